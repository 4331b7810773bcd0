"""`rollout watch-clusters`: the flags; the process is rollout_cli/processes/watch_clusters.py.

Light at import, so that `rollout watch-clusters --help` does not import the Kubernetes
client (tests/cli/test_startup.py).
"""

from __future__ import annotations

import logging.config

import click

from rollout_cli.leadership_options import Leadership, leadership_options
from rollout_cli.options import Context, check_port_free, kafka_options, web_options

DEFAULT_WATCHER_PORT = 6068


@click.command(name="watch-clusters")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig of the management cluster.")
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace of Cluster API clusters to watch (repeatable; default: all namespaces).",
)
@leadership_options("rollout-watch-clusters")
@web_options(DEFAULT_WATCHER_PORT)
@kafka_options
def watch_clusters(
    ctx: Context,
    kubeconfig: str | None,
    context: str | None,
    namespaces: tuple[str, ...],
    leadership: Leadership,
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
) -> None:
    """Publish Cluster API clusters of the management cluster as fleet clusters, until stopped."""
    check_port_free(web_port, web_host)
    from infra.observability import logging_config
    from rollout_cli.processes.signals import run_until_signalled
    from rollout_cli.processes.watch_clusters import run_watch_clusters

    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, prefix = ctx.bootstrap, ctx.prefix
    run_until_signalled(
        lambda stop: run_watch_clusters(
            kubeconfig=kubeconfig,
            context=context,
            namespaces=namespaces,
            bootstrap=bootstrap,
            prefix=prefix,
            stop=stop,
            leadership=leadership,
            web_port=web_port,
            web_host=web_host,
        )
    )
