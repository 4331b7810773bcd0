"""`rollout gate-runner`: the flags; the process is rollout_cli/processes/gate_runner.py."""

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
    import logging.config

    from infra.observability import logging_config
    from rollout_cli.processes.gate_runner import run_gate_runner
    from rollout_cli.processes.signals import run_until_signalled

    check_port_free(web_port, web_host)
    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, prefix = ctx.bootstrap, ctx.prefix
    run_until_signalled(
        lambda stop: run_gate_runner(
            bootstrap=bootstrap, prefix=prefix, interval=interval, web_port=web_port, web_host=web_host, stop=stop
        )
    )
