"""`rollout applier`: the flags; the process is rollout_cli/processes/applier.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rollout_cli.options import Context, check_port_free, kafka_options, web_options
from rollout_cli.sink_options import sink_timing_options, timings_from


@click.command()
@click.option(
    "--sink", "sink_spec", envvar="ROLLOUT_SINK", required=True, help="dir:PATH or kubernetes (env ROLLOUT_SINK)."
)
@click.option(
    "--template-dir",
    envvar="ROLLOUT_TEMPLATE_DIR",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of Jinja2 templates overriding the shipped ones (env ROLLOUT_TEMPLATE_DIR).",
)
@click.option(
    "--interval",
    envvar="ROLLOUT_FLUX_INTERVAL",
    default="10m",
    show_default=True,
    help="spec.interval of rendered Flux objects (env ROLLOUT_FLUX_INTERVAL).",
)
@click.option(
    "--group-id",
    envvar="ROLLOUT_APPLIER_GROUP",
    default=None,
    help="Consumer group shared by applier replicas (default: <prefix>rollout-applier).",
)
@click.option(
    "--simulate-status",
    is_flag=True,
    envvar="ROLLOUT_SIMULATE_STATUS",
    help="Report every sync written as succeeded (a simulator: the directory sink cannot see Flux).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Management cluster kubeconfig (--sink kubernetes; default: in-cluster).",
)
@click.option("--context", default=None, help="Context of --kubeconfig.")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Fleet namespaces where kubeconfig secrets live (repeatable; --sink kubernetes).",
)
@click.option(
    "--lease-seconds",
    envvar="ROLLOUT_LEASE_SECONDS",
    type=click.FloatRange(min=0, max=86400),
    default=60.0,
    show_default=True,
    help="Lease of each cluster reached: a heartbeat every third of it (0: no heartbeats) (env ROLLOUT_LEASE_SECONDS).",
)
@sink_timing_options
@web_options(6067)
@kafka_options
def applier(
    ctx: Context,
    sink_spec: str,
    template_dir: Path | None,
    interval: str,
    group_id: str | None,
    simulate_status: bool,
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
    kubeconfig: str | None,
    context: str | None,
    namespaces: tuple[str, ...],
    lease_seconds: float,
    **timings: Any,
) -> None:
    """Turn assemblage snapshots into Flux objects in a sink, until SIGINT/SIGTERM.

    --sink dir:PATH writes YAML files; --sink kubernetes applies them (server-side apply)
    in the management cluster (RemoteAssemblage) and inside each workload cluster through
    its kubeconfig secret (ProxyAssemblage), and reports sync status from the Kustomizations.
    """
    check_port_free(web_port, web_host)
    from rollout_cli.processes.applier import run_applier_forever

    run_applier_forever(
        bootstrap=ctx.bootstrap,
        prefix=ctx.prefix,
        sink_spec=sink_spec,
        template_dir=template_dir,
        interval=interval,
        group_id=group_id or f"{ctx.prefix}rollout-applier",
        report=simulate_status,
        web_port=web_port,
        web_host=web_host,
        log_format=log_format,
        loglevel=loglevel,
        kubeconfig=kubeconfig,
        context=context,
        namespaces=namespaces,
        timings=timings_from(timings),
        lease_seconds=lease_seconds,
    )
