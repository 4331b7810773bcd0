"""`rollout notifier`: the flags; the process is rollout_cli/processes/notifier.py."""

from __future__ import annotations

from pathlib import Path

import click

from rollout_cli.options import Context, check_port_free, kafka_options, web_options

DEFAULT_NOTIFIER_PORT = 6072


@click.command(name="notifier")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="ROLLOUT_NOTIFIER_CONFIG",
    help="The webhooks, their filters and auth headers, the retry policy: a YAML file "
    "(docs/configuration.md, Notifications; env ROLLOUT_NOTIFIER_CONFIG).",
)
@click.option(
    "--webhook",
    "urls",
    multiple=True,
    help="Send every notification to URL (repeatable; with --config, added to its webhooks).",
)
@click.option(
    "--source",
    default=None,
    envvar="ROLLOUT_NOTIFIER_SOURCE",
    help="The events' CloudEvents `source` (default: the config's, else /rollout/<topic prefix>; "
    "env ROLLOUT_NOTIFIER_SOURCE).",
)
@click.option(
    "--start-from",
    type=click.Choice(["latest", "earliest"]),
    default="latest",
    show_default=True,
    envvar="ROLLOUT_NOTIFIER_START_FROM",
    help="Where a first start reads from (the group has no offsets yet): decisions from now on, or "
    "every decision the topic holds (env ROLLOUT_NOTIFIER_START_FROM).",
)
@web_options(DEFAULT_NOTIFIER_PORT)
@kafka_options
def notifier(
    ctx: Context,
    config_path: Path | None,
    urls: tuple[str, ...],
    source: str | None,
    start_from: str,
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
) -> None:
    """Send stage started, awaiting approval, halted, rollback, complete (and more) decisions as
    CloudEvents to webhooks, at least once, until SIGINT/SIGTERM."""
    import logging.config

    from infra.observability import logging_config
    from projections.notifier.config import ConfigError, load_config
    from rollout_cli.processes.notifier import run_notifier
    from rollout_cli.processes.signals import run_until_signalled

    if config_path is None and not urls:
        raise click.UsageError("nothing to notify: give --config FILE or --webhook URL")
    try:
        config = load_config(config_path, urls=list(urls), source=source)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    check_port_free(web_port, web_host)
    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, prefix = ctx.bootstrap, ctx.prefix
    run_until_signalled(
        lambda stop: run_notifier(
            bootstrap=bootstrap,
            prefix=prefix,
            config=config,
            start_from=start_from,
            web_port=web_port,
            web_host=web_host,
            stop=stop,
        )
    )
