"""Terse builders for manifests and events, and the `Fleet` harness the rollout tests drive.

    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", stage("canary", {"ring": "canary"})))
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "c1") == "v1"

`Fleet` feeds events to a fresh `RolloutEngine` over plain dicts and keeps what a consumer of
its outcomes would see: the assemblages (folded from `assignments`), the decisions, the
module/target status views and rejections. After every event it checks that the engine's
stored state is self-consistent (`check_consistency`): per-stage counters equal a recount
of the targets, every stored category is the one the rules give, assemblages agree with
the targets. `restart()` round-trips every stored model through JSON into a new engine
instance with cold in-memory indexes, as a worker recovering from the changelog would.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

from rollout.api.manifests import (
    CLUSTER_SCOPE,
    BootstrapModuleManifest,
    ClusterFreezeCalendarManifest,
    ClusterManifest,
    FreezeCalendarManifest,
    ModuleManifest,
    ModuleRestrictionManifest,
)
from rollout.api.restrictions import admits
from rollout.api.selectors import selects
from rollout.engine.clock import LEASE_TICK_STEP
from rollout.engine.core import Decision, Outcome, RolloutEngine, stage_for, stages_of
from rollout.engine.state import CATEGORIES, ENGINE_MAPPINGS, ClusterFacts, ModuleRecord, Target, target_key
from rollout.engine.strategy import moving_key
from rollout.wire.assemblages import ASSEMBLAGE_FOR, AssignedSync
from rollout.wire.events import (
    CalendarBreakGlass,
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    ClusterObserved,
    ClusterRemoved,
    FleetSeen,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    GateEvaluated,
    ModuleApplied,
    ModuleDeleted,
    ObservedMember,
    PromotedSource,
    PromotionObserved,
    ReleasePromotionObserved,
    RolloutCommanded,
    SyncStatusReported,
    Tick,
)
from rollout.wire.status import ModuleStatus, TargetStatus, run_members
from tests.rollout.reasons import check_reasons

API = "rollout.dev/v1alpha1"
GIT_URL = "https://github.com/example/app"
AT = "2026-01-01T00:00:00+00:00"  # the informational `at` of every built event
T0 = 1_000.0  # the time of the first tick `given` sends

_ids = itertools.count(1)


def next_id() -> str:
    return f"ev-{next(_ids):06d}"


# --- manifests --------------------------------------------------------------------------


def selector(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """`None` stays missing; a dict with matchLabels/matchExpressions is a full selector;
    any other dict is the `matchLabels` shorthand (`{}` selects everything)."""
    if value is None:
        return None
    if "matchLabels" in value or "matchExpressions" in value:
        return value
    return {"matchLabels": dict(value)}


def cluster(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    ready: bool = True,
    namespace: str = "fleet",
    annotations: dict[str, str] | None = None,
) -> ClusterManifest:
    return ClusterManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "Cluster",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "status": {"controlPlaneReady": ready, "kubeconfigSecret": ready},
        }
    )


def stage(
    name: str,
    labels: dict[str, Any] | None = None,
    *,
    concurrency: int | str | None = None,
    failures: int | str | None = None,
    soak: str | None = None,
    approval: bool | dict[str, Any] = False,
    waves: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A stage; `labels` None means no selector (the stage takes every remaining member).
    `approval`: True is `requireApproval`, a dict the stage's `approval` policy."""
    spec: dict[str, Any] = {"name": name}
    if labels is not None:
        spec["selector"] = selector(labels)
    if concurrency is not None:
        spec["maxConcurrency"] = concurrency
    if failures is not None:
        spec["maxFailures"] = failures
    if soak is not None:
        spec["minSuccessTime"] = soak
    if isinstance(approval, dict):
        spec["approval"] = approval
    elif approval:
        spec["requireApproval"] = True
    if waves is not None:
        spec["waves"] = waves
    return spec


