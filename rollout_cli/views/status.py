"""`rollout status MODULE`: the screen of any module-status shape (rollout/wire/status.py) —
header, stages with progress bars and limits, failed clusters, latest decisions."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from rollout_cli.views import terminal

if TYPE_CHECKING:
    from rollout.wire.decisions import DecisionDocument
    from rollout.wire.status import (
        BreakGlassStatus,
        FrozenStatus,
        MemberCounts,
        ModuleStatus,
        PromotionStatus,
        ReleasePromotionStatus,
        ReleaseStatus,
        RunStatus,
        StageGate,
        StageStatus,
        StageWaves,
        StageWindow,
        TargetStatus,
    )

BAR_WIDTH = 24
RELEASE_CLUSTERS_SHOWN = 50  # a release's clusters listed by `rollout status` (those not done first)


def dependency_waits(status: ModuleStatus, known_modules: Collection[str] | None) -> list[str]:
    """Why a module's blocked members wait, per dependency the engine cannot count yet: one
    that does not exist, or one applied with it whose apply is not folded yet."""
    reasons = []
    for dependency in status.depends_on:
        if known_modules is not None and dependency not in known_modules:
            reasons.append(f"waiting for module {dependency}, which does not exist")
        elif dependency in status.awaiting:
            reasons.append(f"waiting for module {dependency} to take the apply made with this one")
    return reasons


def release_renderable(release: ReleaseStatus) -> Group:
    """A release: its phase, each member's phase and revisions, and per cluster which
    member is on which revision (and its state there)."""
    members = Table(title=f"Release {release.name}: {release.phase}", title_justify="left")
    for column in ("Module", "Phase", "Target", "Stable"):
        members.add_column(column)
    for member in release.members:
        members.add_row(member.module, member.phase, member.target_revision or "-", member.stable_revision or "-")
    clusters = Table()
    clusters.add_column("Cluster")
    for member in release.members:
        clusters.add_column(member.module)
    clusters.add_column("Done")
    shown = sorted(release.clusters, key=lambda place: place.done)[:RELEASE_CLUSTERS_SHOWN]  # not done first
    for place in shown:
        cells = []
        for member in release.members:
            target = place.members.get(member.module)
            cells.append(f"{target.revision or '-'} {target.state}" if target is not None else "-")
        clusters.add_row(place.cluster, *cells, "yes" if place.done else "no")
    done = sum(place.done for place in release.clusters)
    summary = f"{done} of {len(release.clusters)} cluster(s) done: every member on its target and succeeded there"
    more = len(release.clusters) - len(shown)
    summary += f" ({more} more not shown; -o json lists all)" if more else ""
    return Group(Text(""), members, Text(summary), clusters)


def _bar(counts: MemberCounts) -> Text:
    total = counts.members or 1
    text = Text()
    filled = 0
    for count, style in ((counts.succeeded, "green"), (counts.updating, "yellow"), (counts.failed, "red")):
        width = round(BAR_WIDTH * count / total)
        text.append("█" * width, style=style)
        filled += width
    text.append("░" * max(BAR_WIDTH - filled, 0), style="dim")
    return text


def status_renderable(
    status: ModuleStatus,
    targets: list[TargetStatus],
    decisions: list[DecisionDocument],
    known_modules: Collection[str] | None = None,
) -> Group:
    """Any module-status shape (rollout/wire/status.py). `known_modules`: the modules the
    module-status topic holds (None: not read), to say which dependency a blocked module
    waits for does not exist."""
    header = Table.grid(padding=(0, 2))
    header.add_row("Module", f"{status.module} ({status.kind or 'not staged yet'})")
    header.add_row("Phase", status.phase + (" (paused)" if status.paused and status.phase != "Paused" else ""))
    if status.staged:
        header.add_row("Target", f"{status.target_revision} (generation {status.generation})")
        header.add_row("Stable", status.stable_revision or "-")
        header.add_row("Stage", stage_label(status))
    if status.held is not None:  # intents waiting for cluster observations (causal order)
        header.add_row("Held", Text(f"{status.held.intents} intent(s): {status.held.reason}", style="yellow"))
    if status.depends_on:
        waits = " (deletion waits for its dependents)" if status.deleting else ""
        header.add_row("Depends on", ", ".join(status.depends_on) + waits)
        blocked = status.count("blocked")
        for reason in dependency_waits(status, known_modules):
            count = f" ({blocked} cluster(s) blocked)" if blocked else ""
            header.add_row("Blocked", Text(reason + count, style="yellow"))
    elif status.deleting:
        header.add_row("Deleting", "waits for the modules depending on it")
    if status.release is not None:  # moves with its Release (rollout/api/module_releases.py)
        others = ", ".join(m for m in status.release.members if m != status.module)
        header.add_row("Release", f"{status.release.name}, with {others}: a cluster is done once every member is there")
        if status.release.auto_promote is not None:  # auto-promoted as a unit (rollout/engine/promotions.py)
            header.add_row("Release promotion", release_promotion_line(status.module, status.release.auto_promote))
    if status.waiting:  # every stage passed, not every member runs the target (rollout/engine/views.py)
        header.add_row("Waiting", Text(status.waiting, style="yellow"))
    if status.restricted:  # halted by its namespace's ModuleRestriction (rollout/engine/restriction_rules.py)
        header.add_row("Restricted", Text(status.restricted, style="red"))
    for why in paused_by_gates(status):
        header.add_row("Paused", Text(why, style="yellow"))
    if status.run is not None:  # the current run (rollout/engine/runs.py)
        header.add_row("Run", _run_line(status.run))
    for line in filter(None, map(wave_line, status.stages)):  # randomized waves (rollout/engine/waves.py)
        header.add_row("Waves", line)
    for line in filter(None, map(upstreams_line, status.stages)):  # stage graphs (rollout/engine/stage_graph.py)
        header.add_row("Upstream", line)
    if status.promotion is not None:  # auto-promotion (rollout/engine/promotions.py)
        header.add_row("Promotion", promotion_line(status.promotion))
    if status.frozen is not None:  # its moves wait for freeze calendars (rollout/engine/freeze_gate.py)
        header.add_row("Frozen", Text(frozen_line(status.frozen), style="yellow"))
    if status.break_glass is not None:  # a freeze overridden, in force (rollout/engine/freeze_gate.py)
        header.add_row("Break-glass", Text(break_glass_line(status.break_glass), style="red"))
    for glass in status.calendar_break_glass:  # a calendar's own break-glass: every module it governs
        header.add_row("Break-glass", Text(break_glass_line(glass, every_module=True), style="red"))
    if status.rejection is not None:  # rollout/engine/approvals.py
        rejection = status.rejection
        by = f" by {rejection.user}" + (f" via {rejection.via}" if rejection.via else "") if rejection.user else ""
        header.add_row("Rejected", Text(f"at stage {rejection.stage}{by}: {rejection.reason}", style="red"))
    for stage in status.stages:
        line = approvals_line(stage)
        if line:
            header.add_row("Approvals", line)
    parts: list[Any] = [header]
    if status.stages:
        parts += [Text(""), _stages_table(status.stages, release=status.release is not None)]
    analyses = [(stage, gate) for stage in status.stages for gate in stage.gates if gate.count is not None]
    if analyses:
        parts += [Text(""), _analysis_table(analyses)]
    unstaged = [t.cluster for t in targets if t.stage == "-"]
    if unstaged:
        parts.append(Text(f"\nMatching no stage (not rolled out): {', '.join(sorted(unstaged))}", style="yellow"))
    if status.pinned:
        parts.append(Text(f"Pinned: {', '.join(status.pinned)}"))
    failed = [t for t in targets if t.state == "failed"]
    if failed:
        from rollout.wire.status import run_state

        parts.append(Text("\nFailed clusters:", style="red"))
        for target in failed:  # why as its run state says it: its report, or offline past its stage's wait
            at = f" at {target.revision}" if target.revision is not None else ""
            parts.append(Text(f"  {target.cluster}{at}: {run_state(target, status).why}"))
    if status.run is not None:
        parts += _run_exceptions(status, targets)
    if decisions:
        table = Table("TIME", "ACTION", "CLUSTER", "REASON", box=None, title="Latest decisions", title_justify="left")
        for decision in decisions:
            table.add_row(terminal.local_time(decision.at), decision.action, decision.cluster or "", decision.reason)
        parts += [Text(""), table]
    return Group(*parts)


def _stages_table(stage_list: list[StageStatus], *, release: bool = False) -> Table:
    """One row per stage: its state, progress, counts and limits — for a Release member,
    also how many of its clusters wait on its target for the release's other members."""
    columns = ["STAGE", "STATE", "PROGRESS", "PENDING", "UPDATING", "SUCCEEDED", "FAILED", "NOT READY", "BLOCKED"]
    columns += ["AWAITING RELEASE"] if release else []
    stages = Table(*columns, "PINNED", "HELD", "LIMITS", box=None)
    for stage in stage_list:
        c = stage.counts
        limits = f"conc {stage.max_concurrency}, fail {stage.max_failures}"
        if stage.min_success_time:
            limits += f", soak {stage.min_success_time}"
        if stage.approvals_required is not None:
            counted = sum(1 for a in stage.approvals if a.counted)
            limits += f", approvals {min(counted, stage.approvals_required)}/{stage.approvals_required}"
        elif stage.require_approval:
            limits += ", approval " + ("given" if stage.approved else "required")
        limits += _window_limits(stage.window)
        limits += _gate_limits(stage.gates)
        limits += _wave_limits(stage.waves)
        if stage.after is not None:  # a stage graph: the stages it follows
            limits += f", after {'+'.join(edge.stage for edge in stage.after) or 'nothing (a root)'}"
            limits += f" ({stage.quorum})" if len(stage.after) > 1 else ""
        stages.add_row(
            stage.name,
            stage.state,
            _bar(c),
            str(c.pending),
            str(c.updating),
            str(c.succeeded),
            str(c.failed),
            str(c.not_ready),
            str(c.blocked),
            *([str(c.awaiting_release)] if release else []),
            str(c.pinned),
            str(c.held),
            limits,
        )
    return stages


