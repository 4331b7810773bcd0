"""`rollout watch-modules`: the flags; the process is rollout_cli/processes/watch_modules.py
(the Module watcher and the status writer, `projections.module_watcher`, as one leader).

Light at import, so that `rollout watch-modules --help` does not import the Kubernetes client.
"""

from __future__ import annotations

import logging.config

import click

from rollout_cli.leadership_options import Leadership, leadership_options
from rollout_cli.options import Context, check_port_free, kafka_options, web_options

DEFAULT_MODULE_WATCHER_PORT = 6069


@click.command(name="watch-modules")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig of the management cluster.")
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace of Module objects to watch (repeatable; default: all namespaces).",
)
@leadership_options("rollout-watch-modules")
@web_options(DEFAULT_MODULE_WATCHER_PORT)
@kafka_options
def watch_modules(
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
    """Turn Module, BootstrapModule, RolloutApproval, RolloutCommand and RolloutBreakGlass objects into intents
    (and ModuleRestrictions into the policy the engine enforces: a module breaking its
    namespace's is refused, not published), and write each module's rollout status back on
    its object, until stopped."""
    check_port_free(web_port, web_host)
    from infra.observability import logging_config
    from rollout_cli.processes.signals import run_until_signalled
    from rollout_cli.processes.watch_modules import run_watch_modules

    logging.config.dictConfig(logging_config(log_format, loglevel))
    bootstrap, prefix = ctx.bootstrap, ctx.prefix
    run_until_signalled(
        lambda stop: run_watch_modules(
            kubeconfig=kubeconfig,
            context=context,
            namespaces=namespaces,
            bootstrap=bootstrap,
            prefix=prefix,
            leadership=leadership,
            stop=stop,
            web_port=web_port,
            web_host=web_host,
        )
    )
