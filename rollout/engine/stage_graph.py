"""Stage graphs: a stage that follows several upstream stages, with a quorum and a soak per edge.

    stages[].after [{stage, soak}]   the upstream stages (None: the stage before it in the
    stages[].quorum All|OneOf|N%     list); how many of them must count
    StageMachine.advance ──► StageMachine._progress_graph: every stage whose upstream quorum
                             is met starts (its approvals first); every started stage fills,
                             is done, soaks, passes its gates — several at once
    views.py / plan ──► `edges(...)`, `waiting(...)`: which edge counts, what a stage waits for

A strategy without any `after` is the chain it always was (stages.py keeps `stage_index`
for it, and its record is byte for byte what it was). With one `after` anywhere the
strategy is a **graph**: each stage's upstreams are its `after`, or — left out — the stage
before it in the list (the first stage: none, a root); `after: []` makes a root. Manifest
validation (rollout/api/manifests.py `check_stage_graph`) refuses unknown upstreams, a
stage following itself, an upstream named twice, a quorum without `after`, a graph with no
root, and cycles.

When a stage starts. An **edge** from upstream U counts once U has *passed* — done (none of
its members pending, updating or blocked; failures within its `maxFailures`), soaked its
`minSuccessTime`, its gates passed: what a chain asks of a stage before the next starts —
and, with a `soak`, that long after (engine time, from Ticks; a stage passed before the
first tick counts from it). A stage starts when its **quorum** of edges counts: `All` (the
default) every edge, `OneOf` one, `N%` at least N % of its edges, rounded up (50 % of 3 is
2). Then, like any stage, it waits for its approvals. Several stages may run at once: every
started stage moves its members within its own budgets, windows and waves; its gates are
its own; the rollout is Complete when every stage has passed.

Why a stage waits. A stage none of whose upstreams has passed is Pending and says nothing;
once one has and the quorum is not met, the decision `stage-waiting` (`StageWaiting`)
names the upstreams it still waits for and the edges still soaking (until when), decided
again only when that changes (`StageProgress.waiting`). Status shows every stage's edges
(passed, counting, soaking until) whatever the decisions said.

Failures. A stage over its `maxFailures` halts the module (or rolls it back, per
`onFailure`), as in a chain — all of it: no stage moves while it is halted, and a rollback
returns every cluster not on the stable revision, those of every started stage. Failures
within the budget do not keep a stage from being done: its downstream edges count as for a
stage with none.

State: `ModuleRecord.graph`, stage → StageProgress, O(stages); empty until the first
stage starts, cleared by a new target. Per event, deciding which stage starts reads every
stage's edges: O(edges) — never O(clusters).
"""

from __future__ import annotations

import math

from rollout.api.manifests import Stage, StageUpstream, parse_duration, stage_upstreams
from rollout.api.windows import iso
from rollout.engine.state import ModuleRecord, StageProgress, WaveProgress
from rollout.engine.strategy import stages_of
from rollout.wire.decision_reasons import EdgeSoaking, StageWaiting
from rollout.wire.status import StageEdge

NOT_STARTED = StageProgress()  # read only: a stage of a graph that has not started


def is_graph(record: ModuleRecord) -> bool:
    """Whether the module's strategy is a stage graph (some stage has `after`)."""
    return any(stage.after is not None for stage in stages_of(record))


def progress(record: ModuleRecord, name: str) -> StageProgress:
    """Stage `name`'s progress for the target (NOT_STARTED: none yet; read only)."""
    return record.graph.get(name, NOT_STARTED)


def passed(record: ModuleRecord, name: str) -> bool:
    """Whether stage `name` has passed for the target (every stage has, once it is stable)."""
    return (record.mode == "rollout" and record.stable == record.target) or progress(record, name).passed


def needed(quorum: str | None, edges: int) -> int:
    """How many of `edges` upstream edges must count for the stage to start."""
    if edges == 0:
        return 0
    if quorum is None or quorum == "All":
        return edges
    if quorum == "OneOf":
        return 1
    return max(math.ceil(edges * int(quorum.rstrip("%")) / 100), 1)


def edge_soak(edge: StageUpstream) -> float:
    return parse_duration(edge.soak) if edge.soak else 0.0


