"""`rollout plan`: which clusters a module's rollout would move, in which stage and order.

A pure function of a module manifest and the fleet as it is now. It uses the engine's own
rules (`stage_for`, `moving_key`, `resolve_count`, `wave_size`), so the plan is what the
engine will do if every cluster succeeds: stage by stage (in a stage graph, each stage once
its upstream stages' quorum has passed and soaked: `after`, `quorum`), each stage in sorting order — or,
in a stage with random waves, in the order its seed gives (the seed the engine derives when
the manifest has none: from the module's name, revision and bindings) — cut into waves, in
batches of at most `maxConcurrency`. Not-ready clusters — and those `rollout cluster leave` took out (`left`),
which the engine does not move either — are listed as skipped, clusters their owners hold
(`rollout.dev/hold`, rollout/engine/runs.py) as held; clusters that match the selector but no
stage as not rolled out. The stage's clusters are the membership its run fixes when it
starts (budgets resolved against them; docs/rollout-semantics.md, "Churn-proof runs").

For a Helm module the plan also gives each selected cluster's values (`values`): what its
HelmRelease would get, and which layer and policy decided each path — the same merge the
engine does (rollout/values/releases.py), without live values (the plan reads no cluster; paths
under keepCurrent/readOnly are then decided by the declared layers).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from rollout.api.freezes import FreezeWindow, frozen_until
from rollout.api.gates import HealthGate
from rollout.api.manifests import (
    AnyFreezeCalendar,
    BootstrapModuleManifest,
    ClusterManifest,
    ModuleManifest,
    Stage,
    StageUpstream,
    stage_upstreams,
)
from rollout.api.selectors import selects
from rollout.api.windows import iso, stage_window_state, stage_windows
from rollout.engine.promotions import source_label
from rollout.engine.runs import owner_hold
from rollout.engine.stage_graph import is_graph, needed
from rollout.engine.state import ModuleRecord, Revision
from rollout.engine.strategy import (
    bindings_digest,
    moving_key,
    resolve_count,
    stage_for,
    stages_of,
    wave_seed,
    wave_size,
)
from rollout.values.bindings import binding_values
from rollout.values.layers import PathDecision, Refusal, Values
from rollout.values.releases import release_sync


class PlanEdge(BaseModel):
    """An upstream edge of a stage in a stage graph (rollout/engine/stage_graph.py)."""

    stage: str
    soak: str | None = None  # counted from the upstream's pass


class StagePlan(BaseModel):
    name: str
    max_concurrency: int
    max_failures: int
    min_success_time: str | None
    require_approval: bool  # requireApproval, or an approval policy
    batches: list[list[str]]
    skipped_not_ready: list[str]
    held: dict[str, str] = {}  # cluster → its hold's reason: held by its owner (rollout.dev/hold), not moved
    gates: list[str] = []  # its health gates (rollout/api/gates.py), described
    windows: list[str] = []  # its maintenance windows (rollout/api/windows.py), described
    window_open: bool | None = None  # at the plan's `now` (None: no windows, or no time given)
    next_window: str | None = None  # when the next window opens (ISO 8601, UTC)
    # its waves (rollout/engine/waves.py): the ready members of each, in moving order
    waves: list[list[str]] = []
    wave_order: str | None = None  # Random or Sorted (None: no waves)
    wave_seed: int | None = None  # the seed of a Random order, given or derived
    wave_delay: str | None = None
    approvals_required: int | None = None  # its approval policy: distinct verified approvers (None: one by anyone)
    approval_groups: list[str] = []  # ... from one of these groups
    # a stage graph's (None for a chain of stages): the stages this one waits for, its
    # quorum and how many of them must have passed (and soaked) before it starts
    after: list[PlanEdge] | None = None
    quorum: str | None = None
    needed: int | None = None


class ClusterValues(BaseModel):
    """One cluster's Helm values: emitted, effective, and who decided each path."""

    cluster: str
    stage: str
    values: Values
    effective: Values
    decisions: list[PathDecision]
    refusals: list[Refusal]


