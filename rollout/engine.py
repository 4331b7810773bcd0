"""The decision core: fold input events into rollout state and decide assignments.

    handle(event) -> Outcome          (evolves the state it was built over)

`RolloutEngine` is deterministic: the same state and the same event always give the same
new state and the same outcome. It performs no I/O and reads no clock — time is whatever
the latest `Tick` said. The caller (the Faust worker, a test, `rollout replay`) owns the
mappings the engine evolves and ships the outcome:

* `assignments` — for one (cluster, module): the sync now in the cluster's assemblage, or
  None. The assemblage builder folds these into RemoteAssemblage/ProxyAssemblage snapshots.
* `decisions`   — the explainable record of every assignment change and phase transition.
* `module_status` / `target_status` — compacted views for `rollout status`.
* `rejections`  — events that were well-formed but cannot apply (go to dead letters).

How a rollout moves (docs/rollout-semantics.md has the full rules):
the module's *target* generation is driven stage by stage; within the started stages,
ready, unpinned clusters not yet on the target are moved in sorting order while fewer than
`maxConcurrency` of the stage are updating. A stage is done when none of its clusters is
pending or updating and its failures are within `maxFailures`; the next stage starts after
the soak (`minSuccessTime`) and, if it asks for one, an approval. Over the failure budget
the rollout halts or rolls back to the *stable* generation.

Around that core, three guards (docs/rollout-semantics.md, "Delivery"):

* redelivery — every input is remembered by id in the record it touches (state.py); an
  event seen before changes nothing and emits nothing;
* causal order — a ModuleApplied whose `fleet` positions the engine has not yet seen
  (FleetSeen) is *held*, with every later intent of that module behind it, and released in
  order once the cluster observations its publisher knew have been folded;
* time — a Tick moves the clock at most MAX_TICK_STEP ahead, so one bogus far-future tick
  (or the first after a long outage) does not fire every deadline at once.

Cost: a status report touches one Target, one ClusterFacts and one ModuleRecord, and moving
the next cluster pops from an in-memory ordered index of pending clusters per stage
(derived from the Targets, rebuilt lazily after a restart, dropped by `reset_indexes`) — no
scan of the fleet per event. Module events (apply, delete, supersede) and readiness changes
pay for the clusters they concern; a FleetSeen pays for the modules with held intents.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.assemblages import ASSEMBLAGE_FOR, AssignedSync
from rollout.bindings import binding_values, expand_sync
from rollout.events import (
    INPUT_ADAPTER,
    ClusterObserved,
    ClusterRemoved,
    FleetSeen,
    ModuleApplied,
    ModuleDeleted,
    RolloutCommanded,
    SyncStatusReported,
    Tick,
    bounded,
)
from rollout.manifests import Stage, parse_duration
from rollout.selectors import selects
from rollout.state import (
    CAPPED_TICK_IDS_KEPT,
    CATEGORIES,
    ENGINE_MAPPINGS,
    HELD_INTENTS_PER_MODULE,
    INTENT_IDS_KEPT,
    OBSERVATION_IDS_KEPT,
    REPORT_IDS_KEPT,
    UNSTAGED,
    Category,
    ClusterFacts,
    DeletedModule,
    FleetPosition,
    HeldIntent,
    HeldQueue,
    ModuleRecord,
    RemovedCluster,
    Revision,
    StageCounts,
    Target,
    TickLog,
    held_key,
    remember,
    target_key,
)

IMPLICIT_STAGE = Stage(name="all")
MAX_TICK_STEP = 3600.0  # seconds: the most one Tick moves the clock (but the first)
Intent = ModuleApplied | ModuleDeleted | RolloutCommanded


# --- outcome ----------------------------------------------------------------------------


class Assignment(BaseModel):
    """The sync record of `module` in `cluster`'s assemblage; `sync` None removes it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    cluster: str
    cluster_namespace: str = Field(alias="clusterNamespace")
    module: str
    assemblage: str  # RemoteAssemblage | ProxyAssemblage
    sync: AssignedSync | None
    reason: str


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    module: str
    action: str
    reason: str
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    at: float = 0.0


@dataclass
class Outcome:
    assignments: list[Assignment] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    module_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    target_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    rejections: list[str] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.assignments += other.assignments
        self.decisions += other.decisions
        self.module_status.update(other.module_status)
        self.target_status.update(other.target_status)
        self.rejections += other.rejections


# --- pure helpers -----------------------------------------------------------------------


