"""The status documents `rollout status` shows, built from the engine's records.

    module_status(record, now)    -> ModuleStatus: the module-status document (compacted:
                                     O(stages), not O(clusters))
    target_status(record, target) -> TargetStatus: the rollout-targets document of one
                                     (module, cluster)
    held_view(...)                -> the module-status of a module with intents held back
                                     for causal order (causal.py): its status with `held`,
                                     or, not staged yet, the pending shape

The models are the documents' one schema (rollout/wire/status.py), imported by every reader
too. Pure functions: the engine calls them whenever it stores a record and puts the result in
`Outcome.module_status` / `Outcome.target_status` as the JSON object the decider publishes
(`module_view` / `target_view`: the model's `as_json()`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.api.gates import gate_key
from rollout.api.manifests import CLUSTER_SCOPE, Stage, Waves, parse_duration
from rollout.api.windows import iso, stage_window_state, stage_windows
from rollout.engine.approvals import approval_met, counted
from rollout.engine.runs import budget_members, run_members_now
from rollout.engine.stage_graph import edges, is_graph, needed, progress, running, waiting, wave_progress
from rollout.engine.stage_graph import passed as graph_passed
from rollout.engine.state import (
    UNSTAGED,
    BreakGlass,
    DeletedModule,
    FreezeRecord,
    ModuleRecord,
    RunRecord,
    StageCounts,
    Target,
)
from rollout.engine.strategy import resolve_count, stages_of, wave_count, wave_seed, wave_size
from rollout.wire.decision_reasons import Outstanding, WindowWait
from rollout.wire.status import (
    DELETING,
    PENDING,
    BreakGlassStatus,
    FollowedRange,
    FrozenStatus,
    Held,
    MemberCounts,
    ModuleRelease,
    ModuleStatus,
    PromotionHoldStatus,
    PromotionSourceStatus,
    PromotionStatus,
    RejectionStatus,
    ReleasePromotionStatus,
    RunDeparture,
    RunStage,
    RunStatus,
    StageApprover,
    StageGate,
    StageStatus,
    StageWaves,
    StageWindow,
    TargetStatus,
    WindowSpec,
)

NO_COUNTS = StageCounts()  # read only: the counts of a stage nobody is in yet


def module_view(
    record: ModuleRecord, now: float, run: RunRecord | None = None, calendar_glass: Sequence[BreakGlass] = ()
) -> dict[str, Any]:
    """The module-status document as published (the JSON object of `module_status`)."""
    return module_status(record, now, run, calendar_glass).as_json()


def calendar_break_glass(freezes: Mapping[str, FreezeRecord], namespace: str, now: float) -> list[BreakGlass]:
    """The calendars' break-glass overrides in force at `now` over a module of `namespace`
    (freeze_gate.py): the fleet's scope, then its namespace's, by calendar name."""
    found: list[BreakGlass] = []
    for scope in (CLUSTER_SCOPE, namespace):
        kept = freezes.get(scope)
        overrides = kept.break_glass if kept is not None else {}
        found += [overrides[name] for name in sorted(overrides) if now < overrides[name].until]
    return found


def break_glass_status(glass: BreakGlass) -> BreakGlassStatus:
    return BreakGlassStatus(
        calendar=glass.calendar,
        until=glass.until,
        until_at=iso(glass.until),
        reason=glass.reason,
        user=glass.user,
        via=glass.via,
    )


def resorting_reason(record: ModuleRecord) -> str:
    """What a module re-sorting its members (membership.py "Re-sorts per event") says it
    waits for: how far the re-sort went, and that nothing moves before it is done — or, in a
    rollback, that each member goes back as the re-sort reaches it."""
    members = sum(counts.members for counts in record.counts.values())
    where = f"up to cluster {record.resorting}" if record.resorting else "from the first cluster"
    then = (
        "each member goes back to stable as it is reached"
        if record.mode == "rollback"
        else "no member moves to the target before all are"
    )
    return f"re-sorting its {members} members in name order ({where}): {then}"


def module_status(
    record: ModuleRecord, now: float, run: RunRecord | None = None, calendar_glass: Sequence[BreakGlass] = ()
) -> ModuleStatus:
    """The compacted module-status document (size: O(stages), not O(clusters)); `run`: the
    module's current run (runs.py), its stages' limits resolved against its fixed members;
    `calendar_glass`: the break-glass overrides of the calendars governing it, in force."""
    stages = stages_of(record)
    optional: dict[str, Any] = {}  # set only when they apply: absent from the document otherwise
    if record.awaiting:
        # dependencies applied with it whose partition has not said it folded that apply
        # yet: none of their readiness counts until then (dependencies.py)
        optional["awaiting"] = sorted(record.awaiting)
    if record.joining is not None:  # membership.py "Joins per event": stages wait for the whole fleet
        members = sum(counts.members for counts in record.counts.values())
        optional["waiting"] = f"joining the fleet's clusters ({members} members so far): no stage starts before all"
    elif record.resorting is not None:  # membership.py "Re-sorts per event": nothing moves before all are
        optional["waiting"] = resorting_reason(record)
    elif record.stable == record.target and (waiting := waiting_reason(record, now)):
        optional["waiting"] = waiting  # why a module whose stages all passed is not Complete
    if record.restricted is not None:
        optional["restricted"] = record.restricted  # the ModuleRestriction rule it breaks
    if run is not None:
        optional["run"] = run_view(run)  # the current run's fixed membership (runs.py)
    if record.rejection is not None:  # approvals.py
        optional["rejection"] = RejectionStatus.model_validate(record.rejection.model_dump())
    if record.spec.sync.source.auto_promote is not None:  # promotions.py
        optional["promotion"] = promotion_status(record)
    if record.frozen is not None:  # freeze_gate.py
        frozen = record.frozen
        optional["frozen"] = FrozenStatus(calendars=frozen.calendars, until=frozen.until, until_at=iso(frozen.until))
    glass = record.break_glass
    if glass is not None and now < glass.until:  # freeze_gate.py: in force
        optional["break_glass"] = break_glass_status(glass)
    if calendar_glass:  # the calendars' own break-glass (CalendarBreakGlass)
        optional["calendar_break_glass"] = [break_glass_status(glass) for glass in calendar_glass]
    return ModuleStatus(
        module=record.name,
        kind=record.kind,
        namespace=record.namespace,
        generation=record.target,
        target_revision=record.revisions[record.target].revision,
        stable_revision=record.revisions[record.stable].revision
        if record.stable is not None and record.stable in record.revisions
        else None,
        phase=record.phase,
        mode=record.mode,
        paused=record.paused,
        current_stage=current_stage(record),
        stages=[stage_status(record, index, stage, now, run) for index, stage in enumerate(stages)],
        unstaged=member_counts(record.counts.get(UNSTAGED, NO_COUNTS)),
        pinned=record.pinned,
        depends_on=list(record.spec.depends_on),
        release=release_status(record),
        deleting=record.deleting is not None,  # held until its dependents are deleted
        last_decision=record.last_reason,
        observed_at=now,
        **optional,
    )


def release_status(record: ModuleRecord) -> ModuleRelease | None:
    """The release the module moves with, and how it is auto-promoted (promotions.py): the
    hold and what is available are the leader's to say."""
    release = record.spec.release
    if release is None:
        return None
    auto = release.auto_promote
    if auto is None:
        return ModuleRelease(name=release.name, members=list(release.members))
    promotion = ReleasePromotionStatus(
        leader=release.leader,
        hold=auto.hold,
        follow=[FollowedRange(module=member.module, semver=member.semver) for member in auto.follow],
    )
    state = record.promotion
    if release.leader == record.name and state is not None:
        held = state.held_by
        promotion = promotion.model_copy(
            update={
                "held_by": PromotionHoldStatus(reason=held.reason, user=held.user, via=held.via) if held else None,
                "available": dict(state.release_available),
                "available_from": state.available_from if state.release_available else None,
                "promoted": dict(state.release_promoted),
            }
        )
    return ModuleRelease(name=release.name, members=list(release.members), auto_promote=promotion)