def edge_view(record: ModuleRecord, edge: StageUpstream, now: float) -> StageEdge:
    """One upstream edge now: whether its stage passed, whether it counts, until when it soaks."""
    done = passed(record, edge.stage)
    at = progress(record, edge.stage).passed_at
    complete = record.mode == "rollout" and record.stable == record.target
    until = at + edge_soak(edge) if done and edge.soak and at is not None and not complete else None
    soaking = until is not None and (now <= 0 or now < until)
    return StageEdge(
        stage=edge.stage,
        soak=edge.soak,
        passed=done,
        counts=done and not soaking,
        soak_until=until if soaking else None,
        soak_until_at=iso(math.ceil(until)) if soaking and until is not None and until > 0 else None,
    )


def edges(record: ModuleRecord, stage: Stage, now: float) -> list[StageEdge]:
    """Every upstream edge of `stage` now, in the order the manifest gives them."""
    upstreams = stage_upstreams(stages_of(record))[stage.name]
    return [edge_view(record, edge, now) for edge in upstreams]


def waiting(record: ModuleRecord, stage: Stage, now: float) -> StageWaiting | None:
    """What `stage` waits for on its upstreams (None: its quorum of edges counts)."""
    found = edges(record, stage, now)
    need = needed(stage.quorum, len(found))
    counting = [edge.stage for edge in found if edge.counts]
    if len(counting) >= need:
        return None
    return StageWaiting(
        stage=stage.name,
        quorum=stage.quorum or "All",
        needed=need,
        counting=counting,
        missing=[edge.stage for edge in found if not edge.passed],
        soaking=[
            EdgeSoaking(upstream=edge.stage, until=edge.soak_until, until_at=edge.soak_until_at)
            for edge in found
            if edge.passed and not edge.counts
        ],
    )


def announced(wait: StageWaiting) -> bool:
    """Whether a wait is worth a decision: some upstream has passed (a stage none of whose
    upstreams has is simply Pending, as in a chain)."""
    return bool(wait.counting or wait.soaking)


def wait_key(wait: StageWaiting) -> str:
    """What identifies a wait (`StageProgress.waiting`): the same key, no new decision."""
    soaking = ",".join(f"{edge.upstream}@{edge.until}" for edge in wait.soaking)
    return f"{','.join(wait.missing)}|{soaking}"


def first_tick(record: ModuleRecord, now: float) -> None:
    """Stages done or passed before the engine saw any tick start their soaks at the first."""
    for name, stage in record.graph.items():
        if stage.done_at is not None:
            stage.done_at = now
        if stage.passed_at is not None:
            stage.passed_at = now
        record.graph[name] = stage


def running(record: ModuleRecord) -> str | None:
    """The stage status calls current: the first (in the list) started and not passed, else
    the first not passed (None: every stage passed)."""
    stages = stages_of(record)
    for stage in stages:
        if progress(record, stage.name).started and not passed(record, stage.name):
            return stage.name
    return next((stage.name for stage in stages if not passed(record, stage.name)), None)


def follow_strategy(record: ModuleRecord, now: float) -> None:
    """A module applied again with another strategy, for the same target: a graph forgets
    the stages it lost; a chain that became a graph mid-run keeps where it was (its stages
    before the current one passed, the current one as it was); a graph that became a chain
    goes on at its first stage not passed."""
    stages = stages_of(record)
    if is_graph(record):
        names = {stage.name for stage in stages}
        record.graph = {name: state for name, state in record.graph.items() if name in names}
        if record.graph or record.stable == record.target or not (record.stage_index or record.stage_started):
            return
        for stage in stages[: record.stage_index]:
            record.graph[stage.name] = StageProgress(started=True, done_at=now, passed=True, passed_at=now)
        if record.stage_started and record.stage_index < len(stages):
            record.graph[stages[record.stage_index].name] = StageProgress(
                started=True, started_at=record.stage_started_at, done_at=record.stage_completed_at
            )
        return
    if not record.graph:
        return
    index = next((i for i, stage in enumerate(stages) if not progress(record, stage.name).passed), len(stages) - 1)
    state = progress(record, stages[index].name)
    record.stage_index = index
    record.stage_started = state.started
    record.stage_started_at = state.started_at
    record.stage_completed_at = state.done_at
    record.graph = {}


def wave_progress(record: ModuleRecord, stage: Stage) -> WaveProgress | None:
    """The waves of `stage` so far: the module's one `waves` in a chain (only its current
    stage moves), the stage's own in a stage graph (several stages move at once)."""
    if is_graph(record):
        return progress(record, stage.name).waves
    return record.waves


def keep_wave_progress(record: ModuleRecord, stage: Stage, waves: WaveProgress) -> None:
    """Store `waves` where `wave_progress` reads it."""
    if is_graph(record):
        record.graph[stage.name] = progress(record, stage.name).model_copy(update={"waves": waves})
    else:
        record.waves = waves