class RolloutPlan(BaseModel):
    module: str
    kind: str
    revision: str
    stages: list[StagePlan]
    unstaged: list[str]
    not_selected: int
    depends_on: list[str] = []  # dependsOn: moves on a cluster wait for these there
    release: str | None = None  # the Release it moves with (rollout/api/module_releases.py)
    release_members: list[str] = []  # every member of that release, this one included
    values: list[ClusterValues] = []
    # the freeze calendars governing it (rollout/engine/freeze_gate.py), described, and which
    # of them hold it at the plan's `now` (no cluster moves until `frozen_until`, ISO 8601 UTC)
    calendars: list[str] = []
    frozen_by: list[str] = []
    frozen_until: str | None = None
    # the break-glass overrides in force at the plan's `now`: the calendars they name hold
    # nothing (not in `frozen_by`)
    break_glass: list[PlannedBreakGlass] = []
    # the source's autoPromote (rollout/engine/promotions.py): the range it follows, where, held or not
    promotion: PromotionPlan | None = None
    late_joiners: str = "Include"  # rollout.lateJoiners: what the run does with clusters joining mid-run


class PlannedBreakGlass(BaseModel):
    """A break-glass in force at the plan's `now` over the module (rollout/engine/freeze_gate.py):
    a calendar's own (`every_module`: `rollout break-glass calendar/NAME`, every module it
    governs, this one too once applied), or the module's (`calendar` None: every calendar)."""

    calendar: str | None = None
    every_module: bool = False
    until: float
    until_at: str
    reason: str
    user: str | None = None
    via: str | None = None

    def overrides(self, identity: str) -> bool:
        return self.calendar in (None, identity)


class PromotionPlan(BaseModel):
    """What auto-promotion would do: newer versions of `source` in `semver` become new
    revisions, rolled out as this plan says — or, `hold`, are recorded as available."""

    semver: str
    source: str
    hold: bool = False


def cluster_values(record: ModuleRecord, cluster: ClusterManifest) -> ClusterValues | None:
    """The values `cluster` gets from the module's sync (None: not a Helm sync)."""
    labels = dict(cluster.metadata.labels)
    bindings = binding_values(
        record.spec.bindings,
        cluster_name=cluster.metadata.name,
        cluster_namespace=cluster.metadata.namespace,
        labels=labels,
        annotations=dict(cluster.metadata.annotations),
    )
    stage = stage_for(record, labels)[1]
    _, merged = release_sync(record.spec.sync, stage=stage, bindings=bindings, observed=None)
    if merged is None:
        return None
    return ClusterValues(
        cluster=cluster.metadata.name,
        stage=stage,
        values=merged.values,
        effective=merged.effective,
        decisions=merged.decisions,
        refusals=merged.refusals,
    )


def describe_gate(gate: HealthGate) -> str:
    """A gate as `rollout plan` says it: what it asks, its analysis settings, a dry run."""
    if gate.prometheus is not None:
        bounds = [f"≥ {gate.prometheus.min:g}"] if gate.prometheus.min is not None else []
        bounds += [f"≤ {gate.prometheus.max:g}"] if gate.prometheus.max is not None else []
        asks = f"Prometheus {gate.prometheus.query} {' and '.join(bounds)}"
    elif gate.compare is not None:
        limits = [f"ratio ≤ {gate.compare.max_ratio:g}"] if gate.compare.max_ratio is not None else []
        limits += [f"difference ≤ {gate.compare.max_difference:g}"] if gate.compare.max_difference is not None else []
        asks = f"compares {gate.compare.query} on the updated clusters with the baseline: {' and '.join(limits)}"
    else:
        asks = f"webhook {gate.webhook.url}"  # type: ignore[union-attr]
    if gate.count is not None:
        every = f" every {gate.interval}" if gate.interval else " one per gate-runner interval"
        asks += (
            f"; analysis: {gate.count} measurement(s){every}, fails over failureLimit {gate.failures_allowed}, "
            f"pauses over inconclusiveLimit {gate.inconclusives_allowed}"
        )
    return f"{gate.name} ({asks})" + (" — dry run: recorded, never holds the stage" if gate.dry_run else "")


