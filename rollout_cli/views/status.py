"""How the CLI shows projections: tables, the status screen, decision lists (rich)."""

from __future__ import annotations

import getpass
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from infra import client
    from rollout.wire.dead_letters import DeadLetter
    from rollout.wire.status import MemberCounts, ModuleStatus, StageGate, StageStatus, StageWindow, TargetStatus

# Piped output gets a wide console so tables are not squeezed to 80 columns.
_probe = Console()
console = _probe if _probe.is_terminal else Console(width=200)
BAR_WIDTH = 24


def current_user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return None


def decisions_for(records: list[client.Record], module: str) -> list[dict[str, Any]]:
    seen: set[str] = set()
    decisions = []
    for record in records:
        if record.key != module or record.value is None:
            continue
        document = record.json()
        if document.get("id") in seen:
            continue  # at-least-once: a redelivered journal event re-emits the same decision ids
        seen.add(document.get("id"))
        decisions.append(document)
    return decisions


def print_decisions(decisions: list[dict[str, Any]]) -> None:
    table = Table("TIME", "ACTION", "CLUSTER", "REASON", box=None)
    for decision in decisions:
        table.add_row(_time(decision.get("at")), decision["action"], decision.get("cluster") or "", decision["reason"])
    console.print(table)


def _time(at: float | None) -> str:
    if not at:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


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
    decisions: list[dict[str, Any]],
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
        header.add_row("Stage", status.current_stage or "-")
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
    if status.waiting:  # every stage passed, not every member runs the target (rollout/engine/views.py)
        header.add_row("Waiting", Text(status.waiting, style="yellow"))
    if status.restricted:  # halted by its namespace's ModuleRestriction (rollout/engine/restriction_rules.py)
        header.add_row("Restricted", Text(status.restricted, style="red"))
    parts: list[Any] = [header]
    if status.stages:
        parts += [Text(""), _stages_table(status.stages)]
    unstaged = [t.cluster for t in targets if t.stage == "-"]
    if unstaged:
        parts.append(Text(f"\nMatching no stage (not rolled out): {', '.join(sorted(unstaged))}", style="yellow"))
    if status.pinned:
        parts.append(Text(f"Pinned: {', '.join(status.pinned)}"))
    failed = [t for t in targets if t.state == "failed"]
    if failed:
        parts.append(Text("\nFailed clusters:", style="red"))
        for target in failed:
            parts.append(Text(f"  {target.cluster} at {target.revision}: {target.message}"))
    if decisions:
        table = Table("TIME", "ACTION", "CLUSTER", "REASON", box=None, title="Latest decisions", title_justify="left")
        for decision in decisions:
            table.add_row(
                _time(decision.get("at")), decision["action"], decision.get("cluster") or "", decision["reason"]
            )
        parts += [Text(""), table]
    return Group(*parts)


def _stages_table(stage_list: list[StageStatus]) -> Table:
    """One row per stage: its state, progress, counts and limits."""
    stages = Table(
        "STAGE",
        "STATE",
        "PROGRESS",
        "PENDING",
        "UPDATING",
        "SUCCEEDED",
        "FAILED",
        "NOT READY",
        "BLOCKED",
        "PINNED",
        "LIMITS",
        box=None,
    )
    for stage in stage_list:
        c = stage.counts
        limits = f"conc {stage.max_concurrency}, fail {stage.max_failures}"
        if stage.min_success_time:
            limits += f", soak {stage.min_success_time}"
        if stage.require_approval:
            limits += ", approval " + ("given" if stage.approved else "required")
        limits += _window_limits(stage.window)
        limits += _gate_limits(stage.gates)
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
            str(c.pinned),
            limits,
        )
    return stages


def _window_limits(window: StageWindow | None) -> str:
    """A stage's maintenance window state, for the LIMITS column."""
    if window is None:
        return ""
    if window.open:
        return ", window open" + (f" until {window.closes_at}" if window.closes_at else "")
    return ", window closed" + (f", opens {window.next_open_at}" if window.next_open_at else "")


def _gate_limits(gates: list[StageGate]) -> str:
    """A stage's health gates and their latest results, for the LIMITS column."""
    return "".join(f", gate {g.name} {_gate_result(g)}" for g in gates)


def _gate_result(gate: StageGate) -> str:
    """passing / failing / inconclusive, with the gate runner's why (no samples, an error)."""
    if gate.passed is None:
        return f"inconclusive: {gate.message}" if gate.message else "not evaluated yet"
    return "passing" if gate.passed else "failing" + (f": {gate.message}" if gate.message else "")


