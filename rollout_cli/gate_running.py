"""`rollout gate-runner`: the process that evaluates health gates (projections/gate_runner.py).

    module-status ──► gate-runner ──► Prometheus / webhooks ──► GateEvaluated ──► sync-status

It runs beside the worker and the appliers, until SIGINT/SIGTERM; the engine only ever
sees its results as events.
"""

from __future__ import annotations

import click

from rollout_cli.options import Context, Duration, kafka_options


@click.command(name="gate-runner")
@click.option(
    "--interval",
    type=Duration(),
    default="15s",
    show_default=True,
    envvar="ROLLOUT_GATE_INTERVAL",
    help="How often the gates of soaking stages are evaluated (env ROLLOUT_GATE_INTERVAL).",
)
@click.option("--loglevel", default="info", show_default=True, help="debug, info, warning or error.")
@kafka_options
def gate_runner(ctx: Context, interval: float, loglevel: str) -> None:
    """Evaluate the health gates (Prometheus queries, webhooks) of every stage that soaks,
    and publish each result as a GateEvaluated event, until SIGINT/SIGTERM."""
    import asyncio
    import logging.config
    import signal

    from infra.observability import logging_config
    from projections.gate_runner import GateRunner
    from projections.publisher import KafkaPublisher

    logging.config.dictConfig(logging_config("text", loglevel))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        publish = KafkaPublisher(ctx.bootstrap, ctx.topics.status)
        runner = GateRunner(bootstrap=ctx.bootstrap, prefix=ctx.prefix, publish=publish, interval=interval)
        click.echo(f"gate-runner: {ctx.topics.module_status} → gates → {ctx.topics.status}", err=True)
        try:
            await runner.run(stop)
        finally:
            await publish.close()
        click.echo(f"gate-runner stopped: {runner.published} result(s) published", err=True)

    asyncio.run(main())
