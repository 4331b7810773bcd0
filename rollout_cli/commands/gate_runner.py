"""`rollout gate-runner`: the process that evaluates health gates (projections/gate_runner.py).

    module-status ──► gate-runner ──► Prometheus / webhooks ──► GateEvaluated ──► sync-status

It runs beside the worker and the appliers, until SIGINT/SIGTERM; the engine only ever
sees its results as events. Like them it serves /metrics, /healthz and /readyz (ready: the
broker answers) on `--web-port`.
"""

from __future__ import annotations

import click

from rollout_cli.options import Context, Duration, check_port_free, kafka_options, web_options

DEFAULT_GATE_RUNNER_PORT = 6071


@click.command(name="gate-runner")
@click.option(
    "--interval",
    type=Duration(),
    default="15s",
    show_default=True,
    envvar="ROLLOUT_GATE_INTERVAL",
    help="How often the gates of soaking stages are evaluated (env ROLLOUT_GATE_INTERVAL).",
)
@web_options(DEFAULT_GATE_RUNNER_PORT)
@kafka_options
def gate_runner(ctx: Context, interval: float, web_port: int, web_host: str, log_format: str, loglevel: str) -> None:
    """Evaluate the health gates (Prometheus queries, webhooks) of every stage that soaks,
    and publish each result as a GateEvaluated event, until SIGINT/SIGTERM."""
    import asyncio
    import logging.config
    import signal

    from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer, logging_config
    from infra.settings import kafka_client_options
    from projections.gate_runner import GateRunner
    from projections.publisher import KafkaPublisher

    check_port_free(web_port, web_host)
    logging.config.dictConfig(logging_config(log_format, loglevel))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        health = Health(assigned=True)  # no consumer group: ready once the broker answers
        probe = BrokerProbe(ctx.bootstrap, health, **kafka_client_options())
        server = ObservabilityServer(port=web_port, metrics=Metrics(), health=health, host=web_host)
        publish = KafkaPublisher(ctx.bootstrap, ctx.topics.status)
        runner = GateRunner(bootstrap=ctx.bootstrap, prefix=ctx.prefix, publish=publish, interval=interval)
        click.echo(f"gate-runner: {ctx.topics.module_status} → gates → {ctx.topics.status}", err=True)
        if web_port:
            await server.start()
        probe.start()
        try:
            await runner.run(stop)
        except Exception as error:
            health.crashed = str(error)
            raise
        finally:
            await publish.close()
            await probe.stop()
            await server.stop()
        click.echo(f"gate-runner stopped: {runner.published} result(s) published", err=True)

    asyncio.run(main())
