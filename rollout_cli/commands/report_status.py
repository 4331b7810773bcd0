"""`rollout report-status`: publish a sync status as an applier does (simulators, tests)."""

from __future__ import annotations

import click

from rollout_cli.options import Context, check_name, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


@click.command(name="report-status")
@click.option("--cluster", required=True)
@click.option("--module", required=True)
@click.option("--revision", required=True)
@click.option("--state", required=True, type=click.Choice(["succeeded", "failed", "updating"]))
@click.option("--message", default=None)
@click.option(
    "--generation",
    type=click.IntRange(min=1),
    default=None,
    help="The module generation the report answers (as appliers send it); without it the report "
    "is matched by revision only.",
)
@verdict_options
@kafka_options
def report_status(
    ctx: Context,
    cluster: str,
    module: str,
    revision: str,
    state: str,
    message: str | None,
    generation: int | None,
    wait: Wait,
) -> None:
    """Publish a sync status, as an applier does (for simulators and tests).

    Waits for the engine's verdict: a report about an unknown cluster or module, or not
    about the assignment in force, is an error (exit 1) naming why."""
    from rollout.wire.events import SyncStatusReported
    from rollout_cli.publishing.verdicts import decide, request

    check_name(cluster)
    check_name(module)
    event = SyncStatusReported(
        cluster=cluster,
        module=module,
        revision=revision,
        state=state,  # type: ignore[arg-type]
        message=message,
        generation=generation,
        reply=True if wait.enabled else None,
    )
    verdicts = request(ctx, wait, topic=ctx.topics.status, messages=[(cluster, event.to_bytes())], ids=[event.id])
    decide(f"{cluster}/{module}: {state} at {revision}", verdicts, event.id, wait)