def module(
    name: str,
    labels: dict[str, Any] | None = None,
    tag: str = "v1",
    *stages: dict[str, Any],
    kind: str = "Module",
    namespace: str = "fleet",
    on_failure: str | None = None,
    deadline: str | None = None,
    sorting: str | None = None,
    bindings: list[dict[str, str]] | None = None,
    substitute: dict[str, str] | None = None,
    path: str = "./deploy",
    rollout: bool = True,
    windows: list[dict[str, Any]] | None = None,
    depends_on: list[str] | None = None,
    auto_promote: dict[str, Any] | None = None,
    release: tuple[str, list[str]] | None = None,
    release_promotion: dict[str, Any] | None = None,
    late_joiners: str | None = None,
    offline: dict[str, str] | None = None,
) -> ModuleManifest | BootstrapModuleManifest:
    """A Module (or BootstrapModule with kind=...) at Git tag `tag`. `labels` is the
    selector (shorthand for matchLabels; `{}` everything; None: no selector at all).
    `auto_promote`: the source's autoPromote ({"semver": ..., "hold": ...})."""
    source: dict[str, Any] = {"git": {"url": GIT_URL, "version": {"tag": tag}}}
    if auto_promote is not None:
        source["autoPromote"] = auto_promote
    spec: dict[str, Any] = {
        "sync": {
            "source": source,
            "package": {"kustomize": {"path": path, "substitute": substitute or {}}},
        },
        "bindings": bindings or [],
    }
    if labels is not None:
        spec["selector"] = selector(labels)
    if depends_on is not None:
        spec["dependsOn"] = depends_on
    if release is not None:  # as rollout apply gives a Release's member (rollout/api/module_releases.py)
        spec["release"] = {"name": release[0], "members": release[1]}
        if release_promotion is not None:  # the release's autoPromote, as apply gives every member
            spec["release"]["autoPromote"] = release_promotion
    strategy: dict[str, Any] = {}
    if stages:
        strategy["stages"] = list(stages)
    if on_failure is not None:
        strategy["onFailure"] = on_failure
    if deadline is not None:
        strategy["progressDeadline"] = deadline
    if sorting is not None:
        strategy["sortingLabelKey"] = sorting
    if windows is not None:
        strategy["windows"] = windows
    if late_joiners is not None:
        strategy["lateJoiners"] = late_joiners
    if offline is not None:
        strategy["offline"] = offline
    if rollout and strategy:
        spec["rollout"] = strategy
    document = {"apiVersion": API, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    model = BootstrapModuleManifest if kind == "BootstrapModule" else ModuleManifest
    return model.model_validate(document)


def restriction(
    namespace: str = "fleet",
    *,
    name: str = "tenant-lane",
    clusters: dict[str, Any] | None = None,
    sources: list[str] | None = None,
    accounts: list[str] | None = None,
    default: str | None = None,
    namespaces: list[str] | None = None,
) -> ModuleRestrictionManifest:
    spec: dict[str, Any] = {}
    if clusters is not None:
        spec["allowedClusters"] = clusters
    if sources is not None:
        spec["allowedSourcePatterns"] = sources
    if accounts is not None:
        spec["allowedServiceAccounts"] = accounts
    if default is not None:
        spec["defaultServiceAccount"] = default
    if namespaces is not None:
        spec["allowedTargetNamespaces"] = namespaces
    return ModuleRestrictionManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "ModuleRestriction",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def freeze_calendar(
    name: str, *windows: dict[str, Any], namespace: str | None = None
) -> FreezeCalendarManifest | ClusterFreezeCalendarManifest:
    """A FreezeCalendar of `namespace`, or (namespace None) a ClusterFreezeCalendar."""
    if namespace is None:
        return ClusterFreezeCalendarManifest.model_validate(
            {
                "apiVersion": API,
                "kind": "ClusterFreezeCalendar",
                "metadata": {"name": name},
                "spec": {"windows": windows},
            }
        )
    return FreezeCalendarManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "FreezeCalendar",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"windows": windows},
        }
    )


# --- events -----------------------------------------------------------------------------


def calendar_applied(manifest: FreezeCalendarManifest | ClusterFreezeCalendarManifest) -> FreezeCalendarApplied:
    return FreezeCalendarApplied(id=next_id(), at=AT, calendar=manifest)


def calendar_deleted(scope: str, name: str) -> FreezeCalendarDeleted:
    return FreezeCalendarDeleted(id=next_id(), at=AT, scope=scope, name=name)


def observed(manifest: ClusterManifest) -> ClusterObserved:
    return ClusterObserved(id=next_id(), at=AT, cluster=manifest)


def removed(name: str) -> ClusterRemoved:
    return ClusterRemoved(id=next_id(), at=AT, name=name)


