"""The decision core: fold input events into rollout state and decide assignments.

    handle(event) -> Outcome          (evolves the state it was built over)

`RolloutEngine` is deterministic: the same state and the same event always give the same
new state and the same outcome. It performs no I/O and reads no clock — time is whatever
the latest `Tick` said. The caller (the worker's decider, a test, `rollout replay`) owns the
mappings the engine evolves and ships the outcome (outcome.py):

* `assignments` — for one (cluster, module): the sync now in the cluster's assemblage, or
  None. The assemblage builder folds these into RemoteAssemblage/ProxyAssemblage snapshots.
* `decisions`   — the explainable record of every assignment change and phase transition.
* `module_status` / `target_status` — compacted views for `rollout status` (views.py).
* `rejections`  — events that were well-formed but cannot apply (go to dead letters).

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
  (or the first after a long outage) does not fire every deadline at once (reports.py).

Cost: a status report touches one Target, one ClusterFacts and one ModuleRecord, and moving
the next cluster pops from an in-memory ordered index of pending clusters per stage
(derived from the Targets, rebuilt lazily after a restart, dropped by `reset_indexes`) — no
scan of the fleet per event. Module events (apply, delete, supersede) and readiness changes
pay for the clusters they concern; a FleetSeen pays for the modules with held intents.

The engine is one class assembled from one layer per concern, each building on the ones
below it:

    targets.py     TargetBook      the mappings; Targets, their indexes and counters; _assign
    window_gate.py WindowGate      maintenance windows: may a stage's clusters move now?
    stages.py      StageMachine    advance, fill, budget, rollback
    membership.py  Membership      cluster events; which clusters a module covers
    reports.py     Reports         sync status reports and ticks
    live_values.py LiveValues      Helm values observed on clusters: re-merged, re-sent
    gate_results.py GateResults    health gate results: stages wait for them, failures halt
    leases.py      Leases          heartbeats, lease expiry, leave/join: cluster readiness
    dependencies.py DependencyIntents  dependsOn across partitions (and dependency_links.py)
    restriction_rules.py RestrictionRules  namespaces' ModuleRestrictions: admission, halts
    intents.py     ModuleIntents   ModuleApplied, ModuleDeleted, RolloutCommanded
    causal.py      CausalOrder     redelivery and held intents; FleetSeen
    engine.py      RolloutEngine   `handle`: routes each event to its layer
"""

from __future__ import annotations

from typing import Any

from rollout.engine.causal import CausalOrder
from rollout.engine.dependencies import DependencyIntents
from rollout.engine.gate_results import GateResults
from rollout.engine.intents import Intent, intent_module
from rollout.engine.leases import Leases
from rollout.engine.live_values import LiveValues
from rollout.engine.outcome import Assignment, Decision, Outcome
from rollout.engine.reports import MAX_TICK_STEP
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.engine.strategy import IMPLICIT_STAGE, bindings_digest, resolve_count, sort_key, stage_for, stages_of
from rollout.engine.views import format_positions, module_view
from rollout.wire.events import (
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    ClusterObserved,
    ClusterRemoved,
    DependencyCurrent,
    DependencyReported,
    DependentLinked,
    FleetSeen,
    GateEvaluated,
    HelmValuesObserved,
    ModuleApplied,
    ModuleDeleted,
    RestrictionApplied,
    RestrictionDeleted,
    RolloutCommanded,
    SyncStatusReported,
    Tick,
)

__all__ = [
    "IMPLICIT_STAGE",
    "MAX_TICK_STEP",
    "Assignment",
    "Decision",
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


class RolloutEngine(CausalOrder, DependencyIntents, Leases, LiveValues, GateResults):
    """Folds events into the mappings it is given. One instance per journal partition."""

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
        elif isinstance(event, RestrictionApplied):
            self._on_restriction_applied(event, out)
        elif isinstance(event, RestrictionDeleted):
            self._on_restriction_deleted(event, out)
        elif isinstance(event, SyncStatusReported):
            self._on_sync_status(event, out)
        elif isinstance(event, HelmValuesObserved):
            self._on_helm_values(event, out)
        elif isinstance(event, ClusterHeartbeat):
            self._on_heartbeat(event, out)
        elif isinstance(event, ClusterHeartbeats):
            self._on_heartbeats(event, out)
        elif isinstance(event, ClusterCommanded):
            self._on_cluster_command(event, out)
        elif isinstance(event, DependentLinked):
            self._on_dependent_linked(event, out)
        elif isinstance(event, DependencyReported):
            self._on_dependency_reported(event, out)
        elif isinstance(event, DependencyCurrent):
            self._on_dependency_current(event, out)
        elif isinstance(event, GateEvaluated):
            self._on_gate_evaluated(event, out)
        else:  # pragma: no cover - parse_event only yields the types above
            out.rejections.append(f"unknown event type {type(event).__name__}")
        return out


def new_engine(partition: int = 0) -> RolloutEngine:
    """An engine over fresh plain dicts, one per `ENGINE_MAPPINGS` entry (for replay)."""
    mappings: dict[str, Any] = {name: {} for name in ENGINE_MAPPINGS}
    return RolloutEngine(**mappings, partition=partition)