def approvals_line(stage: StageStatus) -> str:
    """Who approved `stage` for the target and how many more it waits for ('' : it asks for
    no approval, or none was given and it is not waiting), e.g. "wave: alice@example.com
    (dashboard); waiting for 1 more from sre or release-managers"."""
    if not stage.require_approval or (not stage.approvals and stage.state != "AwaitingApproval"):
        return ""
    who = ", ".join(f"{a.user or '?'} ({a.via or '?'}{'' if a.counted else ', not counted'})" for a in stage.approvals)
    required = stage.approvals_required or 1
    missing = 0 if stage.approved else max(required - sum(1 for a in stage.approvals if a.counted), 1)
    groups = f" from {' or '.join(stage.approval_groups)}" if stage.approval_groups else ""
    waiting = f"waiting for {missing} more{groups}" if missing else "approved"
    return f"{stage.name}: {who + '; ' if who else ''}{waiting}"


def _window_limits(window: StageWindow | None) -> str:
    """A stage's maintenance window state, for the LIMITS column."""
    if window is None:
        return ""
    if window.open:
        return ", window open" + (f" until {window.closes_at}" if window.closes_at else "")
    return ", window closed" + (f", opens {window.next_open_at}" if window.next_open_at else "")


def paused_by_gates(status: ModuleStatus) -> list[str]:
    """Why a paused module is paused by its gates: each analysis whose run was inconclusive
    (rollout/engine/gate_results.py), from its typed counts."""
    if not status.paused:
        return []
    reasons = []
    for stage in status.stages:
        for gate in stage.gates:
            analysis = gate.analysis
            if analysis is None or analysis.phase != "Inconclusive" or gate.dry_run:
                continue
            latest = f" (latest: {gate.message})" if gate.message else ""
            reasons.append(
                f"gate {gate.name} of stage {stage.name} inconclusive: {analysis.inconclusive} inconclusive "
                f"measurement(s) > inconclusiveLimit {gate.inconclusive_limit or 0}{latest}; "
                f"`rollout resume {status.module}` measures it again"
            )
    return reasons