def applied(
    manifest: ModuleManifest | BootstrapModuleManifest,
    *,
    fleet: dict[int, int] | None = None,
    after: dict[str, str] | None = None,
) -> ModuleApplied:
    """`fleet`: the cluster-observation positions the apply must wait for (causal order);
    `after`: dependency → the id of its intent applied with this one (dependencies)."""
    return ModuleApplied(id=next_id(), at=AT, module=manifest, fleet=fleet or {}, after=after or {})


def deleted(name: str, kind: str = "Module") -> ModuleDeleted:
    return ModuleDeleted(id=next_id(), at=AT, name=name, kind=kind)  # type: ignore[arg-type]


def reported(
    module_name: str,
    cluster_name: str,
    revision: str,
    state: str,
    message: str | None = None,
    *,
    generation: int | None = None,
) -> SyncStatusReported:
    return SyncStatusReported(
        id=next_id(),
        at=AT,
        module=module_name,
        cluster=cluster_name,
        revision=revision,
        state=state,  # type: ignore[arg-type]
        message=message,
        generation=generation,
    )


def fleet_seen(partition: int, position: int) -> FleetSeen:
    return FleetSeen(id=next_id(), at=AT, partition=partition, position=position)


def tick(now: float) -> Tick:
    return Tick(id=next_id(), at=AT, now=now)


def command(
    module_name: str,
    name: str,
    *,
    stage: str | None = None,
    cluster: str | None = None,
    user: str | None = None,
    via: str | None = None,
    groups: list[str] | None = None,
    reason: str | None = None,
    until: float | None = None,
    calendar: str | None = None,
    namespace: str | None = None,
) -> RolloutCommanded:
    return RolloutCommanded(
        id=next_id(),
        at=AT,
        module=module_name,
        command=name,  # type: ignore[arg-type]
        stage=stage,
        cluster=cluster,
        user=user,
        via=via,  # type: ignore[arg-type]
        groups=groups,
        reason=reason,
        until=until,
        calendar=calendar,
        namespace=namespace,
    )


def calendar_break_glass(
    name: str,
    until: float,
    *,
    scope: str = CLUSTER_SCOPE,
    reason: str = "sev-1 fix",
    user: str | None = "alice@example.com",
    via: str | None = "cli",
) -> CalendarBreakGlass:
    """An operator's break-glass of the calendar `name` of `scope` (`*`: a ClusterFreezeCalendar)."""
    return CalendarBreakGlass(
        id=next_id(),
        at=AT,
        scope=scope,
        name=name,
        reason=reason,
        until=until,
        user=user,
        via=via,  # type: ignore[arg-type]
    )


def heartbeat(cluster_name: str, lease_seconds: float = 60.0) -> ClusterHeartbeat:
    return ClusterHeartbeat(id=next_id(), at=AT, cluster=cluster_name, lease_seconds=lease_seconds)


def heartbeats(*cluster_names: str, lease_seconds: float = 60.0) -> ClusterHeartbeats:
    return ClusterHeartbeats(id=next_id(), at=AT, clusters=list(cluster_names), lease_seconds=lease_seconds)


def cluster_command(cluster_name: str, name: str, *, reply: bool | None = None) -> ClusterCommanded:
    return ClusterCommanded(id=next_id(), at=AT, cluster=cluster_name, command=name, reply=reply)  # type: ignore[arg-type]


def promotion(
    module_name: str,
    version: str,
    *,
    url: str = GIT_URL,
    kind: str = "git",
    chart: str | None = None,
    promoter: str = "promoter-0",
) -> PromotionObserved:
    """A PromotionObserved: `version` of the module's source (default: builders' Git URL)."""
    return PromotionObserved(
        id=next_id(),
        at=AT,
        module=module_name,
        version=version,
        source=PromotedSource(kind=kind, url=url, chart=chart),  # type: ignore[arg-type]
        promoter=promoter,
    )


def release_observed(
    leader: str,
    release_name: str,
    versions: dict[str, str],
    *,
    url: str = GIT_URL,
    promoter: str = "promoter-0",
) -> ReleasePromotionObserved:
    """A ReleasePromotionObserved for `leader`: each member's newest version in range (its
    source the builders' Git URL unless `url`)."""
    return ReleasePromotionObserved(
        id=next_id(),
        at=AT,
        module=leader,
        release=release_name,
        members=[
            ObservedMember(module=name, version=version, source=PromotedSource(kind="git", url=url))
            for name, version in versions.items()
        ],
        promoter=promoter,
    )