def promotion_status(record: ModuleRecord) -> PromotionStatus:
    """The module's auto-promotion: its range and source (what `rollout promoter` reads), its
    holds, the version available while held, the latest promoted."""
    source = record.spec.sync.source
    auto = source.auto_promote
    assert auto is not None
    origin = source.git or source.oci or source.helm
    secret = getattr(origin, "secret_ref", None)
    state = record.promotion
    held = state.held_by if state is not None else None
    return PromotionStatus(
        semver=auto.semver,
        source=PromotionSourceStatus(
            kind=source.kind,
            url=source.url,
            chart=source.helm.chart if source.helm is not None else None,
            secret_ref=secret.name if secret is not None else None,
            insecure=bool(getattr(origin, "insecure", False)),
        ),
        hold=auto.hold,
        held_by=PromotionHoldStatus(reason=held.reason, user=held.user, via=held.via) if held is not None else None,
        available=state.available if state is not None else None,
        available_from=state.available_from if state is not None else None,
        promoted=state.promoted if state is not None else None,
    )


def stage_status(
    record: ModuleRecord, index: int, stage: Stage, now: float, run: RunRecord | None = None
) -> StageStatus:
    """Stage `index` of the module's rollout: its state, limits, counts, window and gates."""
    counts = record.counts.get(stage.name, NO_COUNTS)
    members = budget_members(run, stage.name, run_members_now(counts))  # the run's fixed set (runs.py)
    graph = is_graph(record)
    if graph:
        state = graph_stage_state(record, stage, now)
    elif index < record.stage_index or (record.mode == "rollout" and record.stable == record.target):
        state = "Succeeded"
    elif index == record.stage_index:
        state = {"Soaking": "Soaking", "AwaitingApproval": "AwaitingApproval"}.get(
            record.phase, "Running" if record.stage_started else "Pending"
        )
    else:
        state = "Pending"
    optional: dict[str, Any] = {}
    window = window_view(record, stage, now)
    if window is not None:
        optional["window"] = window
    if stage.gates:
        optional["gates"] = gates_view(record, stage)
    if stage.waves is not None:
        optional["waves"] = waves_view(record, stage, stage.waves, counts, members, state)
    if stage.needs_approval:
        optional.update(approvals_view(record, stage))
    if graph:  # its upstream edges (stage_graph.py)
        found = edges(record, stage, now)
        optional.update(after=found, quorum=stage.quorum or "All", needed=needed(stage.quorum, len(found)))
    return StageStatus(
        name=stage.name,
        state=state,
        max_concurrency=resolve_count(stage.max_concurrency, total=members, default=max(members, 1)),
        max_failures=resolve_count(stage.max_failures, total=members, default=0),
        min_success_time=stage.min_success_time,
        require_approval=stage.needs_approval,
        approved=stage.needs_approval and approval_met(record, stage),
        counts=member_counts(counts),
        **optional,
    )


