"""`rollout status MODULE`: the status screen (rollout_cli/reading/status_screen.py), its
documents (-o json|yaml), or `--wait`, a gate a CI pipeline stops on (reading/status_wait.py)."""

from __future__ import annotations

import click

from rollout_cli.options import Context, Duration, kafka_options
from rollout_cli.reading.status_wait import Condition, ConditionType
from rollout_cli.views.output import emit, output_option


@click.command()
@click.argument("module")
@click.option("--watch", "-w", is_flag=True, help="Keep refreshing until Ctrl-C.")
@click.option("--decisions", "decision_count", default=8, show_default=True, help="Latest decisions shown.")
@click.option(
    "--wait",
    "gate",
    is_flag=True,
    help="Wait until --for holds (exit 0), the rollout fails — Halted, RollingBack, RolledBack, "
    "Aborted (exit 1; --for phase=RolledBack waits through RollingBack) — or --timeout passes (exit 2).",
)
@click.option(
    "--for",
    "condition",
    type=ConditionType(),
    default="phase=Complete",
    show_default=True,
    help="With --wait: the condition, phase=<phase>.",
)
@click.option("--timeout", type=Duration(), default="10m", show_default=True, help="With --wait: how long.")
@output_option
@kafka_options
def status(
    ctx: Context,
    module: str,
    watch: bool,
    decision_count: int,
    gate: bool,
    condition: Condition,
    timeout: float,
    output: str,
) -> None:
    """Phase, target/stable revisions, per-stage progress and the latest decisions.

    A module with no status on the module-status topic is an error (exit 1), unless --watch
    waits for it to appear. -o json|yaml prints the module-status document. --wait gates a
    CI pipeline on the rollout: exit 0 / 1 / 2 (rollout_cli/reading/status_wait.py).
    """
    if gate:
        from rollout_cli.reading.status_wait import gate as wait_for_rollout

        wait_for_rollout(ctx, module, condition, timeout, output)
    elif output != "table":
        from rollout_cli.reading.status_screen import status_document

        emit(status_document(ctx, module), output)
    else:
        from rollout_cli.reading.status_screen import show_status

        show_status(ctx, module, watch=watch, decision_count=decision_count)