def window_plan(record: ModuleRecord, stage: Stage, now: float | None) -> dict[str, Any]:
    """A stage's windows, described, and (given `now`) whether they are open, when next."""
    windows = stage_windows(record.spec, stage)
    described = [f"{w.kind} {w.schedule} for {w.duration} ({w.time_zone})" for w in windows]
    state = stage_window_state(record.spec, stage, now) if now is not None else None
    if state is None:
        return {"windows": described}
    return {"windows": described, "window_open": state.open, "next_window": iso(state.next_open)}


def chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


def moving_order(
    record: ModuleRecord, stage: Stage, cluster: ClusterManifest, sorting: str | None
) -> tuple[int, int, str]:
    """The engine's moving order of a stage's members (targets.py): the seeded rank in a
    stage of random waves, else the sorting label, then the name."""
    key = moving_key(record, stage, cluster.metadata.name, dict(cluster.metadata.labels), sorting)
    return (1, 0, cluster.metadata.name) if key is None else (0, key, cluster.metadata.name)


def graph_plan(stage: Stage, upstreams: list[StageUpstream], graph: bool) -> dict[str, Any]:
    """A stage's place in a stage graph: its upstream edges, quorum and how many must count
    (nothing for a chain of stages)."""
    if not graph:
        return {}
    return {
        "after": [PlanEdge(stage=edge.stage, soak=edge.soak) for edge in upstreams],
        "quorum": stage.quorum or "All",
        "needed": needed(stage.quorum, len(upstreams)),
    }


def wave_plan(record: ModuleRecord, stage: Stage, waves: list[list[str]]) -> dict[str, Any]:
    """A stage's waves: the members of each, the order, the seed (given, or as the engine
    derives it from the module's name, revision and bindings) and the delay between them."""
    if stage.waves is None:
        return {}
    seed = wave_seed(record, stage.waves) if stage.waves.order == "Random" else None
    return {"waves": waves, "wave_order": stage.waves.order, "wave_seed": seed, "wave_delay": stage.waves.delay}