def current_stage(record: ModuleRecord) -> str:
    """The stage status calls current: a chain's; in a stage graph the first started and
    not passed, else the first not passed (else the last)."""
    stages = stages_of(record)
    if is_graph(record):
        return running(record) or stages[-1].name
    return stages[min(record.stage_index, len(stages) - 1)].name


def graph_stage_state(record: ModuleRecord, stage: Stage, now: float) -> str:
    """A stage graph's stage: Succeeded once passed; Running, then Soaking once done;
    not started, AwaitingApproval when only its approvals keep it, else Pending."""
    if graph_passed(record, stage.name):
        return "Succeeded"
    state = progress(record, stage.name)
    if state.started:
        return "Running" if state.done_at is None else "Soaking"
    if record.mode == "rollout" and waiting(record, stage, now) is None and not approval_met(record, stage):
        return "AwaitingApproval"
    return "Pending"


def waves_view(
    record: ModuleRecord, stage: Stage, waves: Waves, counts: StageCounts, members: int, state: str
) -> StageWaves:
    """A stage's waves: their size (of the run's `members`) and count, the seed, the open
    wave and when the next starts."""
    size = wave_size(waves, members)
    progress = wave_progress(record, stage)
    current = None
    next_wave = None
    if progress is not None and progress.stage == stage.name and progress.generation == record.target:
        current = progress.wave + 1
        if progress.done_at is not None and state == "Running" and counts.pending:
            next_wave = progress.done_at + (parse_duration(waves.delay) if waves.delay else 0.0)
    elif state == "Succeeded":
        current = wave_count(size, counts)
    return StageWaves(
        size=size,
        count=max(wave_count(size, counts), current or 0),
        order=waves.order,
        seed=wave_seed(record, waves) if waves.order == "Random" else None,
        delay=waves.delay,
        current=current,
        next_wave=next_wave,
        next_wave_at=iso(math.ceil(next_wave)) if next_wave is not None else None,  # the second it is due
    )


