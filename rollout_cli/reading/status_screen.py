"""`rollout status MODULE`: the module's status, targets, latest decisions, for a Helm
module its values per cluster and for a Release member its release (every member's phase,
and per cluster which member is on which revision) — read from the topics once, or every
2 s with `--watch` (rich Live) until Ctrl-C, rendered by views/status.py and
views/values.py; with -o json|yaml the module-status document as the topic holds it (and
`values`, `members`: every member of its run in its explicit state, rollout/wire/status.py
`run_members`, and `releaseStatus`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.live import Live
from rich.text import Text

from rollout_cli.options import fail
from rollout_cli.reading.documents import decisions_for, module_status, module_statuses, target_statuses
from rollout_cli.reading.status_values import module_values
from rollout_cli.views import terminal
from rollout_cli.views.status import release_renderable, status_renderable
from rollout_cli.views.values import values_renderable

if TYPE_CHECKING:
    from rollout.wire.status import ModuleStatus, ReleaseStatus


def gather_status(ctx: Any, module: str, decision_count: int) -> tuple[ModuleStatus | None, Group | None]:
    statuses = module_statuses(ctx.latest(ctx.topics.module_status))
    status = statuses.get(module)
    if status is None:
        return None, None
    every_target = ctx.latest(ctx.topics.targets)
    targets = target_statuses(every_target, module)
    every = decisions_for(ctx.records(ctx.topics.decisions), module)
    renderable = status_renderable(status, targets, every[-decision_count:], known_modules=statuses)
    if status.release is not None:  # its release: every member's phase and revision per cluster
        renderable = Group(renderable, release_renderable(release_status(status, statuses, every_target)))
    values = module_values(ctx, module, status, every)  # a Helm module: its values per cluster
    return status, Group(renderable, values_renderable(values)) if values is not None else renderable


def show_status(ctx: Any, module: str, *, watch: bool, decision_count: int) -> None:
    status, renderable = gather_status(ctx, module, decision_count)
    if status is None and not watch:
        fail(f"module {module} not found", code=1)
    if not watch:
        terminal.console.print(renderable)
        return
    with Live(renderable or Text(f"waiting for {module}..."), console=terminal.console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(2)
                _, renderable = gather_status(ctx, module, decision_count)
                if renderable is not None:
                    live.update(renderable)
        except KeyboardInterrupt:
            return


def status_document(ctx: Any, module: str) -> dict[str, Any]:
    """`rollout status -o json|yaml`: the module-status document, with `values` for a Helm
    module; a module without a status is an error (exit 1)."""
    document = ctx.latest(ctx.topics.module_status).get(module)
    if document is None:
        fail(f"module {module} not found", code=1)
    status = module_status(module, document)
    decisions = decisions_for(ctx.records(ctx.topics.decisions), module)
    values = module_values(ctx, module, status, decisions)  # a Helm module: its values per cluster
    shown = status.as_json()
    if status.run is not None:  # every member of its run in its explicit state, and why (runs.py)
        from rollout.wire.status import run_members

        targets = target_statuses(ctx.latest(ctx.topics.targets), module)
        shown["members"] = [member.model_dump(mode="json") for member in run_members(status, targets)]
    if status.release is not None:
        statuses = module_statuses(ctx.latest(ctx.topics.module_status))
        release = release_status(status, statuses, ctx.latest(ctx.topics.targets))
        shown["releaseStatus"] = release.model_dump(mode="json", by_alias=True)
    return shown if values is None else {**shown, "values": values}


def release_status(status: ModuleStatus, statuses: dict[str, ModuleStatus], targets: Any) -> ReleaseStatus:
    """The release of a member `status`: its members' statuses and their targets."""
    from rollout.wire.status import ReleaseStatus

    assert status.release is not None
    members = [t for member in status.release.members for t in target_statuses(targets, member)]
    return ReleaseStatus.of(status.release, statuses, members)