def resolve_count(value: int | str | None, *, total: int, default: int) -> int:
    """An int, or a percentage of `total` rounded down — but at least 1 when the
    percentage is above 0 and the stage is not empty (Fleet's rule)."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    count = total * percent // 100
    if percent > 0 and total > 0:
        count = max(count, 1)
    return count


def sort_key(cluster: str, labels: dict[str, str], sorting_label_key: str | None) -> tuple[int, int, str]:
    """Ascending integer value of the sorting label, then name; unlabelled clusters last."""
    if sorting_label_key is not None:
        try:
            return (0, int(labels[sorting_label_key]), cluster)
        except (KeyError, ValueError):
            pass
    return (1, 0, cluster)


def bindings_digest(record_spec_bindings: Iterable[Any]) -> str:
    payload = json.dumps([b.model_dump(by_alias=True) for b in record_spec_bindings], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _queue_index(target: Target) -> int:
    return target.stage_index if target.stage_index is not None else -1


def stages_of(record: ModuleRecord) -> list[Stage]:
    if record.spec.rollout is None or not record.spec.rollout.stages:
        return [IMPLICIT_STAGE]
    return record.spec.rollout.stages


def stage_for(record: ModuleRecord, labels: dict[str, str]) -> tuple[int | None, str]:
    for index, stage in enumerate(stages_of(record)):
        if stage.selector is None or selects(stage.selector, labels):
            return index, stage.name
    return None, UNSTAGED


def intent_module(event: Intent) -> str:
    """The module an intent is about (the intents topic's key)."""
    if isinstance(event, ModuleApplied):
        return event.module.metadata.name
    if isinstance(event, ModuleDeleted):
        return event.name
    return event.module


def format_positions(fleet: dict[int, int]) -> str:
    return ", ".join(f"partition {p} offset {o}" for p, o in sorted(fleet.items())) or "nothing"


# --- the engine -------------------------------------------------------------------------


class RolloutEngine:
    """Folds events into the mappings it is given. One instance per journal partition."""

    def __init__(
        self,
        *,
        clusters: MutableMapping[str, ClusterFacts],
        modules: MutableMapping[str, ModuleRecord],
        targets: MutableMapping[str, Target],
        clock: MutableMapping[str, float],
        removed_clusters: MutableMapping[str, RemovedCluster] | None = None,
        deleted_modules: MutableMapping[str, DeletedModule] | None = None,
        fleet_positions: MutableMapping[str, FleetPosition] | None = None,
        held_queues: MutableMapping[str, HeldQueue] | None = None,
        held_intents: MutableMapping[str, HeldIntent] | None = None,
        capped_ticks: MutableMapping[str, TickLog] | None = None,
        partition: int = 0,
    ) -> None:
        """One mapping per entry of `ENGINE_MAPPINGS`. The ones after `clock` default to
        plain dicts only so that older callers keep working; a durable runtime passes them
        all (state kept only in a dict is lost on restart)."""
        self.clusters = clusters
        self.modules = modules
        self.targets = targets
        self.clock = clock
        self.removed_clusters = removed_clusters if removed_clusters is not None else {}
        self.deleted_modules = deleted_modules if deleted_modules is not None else {}
        self.fleet_positions = fleet_positions if fleet_positions is not None else {}
        self.held_queues = held_queues if held_queues is not None else {}
        self.held_intents = held_intents if held_intents is not None else {}
        self.capped_ticks = capped_ticks if capped_ticks is not None else {}
        self.partition = partition
        # Derived, in-memory indexes; rebuilt lazily from the mappings after a restart.
        self._members: dict[str, set[str]] = {}
        self._pending: dict[tuple[str, int], list[tuple[tuple[int, int, str], str]]] = {}
        self._updating: dict[str, set[str]] = {}

    def reset_indexes(self) -> None:
        """Drop every derived in-memory index; they are rebuilt lazily from the mappings.
        The runtime calls this when it discards uncommitted writes after an error."""
        self._members = {}
        self._pending = {}
        self._updating = {}

    # -- entry point ----------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.get("now", 0.0)

    def handle(self, event: Any) -> Outcome:
        out = Outcome()
        if isinstance(event, Tick):
            self._on_tick(event, out)
        elif isinstance(event, ModuleApplied | ModuleDeleted | RolloutCommanded):
            self._on_intent(event, out)
        elif isinstance(event, FleetSeen):
            self._on_fleet_seen(event, out)
        elif isinstance(event, ClusterObserved):
            self._on_cluster_observed(event, out)
        elif isinstance(event, ClusterRemoved):
            self._on_cluster_removed(event, out)
        elif isinstance(event, SyncStatusReported):
            self._on_sync_status(event, out)
        else:  # pragma: no cover - parse_event only yields the types above
            out.rejections.append(f"unknown event type {type(event).__name__}")
        return out

    # -- indexes --------------------------------------------------------------------------

    def _index(self, module: str) -> set[str]:
        """Members of `module`; builds the pending/updating indexes on first use."""
        members = self._members.get(module)
        if members is not None:
            return members
        members = set()
        self._members[module] = members
        self._updating[module] = set()
        for cluster in list(self.clusters.keys()):
            target = self.targets.get(target_key(module, cluster))
            if target is not None:
                members.add(cluster)
                self._index_target(target)
        return members

    def _index_target(self, target: Target) -> None:
        if target.category == "pending":
            entry = (self._sort_tuple(target), target.cluster)
            queue = self._pending.setdefault((target.module, _queue_index(target)), [])
            position = bisect.bisect_left(queue, entry)
            if position >= len(queue) or queue[position] != entry:
                queue.insert(position, entry)
        if target.category == "updating":
            self._updating.setdefault(target.module, set()).add(target.cluster)

    def _unindex_target(self, target: Target) -> None:
        if target.category == "pending":
            queue = self._pending.get((target.module, _queue_index(target)), [])
            entry = (self._sort_tuple(target), target.cluster)
            position = bisect.bisect_left(queue, entry)
            if position < len(queue) and queue[position] == entry:
                del queue[position]
        if target.category == "updating":
            self._updating.get(target.module, set()).discard(target.cluster)

    @staticmethod
    def _sort_tuple(target: Target) -> tuple[int, int, str]:
        if target.sort_key is None:
            return (1, 0, target.cluster)
        return (0, target.sort_key, target.cluster)

    def _forget_module_indexes(self, module: str) -> None:
        self._members.pop(module, None)
        self._updating.pop(module, None)
        for key in [k for k in self._pending if k[0] == module]:
            del self._pending[key]

    # -- targets and counters -------------------------------------------------------------

    def _goal(self, record: ModuleRecord) -> int | None:
        return record.target if record.mode == "rollout" else record.stable

    def _categorize(self, record: ModuleRecord, target: Target) -> Category:
        if target.pinned:
            return "pinned"
        goal = self._goal(record)
        if target.assigned == goal:
            if goal is None or target.status == "succeeded":
                return "succeeded"
            return "failed" if target.status == "failed" else "updating"
        if record.mode == "rollback" and target.stage_index is None and target.assigned is None:
            return "succeeded"  # unstaged and never given anything: a rollback has nothing to undo
        if not target.ready and record.mode == "rollout":
            return "not_ready"
        return "pending"

    def _counts(self, record: ModuleRecord, stage: str) -> StageCounts:
        counts = record.counts.get(stage)
        if counts is None:
            counts = StageCounts()
            record.counts[stage] = counts
        return counts

    def _store_target(self, record: ModuleRecord, old: Target | None, new: Target | None, out: Outcome) -> None:
        """Persist a Target, keeping counters, indexes and the status view in step."""
        if old is not None:
            counts = self._counts(record, old.stage)
            counts.members -= 1
            setattr(counts, old.category, getattr(counts, old.category) - 1)
            self._unindex_target(old)
        if new is not None:
            new.category = self._categorize(record, new)
            counts = self._counts(record, new.stage)
            counts.members += 1
            setattr(counts, new.category, getattr(counts, new.category) + 1)
            self._index_target(new)
            key = target_key(new.module, new.cluster)
            if old != new:
                self.targets[key] = new
                out.target_status[key] = self._target_view(record, new)
            self._index(record.name).add(new.cluster)
        elif old is not None:
            key = target_key(old.module, old.cluster)
            self.targets.pop(key, None)
            out.target_status[key] = None
            self._index(record.name).discard(old.cluster)

    def _recategorize_all(self, record: ModuleRecord, out: Outcome) -> None:
        for cluster in sorted(self._index(record.name)):
            old = self.targets[target_key(record.name, cluster)]
            self._store_target(record, old, old.model_copy(), out)

    # -- assignments ----------------------------------------------------------------------

    def _assign(
        self, record: ModuleRecord, target: Target, generation: int | None, reason: str, out: Outcome
    ) -> Target:
        """Put `generation` (None: nothing) into the cluster's assemblage."""
        old_generation = target.assigned
        if old_generation is not None and old_generation in record.revisions:
            record.revisions[old_generation].assigned -= 1
        if generation is not None:
            record.revisions[generation].assigned += 1
        new = target.model_copy(
            update={
                "assigned": generation,
                "status": "updating" if generation is not None else "none",
                "status_message": "",
                # before the first Tick the engine knows no time: the deadline clock starts at it
                "updating_since": self.now if generation is not None and self.now > 0 else None,
            }
        )
        facts = self.clusters.get(target.cluster)
        revision = record.revisions[generation].revision if generation is not None else None
        out.assignments.append(
            Assignment(
                cluster=target.cluster,
                cluster_namespace=facts.namespace if facts else record.namespace,
                module=record.name,
                assemblage=ASSEMBLAGE_FOR[record.kind],
                sync=self._assigned_sync(record, generation, facts) if generation is not None else None,
                reason=reason,
            )
        )
        self._decide(
            record,
            "assign" if generation is not None else "unassign",
            reason,
            out,
            cluster=target.cluster,
            generation=generation,
            revision=revision,
        )
        self._prune_revisions(record)
        return new

    def _assigned_sync(self, record: ModuleRecord, generation: int, facts: ClusterFacts | None) -> AssignedSync:
        revision = record.revisions[generation]
        cluster = facts or ClusterFacts(name="", namespace=record.namespace)
        values = binding_values(
            record.spec.bindings,
            cluster_name=cluster.name,
            cluster_namespace=cluster.namespace,
            labels=cluster.labels,
            annotations=cluster.annotations,
        )
        return AssignedSync(
            module=record.name,
            moduleNamespace=record.namespace,
            revision=revision.revision,
            generation=generation,
            sync=expand_sync(revision.sync, values),
        )

    def _prune_revisions(self, record: ModuleRecord) -> None:
        keep = {record.target, record.stable}
        for generation in [g for g, r in record.revisions.items() if r.assigned <= 0 and g not in keep]:
            del record.revisions[generation]

    def _decide(
        self,
        record: ModuleRecord,
        action: str,
        reason: str,
        out: Outcome,
        *,
        cluster: str | None = None,
        generation: int | None = None,
        revision: str | None = None,
    ) -> None:
        out.decisions.append(
            Decision(
                module=record.name,
                action=action,
                reason=reason,
                cluster=cluster,
                generation=generation,
                revision=revision,
                at=self.now,
            )
        )
        record.last_reason = reason

    # -- module intents: redelivery and causal order ------------------------------------

    def _on_intent(self, event: Intent, out: Outcome) -> None:
        name = intent_module(event)
        if self._intent_seen(name, event.id):
            return  # redelivered: handled (or held) already
        queue = self.held_queues.get(name)
        if queue is not None or (isinstance(event, ModuleApplied) and not self._fleet_covers(event.fleet)):
            self._hold(name, queue, event, out)
            return
        self._apply_intent(event, out)

    def _apply_intent(self, event: Intent, out: Outcome) -> None:
        if isinstance(event, ModuleApplied):
            self._on_module_applied(event, out)
        elif isinstance(event, ModuleDeleted):
            self._on_module_deleted(event, out)
        else:
            self._on_command(event, out)

    def _intent_seen(self, name: str, event_id: str) -> bool:
        record = self.modules.get(name)
        if record is not None and event_id in record.handled_intents:
            return True
        tombstone = self.deleted_modules.get(name)
        if tombstone is not None and event_id in tombstone.handled_intents:
            return True
        queue = self.held_queues.get(name)
        return queue is not None and event_id in queue.ids

    def _remember_intent(self, name: str, event_id: str) -> None:
        """Note an intent that changed nothing else: on the module, or its tombstone."""
        record = self.modules.get(name)
        if record is not None:
            ids = remember(record.handled_intents, event_id, INTENT_IDS_KEPT)
            self.modules[name] = record.model_copy(update={"handled_intents": ids})
            return
        tombstone = self.deleted_modules.get(name) or DeletedModule(name=name)
        ids = remember(tombstone.handled_intents, event_id, INTENT_IDS_KEPT)
        self.deleted_modules[name] = tombstone.model_copy(update={"handled_intents": ids})

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
            out.rejections.append(
                bounded(
                    f"{event.type} {name} ({event.id}): {len(queue.ids)} intents of the module already wait "
                    f"for cluster observations (at most {HELD_INTENTS_PER_MODULE}); dropped"
                )
            )
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
        out.module_status[name] = self._status_of(name)

    def _waiting_for(self, queue: HeldQueue) -> dict[int, int]:
        head = self.held_intents.get(held_key(queue.module, queue.first))
        return dict(head.fleet) if head is not None else {}

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
            out.module_status[name] = self._status_of(name)

    def _status_of(self, name: str) -> dict[str, Any] | None:
        """The module-status document of `name`, with what it holds."""
        record = self.modules.get(name)
        view = module_view(record, self.now) if record is not None else None
        queue = self.held_queues.get(name)
        if queue is None:
            return view
        waiting = self._waiting_for(queue)
        held = {
            "intents": len(queue.ids),
            "waitingFor": {str(p): o for p, o in sorted(waiting.items())},
            "reason": f"waiting for cluster observations up to {format_positions(waiting)}",
        }
        if view is None:
            return {"module": name, "phase": "Pending", "reason": held["reason"], "held": held, "observedAt": self.now}
        return {**view, "held": held}

    # -- module intents: what they do ----------------------------------------------------

    def _on_module_applied(self, event: ModuleApplied, out: Outcome) -> None:
        manifest = event.module
        name = manifest.metadata.name
        existing = self.modules.get(name)
        if existing is not None and existing.kind != manifest.kind:
            out.rejections.append(
                f"{manifest.kind} {name}: the name is already used by {existing.kind} {name}; "
                "delete it first or choose another name"
            )
            self._remember_intent(name, event.id)
            return
        digest = bindings_digest(manifest.spec.bindings)
        if existing is None:
            tombstone = self.deleted_modules.pop(name, None)
            # a module created again continues the generations of the one deleted before
            generation = tombstone.generation + 1 if tombstone is not None else 1
            record = ModuleRecord(
                name=name,
                kind=manifest.kind,
                namespace=manifest.metadata.namespace,
                spec=manifest.spec,
                partition=self.partition,
                generation=generation,
                target=generation,
                revisions={
                    generation: Revision(
                        generation=generation,
                        revision=manifest.spec.sync.revision,
                        sync=manifest.spec.sync,
                        bindings_digest=digest,
                    )
                },
                handled_intents=remember(
                    tombstone.handled_intents if tombstone is not None else [], event.id, INTENT_IDS_KEPT
                ),
            )
            self._decide(record, "created", f"{manifest.kind} {name} created at {manifest.spec.sync.revision}", out)
            self._refresh_membership(record, self._all_clusters(), out)
            self._advance(record, out)
            self._save_module(record, out)
            return
        record = existing.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        current = record.revisions[record.target]
        new_sync = manifest.spec.sync != current.sync or digest != current.bindings_digest
        if not new_sync and manifest.spec == record.spec and manifest.metadata.namespace == record.namespace:
            self.modules[name] = record  # the same manifest again: only its id is new
            return
        record.spec = manifest.spec
        record.namespace = manifest.metadata.namespace
        if record.stage_index >= len(stages_of(record)) or (not new_sync and self._completed(record)):
            # the strategy lost stages the rollout had reached, or the rollout is complete:
            # every stage but the last is passed, and the last runs (for late joiners)
            record.stage_index = len(stages_of(record)) - 1
            record.stage_started = True
            record.stage_completed_at = None
        if new_sync:
            previous = current.revision
            record.generation += 1
            record.revisions[record.generation] = Revision(
                generation=record.generation,
                revision=manifest.spec.sync.revision,
                sync=manifest.spec.sync,
                bindings_digest=digest,
            )
            superseded = record.target if record.phase not in ("Complete", "RolledBack") else None
            record.target = record.generation
            record.mode = "rollout"
            record.halted = record.aborted = False
            record.stage_index = 0
            record.stage_started = False
            record.stage_completed_at = None
            record.approvals = []
            record.phase = "Progressing"  # not Complete/RolledBack any more: _advance settles it
            note = f" (supersedes the rollout of {previous})" if superseded is not None else ""
            self._decide(
                record,
                "new-revision",
                f"target {manifest.spec.sync.revision} (generation {record.generation}){note}; "
                "starting again from the first stage",
                out,
                generation=record.generation,
                revision=manifest.spec.sync.revision,
            )
        self._refresh_membership(record, self._index(name) | self._all_clusters(), out)
        self._recategorize_all(record, out)
        self._advance(record, out)
        self._save_module(record, out)

    def _on_module_deleted(self, event: ModuleDeleted, out: Outcome) -> None:
        record = self.modules.get(event.name)
        if record is None or record.kind != event.kind:
            self._remember_intent(event.name, event.id)
            return  # already gone, never existed, or another kind: nothing to delete
        record = record.working_copy()
        for cluster in sorted(self._index(record.name)):
            target = self.targets[target_key(record.name, cluster)]
            if target.assigned is not None:
                self._assign(record, target, None, f"{record.kind} {record.name} deleted", out)
            self._store_target(record, target, None, out)
        self._decide(record, "deleted", f"{record.kind} {record.name} deleted", out)
        self.deleted_modules[record.name] = DeletedModule(
            name=record.name,
            kind=record.kind,
            generation=record.generation,
            handled_intents=remember(record.handled_intents, event.id, INTENT_IDS_KEPT),
        )
        self.modules.pop(record.name, None)
        self._forget_module_indexes(record.name)
        out.module_status[record.name] = None

    def _on_command(self, event: RolloutCommanded, out: Outcome) -> None:
        stored = self.modules.get(event.module)
        if stored is None:
            out.rejections.append(f"{event.command} {event.module}: no such module")
            self._remember_intent(event.module, event.id)
            return
        record = stored.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        by = f" by {event.user}" if event.user else ""
        command = event.command
        if command == "pause":
            if not record.paused:
                record.paused = True
                self._decide(record, "paused", f"paused{by}: no new moves until resume", out)
        elif command == "resume":
            if record.paused or record.halted:
                record.paused = record.halted = False
                self._decide(record, "resumed", f"resumed{by}", out)
        elif command == "abort":
            if not record.aborted:
                record.aborted = True
                self._decide(record, "aborted", f"aborted{by}: the rollout stops where it stands", out)
        elif command == "rollback":
            self._start_rollback(record, f"rollback requested{by}", out)
        elif command == "approve":
            names = [s.name for s in stages_of(record)]
            if event.stage not in names:
                out.rejections.append(f"approve {record.name}: no stage {event.stage!r}; stages are {', '.join(names)}")
                self.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if event.stage not in record.approvals:
                record.approvals.append(event.stage)  # type: ignore[arg-type]
                self._decide(record, "approved", f"stage {event.stage} approved{by}", out)
        elif command in ("pin", "unpin"):
            if event.cluster is None:
                out.rejections.append(f"{command} {record.name}: a cluster is required")
                self.modules[record.name] = record  # remembers the command's id, nothing else
                return
            pinned = command == "pin"
            if (event.cluster in record.pinned) != pinned:
                record.pinned = sorted(set(record.pinned) ^ {event.cluster})
                self._decide(
                    record,
                    "pinned" if pinned else "unpinned",
                    f"{event.cluster} {'pinned at its current revision' if pinned else 'unpinned'}{by}",
                    out,
                    cluster=event.cluster,
                )
                target = self.targets.get(target_key(record.name, event.cluster))
                if target is not None:
                    self._index(record.name)
                    new = self._join_at_stage_revision(record, target.model_copy(update={"pinned": pinned}), out)
                    self._store_target(record, target, new, out)
        self._advance(record, out)
        self._save_module(record, out)

    def _start_rollback(self, record: ModuleRecord, reason: str, out: Outcome) -> None:
        if record.mode == "rollback":
            return
        record.mode = "rollback"
        stable = record.revisions[record.stable].revision if record.stable is not None else "nothing"
        self._decide(record, "rollback", f"{reason}: every cluster on the target returns to {stable}", out)
        self._recategorize_all(record, out)

    # -- cluster observations -------------------------------------------------------------

    def _all_clusters(self) -> set[str]:
        return set(self.clusters.keys())

    def _on_cluster_observed(self, event: ClusterObserved, out: Outcome) -> None:
        manifest = event.cluster
        name = manifest.metadata.name
        previous = self.clusters.get(name)
        known: ClusterFacts | RemovedCluster | None = previous or self.removed_clusters.get(name)
        if known is not None and event.id in known.observation_ids:
            return  # redelivered — perhaps after the cluster was removed: it stays removed
        facts = ClusterFacts(
            name=name,
            namespace=manifest.metadata.namespace,
            labels=dict(manifest.metadata.labels),
            annotations=dict(manifest.metadata.annotations),
            ready=manifest.status.ready,
            observation_ids=remember(known.observation_ids if known else [], event.id, OBSERVATION_IDS_KEPT),
            report_ids=list(known.report_ids) if known else [],
        )
        if previous is None:
            self.removed_clusters.pop(name, None)
        self.clusters[name] = facts
        if previous is not None and previous.same_facts(facts):
            return  # nothing new but the id (a heartbeat-only observation)
        self._on_cluster_changed(name, previous, facts, out)

    def _on_cluster_removed(self, event: ClusterRemoved, out: Outcome) -> None:
        previous = self.clusters.get(event.name)
        known: ClusterFacts | RemovedCluster | None = previous or self.removed_clusters.get(event.name)
        if known is not None and event.id in known.observation_ids:
            return  # redelivered
        self.removed_clusters[event.name] = RemovedCluster(
            name=event.name,
            observation_ids=remember(known.observation_ids if known else [], event.id, OBSERVATION_IDS_KEPT),
            report_ids=list(known.report_ids) if known else [],
        )
        if previous is None:
            return  # not a member of the fleet: only its id is remembered
        del self.clusters[event.name]
        self._on_cluster_changed(event.name, previous, None, out)

    def _on_cluster_changed(
        self, cluster: str, previous: ClusterFacts | None, facts: ClusterFacts | None, out: Outcome
    ) -> None:
        moved_namespace = previous is not None and facts is not None and previous.namespace != facts.namespace
        bindings_changed = (
            previous is not None
            and facts is not None
            and (previous.labels != facts.labels or previous.annotations != facts.annotations)
        )
        for name in sorted(self.modules.keys()):
            stored = self.modules[name]
            if stored.partition != self.partition:
                continue
            if facts is None or not selects(stored.spec.selector, facts.labels):
                if target_key(name, cluster) not in self.targets:
                    continue  # a member neither before nor now: nothing changes for this module
            record = stored.working_copy()
            self._refresh_membership(record, {cluster}, out)
            target = self.targets.get(target_key(name, cluster))
            resend = moved_namespace or (bindings_changed and bool(record.spec.bindings))
            if resend and target is not None and target.assigned is not None:
                # the cluster's labels feed its bindings, its namespace CLUSTER_NAMESPACE and
                # its assemblage's place: re-send its expanded sync
                out.assignments.append(
                    Assignment(
                        cluster=cluster,
                        cluster_namespace=facts.namespace,  # type: ignore[union-attr]
                        module=name,
                        assemblage=ASSEMBLAGE_FOR[record.kind],
                        sync=self._assigned_sync(record, target.assigned, facts),
                        reason="cluster namespace changed: sync re-sent"
                        if moved_namespace
                        else "cluster labels changed: bindings re-expanded",
                    )
                )
            self._advance(record, out)
            if record != stored:
                self._save_module(record, out)

    def _refresh_membership(self, record: ModuleRecord, clusters: Iterable[str], out: Outcome) -> None:
        """Add, move or drop the Targets of `clusters` to match selector, stages, readiness."""
        self._index(record.name)
        sorting = record.spec.rollout.sorting_label_key if record.spec.rollout else None
        for cluster in sorted(clusters):
            facts = self.clusters.get(cluster)
            key = target_key(record.name, cluster)
            old = self.targets.get(key)
            if facts is None or not selects(record.spec.selector, facts.labels):
                if old is not None:
                    why = "cluster removed" if facts is None else "cluster no longer matches the selector"
                    if old.assigned is not None:
                        self._assign(record, old, None, f"{cluster}: {why}", out)
                    self._store_target(record, old, None, out)
                continue
            stage_index, stage_name = stage_for(record, facts.labels)
            _, order, _ = sort_key(cluster, facts.labels, sorting)
            has_order = sorting is not None and sort_key(cluster, facts.labels, sorting)[0] == 0
            new = (old or Target(module=record.name, cluster=cluster)).model_copy(
                update={
                    "stage": stage_name,
                    "stage_index": stage_index,
                    "sort_key": order if has_order else None,
                    "ready": facts.ready,
                    "pinned": cluster in record.pinned,
                }
            )
            if old is None:
                self._decide(
                    record,
                    "joined",
                    f"{cluster} matches the selector (stage {stage_name})"
                    + ("" if facts.ready else "; not ready, skipped until it is"),
                    out,
                    cluster=cluster,
                )
            elif old.ready != new.ready:
                self._decide(
                    record,
                    "readiness",
                    f"{cluster} is {'ready' if facts.ready else 'not ready'}",
                    out,
                    cluster=cluster,
                )
            new = self._join_at_stage_revision(record, new, out)
            self._store_target(record, old, new, out)

    def _join_at_stage_revision(self, record: ModuleRecord, target: Target, out: Outcome) -> Target:
        """A ready cluster with nothing assigned, in a stage the rollout has not reached,
        gets the stable revision at once: that is the revision its stage runs."""
        if (
            target.assigned is None
            and target.ready
            and not target.pinned
            and record.mode == "rollout"
            and record.stable is not None
            and record.stable != record.target
            and target.stage_index is not None
            and not self._stage_open(record, target.stage_index)
        ):
            stable = record.revisions[record.stable].revision
            return self._assign(
                record,
                target,
                record.stable,
                f"{target.cluster} → {stable}: stage {target.stage} has not started, it runs the stable revision",
                out,
            )
        return target

    # -- sync status and time -------------------------------------------------------------

    def _on_sync_status(self, event: SyncStatusReported, out: Outcome) -> None:
        if not self._remember_report(event):
            return  # redelivered, or about a cluster the engine never saw
        stored = self.modules.get(event.module)
        target = self.targets.get(target_key(event.module, event.cluster))
        if stored is None or target is None or target.assigned is None:
            return  # about a module/cluster the engine no longer drives: nothing to decide
        if event.generation is not None and event.generation != target.assigned:
            return  # about another assignment than the current one (say, same tag, other path)
        revision = stored.revisions.get(target.assigned)
        if revision is None or revision.revision != event.revision:
            return  # a report about an older revision than the one assigned
        status = event.state
        if target.status in ("succeeded", "failed") and status == "updating":
            # Flux flips Ready to Progressing on every reconcile (and retries a failure):
            # only `succeeded` or `failed` change what is known about the revision
            return
        if target.status == status and target.status_message == (event.message or ""):
            return
        record = stored.working_copy()
        self._index(record.name)
        new = target.model_copy(update={"status": status, "status_message": event.message or ""})
        if status == "failed" and target.status != "failed":
            self._decide(
                record,
                "failed",
                f"{event.cluster} failed on {event.revision}" + (f": {event.message}" if event.message else ""),
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        elif status == "succeeded" and target.status != "succeeded":
            self._decide(
                record,
                "succeeded",
                f"{event.cluster} runs {event.revision}",
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        self._store_target(record, target, new, out)
        self._advance(record, out)
        self._save_module(record, out)

    def _remember_report(self, event: SyncStatusReported) -> bool:
        """Note the report's id on its cluster; False if it was seen before (or the
        cluster never was)."""
        facts = self.clusters.get(event.cluster)
        if facts is not None:
            if event.id in facts.report_ids:
                return False
            ids = remember(facts.report_ids, event.id, REPORT_IDS_KEPT)
            self.clusters[event.cluster] = facts.model_copy(update={"report_ids": ids})
            return True
        removed = self.removed_clusters.get(event.cluster)
        if removed is not None and event.id not in removed.report_ids:
            ids = remember(removed.report_ids, event.id, REPORT_IDS_KEPT)
            self.removed_clusters[event.cluster] = removed.model_copy(update={"report_ids": ids})
        return False

    def _on_tick(self, event: Tick, out: Outcome) -> None:
        if event.now <= self.now:
            return  # time never goes back; a redelivered tick changes nothing
        log = self.capped_ticks.get("recent") or TickLog()
        if event.id in log.ids:
            return  # a redelivered tick that was capped has moved the clock already
        first = self.now == 0.0
        if first or event.now - self.now <= MAX_TICK_STEP:
            self.clock["now"] = event.now
        else:
            # a jump: catch up by MAX_TICK_STEP per tick, so deadlines fire in turn, not all at once
            self.capped_ticks["recent"] = TickLog(ids=remember(log.ids, event.id, CAPPED_TICK_IDS_KEPT))
            self.clock["now"] = self.now + MAX_TICK_STEP
        for name in sorted(self.modules.keys()):
            stored = self.modules[name]
            if stored.partition != self.partition or stored.phase in ("Complete", "RolledBack", "Aborted"):
                continue
            record = stored.working_copy()
            self._index(name)
            if first and record.stage_completed_at is not None:
                # a stage done before the engine saw any tick starts its soak at the first one
                record.stage_completed_at = self.now
            deadline = record.spec.rollout.progress_deadline if record.spec.rollout else None
            if deadline is not None:
                limit = parse_duration(deadline)
                for cluster in sorted(self._updating.get(name, set())):
                    target = self.targets[target_key(name, cluster)]
                    if target.updating_since is None:
                        since = target.model_copy(update={"updating_since": self.now})
                        self._store_target(record, target, since, out)
                    elif self.now - target.updating_since >= limit:
                        message = f"updating for longer than progressDeadline {deadline}"
                        self._decide(record, "failed", f"{cluster}: {message}", out, cluster=cluster)
                        self._store_target(
                            record,
                            target,
                            target.model_copy(update={"status": "failed", "status_message": message}),
                            out,
                        )
            self._advance(record, out)
            if record != stored:
                self._save_module(record, out)

    # -- the rollout state machine --------------------------------------------------------

    def _stage_open(self, record: ModuleRecord, index: int) -> bool:
        """Whether clusters of stage `index` may be moved to the target."""
        return index < record.stage_index or (index == record.stage_index and record.stage_started)

    def _budget(self, record: ModuleRecord, index: int) -> tuple[int, int]:
        stage = stages_of(record)[index]
        members = self._counts(record, stage.name).members
        concurrency = resolve_count(stage.max_concurrency, total=members, default=max(members, 1))
        failures = resolve_count(stage.max_failures, total=members, default=0)
        return max(concurrency, 1), failures

    def _completed(self, record: ModuleRecord) -> bool:
        """The target's rollout finished: it is the stable generation."""
        return record.mode == "rollout" and record.stable == record.target

    def _advance(self, record: ModuleRecord, out: Outcome) -> None:
        """Make every move the strategy allows now, then settle the phase."""
        self._index(record.name)  # the pending queues may be cold after a restart
        stages = stages_of(record)
        if record.mode == "rollback":
            self._move_rollback(record, out)
            rolling = any(
                self._counts(record, s).updating or self._counts(record, s).pending for s in [*record.counts.keys()]
            )
            record.phase = "RollingBack" if rolling else "RolledBack"
            return
        if record.aborted:
            record.phase = "Aborted"
            return
        if not self._completed(record) and self._over_budget(record, out):
            if record.mode == "rollback":
                self._advance(record, out)
                return
        if record.halted:
            record.phase = "Halted"
            return
        if record.paused:
            record.phase = "Paused"
            return
        while True:
            for index in range(min(record.stage_index, len(stages) - 1) + 1):
                if self._stage_open(record, index):
                    self._fill(record, index, out)
            if self._completed(record):
                record.phase = "Complete"
                return  # late joiners and clusters back from not-ready still get moved above
            stage = stages[record.stage_index]
            if not record.stage_started:
                if stage.require_approval and stage.name not in record.approvals:
                    if record.phase != "AwaitingApproval":
                        self._decide(record, "awaiting-approval", f"stage {stage.name} waits for approval", out)
                    record.phase = "AwaitingApproval"
                    return
                record.stage_started = True
                counts = self._counts(record, stage.name)
                if counts.members == 0:
                    # nothing to move — of the fleet the module's publisher knew (causal order):
                    # the stage is passed with no soak; members joining later get the target
                    record.stage_completed_at = self.now
                    self._decide(record, "stage-skipped", f"stage {stage.name} has no members: skipped", out)
                    continue
                self._decide(
                    record,
                    "stage-started",
                    f"stage {stage.name} started: {counts.pending} to move, "
                    f"{counts.not_ready} not ready, {counts.pinned} pinned",
                    out,
                )
                continue
            counts = self._counts(record, stage.name)
            _, max_failures = self._budget(record, record.stage_index)
            done = counts.pending == 0 and counts.updating == 0 and counts.failed <= max_failures
            if not done:
                record.stage_completed_at = None
                record.phase = "Progressing"
                return
            if record.stage_completed_at is None:
                record.stage_completed_at = self.now
                self._decide(
                    record,
                    "stage-succeeded",
                    f"stage {stage.name} succeeded: {counts.succeeded} succeeded, {counts.failed} failed, "
                    f"{counts.not_ready} not ready, {counts.pinned} pinned",
                    out,
                )
            soak = parse_duration(stage.min_success_time) if stage.min_success_time and counts.succeeded else 0.0
            if self.now < record.stage_completed_at + soak:
                record.phase = "Soaking"
                return
            if record.stage_index == len(stages) - 1:
                record.stable = record.target
                record.phase = "Complete"
                self._decide(
                    record,
                    "complete",
                    f"rollout of {record.revisions[record.target].revision} complete; it is the stable revision",
                    out,
                    generation=record.target,
                    revision=record.revisions[record.target].revision,
                )
                self._prune_revisions(record)
                return
            record.stage_index += 1
            record.stage_started = False
            record.stage_completed_at = None

    def _over_budget(self, record: ModuleRecord, out: Outcome) -> bool:
        stages = stages_of(record)
        for index in range(min(record.stage_index, len(stages) - 1) + 1):
            counts = self._counts(record, stages[index].name)
            _, max_failures = self._budget(record, index)
            if counts.failed > max_failures:
                reason = f"stage {stages[index].name} failures {counts.failed} > maxFailures {max_failures}"
                on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
                if on_failure == "Rollback":
                    self._start_rollback(record, reason, out)
                elif not record.halted:
                    record.halted = True
                    self._decide(record, "halted", f"halted: {reason}", out)
                return True
        return False

    def _fill(self, record: ModuleRecord, index: int, out: Outcome) -> None:
        stages = stages_of(record)
        stage = stages[index]
        concurrency, _ = self._budget(record, index)
        queue = self._pending.get((record.name, index), [])
        counts = self._counts(record, stage.name)
        revision = record.revisions[record.target].revision
        while queue and counts.updating < concurrency:
            _, cluster = queue[0]
            target = self.targets[target_key(record.name, cluster)]
            slot = counts.updating + counts.succeeded + counts.failed + 1
            movable = counts.members - counts.not_ready - counts.pinned
            moved = self._assign(
                record,
                target,
                record.target,
                f"{cluster} → {revision}: stage {stage.name} {slot}/{movable}",
                out,
            )
            self._store_target(record, target, moved, out)

    def _move_rollback(self, record: ModuleRecord, out: Outcome) -> None:
        """Every unpinned cluster not on the stable generation returns to it at once —
        ready or not, staged or not: the target is what is being taken away."""
        stable = record.revisions[record.stable].revision if record.stable is not None else "nothing"
        self._index(record.name)
        for index in range(-1, len(stages_of(record))):
            queue = self._pending.get((record.name, index), [])
            while queue:
                _, cluster = queue[0]
                target = self.targets[target_key(record.name, cluster)]
                moved = self._assign(record, target, record.stable, f"{cluster} → {stable}: rollback", out)
                self._store_target(record, target, moved, out)

    # -- views ----------------------------------------------------------------------------

    def _save_module(self, record: ModuleRecord, out: Outcome) -> None:
        self.modules[record.name] = record
        out.module_status[record.name] = self._status_of(record.name)

    def _target_view(self, record: ModuleRecord, target: Target) -> dict[str, Any]:
        revision = record.revisions.get(target.assigned) if target.assigned is not None else None
        return {
            "module": target.module,
            "cluster": target.cluster,
            "stage": target.stage,
            "state": target.category,
            "ready": target.ready,
            "pinned": target.pinned,
            "revision": revision.revision if revision else None,
            "generation": target.assigned,
            "status": target.status,
            "message": target.status_message,
            "updatingSince": target.updating_since,
        }


def module_view(record: ModuleRecord, now: float) -> dict[str, Any]:
    """The compacted module-status document (size: O(stages), not O(clusters))."""
    stages = stages_of(record)
    views = []
    for index, stage in enumerate(stages):
        counts = record.counts.get(stage.name, StageCounts())
        members = counts.members
        if index < record.stage_index or (record.mode == "rollout" and record.stable == record.target):
            state = "Succeeded"
        elif index == record.stage_index:
            state = {"Soaking": "Soaking", "AwaitingApproval": "AwaitingApproval"}.get(
                record.phase, "Running" if record.stage_started else "Pending"
            )
        else:
            state = "Pending"
        views.append(
            {
                "name": stage.name,
                "state": state,
                "maxConcurrency": resolve_count(stage.max_concurrency, total=members, default=max(members, 1)),
                "maxFailures": resolve_count(stage.max_failures, total=members, default=0),
                "minSuccessTime": stage.min_success_time,
                "requireApproval": stage.require_approval,
                "approved": stage.name in record.approvals,
                "counts": {c: getattr(counts, c) for c in ("members", *CATEGORIES)},
            }
        )
    unstaged = record.counts.get(UNSTAGED, StageCounts())
    return {
        "module": record.name,
        "kind": record.kind,
        "namespace": record.namespace,
        "generation": record.target,
        "targetRevision": record.revisions[record.target].revision,
        "stableRevision": record.revisions[record.stable].revision
        if record.stable is not None and record.stable in record.revisions
        else None,
        "phase": record.phase,
        "mode": record.mode,
        "paused": record.paused,
        "currentStage": stages[min(record.stage_index, len(stages) - 1)].name,
        "stages": views,
        "unstaged": {c: getattr(unstaged, c) for c in ("members", *CATEGORIES)},
        "pinned": record.pinned,
        "lastDecision": record.last_reason,
        "observedAt": now,
    }


def new_engine(partition: int = 0) -> RolloutEngine:
    """An engine over fresh plain dicts, one per `ENGINE_MAPPINGS` entry (for replay)."""
    mappings: dict[str, Any] = {name: {} for name in ENGINE_MAPPINGS}
    return RolloutEngine(**mappings, partition=partition)
