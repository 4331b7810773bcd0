"""Causal order and redelivery of module intents: held intents, released by FleetSeen.

    ModuleApplied / ModuleDeleted / RolloutCommanded
        -> seen before (by id)?            dropped: handled or held already
        -> its `fleet` positions folded?   applied now (intents.py)
        -> otherwise                       held (HeldIntent), with every later intent of the
                                           module queued behind it (HeldQueue)
    FleetSeen(partition, position)
        -> the fleet positions grow        held intents released, in order, while the first
                                           one's fleet is covered

A ModuleApplied carries the positions of the cluster-observation partitions its publisher
had read (`fleet`): the module is not decided against an older view of the fleet than the
one its publisher knew. At most HELD_INTENTS_PER_MODULE wait per module; more are rejected.
A held intent gets its verdict when it is released (intents.py), not when it is held.
"""

from __future__ import annotations

from rollout.engine.intents import Intent, ModuleIntents, intent_module
from rollout.engine.outcome import Decision, Outcome, verdict
from rollout.engine.state import HELD_INTENTS_PER_MODULE, FleetPosition, HeldIntent, HeldQueue, held_key
from rollout.engine.views import format_positions
from rollout.wire.events import INPUT_ADAPTER, FleetSeen, ModuleApplied, bounded


class CausalOrder(ModuleIntents):
    """Holds module intents until the fleet their publisher knew has been folded."""

    def _on_intent(self, event: Intent, out: Outcome) -> None:
        name = intent_module(event)
        if self._intent_seen(name, event.id):
            return  # redelivered: handled (or held) already
        queue = self.held_queues.get(name)
        if queue is not None or (isinstance(event, ModuleApplied) and not self._fleet_covers(event.fleet)):
            self._hold(name, queue, event, out)
            return
        self._apply_intent(event, out)

    def _intent_seen(self, name: str, event_id: str) -> bool:
        record = self.modules.get(name)
        if record is not None and event_id in record.handled_intents:
            return True
        tombstone = self.deleted_modules.get(name)
        if tombstone is not None and event_id in tombstone.handled_intents:
            return True
        queue = self.held_queues.get(name)
        return queue is not None and event_id in queue.ids

    def _fleet_covers(self, fleet: dict[int, int]) -> bool:
        """Every cluster observation below `fleet`'s positions has been folded."""
        for partition, offset in fleet.items():
            seen = self.fleet_positions.get(str(partition))
            if offset > (seen.position if seen is not None else 0):
                return False
        return True

    def _hold(self, name: str, queue: HeldQueue | None, event: Intent, out: Outcome) -> None:
        """Queue `event` behind the module's waiting intents (or as the first of them)."""
        queue = queue or HeldQueue(module=name)
        if len(queue.ids) >= HELD_INTENTS_PER_MODULE:
            rejections, decisions = len(out.rejections), len(out.decisions)
            out.rejections.append(
                bounded(
                    f"{event.type} {name} ({event.id}): {len(queue.ids)} intents of the module already wait "
                    f"for cluster observations (at most {HELD_INTENTS_PER_MODULE}); dropped"
                )
            )
            out.verdicts.append(verdict(event.id, name, out, rejections=rejections, decisions=decisions))
            return
        fleet = dict(event.fleet) if isinstance(event, ModuleApplied) else {}
        self.held_intents[held_key(name, queue.next)] = HeldIntent(
            module=name,
            seq=queue.next,
            id=event.id,
            type=event.type,
            fleet=fleet,
            event=event.to_bytes().decode(),
        )
        queue = queue.model_copy(update={"next": queue.next + 1, "ids": [*queue.ids, event.id]})
        self.held_queues[name] = queue
        waiting = self._waiting_for(queue)
        reason = (
            f"{event.type} held: waiting for cluster observations up to {format_positions(waiting)}"
            if event.type == "ModuleApplied" and len(queue.ids) == 1
            else f"{event.type} held behind {len(queue.ids) - 1} earlier intent(s) of {name}"
        )
        out.decisions.append(Decision(module=name, action="held", reason=reason, at=self.now))
        self._show_status(name, out)

    def _on_fleet_seen(self, event: FleetSeen, out: Outcome) -> None:
        key = str(event.partition)
        seen = self.fleet_positions.get(key)
        if seen is not None and seen.position >= event.position:
            return  # positions only grow: an old or redelivered FleetSeen says nothing new
        self.fleet_positions[key] = FleetPosition(partition=event.partition, position=event.position)
        for name in sorted(self.held_queues.keys()):
            self._release(name, out)

    def _release(self, name: str, out: Outcome) -> None:
        """Apply the module's held intents, in order, while the first one's fleet is covered."""
        queue: HeldQueue | None = self.held_queues.get(name)
        released = False
        while queue is not None:
            key = held_key(name, queue.first)
            held = self.held_intents.get(key)
            if held is not None and not self._fleet_covers(held.fleet):
                break
            if held is not None:
                del self.held_intents[key]
            if queue.first + 1 >= queue.next:
                del self.held_queues[name]
                queue = None
            else:
                queue = queue.model_copy(update={"first": queue.first + 1, "ids": queue.ids[1:]})
                self.held_queues[name] = queue
            if held is not None:
                released = True
                self._apply_intent(INPUT_ADAPTER.validate_json(held.event), out)
        if released and queue is not None:
            self._show_status(name, out)