def _analysis_table(analyses: list[tuple[StageStatus, StageGate]]) -> Table:
    """One row per gate with `count`: its current run's measurements so far."""
    table = Table(
        "STAGE",
        "GATE",
        "RUN",
        "MEASURED",
        "PASSED",
        "FAILED",
        "INCONCLUSIVE",
        "PHASE",
        box=None,
        title="Analysis",
        title_justify="left",
    )
    for stage, gate in analyses:
        a = gate.analysis
        table.add_row(
            stage.name,
            gate.name + (" (dry run)" if gate.dry_run else ""),
            str(a.run) if a else "-",
            f"{a.measured if a else 0}/{gate.count}" + (f" every {gate.interval}" if gate.interval else ""),
            str(a.successful if a else 0),
            f"{a.failed if a else 0} (limit {gate.failure_limit or 0})",
            f"{a.inconclusive if a else 0} (limit {gate.inconclusive_limit or 0})",
            a.phase if a else "not measured yet",
        )
    return table


def _wave_limits(waves: StageWaves | None) -> str:
    """A stage's waves, short, for LIMITS: the open one of how many (the Waves line says more)."""
    if waves is None:
        return ""
    return f", waves of {waves.size}" + (f" ({waves.current}/{waves.count})" if waves.current is not None else "")