def gate_result(
    module_name: str,
    stage_name: str,
    gate: str,
    passed: bool | None,
    *,
    generation: int = 1,
    message: str = "",
    run: int | None = None,
    measurement: int | None = None,
) -> GateEvaluated:
    return GateEvaluated(
        id=next_id(),
        at=AT,
        module=module_name,
        stage=stage_name,
        gate=gate,
        generation=generation,
        passed=passed,
        message=message,
        run=run,
        measurement=measurement,
    )


def as_event(item: Any) -> Any:
    if isinstance(item, ClusterManifest):
        return observed(item)
    if isinstance(item, ModuleManifest | BootstrapModuleManifest):
        return applied(item)
    if isinstance(item, FreezeCalendarManifest | ClusterFreezeCalendarManifest):
        return calendar_applied(item)
    return item


def serialize(outcome: Outcome) -> dict[str, Any]:
    """An outcome as plain JSON data, for comparing two engines' outputs."""
    return {
        "assignments": [a.model_dump(mode="json", by_alias=True) for a in outcome.assignments],
        "decisions": [d.model_dump(mode="json") for d in outcome.decisions],
        "module_status": outcome.module_status,
        "target_status": outcome.target_status,
        "rejections": outcome.rejections,
    }


# --- the harness ------------------------------------------------------------------------