def approvals_view(record: ModuleRecord, stage: Stage) -> dict[str, Any]:
    """A stage's approvals for the target (approvals.py): who, whether each counts, and its
    policy — the StageStatus fields, set only for a stage that waits for approval."""
    counting = counted(record, stage)
    view: dict[str, Any] = {
        "approvals": [
            StageApprover(user=a.user, via=a.via, counted=a in counting) for a in record.approvers.get(stage.name, [])
        ]
    }
    if stage.approval is not None:
        view["approvals_required"] = stage.approval.required
        view["approval_groups"] = list(stage.approval.groups)
    return view


def member_counts(counts: StageCounts) -> MemberCounts:
    return MemberCounts(
        members=counts.members,
        pending=counts.pending,
        updating=counts.updating,
        succeeded=counts.succeeded,
        failed=counts.failed,
        not_ready=counts.not_ready,
        pinned=counts.pinned,
        blocked=counts.blocked,
        held=counts.held,
        awaiting_release=counts.awaiting_release,
        deferred=counts.deferred,
        excluded=counts.excluded,
        awaited=counts.awaited,
    )


def run_view(run: RunRecord) -> RunStatus:
    """The current run: its fixed members and departures per stage (runs.py)."""
    return RunStatus(
        number=run.number,
        mode=run.mode,
        generation=run.generation,
        started_at=run.started_at,
        adopted=run.adopted,
        joiners=run.joiners,
        follow_up=run.follow_up,
        stages={name: RunStage(members=stage.members, left=stage.left) for name, stage in sorted(run.stages.items())},
        departed=[
            RunDeparture(cluster=d.cluster, stage=d.stage, reason=d.reason, at=d.at, generation=d.generation)
            for d in run.departed
        ],
    )


def outstanding_members(record: ModuleRecord) -> int:
    """Staged members not running the target: pending (waiting for a window, say),
    updating, blocked, waiting for their Release's other members, not ready, or held by
    their owners — the members a Complete module may not have."""
    return sum(
        counts.pending
        + counts.updating
        + counts.blocked
        + counts.awaiting_release
        + counts.not_ready
        + counts.held
        + counts.awaited
        for name, counts in record.counts.items()
        if name != UNSTAGED
    )


