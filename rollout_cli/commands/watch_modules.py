"""`rollout crds` and `rollout watch-modules`: the command lines; the work is in
`rollout_cli.kube_modules` (and `projections.module_watcher`).

Kept light, like rollout_cli/watching.py, so that `rollout --help` does not import the
Kubernetes client.
"""

from __future__ import annotations

import asyncio
import logging.config
import signal

import click

from rollout_cli.leadership_options import Leadership, leadership_options
from rollout_cli.options import Context, check_port_free, kafka_options, web_options

DEFAULT_MODULE_WATCHER_PORT = 6069


@click.command(name="crds")
def crds() -> None:
    """Print the CustomResourceDefinitions of Module, BootstrapModule, RolloutApproval,
    RolloutCommand and ModuleRestriction (`rollout crds | kubectl apply -f -`; the chart
    ships the same)."""
    from projections.crd_schema import crds_yaml

    click.echo(crds_yaml(), nl=False)


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
    """Turn Module, BootstrapModule, RolloutApproval and RolloutCommand objects into intents
    (and ModuleRestrictions into the policy the engine enforces: a module breaking its
    namespace's is refused, not published), and write each module's rollout status back on
    its object, until stopped."""
    check_port_free(web_port, web_host)
    from infra.observability import logging_config
    from rollout_cli.kube_modules import run_watch_modules

    logging.config.dictConfig(logging_config(log_format, loglevel))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_watch_modules(
            kubeconfig=kubeconfig,
            context=context,
            namespaces=namespaces,
            bootstrap=ctx.bootstrap,
            prefix=ctx.prefix,
            leadership=leadership,
            stop=stop,
            web_port=web_port,
            web_host=web_host,
        )

    asyncio.run(main())