def plan_rollout(
    module: ModuleManifest | BootstrapModuleManifest,
    fleet: Iterable[ClusterManifest],
    *,
    now: float | None = None,
    left: Collection[str] = (),
    calendars: Sequence[AnyFreezeCalendar] = (),
    break_glass: Sequence[PlannedBreakGlass] = (),
) -> RolloutPlan:
    """The plan; with `now` (seconds since the epoch), each stage's window state then, and
    which of `calendars` (those governing the module: the fleet's and its namespace's)
    freeze it then — but those a `break_glass` in force then overrides. `left`: the clusters
    taken out of the rollouts (skipped, as not ready)."""
    revision = Revision(
        generation=1,
        revision=module.spec.sync.revision,
        sync=module.spec.sync,
        bindings_digest=bindings_digest(module.spec.bindings),
    )
    record = ModuleRecord(
        name=module.metadata.name,
        kind=module.kind,
        namespace=module.metadata.namespace,
        spec=module.spec,
        revisions={1: revision},  # the seed of random waves is derived from it (strategy.py)
    )
    sorting = module.spec.rollout.sorting_label_key if module.spec.rollout else None
    stages = stages_of(record)
    members: dict[int, list[ClusterManifest]] = {i: [] for i in range(len(stages))}
    unstaged: list[str] = []
    not_selected = 0
    values: list[ClusterValues] = []
    for cluster in fleet:
        labels = dict(cluster.metadata.labels)
        if not selects(module.spec.selector, labels):
            not_selected += 1
            continue
        if (per_cluster := cluster_values(record, cluster)) is not None:
            values.append(per_cluster)
        index, _ = stage_for(record, labels)
        if index is None:
            unstaged.append(cluster.metadata.name)
        else:
            members[index].append(cluster)
    plans = []
    graph = is_graph(record)
    upstreams = stage_upstreams(stages)
    for index, stage in enumerate(stages):
        ordered = sorted(members[index], key=lambda c: moving_order(record, stage, c, sorting))
        total = len(ordered)
        concurrency = max(resolve_count(stage.max_concurrency, total=total, default=max(total, 1)), 1)
        holds = {c.metadata.name: owner_hold(dict(c.metadata.annotations), now or 0.0) for c in ordered}
        held = {name: reason for name, reason in holds.items() if reason is not None}
        movable = {c.metadata.name for c in ordered if c.status.ready and c.metadata.name not in left}
        ready = [c.metadata.name for c in ordered if c.metadata.name in movable and c.metadata.name not in held]
        waves = [ready] if stage.waves is None else chunks(ready, wave_size(stage.waves, total))
        plans.append(
            StagePlan(
                name=stage.name,
                max_concurrency=concurrency,
                max_failures=resolve_count(stage.max_failures, total=total, default=0),
                min_success_time=stage.min_success_time,
                require_approval=stage.needs_approval,
                approvals_required=stage.approval.required if stage.approval else None,
                approval_groups=list(stage.approval.groups) if stage.approval else [],
                batches=[batch for wave in waves for batch in chunks(wave, concurrency)],
                skipped_not_ready=[
                    c.metadata.name for c in ordered if c.metadata.name not in movable and c.metadata.name not in held
                ],
                held=held,
                **window_plan(record, stage, now),
                **wave_plan(record, stage, waves),
                gates=[describe_gate(gate) for gate in stage.gates],
                **graph_plan(stage, upstreams[stage.name], graph),
            )
        )
    return RolloutPlan(
        module=module.metadata.name,
        kind=module.kind,
        revision=module.spec.sync.revision,
        stages=plans,
        unstaged=sorted(unstaged),
        not_selected=not_selected,
        depends_on=list(module.spec.depends_on),
        release=module.spec.release.name if module.spec.release is not None else None,
        release_members=list(module.spec.release.members) if module.spec.release is not None else [],
        values=sorted(values, key=lambda v: v.cluster),
        promotion=promotion_plan(module),
        **freeze_plan(calendars, now, break_glass),
        late_joiners=module.spec.rollout.late_joiners if module.spec.rollout is not None else "Include",
    )


def promotion_plan(module: ModuleManifest | BootstrapModuleManifest) -> PromotionPlan | None:
    source = module.spec.sync.source
    auto = source.auto_promote
    if auto is None:
        return None
    return PromotionPlan(semver=auto.semver, source=source_label(source), hold=auto.hold)


def freeze_plan(
    calendars: Sequence[AnyFreezeCalendar], now: float | None, break_glass: Sequence[PlannedBreakGlass] = ()
) -> dict[str, Any]:
    """The calendars governing the module, described; with `now`, those holding it then —
    but those a break-glass in force then overrides — and when the latest of their windows
    holding it ends (the engine's rule: freeze_gate.py)."""
    described = [f"{c.identity}: {'; '.join(describe_freeze(w) for w in c.spec.windows)}" for c in calendars]
    if now is None:
        return {"calendars": described}
    glass = [g for g in break_glass if now < g.until]
    holding = [
        (c.identity, until)
        for c in calendars
        if not any(g.overrides(c.identity) for g in glass) and (until := frozen_until(c.spec.windows, now)) is not None
    ]
    return {
        "calendars": described,
        "frozen_by": [identity for identity, _ in holding],
        "frozen_until": iso(max(until for _, until in holding)) if holding else None,
        "break_glass": glass,
    }


def describe_freeze(window: FreezeWindow) -> str:
    """ "holidays: FREQ=YEARLY;BYMONTH=12 from 2026-12-20T00:00:00 for 336h (Europe/Berlin)"."""
    when = f"{window.rrule} from {window.start}" if window.rrule else f"cron {window.schedule}"
    return f"{window.name}: {when} for {window.duration} ({window.time_zone})"