def outstanding(record: ModuleRecord, now: float) -> Outstanding | None:
    """Why a module whose stages have passed is not Complete (None: nothing outstanding):
    members not ready, not on the target yet, stages waiting for a window."""
    if record.mode != "rollout" or not outstanding_members(record):
        return None
    staged = [counts for name, counts in record.counts.items() if name != UNSTAGED]
    windows = []
    for stage in stages_of(record):
        if stage.name in record.window_waits:
            state = stage_window_state(record.spec, stage, now) if now > 0 else None
            windows.append(WindowWait(stage=stage.name, next_open=state.next_open if state is not None else None))
    found = Outstanding(
        not_ready=sum(counts.not_ready + counts.awaited for counts in staged),
        moving=sum(counts.pending + counts.updating + counts.blocked for counts in staged),
        windows=windows,
        held=sum(counts.held for counts in staged),
        awaiting_release=sum(counts.awaiting_release for counts in staged),
    )
    return found if found.not_ready or found.moving or found.windows or found.held or found.awaiting_release else None


def waiting_reason(record: ModuleRecord, now: float) -> str:
    """`outstanding` as a sentence ('' : nothing outstanding), e.g. "2 clusters not ready;
    stage wave waits for a maintenance window"."""
    found = outstanding(record, now)
    return found.sentence() if found is not None else ""


def window_view(record: ModuleRecord, stage: Stage, now: float) -> StageWindow | None:
    """A stage's maintenance windows at `now` (None: it has none): open, when the next
    opens or the current closes (seconds since the epoch, and ISO 8601 in UTC)."""
    windows = stage_windows(record.spec, stage)
    state = stage_window_state(record.spec, stage, now)
    if state is None:
        return None
    return StageWindow(
        open=state.open,
        next_open=state.next_open,
        next_open_at=iso(state.next_open),
        closes_at=iso(state.closes_at),
        windows=[
            WindowSpec(kind=w.kind, schedule=w.schedule, duration=w.duration, time_zone=w.time_zone) for w in windows
        ],
    )


def gates_view(record: ModuleRecord, stage: Stage) -> list[StageGate]:
    """A stage's health gates (gates.py): each one's definition, for the gate runner, and
    its latest result for the current target (passed None: none yet, or inconclusive)."""
    views = []
    for gate in stage.gates:
        state = record.gates.get(gate_key(stage.name, gate.name))
        current = state if state is not None and state.generation == record.target else None
        result: dict[str, Any] = {
            "passed": current.passed if current else None,
            "passingSince": current.since if current else None,
            "message": current.message if current else "",
        }
        if current is not None and current.analysis is not None:
            analysis = current.analysis
            result["analysis"] = {**analysis.model_dump(), "measured": analysis.measured}
        views.append(StageGate.model_validate(gate.model_dump(by_alias=True, exclude_defaults=True) | result))
    return views


def target_view(record: ModuleRecord, target: Target, offline: str | None = None) -> dict[str, Any]:
    """The rollout-targets document as published: exactly `target_status(...).as_json()`,
    written directly because it is built once per changed target — on the path of every
    status report — where the model's validation and dump would cost twice as much as the
    rest of the document's work (tests/rollout/test_target_documents.py holds them equal
    for every target state)."""
    revision = record.revisions.get(target.assigned) if target.assigned is not None else None
    return {
        "schemaVersion": TargetStatus.SCHEMA_VERSION,
        "module": target.module,
        "cluster": target.cluster,
        "stage": target.stage,
        "state": target.category,
        "ready": target.ready,
        "pinned": target.pinned,
        "revision": revision.revision if revision else None,
        "generation": target.assigned,
        "status": target.status,
        "message": target_message(record, target),
        "updatingSince": target.updating_since,
    } | _target_extras(target, offline)


def target_status(record: ModuleRecord, target: Target, offline: str | None = None) -> TargetStatus:
    """The rollout-targets document of one (module, cluster); `offline`: why it is not
    ready (runs.py `offline_reason`, from its cluster's facts)."""
    revision = record.revisions.get(target.assigned) if target.assigned is not None else None
    return TargetStatus(
        module=target.module,
        cluster=target.cluster,
        stage=target.stage,
        state=target.category,
        ready=target.ready,
        pinned=target.pinned,
        revision=revision.revision if revision else None,
        generation=target.assigned,
        status=target.status,
        message=target_message(record, target),
        updating_since=target.updating_since,
        **_target_extras(target, offline),
    )