def gather_status(ctx: Any, module: str, decision_count: int) -> tuple[ModuleStatus | None, Group | None]:
    from rollout_cli.documents import module_statuses, target_statuses

    statuses = module_statuses(ctx.latest(ctx.topics.module_status))
    status = statuses.get(module)
    if status is None:
        return None, None
    targets = target_statuses(ctx.latest(ctx.topics.targets), module)
    every = decisions_for(ctx.records(ctx.topics.decisions), module)
    renderable = status_renderable(status, targets, every[-decision_count:], known_modules=statuses)
    from rollout_cli.status_values import module_values, values_renderable

    values = module_values(ctx, module, status, every)  # a Helm module: its values per cluster
    return status, Group(renderable, values_renderable(values)) if values is not None else renderable


def show_status(ctx: Any, module: str, *, watch: bool, decision_count: int) -> None:
    status, renderable = gather_status(ctx, module, decision_count)
    if status is None and not watch:
        from rollout_cli.options import fail

        fail(f"module {module} not found", code=1)
    if not watch:
        console.print(renderable)
        return
    with Live(renderable or Text(f"waiting for {module}..."), console=console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(2)
                _, renderable = gather_status(ctx, module, decision_count)
                if renderable is not None:
                    live.update(renderable)
        except KeyboardInterrupt:
            return


def print_plan(plan: Any) -> None:
    console.print(f"[bold]{plan.kind} {plan.module}[/] → {plan.revision}")
    if plan.depends_on:
        names = ", ".join(plan.depends_on)
        console.print(f"  depends on {names}: a cluster moves once {names} is on its target there and succeeded")
    for index, stage in enumerate(plan.stages, start=1):
        gates = []
        if stage.require_approval:
            gates.append("waits for approval")
        if stage.min_success_time:
            gates.append(f"soaks {stage.min_success_time} after success")
        if stage.gates:
            gates.append(f"health gates pass for the soak: {', '.join(stage.gates)}")
        if stage.windows:
            now = "" if stage.window_open is None else (" (open now)" if stage.window_open else " (closed now)")
            opens = f", next opens {stage.next_window}" if stage.next_window else ""
            gates.append(f"moves only in windows: {'; '.join(stage.windows)}{now}{opens}")
        console.print(
            f"  {index}. stage [bold]{stage.name}[/]: {sum(len(b) for b in stage.batches)} cluster(s), "
            f"maxConcurrency {stage.max_concurrency}, maxFailures {stage.max_failures}"
            + (f"; {', '.join(gates)}" if gates else "")
        )
        for number, batch in enumerate(stage.batches, start=1):
            console.print(f"       batch {number}: {', '.join(batch)}")
        if stage.skipped_not_ready:
            console.print(f"       skipped, not ready: {', '.join(stage.skipped_not_ready)}", style="yellow")
    if plan.unstaged:
        console.print(f"  matching no stage (not rolled out): {', '.join(plan.unstaged)}", style="yellow")
    console.print(f"  not selected: {plan.not_selected} cluster(s)")


def dead_letters_from_records(
    records: list[client.Record], since: float | None = None
) -> list[tuple[float | None, DeadLetter]]:
    """The dead letters (rollout/wire/dead_letters.py), oldest first, each with its record's
    timestamp (seconds). `since`: only those at or after that time. A record the model cannot
    read is shown as an unreadable dead letter, with why."""
    from rollout.wire.dead_letters import DeadLetter
    from rollout.wire.documents import DocumentError

    letters: list[tuple[float | None, DeadLetter]] = []
    for record in records:
        at = record.timestamp
        if since is not None and (at is None or at < since):
            continue
        size = len(record.value) if record.value is not None else 0
        try:
            letter = DeadLetter.read(record.value if record.value is not None else b"null")
        except DocumentError as error:
            letter = DeadLetter(reason=f"unreadable dead letter: {error}", size=size)
        letters.append((at, letter))
    letters.sort(key=lambda shown: shown[0] or 0.0)
    return letters


def dead_letters_json(letters: list[tuple[float | None, DeadLetter]]) -> list[dict[str, Any]]:
    """`rollout dead-letters -o json|yaml`: each document with `at`, its record's time."""
    return [{"at": at, **letter.as_json()} for at, letter in letters]


def print_dead_letters(letters: list[tuple[float | None, DeadLetter]]) -> None:
    table = Table("TIME", "STAGE", "INPUT", "KEY", "SIZE", "REASON", box=None)
    for at, letter in letters:
        table.add_row(
            _time(at), letter.stage or "-", letter.position, letter.key or "-", _size(letter.size), letter.reason
        )
    console.print(table)


def _size(size: Any) -> str:
    if not isinstance(size, int):
        return "-"
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