def wave_line(stage: StageStatus) -> str | None:
    """The header's Waves line of a stage with waves: the open wave, the order and seed,
    the delay and when the next wave starts (None: the stage has no waves)."""
    waves = stage.waves
    if waves is None:
        return None
    at = f"wave {waves.current}/{waves.count}" if waves.current is not None else f"{waves.count} wave(s)"
    order = f"seed {waves.seed}" if waves.seed is not None else "sorting order"
    apart = f", {waves.delay} apart" if waves.delay else ""
    following = f"; next wave at {waves.next_wave_at}" if waves.next_wave_at is not None else ""
    return f"stage {stage.name}: {at} of {waves.size} ({order}{apart}){following}"


def stage_label(status: ModuleStatus) -> str:
    """The header's Stage: the current stage — in a stage graph, every stage under way at
    once (running, soaking or awaiting approval), e.g. "eu, us (side by side)"."""
    if any(stage.after is not None for stage in status.stages):
        busy = status.stages_under_way
        if len(busy) > 1:
            return f"{', '.join(busy)} (side by side)"
    return status.current_stage or "-"


def upstreams_line(stage: StageStatus) -> str | None:
    """The header's Upstream line of a stage of a stage graph not started yet: each upstream
    edge — counting, soaking until when, or waiting for its stage — and how many must count
    (None: a chain's stage, a root, or a stage already under way)."""
    if not stage.after or stage.state not in ("Pending", "AwaitingApproval"):
        return None
    edges = []
    for edge in stage.after:
        if edge.counts:
            edges.append(f"{edge.stage} passed")
        elif edge.passed:
            edges.append(f"{edge.stage} passed, soaking until {edge.soak_until_at or 'the first tick'}")
        else:
            edges.append(f"waiting for {edge.stage}")
    counting = sum(1 for edge in stage.after if edge.counts)
    return f"stage {stage.name}: {'; '.join(edges)} ({counting} of {stage.needed} needed, quorum {stage.quorum})"


def _gate_limits(gates: list[StageGate]) -> str:
    """A stage's health gates and their latest results, for the LIMITS column."""
    return "".join(f", gate {g.name} {_gate_result(g)}" for g in gates)


def _gate_result(gate: StageGate) -> str:
    """passing / failing / inconclusive, with the gate runner's why (no samples, an error);
    an analysis: its phase and measurements (the Analysis table has the counts)."""
    dry = " (dry run)" if gate.dry_run else ""
    if gate.count is not None:
        a = gate.analysis
        measured = f"{a.phase.lower()}, {a.measured}/{gate.count} measured" if a else "not measured yet"
        return f"analysis{dry} {measured}" + (f": {gate.message}" if a and gate.message else "")
    if dry:
        return dry.strip() + " " + _gate_result(gate.model_copy(update={"dry_run": False}))
    if gate.passed is None:
        return f"inconclusive: {gate.message}" if gate.message else "not evaluated yet"
    return "passing" if gate.passed else "failing" + (f": {gate.message}" if gate.message else "")


RUN_EXCEPTIONS = (
    "AwaitingReturn",
    "SkippedOffline",
    "Held",
    "DeferredByWindow",
    "Left",
    "Pinned",
    "DeferredToNextRun",
    "Excluded",
)
"""The run states `rollout status` lists by name, with why: the offline members a stage
waits for (and until when), the members the run went on without — and the late joiners it
kept out (`lateJoiners`)."""


