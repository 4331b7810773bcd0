"""`rollout dashboard`: the command line; the work is `projections.dashboard.server.serve`.

Kept apart from rollout_cli/main.py, like watching.py, so that `rollout --help` imports
neither aiohttp nor aiokafka (tests/cli/test_startup.py).
"""

from __future__ import annotations

import asyncio
import logging.config
import signal

import click

from rollout_cli.options import DEFAULT_WEB_HOST, Context, check_port_free, fail, kafka_options

DEFAULT_DASHBOARD_PORT = 6070


@click.command(name="dashboard")
@click.option(
    "--port",
    envvar="ROLLOUT_DASHBOARD_PORT",
    default=DEFAULT_DASHBOARD_PORT,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port of the web UI (env ROLLOUT_DASHBOARD_PORT).",
)
@click.option(
    "--host",
    envvar="ROLLOUT_DASHBOARD_HOST",
    default=DEFAULT_WEB_HOST,
    show_default=True,
    help="Address the web UI listens on; 0.0.0.0 for every interface, as in a container "
    "(env ROLLOUT_DASHBOARD_HOST). Anyone who reaches it can approve, pause and roll back.",
)
@click.option(
    "--log-format",
    envvar="ROLLOUT_LOG_FORMAT",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="Log lines for humans or for a log pipeline.",
)
@click.option(
    "--loglevel",
    envvar="ROLLOUT_LOGLEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@kafka_options
def dashboard(ctx: Context, port: int, host: str, log_format: str, loglevel: str) -> None:
    """Serve a live web UI of modules, stages, clusters and dead letters, until stopped.

    It reads the projection topics (read_committed), updates the browser through server-sent
    events, and its approve / pause / resume / rollback / abort buttons publish the same
    commands as the CLI, showing the engine's refusal when there is one.
    """
    check_port_free(port, host, "--port")
    from infra import client
    from infra.observability import logging_config
    from projections.dashboard.server import serve

    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, topics = ctx.bootstrap, ctx.topics
    click.echo(f"dashboard: http://{host}:{port}/ (topics {ctx.prefix}*, Kafka {bootstrap})")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(bootstrap=bootstrap, topics=topics, host=host, port=port, stop=stop)

    try:
        asyncio.run(main())
    except client.MissingTopic as error:
        fail(str(error))