def _target_extras(target: Target, offline: str | None) -> dict[str, Any]:
    """The fields a target document has only when they apply: why it is offline, its hold,
    its place as a late joiner kept out of the run (runs.py)."""
    extras: dict[str, Any] = {}
    if offline is not None:
        extras["offline"] = offline
    if target.hold is not None:
        extras["hold"] = target.hold
    if target.late is not None:
        extras["late"] = target.late
    if target.offline_until is not None:
        extras["offlineUntil"] = target.offline_until  # its stage waits for it until then
    if target.offline_failed:
        extras["offlineFailed"] = True  # failed: offline past its stage's offline.wait
    return extras


def target_message(record: ModuleRecord, target: Target) -> str:
    """What a member's status says: why it is blocked, why it waits on its target (its
    Release's other members), why it failed though its own sync did not (its Release
    failed here), else the latest report's message."""
    release = record.spec.release
    if target.category == "blocked":
        return blocked_message(record)
    if target.category == "awaiting_release" and release is not None:
        peers = ", ".join(release.peers(record.name))
        return f"on its target, waiting for release {release.name}: {peers} on their target and succeeded here"
    if target.category == "failed" and release is not None and target.status != "failed":
        return f"release {release.name} failed here: another member failed on its target"
    return target.status_message


def blocked_message(record: ModuleRecord) -> str:
    """Why a blocked member does not move: the dependencies it waits for (dependencies.py)."""
    return f"waiting for {', '.join(record.spec.depends_on)}: not on its target and succeeded here"


def format_positions(fleet: dict[int, int]) -> str:
    return ", ".join(f"partition {p} offset {o}" for p, o in sorted(fleet.items())) or "nothing"


def deleting_view(tombstone: DeletedModule, now: float) -> dict[str, Any]:
    """The status document of a module deleted while its members' syncs are removed, a
    slice an event (deletions.py "Deletes per event"): phase Deleting, how many are left."""
    where = f"up to cluster {tombstone.unassigning}" if tombstone.unassigning else "from the first cluster"
    return ModuleStatus(
        module=tombstone.name,
        phase=DELETING,
        kind=tombstone.kind,
        namespace=tombstone.namespace or None,
        waiting=(f"deleted: removing its sync from its {tombstone.members_left} members left, in name order ({where})"),
        last_decision=f"{tombstone.kind or 'Module'} {tombstone.name} deleted",
        observed_at=now,
    ).as_json()


def held_view(
    name: str,
    view: dict[str, Any] | None,
    held_intents: int,
    waiting: dict[int, int],
    now: float,
    reason: str | None = None,
) -> dict[str, Any]:
    """`view` (a `module_view`; None: the module does not exist yet) with what the module
    holds back: its status with `held`, or the pending shape (rollout/wire/status.py).
    `reason`: why, if not for cluster observations (a deletion under way: deletions.py)."""
    status = None if view is None else ModuleStatus.read(view)
    return held_status(name, status, held_intents, waiting, now, reason).as_json()


def held_status(
    name: str,
    status: ModuleStatus | None,
    held_intents: int,
    waiting: dict[int, int],
    now: float,
    reason: str | None = None,
) -> ModuleStatus:
    held = Held(
        intents=held_intents,
        waiting_for={str(p): o for p, o in sorted(waiting.items())},
        reason=reason or f"waiting for cluster observations up to {format_positions(waiting)}",
    )
    if status is None:
        return ModuleStatus(module=name, phase=PENDING, reason=held.reason, held=held, observed_at=now)
    return status.model_copy(update={"held": held})
