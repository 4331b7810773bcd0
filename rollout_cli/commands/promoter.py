"""`rollout promoter`: the flags; the process is rollout_cli/processes/promoter.py."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from rollout_cli.options import Context, Duration, check_port_free, kafka_options, web_options

DEFAULT_PROMOTER_PORT = 6073


@click.command(name="promoter")
@click.option(
    "--interval",
    type=Duration(),
    default="1m",
    show_default=True,
    envvar="ROLLOUT_PROMOTER_INTERVAL",
    help="How often every auto-promoted source is listed (env ROLLOUT_PROMOTER_INTERVAL).",
)
@click.option(
    "--name",
    default=None,
    envvar="ROLLOUT_PROMOTER_NAME",
    help="Who observed a version: recorded with each promotion (default: rollout-promoter@<host>; "
    "env ROLLOUT_PROMOTER_NAME).",
)
@click.option(
    "--secrets-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="ROLLOUT_PROMOTER_SECRETS_DIR",
    help="Where the Secrets sources name are mounted, one directory per Secret (DIR/<name>/<key>: "
    "username + password, or .dockerconfigjson; env ROLLOUT_PROMOTER_SECRETS_DIR).",
)
@web_options(DEFAULT_PROMOTER_PORT)
@kafka_options
def promoter(
    ctx: Context,
    interval: float,
    name: str | None,
    secrets_dir: Path | None,
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
) -> None:
    """Watch auto-promoted sources (OCI tags, Helm repository indexes, Git tags) and publish each
    newer version in a module's range as a PromotionObserved event, until SIGINT/SIGTERM."""
    import logging.config

    from infra.observability import logging_config
    from rollout_cli.processes.promoter import run_promoter
    from rollout_cli.processes.signals import run_until_signalled

    check_port_free(web_port, web_host)
    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, prefix = ctx.bootstrap, ctx.prefix
    identity = name or f"rollout-promoter@{socket.gethostname()}"
    run_until_signalled(
        lambda stop: run_promoter(
            bootstrap=bootstrap,
            prefix=prefix,
            interval=interval,
            name=identity,
            secrets_dir=secrets_dir,
            web_port=web_port,
            web_host=web_host,
            stop=stop,
        )
    )