class Fleet:
    """A fresh engine over dicts, plus everything its outcomes told the world."""

    def __init__(self, *, moves_per_event: int | None = None) -> None:
        # every mapping the engine declares (state.ENGINE_MAPPINGS), as plain dicts
        self.state: dict[str, dict[str, Any]] = {name: {} for name in ENGINE_MAPPINGS}
        self.moves_per_event = moves_per_event  # None: the engine's own limit (stages.py)
        self.lease_tick_step: float | None = None  # None: the engine's own (clock.py LEASE_TICK_STEP)
        self.expiries_per_event: int | None = None  # None: the engine's own (leases.py EXPIRIES_PER_EVENT)
        self.engine = self._new_engine()
        self.journal: list[Any] = []
        self.outcomes: list[Outcome] = []
        self.decisions: list[Decision] = []
        self.rejections: list[str] = []
        self.last = Outcome()
        # (cluster, module) -> the sync record in that cluster's assemblage, and its kind
        self.assemblages: dict[tuple[str, str], AssignedSync] = {}
        self.assemblage_kind: dict[tuple[str, str], str] = {}
        self.assemblage_namespace: dict[tuple[str, str], str] = {}
        self.module_status: dict[str, dict[str, Any] | None] = {}
        self.target_status: dict[str, dict[str, Any] | None] = {}
        self.check_each_event = True
        # feed the events the engine sends to other partitions back, as the router would
        self.feedback = True
        # ... one event late: after the next event sent (the router is slower than the
        # operator), so a module continuing itself meets other events between its slices
        self.late_feedback = False
        self.held_back: list[Any] = []

    def _new_engine(self) -> RolloutEngine:
        engine = RolloutEngine(**self.state)  # type: ignore[arg-type]
        if self.moves_per_event is not None:
            engine.stages.moves_per_event = self.moves_per_event
        if self.lease_tick_step is not None:
            engine.ticks.lease_tick_step = self.lease_tick_step
        if self.expiries_per_event is not None:
            engine.leases.expiries_per_event = self.expiries_per_event
        return engine

    @property
    def clusters(self) -> dict[str, ClusterFacts]:
        return self.state["clusters"]

    @property
    def modules(self) -> dict[str, ModuleRecord]:
        return self.state["modules"]

    @property
    def targets(self) -> dict[str, Target]:
        return self.state["targets"]

    @property
    def clock(self) -> dict[str, float]:
        return self.state["clock"]

    # -- feeding events ------------------------------------------------------------------

    def send(self, *items: Any) -> Outcome:
        """Feed events (manifests become Applied/Observed events); returns their merged outcome."""
        merged = Outcome()
        queue = [as_event(item) for item in items]
        if self.held_back:  # the events fed back late: after the first one sent now
            queue[1:1] = self.held_back
            self.held_back = []
        while queue:
            event = queue.pop(0)
            outcome = self.engine.handle(event)
            check_reasons(outcome)
            self.journal.append(event)
            self.outcomes.append(outcome)
            self._absorb(outcome)
            merged.merge(outcome)
            if self.check_each_event:
                check_consistency(self)
            if self.feedback and self.late_feedback:
                self.held_back += outcome.dependency_events
            elif self.feedback:
                queue[:0] = outcome.dependency_events
        self.last = merged
        return merged

    def _absorb(self, outcome: Outcome) -> None:
        for assignment in outcome.assignments:
            key = (assignment.cluster, assignment.module)
            if assignment.sync is None:
                self.assemblages.pop(key, None)
                self.assemblage_kind.pop(key, None)
                self.assemblage_namespace.pop(key, None)
            else:
                self.assemblages[key] = assignment.sync
                self.assemblage_kind[key] = assignment.assemblage
                self.assemblage_namespace[key] = assignment.cluster_namespace
        self.decisions += outcome.decisions
        self.rejections += outcome.rejections
        self.module_status.update(outcome.module_status)
        self.target_status.update(outcome.target_status)

    def apply(self, *manifests: Any) -> Outcome:
        return self.send(*manifests)

    def remove(self, name: str) -> Outcome:
        return self.send(removed(name))

    def delete(self, name: str, kind: str = "Module") -> Outcome:
        return self.send(deleted(name, kind))

    def report(self, module_name: str, cluster_name: str, state: str = "succeeded", revision: str | None = None):
        """A status report; by default about the revision the cluster is assigned."""
        if revision is None:
            revision = self.revision(module_name, cluster_name)
            assert revision is not None, f"{cluster_name} has nothing of {module_name} to report about"
        return self.send(reported(module_name, cluster_name, revision, state))

    def succeed(self, module_name: str, *clusters: str) -> Outcome:
        merged = Outcome()
        for name in clusters:
            merged.merge(self.report(module_name, name, "succeeded"))
        self.last = merged
        return merged

    def fail(self, module_name: str, *clusters: str) -> Outcome:
        merged = Outcome()
        for name in clusters:
            merged.merge(self.report(module_name, name, "failed"))
        self.last = merged
        return merged

    def succeed_all(self, module_name: str, revision: str) -> Outcome:
        """Every cluster assigned `revision` (and not already succeeded) reports success."""
        merged = Outcome()
        for name in self.on(module_name, revision):
            if self.targets[target_key(module_name, name)].status != "succeeded":
                merged.merge(self.report(module_name, name, "succeeded"))
        self.last = merged
        return merged

    def tick(self, now: float) -> Outcome:
        return self.send(tick(now))

    def wait(self, seconds: float) -> Outcome:
        """One tick `seconds` on (a gap in the engine's clock if over LEASE_TICK_STEP)."""
        return self.tick(self.now + seconds)

    def run_for(self, seconds: float) -> Outcome:
        """`seconds` pass with the engine running: a tick every LEASE_TICK_STEP at most, as
        a worker's ticker sends them (a single tick further on is a gap in the engine's
        clock, which leases do not count: clock.py). The outcomes merged."""
        if self.now == 0:
            return self.tick(seconds)  # the first tick: no gap before it
        end, merged = self.now + seconds, Outcome()
        while self.now < end:
            merged.merge(self.tick(min(end, self.now + LEASE_TICK_STEP)))
        self.last = merged
        return merged

    def command(self, module_name: str, name: str, **kwargs: Any) -> Outcome:
        return self.send(command(module_name, name, **kwargs))

    def pause(self, module_name: str) -> Outcome:
        return self.command(module_name, "pause")

    def resume(self, module_name: str) -> Outcome:
        return self.command(module_name, "resume")

    def abort(self, module_name: str) -> Outcome:
        return self.command(module_name, "abort")

    def rollback(self, module_name: str) -> Outcome:
        return self.command(module_name, "rollback")

    def approve(self, module_name: str, stage_name: str) -> Outcome:
        return self.command(module_name, "approve", stage=stage_name)

    def pin(self, module_name: str, cluster_name: str) -> Outcome:
        return self.command(module_name, "pin", cluster=cluster_name)

    def unpin(self, module_name: str, cluster_name: str) -> Outcome:
        return self.command(module_name, "unpin", cluster=cluster_name)

    # -- recovery ------------------------------------------------------------------------

    def restart(self) -> None:
        """A new engine over the stored models after a JSON round trip (cold indexes), as
        the runtime stores them: `model_dump(mode="json")` and `model_validate` per value."""
        self.state = {name: _round_trip(self.state[name], kind) for name, kind in ENGINE_MAPPINGS.items()}
        self.engine = self._new_engine()

    def snapshot(self) -> dict[str, Any]:
        """The engine's whole stored state as JSON data."""
        return {name: {k: _dump(mapping[k]) for k in sorted(mapping)} for name, mapping in self.state.items()}

    # -- what the world sees -------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.get("now", 0.0)

    def revision(self, module_name: str, cluster_name: str) -> str | None:
        """The revision label of `module_name` in `cluster_name`'s assemblage (None: nothing)."""
        sync = self.assemblages.get((cluster_name, module_name))
        return sync.revision if sync is not None else None

    def assigned(self, module_name: str) -> dict[str, str | None]:
        """Every member (and every cluster holding the module) → its revision label."""
        names = {t.cluster for t in self.targets.values() if t.module == module_name}
        names |= {c for (c, m) in self.assemblages if m == module_name}
        return {name: self.revision(module_name, name) for name in sorted(names)}

    def on(self, module_name: str, revision: str | None) -> list[str]:
        return [name for name, label in self.assigned(module_name).items() if label == revision]

    def phase(self, module_name: str) -> str:
        return self.modules[module_name].phase

    def record(self, module_name: str) -> ModuleRecord:
        return self.modules[module_name]

    def target(self, module_name: str, cluster_name: str) -> Target | None:
        return self.targets.get(target_key(module_name, cluster_name))

    def category(self, module_name: str, cluster_name: str) -> str | None:
        found = self.target(module_name, cluster_name)
        return found.category if found is not None else None

    def status(self, module_name: str) -> dict[str, Any]:
        view = self.module_status.get(module_name)
        assert view is not None, f"no status published for {module_name}"
        return view

    def run_members(self, module_name: str) -> dict[str, tuple[str, str]]:
        """cluster → (its explicit run state, why), from the published documents, as
        `rollout status` and the dashboard read them (rollout/wire/status.py `run_members`)."""
        status = ModuleStatus.read(self.status(module_name))
        targets = [
            TargetStatus.read(view)
            for key, view in sorted(self.target_status.items())
            if view is not None and key.startswith(f"{module_name}/")
        ]
        return {member.cluster: (member.state, member.why) for member in run_members(status, targets)}

    def run(self, module_name: str) -> dict[str, Any]:
        """The module's current run, as published (`run` of its status)."""
        found: dict[str, Any] = self.status(module_name)["run"]
        return found

    def counts(self, module_name: str, stage_name: str) -> dict[str, int]:
        """The published counts of one stage (`-`: the unstaged members)."""
        view = self.status(module_name)
        if stage_name == "-":
            return view["unstaged"]
        return next(s["counts"] for s in view["stages"] if s["name"] == stage_name)

    def actions(self, module_name: str | None = None) -> list[str]:
        return [d.action for d in self.decisions if module_name is None or d.module == module_name]

    def decisions_of(self, module_name: str, action: str) -> list[Decision]:
        """The module's decisions of `action`, in order."""
        return [d for d in self.decisions if d.module == module_name and d.action == action]

    def last_actions(self) -> list[str]:
        return [d.action for d in self.last.decisions]

    def moved(self, outcome: Outcome | None = None) -> list[tuple[str, str | None]]:
        """(cluster, revision) of every assignment in an outcome (default: the last)."""
        outcome = outcome if outcome is not None else self.last
        return [(a.cluster, a.sync.revision if a.sync else None) for a in outcome.assignments]


