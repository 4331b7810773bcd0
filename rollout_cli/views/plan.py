"""`rollout plan`: per module, its stages in order — batches, gates, windows, in a stage
graph the stages each waits for — and what no stage selects. The Helm values of each plan are views/values.py."""

from __future__ import annotations

from typing import Any

from rollout_cli.views import terminal

LATE_JOINERS = {
    "Include": "are taken in",
    "NextRun": "wait for the next run (lateJoiners: NextRun; stable meanwhile)",
    "Exclude": "are excluded from it (lateJoiners: Exclude)",
}
"""What a run does with clusters joining mid-run, per `rollout.lateJoiners`, as the plan says it."""


def graph_line(stage: Any) -> str:
    """Which stages `stage` of a stage graph waits for, its quorum and each edge's soak."""
    if not stage.after:
        return "a root: starts when the rollout starts"
    edges = ", ".join(edge.stage + (f" (then soaks {edge.soak})" if edge.soak else "") for edge in stage.after)
    count = len(stage.after)
    return f"after {edges}: starts once {stage.needed} of {count} passed (quorum {stage.quorum})"


def print_plan(plan: Any) -> None:
    terminal.console.print(f"[bold]{plan.kind} {plan.module}[/] → {plan.revision}")
    if plan.depends_on:
        names = ", ".join(plan.depends_on)
        terminal.console.print(
            f"  depends on {names}: a cluster moves once {names} is on its target there and succeeded"
        )
    if plan.promotion is not None:  # auto-promotion (rollout/engine/promotions.py)
        promotion = plan.promotion
        then = (
            "held (autoPromote.hold): recorded as available, promoted once the hold is lifted"
            if promotion.hold
            else "each becomes a new revision, rolled out as below (unless `rollout promotion hold`)"
        )
        terminal.console.print(f"  auto-promotes: newer versions in {promotion.semver} of {promotion.source}; {then}")
    if plan.frozen_by:  # rollout/engine/freeze_gate.py
        until = f" until {plan.frozen_until}" if plan.frozen_until else ""
        terminal.console.print(
            f"  [yellow]frozen now by calendar {', '.join(plan.frozen_by)}{until}: no cluster moves before[/]"
        )
    for glass in plan.break_glass:  # overrides in force: the calendars they name hold nothing now
        which = f"freeze calendar {glass.calendar}" if glass.calendar else "every freeze calendar"
        scope = "every module it governs" if glass.every_module else f"module {plan.module}"
        by = (f" by {glass.user}" if glass.user else "") + (f" via {glass.via}" if glass.via else "")
        terminal.console.print(
            f"  [red]break-glass of {which} in force until {glass.until_at}{by} ({scope}): {glass.reason}[/]"
        )
    for calendar in plan.calendars:
        terminal.console.print(f"  obeys freeze calendar {calendar}")
    if plan.release is not None:
        others = ", ".join(m for m in plan.release_members if m != plan.module)
        terminal.console.print(
            f"  release {plan.release}, with {others}: a cluster is done once every member succeeded there; "
            "a failure of any member there fails it for all"
        )
    for index, stage in enumerate(plan.stages, start=1):
        gates = []
        if stage.approvals_required is not None:
            people = (
                f"{stage.approvals_required} distinct verified approver{'s' if stage.approvals_required != 1 else ''}"
            )
            groups = f" from {' or '.join(stage.approval_groups)}" if stage.approval_groups else ""
            gates.append(f"waits for approval by {people}{groups}")
        elif stage.require_approval:
            gates.append("waits for approval")
        if stage.min_success_time:
            gates.append(f"soaks {stage.min_success_time} after success")
        if stage.gates:
            gates.append(f"health gates pass for the soak: {', '.join(stage.gates)}")
        if stage.windows:
            now = "" if stage.window_open is None else (" (open now)" if stage.window_open else " (closed now)")
            opens = f", next opens {stage.next_window}" if stage.next_window else ""
            gates.append(f"moves only in windows: {'; '.join(stage.windows)}{now}{opens}")
        terminal.console.print(
            f"  {index}. stage [bold]{stage.name}[/]: {sum(len(b) for b in stage.batches)} cluster(s), "
            f"maxConcurrency {stage.max_concurrency}, maxFailures {stage.max_failures}"
            + (f"; {', '.join(gates)}" if gates else "")
        )
        if stage.after is not None:  # a stage graph (rollout/engine/stage_graph.py)
            terminal.console.print(f"       {graph_line(stage)}")
        if stage.wave_order is not None:
            order = f"random order, seed {stage.wave_seed}" if stage.wave_seed is not None else "sorting order"
            delay = f", {stage.wave_delay} apart" if stage.wave_delay else ""
            terminal.console.print(f"       {len(stage.waves)} wave(s) in {order}{delay}:")
            for number, wave in enumerate(stage.waves, start=1):
                terminal.console.print(f"       wave {number}: {', '.join(wave)}")
        for number, batch in enumerate(stage.batches, start=1):
            terminal.console.print(f"       batch {number}: {', '.join(batch)}")
        if stage.skipped_not_ready:
            terminal.console.print(f"       skipped, not ready: {', '.join(stage.skipped_not_ready)}", style="yellow")
        for cluster, reason in sorted(stage.held.items()):
            terminal.console.print(
                f"       held by its owner: {cluster}" + (f" ({reason})" if reason else ""), style="yellow"
            )
    members = sum(
        sum(len(b) for b in stage.batches) + len(stage.skipped_not_ready) + len(stage.held) for stage in plan.stages
    )
    joining = LATE_JOINERS.get(plan.late_joiners, LATE_JOINERS["Include"])
    terminal.console.print(
        f"  run: {members} member(s) fixed when it starts, the limits resolved against them; clusters joining "
        f"mid-run {joining}, clusters leaving drop out as Left, offline ones are skipped, held ones deferred"
    )
    if plan.unstaged:
        terminal.console.print(f"  matching no stage (not rolled out): {', '.join(plan.unstaged)}", style="yellow")
    terminal.console.print(f"  not selected: {plan.not_selected} cluster(s)")
