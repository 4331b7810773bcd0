"""Causal order and redelivery of module intents: held intents, released by FleetSeen.

    ModuleApplied / ModuleDeleted / RolloutCommanded
        -> seen before (by id)?            dropped: handled or held already
        -> its `fleet` positions folded,
           no deletion of the module
           still under way (deletions.py)? applied now (`apply`: RolloutEngine.apply_intent)
        -> otherwise                       held (HeldIntent), with every later intent of the
                                           module queued behind it (HeldQueue)
    FleetSeen(partition, position)
        -> the fleet positions grow        held intents released, in order, while the first
                                           one's fleet is covered

A ModuleApplied carries the positions of the cluster-observation partitions its publisher
had read (`fleet`): the module is not decided against an older view of the fleet than the
one its publisher knew. At most HELD_INTENTS_PER_MODULE wait per module; more are rejected.
A held intent gets its verdict when it is released (`apply`), not when it is held.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from rollout.engine.deletions import being_deleted
from rollout.engine.intents import Intent, intent_module
from rollout.engine.outcome import Decision, DecisionAction, Outcome, Verdict, verdict
from rollout.engine.state import HELD_INTENTS_PER_MODULE, FleetPosition, HeldIntent, HeldQueue, held_key
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import HeldBehindIntents, HeldForDeletion, HeldForFleet, render
from rollout.wire.events import INPUT_ADAPTER, FleetSeen, ModuleApplied, bounded

ApplyIntent = Callable[[Intent, Outcome], None]
"""Applies an intent whose turn has come and answers it (core.py: `RolloutEngine.apply_intent`)."""


class CausalOrder:
    """Holds module intents until the fleet their publisher knew has been folded."""

    def __init__(self, tables: StateTables, book: TargetBook, apply: ApplyIntent) -> None:
        self.tables = tables
        self.book = book
        self.apply = apply
        self._releasing: set[str] = set()  # the modules whose held intents `release` applies now

    def on_intent(self, event: Intent, out: Outcome) -> None:
        name = intent_module(event)
        if self._intent_seen(name, event.id):
            return  # redelivered: handled (or held) already
        queue = self.tables.held_queues.get(name)
        if queue is not None or (isinstance(event, ModuleApplied) and not self._may_apply(name, event.fleet)):
            self._hold(name, queue, event, out)
            return
        self.apply(event, out)

    def _may_apply(self, name: str, fleet: dict[int, int]) -> bool:
        """Whether an apply of `name` waiting for `fleet` may be applied now: the fleet is
        folded that far, and no deletion of the module is still removing its members'
        syncs (deletions.py: the module is created again once it is gone)."""
        return self._fleet_covers(fleet) and being_deleted(self.tables, name) is None

    def _intent_seen(self, name: str, event_id: str) -> bool:
        tables = self.tables
        record = tables.modules.get(name)
        if record is not None and event_id in record.handled_intents:
            return True
        tombstone = tables.deleted_modules.get(name)
        if tombstone is not None and event_id in tombstone.handled_intents:
            return True
        queue = tables.held_queues.get(name)
        return queue is not None and event_id in queue.ids

    def _fleet_covers(self, fleet: dict[int, int]) -> bool:
        """Every cluster observation below `fleet`'s positions has been folded."""
        positions = self.tables.fleet_positions
        for partition, offset in fleet.items():
            seen = positions.get(str(partition))
            if offset > (seen.position if seen is not None else 0):
                return False
        return True

    def _hold(self, name: str, queue: HeldQueue | None, event: Intent, out: Outcome) -> None:
        """Queue `event` behind the module's waiting intents (or as the first of them)."""
        tables = self.tables
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
        tables.held_intents[held_key(name, queue.next)] = HeldIntent(
            module=name,
            seq=queue.next,
            id=event.id,
            type=event.type,
            fleet=fleet,
            event=event.to_bytes().decode(),
        )
        queue = queue.model_copy(update={"next": queue.next + 1, "ids": [*queue.ids, event.id]})
        tables.held_queues[name] = queue
        waiting = self.book.waiting_for(queue)
        deleting = being_deleted(tables, name)
        because: HeldForFleet | HeldForDeletion | HeldBehindIntents = (
            HeldBehindIntents(intent=event.type, earlier=len(queue.ids) - 1, module=name)
            if event.type != "ModuleApplied" or len(queue.ids) != 1
            else HeldForDeletion(intent=event.type, module=name, members=deleting.members_left)
            if deleting is not None
            else HeldForFleet(intent=event.type, positions=waiting)
        )
        out.decisions.append(
            Decision(module=name, action=DecisionAction.HELD, reason=render(because), because=because, at=tables.now)
        )
        self.book.show_status(name, out)

    def on_fleet_seen(self, event: FleetSeen, out: Outcome) -> None:
        tables = self.tables
        key = str(event.partition)
        seen = tables.fleet_positions.get(key)
        if seen is not None and seen.position >= event.position:
            return  # positions only grow: an old or redelivered FleetSeen says nothing new
        tables.fleet_positions[key] = FleetPosition(partition=event.partition, position=event.position)
        for name in sorted(tables.held_queues.keys()):
            self.release(name, out)

    def release(self, name: str, out: Outcome) -> None:
        """Apply the module's held intents, in order, while the first one may be: its fleet
        is covered, and an apply waits for no deletion of the module (deletions.py calls
        this once the last member's sync is removed)."""
        if name in self._releasing:
            return  # a deletion it released finished at once: this loop goes on with the rest
        self._releasing.add(name)
        try:
            self._release(name, out)
        finally:
            self._releasing.discard(name)

    def _release(self, name: str, out: Outcome) -> None:
        tables = self.tables
        queue: HeldQueue | None = tables.held_queues.get(name)
        released = False
        while queue is not None:
            key = held_key(name, queue.first)
            held = tables.held_intents.get(key)
            if held is not None and not self._fleet_covers(held.fleet):
                break
            if held is not None and held.type == "ModuleApplied" and being_deleted(tables, name) is not None:
                break
            if held is not None:
                del tables.held_intents[key]
            if queue.first + 1 >= queue.next:
                del tables.held_queues[name]
                queue = None
            else:
                queue = queue.model_copy(update={"first": queue.first + 1, "ids": queue.ids[1:]})
                tables.held_queues[name] = queue
            if held is not None:
                released = True
                try:
                    intent = INPUT_ADAPTER.validate_json(held.event)
                except ValidationError as error:  # held by an earlier release whose rules were looser
                    refusal = unreadable_held_intent(held, error)
                    out.rejections.append(refusal)
                    out.verdicts.append(Verdict(held.id, held.module, False, refusal))  # its answer, at last
                    continue  # dropped, dead-lettered; the intents behind it go on
                self.apply(intent, out)
        if released and queue is not None:
            self.book.show_status(name, out)


def unreadable_held_intent(held: HeldIntent, error: ValidationError) -> str:
    """The dead letter's reason for a held intent this release can no longer read (an
    earlier release held it; a rule has tightened since): which intent, what is wrong, and
    what to do — it is dropped, so that the module's intents behind it are not stuck."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the event"
    return (
        f"held {held.type} {held.id} of module {held.module} can no longer be read by this release "
        f"({where}: {first['msg']}): dropped; apply the module again"
    )
