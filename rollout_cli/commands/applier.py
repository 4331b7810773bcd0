"""Commands that run the processes: `topics create`, `worker`, `applier`, `up`, `replay`."""

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rollout_cli.options import (
    DEFAULT_WEB_HOST,
    Context,
    check_port_free,
    fail,
    free_port,
    kafka_options,
    partitions_option,
    replication_option,
    web_options,
)
from rollout_cli.sink_options import sink_timing_options, timings_from

DEFAULT_UP_WEB_PORT = 6066


@click.group()
def topics() -> None:
    """Manage the engine's topics."""


@topics.command("create")
@partitions_option
@replication_option
@kafka_options
def topics_create(ctx: Context, partitions: int, replication_factor: int) -> None:
    """Create every topic with its retention/compaction settings (idempotent)."""
    from infra.topics import ensure_topics_sync

    try:
        created = ensure_topics_sync(ctx.bootstrap, ctx.prefix, partitions, replication=replication_factor)
    except Exception as error:
        fail(str(error))
    for name in created:
        click.echo(f"created {name}")
    click.echo(f"{len(created)} topic(s) created")


def worker_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = partitions_option(command)
    command = click.option(
        "--tick-interval",
        envvar="ROLLOUT_TICK_INTERVAL",
        default=10.0,
        show_default=True,
        type=float,
        help="Seconds between Tick events (env ROLLOUT_TICK_INTERVAL).",
    )(command)
    return command


def stages_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--stages",
        envvar="ROLLOUT_STAGES",
        default="route,decide,assemble",
        show_default=True,
        callback=parse_stages,
        help="Comma-separated stages this process runs (env ROLLOUT_STAGES). Run e.g. `--stages route` "
        "and `--stages decide,assemble` as two processes to use two cores.",
    )(command)


def parse_stages(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    from infra.settings import STAGES

    stages = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    unknown = [stage for stage in stages if stage not in STAGES]
    if unknown or not stages:
        raise click.BadParameter(f"{', '.join(unknown) or 'nothing'}: stages are {', '.join(STAGES)}")
    return stages


@click.command()
@worker_options
@stages_option
@web_options(6066)
@replication_option
@kafka_options
def worker(
    ctx: Context,
    replication_factor: int,
    partitions: int,
    tick_interval: float,
    stages: tuple[str, ...],
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
) -> None:
    """Run the stream processors (router, decider, assembler) until SIGINT/SIGTERM."""
    check_port_free(web_port, web_host)
    from infra.settings import Settings
    from infra.topics import ensure_topics_sync
    from streams.app import run_worker

    try:
        ensure_topics_sync(ctx.bootstrap, ctx.prefix, partitions, replication=replication_factor)
    except Exception as error:
        fail(str(error))
    settings = Settings(
        bootstrap_servers=ctx.bootstrap,
        topic_prefix=ctx.prefix,
        partitions=partitions,
        replication_factor=replication_factor,
        tick_interval=tick_interval,
        web_port=web_port,
        web_host=web_host,
        log_format=log_format,
        stages=stages,
    )
    run_worker(settings, loglevel=loglevel)


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
    from rollout_cli.processes import run_applier_forever

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
    from rollout_cli.processes import run_up

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
    )


@click.command()
@click.option("--check", is_flag=True, help="Exit 1 unless the refold equals what is on the topics.")
@kafka_options
def replay(ctx: Context, check: bool) -> None:
    """Refold the journal and the assignments log; compare with the live topics."""
    from rollout_cli.replaying import replay_and_compare

    report = replay_and_compare(ctx)
    click.echo(report.summary())
    if check and not report.identical:
        sys.exit(1)


COMMANDS: list[click.Command] = [topics, worker, applier, up, replay]