def is_member(fleet: Fleet, record: ModuleRecord, labels: dict[str, str]) -> bool:
    """The membership rule: the selector picks the cluster and the namespace's
    ModuleRestriction (if any) allows it."""
    restriction = fleet.state["restrictions"].get(record.namespace)
    return selects(record.spec.selector, labels) and admits(restriction and restriction.restriction, labels)


def given(*items: Any, at: float | None = T0) -> Fleet:
    """A fleet that saw a first tick at `at` (None: no tick), then the given manifests/events."""
    fleet = Fleet()
    if at is not None:
        fleet.tick(at)
    fleet.send(*items)
    return fleet


def _dump(value: Any) -> Any:
    return value if isinstance(value, float) else value.model_dump(mode="json")


def _round_trip(mapping: dict[str, Any], kind: type) -> dict[str, Any]:
    if kind is float:
        return {key: float(json.loads(json.dumps(value))) for key, value in mapping.items()}
    return {key: kind.model_validate(json.loads(json.dumps(_dump(value)))) for key, value in mapping.items()}  # type: ignore[attr-defined]


# --- consistency of the stored state ----------------------------------------------------


def expected_category(record: ModuleRecord, target: Target, upstream: dict[str, Any] | None = None) -> str:
    """Where a member stands, in the words of docs/rollout-semantics.md."""
    if target.pinned:
        return "pinned"
    goal = record.target if record.mode == "rollout" else record.stable
    release = record.spec.release
    peers = [m for m in release.members if m != record.name] if release and record.mode == "rollout" and goal else []
    known_peers = {peer: (upstream or {}).get(target_key(peer, target.cluster)) for peer in peers}
    updating = target.assigned == goal and target.status == "updating"  # its own slot: kept
    for peer, known in known_peers.items():  # a member failed here: the release failed here
        if not updating and peer not in record.awaiting and known is not None and known.failed:
            return "failed"
    if target.assigned == goal:
        if goal is None or target.status == "succeeded":
            for peer, known in known_peers.items():  # done only once every member is done (or skipped) here
                if target.hold is not None:
                    break  # a cluster its owner holds: the others are held there too
                if peer in record.awaiting or known is None or not (known.ready or known.skipped):
                    return "awaiting_release"  # started, not done
            return "succeeded"
        return "failed" if target.status == "failed" else "updating"
    if record.mode == "rollback" and target.stage_index is None and target.assigned is None:
        return "succeeded"  # unstaged, never given anything: nothing for a rollback to undo
    if target.hold is not None and record.mode == "rollout":
        return "held"  # its owner holds it (rollout.dev/hold): not moved, not failed
    if target.late is not None and record.mode == "rollout":
        return "deferred" if target.late == "next-run" else "excluded"  # kept out of the run (lateJoiners)
    if not target.ready and record.mode == "rollout":
        if target.offline_failed:
            return "failed"  # stayed offline past its stage's offline.wait, then: Fail
        return "awaited" if target.offline_until is not None else "not_ready"
    if record.mode == "rollout":
        for dependency in record.spec.depends_on:  # every dependency on its target there
            known = (upstream or {}).get(target_key(dependency, target.cluster))
            if dependency in record.awaiting or known is None or not known.ready:
                return "blocked"  # not ready there, or its apply with this one not folded yet
    return "pending"