def release_promotion_line(module: str, promotion: ReleasePromotionStatus) -> Text:
    """`as a unit: api ^2.0.0, web >=1.0.0 <2.0.0 — decided by api; held by alice via cli:
    incident; available api 2.2.0, web 1.1.0 (seen by promoter-a)`."""
    ranges = ", ".join(f"{member.module} {member.semver}" for member in promotion.follow)
    line = Text(f"as a unit: {ranges} — decided by {promotion.leader}")
    if promotion.hold:
        line.append("; held (the Release's autoPromote.hold)", style="yellow")
    if module != promotion.leader:
        line.append(f" (its hold and what is available: rollout status {promotion.leader})")
        return line
    if promotion.held_by is not None:
        hold = promotion.held_by
        by = f" by {hold.user}" + (f" via {hold.via}" if hold.via else "") if hold.user else ""
        line.append(f"; held{by}: {hold.reason}", style="yellow")
    if promotion.available:
        seen = f" (seen by {promotion.available_from})" if promotion.available_from else ""
        versions = ", ".join(f"{name} {version}" for name, version in sorted(promotion.available.items()))
        line.append(f"; available {versions}, held{seen}", style="bold yellow")
    elif promotion.promoted:
        versions = ", ".join(f"{name} {version}" for name, version in sorted(promotion.promoted.items()))
        line.append(f"; last promoted {versions}")
    return line


def promotion_line(promotion: PromotionStatus) -> Text:
    """`follows >=1.0.0 <2.0.0 of oci oci://…; held by alice via cli: incident; 1.5.0 available, held`."""
    source = promotion.source
    chart = f" chart {source.chart}" if source.chart else ""
    line = Text(f"follows {promotion.semver} of {source.kind} {source.url}{chart}")
    if promotion.hold:
        line.append("; held (autoPromote.hold)", style="yellow")
    if promotion.held_by is not None:
        hold = promotion.held_by
        by = f" by {hold.user}" + (f" via {hold.via}" if hold.via else "") if hold.user else ""
        line.append(f"; held{by}: {hold.reason}", style="yellow")
    if promotion.available:
        seen = f" (seen by {promotion.available_from})" if promotion.available_from else ""
        line.append(f"; {promotion.available} available, held{seen}", style="bold yellow")
    elif promotion.promoted:
        line.append(f"; last promoted {promotion.promoted}")
    return line


def _run_line(run: RunStatus) -> str:
    """The run's number, what it drives, when it started and its fixed members."""
    members = sum(stage.members for stage in run.stages.values())
    what = "rollback to" if run.mode == "rollback" else "rollout of"
    line = f"#{run.number}, {what} generation {run.generation}, {members} member(s) fixed at its start"
    if run.started_at:
        line += f" ({terminal.local_time(run.started_at)})"
    if run.left:
        line += f", {run.left} left since"
    if run.follow_up:
        line += f" — the next run for the {run.joiners} late joiner(s) deferred by the run before"
    elif run.joiners:
        line += f", {run.joiners} late joiner(s) of the run before taken in"
    return line + (" — adopted by this release" if run.adopted else "")


def _run_exceptions(status: ModuleStatus, targets: list[TargetStatus]) -> list[Text]:
    """The members the run went on without, by state: who and why (rollout/wire/status.py)."""
    from rollout.wire.status import run_members

    members = run_members(status, targets)
    parts: list[Text] = []
    for state in RUN_EXCEPTIONS:
        chosen = [member for member in members if member.state == state]
        if not chosen:
            continue
        parts.append(Text(f"\n{state} ({len(chosen)}):", style="yellow"))
        for member in chosen:
            why = f": {member.why}" if member.why else ""
            parts.append(Text(f"  {member.cluster} (stage {member.stage}){why}"))
    present = {target.cluster for target in targets}
    listed = sum(1 for member in members if member.state == "Left" and member.cluster not in present)
    if status.run is not None and status.run.left > listed:
        parts.append(Text(f"  … and {status.run.left - listed} more that left (the latest are listed)"))
    return parts


def frozen_line(frozen: FrozenStatus) -> str:
    """ "by calendar year-end, team-a/weekends until 2027-01-02T23:00:00Z" (the calendars
    holding the module's moves, and when the freeze ends)."""
    until = f" until {frozen.until_at}" if frozen.until_at else " (until unknown: no tick yet)"
    return f"by calendar {', '.join(frozen.calendars)}{until}"


def break_glass_line(glass: BreakGlassStatus, *, every_module: bool = False) -> str:
    """ "every freeze calendar overridden until … by alice via cli: sev-1 fix"; a calendar's
    own (`every_module`): "freeze calendar X overridden for every module it governs until …"."""
    which = f"freeze calendar {glass.calendar}" if glass.calendar else "every freeze calendar"
    scope = " for every module it governs" if every_module else ""
    by = f" by {glass.user}" if glass.user else ""
    door = f" via {glass.via}" if glass.via else ""
    return f"{which} overridden{scope} until {glass.until_at}{by}{door}: {glass.reason}"
