"""`rollout up`: the flags; the process — broker, topics, worker, applier, gate runner,
dashboard (and the notifier, given webhooks) as children, a live summary — is
rollout_cli/processes/up.py."""

from __future__ import annotations

import os
from pathlib import Path

import click

from rollout_cli.options import (
    DEFAULT_WEB_HOST,
    Context,
    check_port_free,
    fail,
    free_port,
    kafka_options,
    worker_options,
)

DEFAULT_UP_WEB_PORT = 6066


@click.command()
@click.option("--example", is_flag=True, help="Apply the example fleet in examples/ once everything runs.")
@click.option("--sink", "sink_spec", default="dir:./flux-out", show_default=True, help="Where the applier writes.")
@click.option("--no-simulate-status", is_flag=True, help="Do not report written syncs as succeeded.")
@click.option(
    "--web-port",
    type=click.IntRange(0, 65534),
    default=DEFAULT_UP_WEB_PORT,
    show_default=True,
    help="The worker's /metrics, /healthz, /readyz port; the applier's is the next one. 0 turns both off.",
)
@click.option(
    "--dashboard-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port of the web dashboard (default: a free one, printed); 0 turns it off.",
)
@click.option(
    "--clusters",
    type=click.IntRange(0, 20),
    default=0,
    show_default=True,
    help="Start a local fleet on real Flux: a management cluster and N workload clusters (kube-apiservers, "
    "Flux's source-, kustomize- and helm-controller; built from the Go module proxy on first use, minutes) "
    "and roll its example out to them. Implies the Kubernetes sink; 0: none.",
)
@click.option(
    "--notify",
    "notify_urls",
    multiple=True,
    metavar="URL",
    help="Also run `rollout notifier`, sending the rollouts' stage started, awaiting approval, halted, "
    "rollback and complete decisions as CloudEvents to URL (repeatable).",
)
@click.option(
    "--notifier-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Also run `rollout notifier` with this configuration (webhooks, filters, auth headers, retries: "
    "docs/configuration.md, Notifications); with --notify, the URLs are added to its webhooks.",
)
@worker_options
@kafka_options
def up(
    ctx: Context,
    example: bool,
    clusters: int,
    sink_spec: str,
    no_simulate_status: bool,
    web_port: int,
    dashboard_port: int | None,
    notify_urls: tuple[str, ...],
    notifier_config: Path | None,
    partitions: int,
    tick_interval: float,
) -> None:
    """Everything on one machine: local broker (started if none), topics, worker, applier,
    dashboard.

    The worker and the applier serve /metrics, /healthz and /readyz on 127.0.0.1 (or
    $ROLLOUT_WEB_HOST), ports --web-port and --web-port + 1, and the dashboard its UI on
    --dashboard-port; a port in use is an error before anything starts.
    """
    web_host = os.environ.get("ROLLOUT_WEB_HOST") or DEFAULT_WEB_HOST
    if web_port:
        check_port_free(web_port, web_host, "--web-port: the worker's")
        check_port_free(web_port + 1, web_host, "--web-port + 1: the applier's")
    if dashboard_port is None:
        dashboard_port = free_port(web_host, avoid={web_port, web_port + 1})
    check_port_free(dashboard_port, web_host, "--dashboard-port")
    if clusters and (example or sink_spec != "dir:./flux-out" or no_simulate_status):
        fail("--clusters runs its own example on the Kubernetes sink: drop --example, --sink, --no-simulate-status")
    from rollout_cli.processes.up import run_up

    run_up(
        bootstrap=ctx._bootstrap,
        prefix=ctx.prefix,
        example=example,
        sink_spec=sink_spec,
        simulate=not no_simulate_status,
        partitions=partitions,
        tick_interval=tick_interval,
        web_port=web_port,
        dashboard_port=dashboard_port,
        clusters=clusters,
        notifier_args=_notifier_args(notify_urls, notifier_config),
    )


def _notifier_args(urls: tuple[str, ...], config: Path | None) -> list[str] | None:
    """The notifier's flags, or None when no webhook is given: it then does not run."""
    if not urls and config is None:
        return None
    args = ["--config", str(config.resolve())] if config is not None else []
    return args + [flag for url in urls for flag in ("--webhook", url)]
