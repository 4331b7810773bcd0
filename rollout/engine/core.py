"""The decision core: fold input events into rollout state and decide assignments.

    handle(event) -> Outcome          (evolves the state it was built over)

`RolloutEngine` is deterministic: the same state and the same event always give the same
new state and the same outcome. It performs no I/O and reads no clock — time is whatever
the latest `Tick` said. The caller (the worker's decider, a test, `rollout replay`) owns the
mappings the engine evolves and ships the outcome (outcome.py):

* `assignments` — for one (cluster, module): the sync now in the cluster's assemblage, or
  None. The assemblage builder folds these into RemoteAssemblage/ProxyAssemblage snapshots.
* `decisions`   — the explainable record of every assignment change and phase transition
  (`Decision.action` is a `DecisionAction`; `Decision.because` the reason's model, a code
  and its facts, whose sentence is `Decision.reason`: rollout/wire/decision_reasons.py).
* `module_status` / `target_status` — compacted views for `rollout status` (views.py).
* `rejections`  — events that were well-formed but cannot apply (go to dead letters).

Read it as a Decider: `handle` decides what the event changes — writes into the state
tables, and the outcome — given the state; the caller's mappings evolve by those writes.
The writes are the only changes (no value in the mappings is changed in place:
`Record.working_copy`, tables.py), so the caller undoes an event that fails by dropping
its writes (`streams/state.py`).

How a rollout moves (docs/rollout-semantics.md has the full rules; stages.py the code):
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
  order once the cluster observations its publisher knew have been folded (causal.py);
* time — a Tick moves the clock at most MAX_TICK_STEP ahead, so one bogus far-future tick
  (or the first after a long outage) does not fire every deadline at once (clock.py).

Cost: a status report touches one Target, one ClusterFacts and one ModuleRecord, and moving
the next cluster pops from an in-memory ordered index of pending clusters per stage
(derived from the Targets, rebuilt lazily after a restart, dropped by `reset_indexes`) — no
scan of the fleet per event. Module events (apply, delete, supersede) and readiness changes
pay for the clusters they concern; a FleetSeen pays for the modules with held intents.

The composition. The engine is one object per concern, each given the collaborators it
uses when it is built (below, bottom to top; none reaches another but through them):

    tables.py           StateTables        the mappings (ENGINE_MAPPINGS), partition, now
    dependency_links.py DependencyLinks    tells dependents where a module is ready
    targets.py          TargetBook         Targets, their indexes and counters; assign, decide,
                                           save_module, status documents        (tables, links)
    window_gate.py      WindowGate         may a stage's clusters move now?     (tables, book)
    runs.py             Runs               a run's fixed membership; holds, offline members, late joiners
    offline_waits.py    OfflineWaits       how long a stage waits for offline members (StageMachine.offline)
    stages.py           StageMachine       advance, fill, budget, rollback      (tables, book, windows, runs)
    membership.py       Membership         cluster events; which clusters a module covers
    reports.py          Reports            sync status reports
    clock.py            Clock, ModuleTimers  ticks; what time does to each module
    live_values.py      LiveValues         Helm values observed on clusters: re-merged, re-sent
    gate_results.py     GateResults        health gate results: stages wait for them, failures halt
    leases.py           Leases             heartbeats and claims, lease expiry, leave/join: readiness
    restriction_rules.py RestrictionRules  namespaces' ModuleRestrictions: admission, halts
    deletions.py        Deletions          a deleted module's syncs removed from its members, in slices
    intents.py          ModuleIntents      ModuleApplied, ModuleDeleted, RolloutCommanded
    promotions.py       Promotions         PromotionObserved, ReleasePromotionObserved (at a release's
                                           leader), promotion hold/resume (inside ModuleIntents)
    dependencies.py     DependencyIntents  dependsOn across partitions, around intents.py;
                                           ReleasePromoted (a release member's new combination)
    causal.py           CausalOrder        redelivery and held intents; FleetSeen
    tombstones.py       Tombstones         removed clusters' and deleted modules' tombstones pruned

`RolloutEngine` builds them and wires them together with three explicit structures, in
this file and nowhere else:

* `handlers` — the dispatch table: one handler per event type (`handle` looks the event's
  type up; every type of `rollout.wire.events.InputEvent` has one);
* `intent_handlers` — what an intent does once its turn has come (`apply_intent`, called
  by CausalOrder): ModuleApplied and ModuleDeleted go through DependencyIntents (which
  calls ModuleIntents), RolloutCommanded to ModuleIntents; then its verdict;
* the hook lists, each run in order:
    `on_clock_moved` (a Tick moved the clock: clock.py)
        1. Leases.expire_leases — first, so modules moving on this tick see which
           clusters are ready now; it then forgets the holders expired a horizon ago
           (no readiness changes);
        2. ModuleTimers.on_clock_moved — per module: soak and window waits restarted at the
           first tick, progressDeadline failures, then advance;
        3. FreezeCalendars.end_break_glass — the calendars' break-glass overrides whose
           end has come are dropped and their end decided (the modules of step 2 saw them
           ended already: freeze_gate.py);
        4. Tombstones.prune — tombstones noted a horizon ago or longer are deleted (no
           decision rests on them: last);
    `after_intent` (an intent was applied and answered)
        1. DependencyIntents.answer_waiting_dependents;
    `on_reset` (`reset_indexes`: the runtime dropped uncommitted writes)
        1. TargetBook.reset_indexes, 2. Leases.reset_index, 3. Tombstones.reset_index.
  A cluster whose facts change (observed, removed, a lease expired or renewed, leave or
  join) goes to `Membership.cluster_changed`, and a stored Target to
  `DependencyLinks.readiness_stored` — one collaborator each, called directly.

`tests/rollout/test_engine_composition.py` checks the dispatch table covers every input
event and that dropping any entry of a hook list changes what the engine decides.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from rollout.engine.causal import CausalOrder
from rollout.engine.clock import MAX_TICK_STEP, Clock, ClockHook, ModuleTimers
from rollout.engine.deletions import Deletions
from rollout.engine.dependencies import DependencyIntents
from rollout.engine.dependency_links import DependencyLinks
from rollout.engine.freeze_gate import FreezeCalendars
from rollout.engine.gate_results import GateResults
from rollout.engine.intents import Intent, ModuleIntents, intent_module
from rollout.engine.leases import Leases
from rollout.engine.live_values import LiveValues
from rollout.engine.membership import Membership
from rollout.engine.outcome import Assignment, Decision, DecisionAction, Outcome, verdict
from rollout.engine.reports import Reports
from rollout.engine.restriction_rules import RestrictionRules
from rollout.engine.runs import Runs
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    ENGINE_MAPPINGS,
    ClaimChunk,
    ClusterClaims,
    ClusterFacts,
    DeletedModule,
    Dependents,
    FleetPosition,
    FreezeRecord,
    HeldIntent,
    HeldQueue,
    HolderLease,
    ModuleRecord,
    RemovedCluster,
    RestrictionRecord,
    RunRecord,
    Sequence,
    Target,
    TickLog,
    Upstream,
)
from rollout.engine.strategy import IMPLICIT_STAGE, bindings_digest, resolve_count, sort_key, stage_for, stages_of
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.engine.tombstones import Tombstones
from rollout.engine.views import format_positions, module_view
from rollout.engine.window_gate import WindowGate
from rollout.values.releases import ObservedValues
from rollout.wire.events import (
    CalendarBreakGlass,
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    ClusterObserved,
    ClusterRemoved,
    DependencyCurrent,
    DependencyReported,
    DependentLinked,
    FleetSeen,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    GateEvaluated,
    HelmValuesObserved,
    HolderClaims,
    HolderHeartbeat,
    LeasesContinued,
    ModuleApplied,
    ModuleDeleted,
    PromotionObserved,
    ReleasePromoted,
    ReleasePromotionObserved,
    ReleaseStageApproved,
    RestrictionApplied,
    RestrictionDeleted,
    RolloutCommanded,
    RolloutContinued,
    SyncStatusReported,
    Tick,
)

__all__ = [
    "IMPLICIT_STAGE",
    "MAX_TICK_STEP",
    "Assignment",
    "Decision",
    "DecisionAction",
    "Intent",
    "Outcome",
    "RolloutEngine",
    "bindings_digest",
    "format_positions",
    "intent_module",
    "module_view",
    "new_engine",
    "resolve_count",
    "sort_key",
    "stage_for",
    "stages_of",
]

Handler = Callable[[Any, Outcome], None]
"""Folds one event of the type it is registered for into the state, and its effects into `out`."""

IntentHook = Callable[[Intent, Outcome], None]
"""Runs after an intent was applied and answered (`after_intent`)."""


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
        tombstones_noted: MutableMapping[str, float] | None = None,
        fleet_positions: MutableMapping[str, FleetPosition] | None = None,
        held_queues: MutableMapping[str, HeldQueue] | None = None,
        held_intents: MutableMapping[str, HeldIntent] | None = None,
        capped_ticks: MutableMapping[str, TickLog] | None = None,
        observed_values: MutableMapping[str, ObservedValues] | None = None,
        dependents: MutableMapping[str, Dependents] | None = None,
        upstream: MutableMapping[str, Upstream] | None = None,
        sequences: MutableMapping[str, Sequence] | None = None,
        restrictions: MutableMapping[str, RestrictionRecord] | None = None,
        holders: MutableMapping[str, HolderLease] | None = None,
        holder_claims: MutableMapping[str, ClaimChunk] | None = None,
        claims: MutableMapping[str, ClusterClaims] | None = None,
        runs: MutableMapping[str, RunRecord] | None = None,
        freezes: MutableMapping[str, FreezeRecord] | None = None,
        partition: int = 0,
    ) -> None:
        """One mapping per entry of `ENGINE_MAPPINGS`. The ones after `clock` default to
        plain dicts only so that older callers keep working; a durable runtime passes them
        all (state kept only in a dict is lost on restart)."""
        self.tables = tables = StateTables(
            clusters=clusters,
            modules=modules,
            targets=targets,
            clock=clock,
            removed_clusters=_or_new(removed_clusters),
            deleted_modules=_or_new(deleted_modules),
            tombstones_noted=_or_new(tombstones_noted),
            fleet_positions=_or_new(fleet_positions),
            held_queues=_or_new(held_queues),
            held_intents=_or_new(held_intents),
            capped_ticks=_or_new(capped_ticks),
            observed_values=_or_new(observed_values),
            dependents=_or_new(dependents),
            upstream=_or_new(upstream),
            sequences=_or_new(sequences),
            restrictions=_or_new(restrictions),
            holders=_or_new(holders),
            holder_claims=_or_new(holder_claims),
            claims=_or_new(claims),
            runs=_or_new(runs),
            freezes=_or_new(freezes),
            partition=partition,
        )
        # the concerns, bottom to top: each gets the collaborators it uses
        self.links = DependencyLinks(tables)
        self.book = book = TargetBook(tables, self.links)
        self.stages = stages = StageMachine(tables, book, WindowGate(tables, book), Runs(tables))
        self.membership = membership = Membership(tables, book, stages)
        stages.rejoin = membership.join_at_stage_revision  # late joiners released into a run (runs.py)
        self.reports = Reports(tables, book, stages)
        self.timers = ModuleTimers(tables, book, stages, membership.join_at_stage_revision)
        self.live_values = LiveValues(tables, book)
        self.gate_results = GateResults(tables, book, stages)
        self.leases = Leases(tables, membership)
        membership.new_lease = self.leases.lease_of_new_cluster  # a cluster observed anew: its holders'
        stages.join_members = membership.join_next  # a module joining the fleet, in slices
        stages.resort_members = membership.resort_next  # a module re-sorting its members, in slices
        self.rules = RestrictionRules(tables, book, stages, membership)
        self.freezes = FreezeCalendars(tables, book, stages.advance)
        self.deletions = deletions = Deletions(tables, book, stages)
        membership.removed_from_deletions = deletions.cluster_removed  # a removed cluster's sync of a module deleted
        self.intents = ModuleIntents(tables, book, stages, membership, self.rules, deletions)
        self.dependencies = DependencyIntents(tables, book, stages, self.intents, self.links)
        stages.tell_dependents = self.dependencies.tell_next  # a first tell, in slices
        self.causal = CausalOrder(tables, book, self.apply_intent)
        deletions.release_held = self.causal.release  # applies held while it was being deleted
        self.tombstones = Tombstones(tables)  # its `horizon` may be set per engine (tests)

        # the hook lists, each run in this order (see the module doc)
        self.on_clock_moved: list[ClockHook] = [
            self.leases.expire_leases,
            self.timers.on_clock_moved,
            self.freezes.end_break_glass,
            self.tombstones.prune,
        ]
        self.after_intent: list[IntentHook] = [self.dependencies.answer_waiting_dependents]
        self.on_reset: list[Callable[[], None]] = [
            book.reset_indexes,
            self.leases.reset_index,
            self.tombstones.reset_index,
        ]
        self.ticks = Clock(tables, self.on_clock_moved)

        # what an intent does once its turn has come (`apply_intent`)
        self.intent_handlers: dict[type, Handler] = {
            ModuleApplied: self.dependencies.on_module_applied,
            ModuleDeleted: self.dependencies.on_module_deleted,
            RolloutCommanded: self.intents.on_command,
        }
        # the dispatch table: event type → handler
        self.handlers: dict[type, Handler] = {
            Tick: self.ticks.on_tick,
            ModuleApplied: self.causal.on_intent,
            ModuleDeleted: self.causal.on_intent,
            RolloutCommanded: self.causal.on_intent,
            FleetSeen: self.causal.on_fleet_seen,
            ClusterObserved: membership.on_cluster_observed,
            ClusterRemoved: membership.on_cluster_removed,
            RestrictionApplied: self.rules.on_restriction_applied,
            RestrictionDeleted: self.rules.on_restriction_deleted,
            FreezeCalendarApplied: self.freezes.on_calendar_applied,
            FreezeCalendarDeleted: self.freezes.on_calendar_deleted,
            CalendarBreakGlass: self.freezes.on_break_glass,
            SyncStatusReported: self.reports.on_sync_status,
            HelmValuesObserved: self.live_values.on_helm_values,
            ClusterHeartbeat: self.leases.on_heartbeat,
            ClusterHeartbeats: self.leases.on_heartbeats,
            HolderHeartbeat: self.leases.on_holder_heartbeat,
            HolderClaims: self.leases.on_holder_claims,
            ClusterCommanded: self.leases.on_cluster_command,
            DependentLinked: self.dependencies.on_dependent_linked,
            DependencyReported: self.dependencies.on_dependency_reported,
            DependencyCurrent: self.dependencies.on_dependency_current,
            GateEvaluated: self.gate_results.on_gate_evaluated,
            PromotionObserved: self.intents.promotions.on_promotion_observed,
            ReleasePromotionObserved: self.intents.promotions.on_release_observed,
            ReleasePromoted: self.dependencies.on_release_promoted,
            ReleaseStageApproved: self.intents.on_release_stage_approved,
            RolloutContinued: self.on_continued,
            LeasesContinued: self.leases.on_continued,
        }

    def handle(self, event: Any) -> Outcome:
        """Fold `event`; what it decided."""
        out = Outcome()
        self.stages.begin_event()
        handler = self.handlers.get(type(event))
        if handler is None:  # pragma: no cover - parse_event only yields the types above
            out.rejections.append(f"unknown event type {type(event).__name__}")
        else:
            handler(event, out)
        return out

    def on_continued(self, event: RolloutContinued, out: Outcome) -> None:
        """A module's continuation (stages.py "Moves per event") — or, for a module deleted
        whose members' syncs are still being removed, its deletion's (deletions.py)."""
        if event.module in self.tables.modules:
            self.stages.on_continued(event, out)
        else:
            self.deletions.on_continued(event, out)

    def apply_intent(self, event: Intent, out: Outcome) -> None:
        """Do what the intent says (its turn has come: causal.py), answer it, then run the
        `after_intent` hooks."""
        rejections, decisions = len(out.rejections), len(out.decisions)
        self.intent_handlers[type(event)](event, out)
        out.verdicts.append(verdict(event.id, intent_module(event), out, rejections=rejections, decisions=decisions))
        for hook in self.after_intent:
            hook(event, out)

    def reset_indexes(self) -> None:
        """Drop every derived in-memory index (the `on_reset` hooks); they are rebuilt lazily
        from the mappings. The runtime calls this when it discards uncommitted writes."""
        for hook in self.on_reset:
            hook()

    def status_of(self, name: str) -> dict[str, Any] | None:
        """The module-status document of `name` now (None: no such module)."""
        return self.book.status_of(name)

    @property
    def defer_views(self) -> bool:
        """Leave module-status documents as `DEFERRED` in outcomes (TargetBook.defer_views)."""
        return self.book.defer_views

    @defer_views.setter
    def defer_views(self, value: bool) -> None:
        self.book.defer_views = value

    @property
    def private_records(self) -> dict[str, ModuleRecord] | None:
        """The module records this batch copied, by name (StateTables.private_records)."""
        return self.tables.private_records

    @private_records.setter
    def private_records(self, value: dict[str, ModuleRecord] | None) -> None:
        self.tables.private_records = value

    @property
    def partition(self) -> int:
        return self.tables.partition

    @property
    def modules(self) -> MutableMapping[str, ModuleRecord]:
        return self.tables.modules

    @property
    def now(self) -> float:
        return self.tables.now


def _or_new(mapping: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
    return mapping if mapping is not None else {}


def new_engine(partition: int = 0) -> RolloutEngine:
    """An engine over fresh plain dicts, one per `ENGINE_MAPPINGS` entry (for replay)."""
    mappings: dict[str, Any] = {name: {} for name in ENGINE_MAPPINGS}
    return RolloutEngine(**mappings, partition=partition)