def recount(fleet: Fleet, module_name: str) -> dict[str, Counter[str]]:
    """Per stage name: members and categories, counted from the stored targets."""
    counts: dict[str, Counter[str]] = {}
    for found in fleet.targets.values():
        if found.module == module_name:
            bucket = counts.setdefault(found.stage, Counter())
            bucket["members"] += 1
            bucket[found.category] += 1
    return counts


def check_consistency(fleet: Fleet) -> None:
    """Assert the stored state is consistent with itself and with the published assemblages."""
    deleted = fleet.state["deleted_modules"]
    for key, found in fleet.targets.items():
        assert key == target_key(found.module, found.cluster)
        assert found.cluster in fleet.clusters, f"target {key} of a removed cluster"
        if found.module in fleet.modules:
            continue
        # a module deleted: only while its members' syncs are removed, in name order
        # (rollout/engine/deletions.py), and none before the cluster it stopped at
        tombstone = deleted.get(found.module)
        assert tombstone is not None and tombstone.unassigning is not None, f"target {key} of a deleted module"
        assert found.cluster > tombstone.unassigning, f"target {key} passed by its module's deletion"
        if found.assigned is not None:
            assert (found.cluster, found.module) in fleet.assemblages, f"{key}: assigned, never sent"
    for name, tombstone in deleted.items():
        if tombstone.unassigning is not None:
            left = sum(1 for found in fleet.targets.values() if found.module == name)
            assert tombstone.members_left == left, f"{name}: {tombstone.members_left} members left, {left} found"
            assert name not in fleet.modules, f"{name} exists and is being deleted"
    for name, record in fleet.modules.items():
        counted = recount(fleet, name)
        for stage_name in set(counted) | set(record.counts):
            stored = record.counts.get(stage_name)
            stored_counts = stored.model_dump() if stored is not None else {}
            for field in ("members", *CATEGORIES):
                assert stored_counts.get(field, 0) == counted.get(stage_name, Counter())[field], (
                    f"{name} stage {stage_name}: counter {field}={stored_counts.get(field, 0)} "
                    f"but the targets say {counted.get(stage_name, Counter())[field]}"
                )
        per_generation = Counter(
            t.assigned for t in fleet.targets.values() if t.module == name and t.assigned is not None
        )
        for generation, count in per_generation.items():
            assert generation in record.revisions, f"{name}: generation {generation} assigned but pruned"
            assert record.revisions[generation].assigned == count, f"{name}: generation {generation} count"
        assert record.target in record.revisions
        if record.stable is not None:
            assert record.stable in record.revisions
        stages = stages_of(record)
        assert 0 <= record.stage_index < len(stages)
        if record.phase == "Complete":
            assert record.mode == "rollout" and record.stable == record.target, f"{name} Complete but not stable"
        if record.phase in ("RollingBack", "RolledBack"):
            assert record.mode == "rollback"
        halted = record.halted or record.restricted is not None
        if record.mode == "rollout" and record.stable != record.target and not (record.paused or halted):
            assert record.phase not in ("Complete", "RolledBack", "Paused", "Halted"), f"{name}: {record.phase}"
        for found in fleet.targets.values():
            if found.module != name:
                continue
            facts = fleet.clusters[found.cluster]
            key = (found.cluster, name)
            if found.assigned is not None:  # sent, re-sorted or not
                assert key in fleet.assemblages, f"{found.cluster} was never sent {name}"
                assert fleet.assemblages[key].revision == record.revisions[found.assigned].revision
            if record.resorting is not None and found.cluster > record.resorting:
                continue  # not re-sorted yet (membership.py "Re-sorts per event"): as it was before
            assert is_member(fleet, record, facts.labels), f"{found.cluster} is not a member of {name}"
            assert (found.stage_index, found.stage) == stage_for(record, facts.labels)
            assert found.ready == facts.ready
            assert found.pinned == (found.cluster in record.pinned)
            stage_of = stages[found.stage_index] if found.stage_index is not None else None
            sorting = record.spec.rollout.sorting_label_key if record.spec.rollout else None
            assert found.sort_key == moving_key(record, stage_of, found.cluster, facts.labels, sorting), (
                f"{name}/{found.cluster}: stale place in its stage's moving order"
            )
            expected = expected_category(record, found, fleet.state["upstream"])
            assert found.category == expected, (
                f"{name}/{found.cluster}: stored category {found.category}, the rules say {expected}"
            )
            key = (found.cluster, name)
            if found.assigned is None:
                assert key not in fleet.assemblages, f"{found.cluster} still holds {name}"
            else:
                assert key in fleet.assemblages, f"{found.cluster} was never sent {name}"
                assert fleet.assemblages[key].revision == record.revisions[found.assigned].revision
                assert fleet.assemblage_kind[key] == ASSEMBLAGE_FOR[record.kind]
                assert fleet.assemblage_namespace[key] == facts.namespace, f"{found.cluster}: stale namespace"
        if record.joining is not None:  # still joining the fleet in name order (membership.py)
            assert record.stage_index == 0 and not record.stage_started, f"{name}: a stage started while joining"
            assert not any(t.assigned for t in fleet.targets.values() if t.module == name), (
                f"{name} moved while joining"
            )
        for cluster_name, facts in fleet.clusters.items():
            if record.joining is not None and cluster_name > record.joining:
                continue  # not considered yet
            if record.resorting is not None and cluster_name > record.resorting:
                continue  # not re-sorted yet
            if is_member(fleet, record, facts.labels):
                assert target_key(name, cluster_name) in fleet.targets, (
                    f"{cluster_name} matches {name} but is no member"
                )
    for cluster_name, module_name in fleet.assemblages:
        assert target_key(module_name, cluster_name) in fleet.targets, (
            f"{cluster_name} holds {module_name} but is not a member of it"
        )
