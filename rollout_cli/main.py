"""`rollout`: the command line — kubectl-shaped verbs over the engine's Kafka topics.

Users publish intents (`apply`, `delete`, `pause`, `approve`, ...), inspect projections
(`get`, `status`, `history`), and run the processes (`worker`, `applier`, `up`, `kafka`).
Every command that talks to Kafka takes `--bootstrap-servers` / ROLLOUT_BOOTSTRAP_SERVERS
and `--topic-prefix` / ROLLOUT_TOPIC_PREFIX; without a bootstrap server it uses the local
broker `rollout kafka start` (or `rollout up`) recorded.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rollout_cli.clusters import cluster_group
from rollout_cli.dashboarding import dashboard
from rollout_cli.gates import Condition, ConditionType
from rollout_cli.kafka import kafka as kafka_group
from rollout_cli.module_watching import crds, watch_modules
from rollout_cli.options import (
    DEFAULT_WEB_HOST,
    Context,
    Duration,
    check_port_free,
    fail,
    free_port,
    kafka_options,
    partitions_option,
    replication_option,
    web_options,
)
from rollout_cli.output import emit, output_option
from rollout_cli.sink_options import sink_timing_options, timings_from
from rollout_cli.values_reporting import report_values
from rollout_cli.verdicts import Wait, verdict_options
from rollout_cli.watching import watch_clusters

# `rollout --help` must start fast (tests/cli/test_startup.py): this module imports only
# click and the light option helpers. The domain (pydantic models, CRD schemas), the Kafka
# client, rich and the Kubernetes client are imported inside the commands that use them.

PACKAGE = "rollout-engine"
DEFAULT_UP_WEB_PORT = 6066


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=PACKAGE, prog_name="rollout", message="%(prog)s %(version)s")
def cli() -> None:
    """Staged, explainable rollouts of Flux syncs across fleets of Kubernetes clusters."""


cli.add_command(kafka_group)
cli.add_command(watch_clusters)
cli.add_command(dashboard)
cli.add_command(cluster_group)
cli.add_command(watch_modules)
cli.add_command(crds)
cli.add_command(report_values)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(rollout completion bash)"     (e.g. in ~/.bashrc)
    zsh:   eval "$(rollout completion zsh)"      (e.g. in ~/.zshrc)
    fish:  rollout completion fish > ~/.config/fish/completions/rollout.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    assert completion_class is not None  # click ships bash, zsh and fish
    click.echo(completion_class(cli, {}, "rollout", "_ROLLOUT_COMPLETE").source())


# --- intents -----------------------------------------------------------------------------


@cli.command()
@click.option("-f", "--filename", "files", multiple=True, required=True, type=click.Path(exists=True))
@verdict_options
@kafka_options
def apply(ctx: Context, files: tuple[str, ...], wait: Wait) -> None:
    """Publish Module, BootstrapModule and Cluster manifests (files or directories).

    Every document is validated and every event's size checked against its topic's limit
    first; if anything is wrong nothing is published and every problem is listed with its
    file, document and field. Then all events are published in one Kafka transaction (all
    or nothing), with a warning for a module or stage that matches no known cluster, and it
    waits for the engine's verdict on each module: created, configured or unchanged, or
    refused (exit 1). Clusters are created, configured or unchanged against the fleet.
    """
    from infra import client
    from rollout_cli import applying
    from rollout_cli.verdicts import awaiting, report_apply

    prepared = applying.prepare(ctx, applying.load(files))
    for warning in prepared.warnings:
        click.echo(f"warning: {warning}", err=True)
    modules = [(i.description, i.event.id) for i in prepared.intents if i.role == "intents"]
    publishing = applying.publish(ctx, prepared)
    try:
        verdicts = client.run(awaiting(ctx, wait, [event_id for _, event_id in modules], publishing))
    except Exception as error:
        publishing.close()  # not awaited if the verdicts topic could not be read first: nothing was sent
        if not prepared.committed:
            fail(f"nothing was applied: {error}")
        fail(f"applied, but cannot read the engine's verdicts at {ctx.bootstrap}: {error}")
    for cluster, change in prepared.cluster_changes.items():
        click.echo(f"{cluster} {change}")
    report_apply(modules, verdicts, wait)


@cli.command()
@click.argument("kind", type=click.Choice(["module", "bootstrapmodule", "cluster"]))
@click.argument("name")
@verdict_options
@kafka_options
def delete(ctx: Context, kind: str, name: str, wait: Wait) -> None:
    """Delete a module, bootstrapmodule or cluster (its syncs are pruned everywhere).

    Waits for the engine's verdict: an unknown name is an error (exit 1)."""
    from rollout.events import ClusterRemoved, ModuleDeleted
    from rollout_cli.verdicts import decide, request

    check_name(name)
    if kind == "cluster":
        event: Any = ClusterRemoved(name=name, reply=True if wait.enabled else None)
        topic = ctx.topics.clusters
    else:
        event = ModuleDeleted(kind="Module" if kind == "module" else "BootstrapModule", name=name)
        topic = ctx.topics.intents
    verdicts = request(ctx, wait, topic=topic, messages=[(name, event.to_bytes())], ids=[event.id])
    decide(f"{kind}/{name}: delete", verdicts, event.id, wait)


def check_name(name: str) -> None:
    from rollout.manifests import check_dns1123_label

    try:
        check_dns1123_label(name)
    except ValueError as error:
        fail(str(error))


def command_verb(verb: str, help_text: str) -> None:
    @cli.command(name=verb, help=help_text)
    @click.argument("module")
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, wait: Wait) -> None:
        from rollout.events import RolloutCommanded
        from rollout_cli import views

        check_name(module)
        event = RolloutCommanded(module=module, command=verb, user=views.current_user())  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb}")


def ask_engine(ctx: Context, wait: Wait, event: Any, key: str, what: str) -> None:
    """Publish intent `event` and report the engine's verdict on it (rollout_cli/verdicts.py)."""
    from rollout_cli.verdicts import decide, request

    verdicts = request(ctx, wait, topic=ctx.topics.intents, messages=[(key, event.to_bytes())], ids=[event.id])
    decide(what, verdicts, event.id, wait)


command_verb("pause", "Stop making new moves in MODULE's rollout until `resume`.")
command_verb("resume", "Resume a paused (or halted) rollout.")
command_verb("abort", "Stop MODULE's rollout where it stands (phase Aborted) until a new revision.")
command_verb("rollback", "Return every cluster on MODULE's target revision to its stable revision.")


@cli.command()
@click.argument("module")
@click.option("--stage", required=True, help="The stage to approve.")
@verdict_options
@kafka_options
def approve(ctx: Context, module: str, stage: str, wait: Wait) -> None:
    """Approve STAGE of MODULE's rollout to start."""
    from rollout.events import RolloutCommanded
    from rollout_cli import views

    check_name(module)
    event = RolloutCommanded(module=module, command="approve", stage=stage, user=views.current_user())
    ask_engine(ctx, wait, event, module, f"module/{module}: approve stage {stage}")


def pin_verb(verb: str, help_text: str) -> None:
    @cli.command(name=verb, help=help_text)
    @click.argument("module")
    @click.option("--cluster", required=True)
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, cluster: str, wait: Wait) -> None:
        from rollout.events import RolloutCommanded
        from rollout_cli import views

        check_name(module)
        check_name(cluster)
        event = RolloutCommanded(module=module, command=verb, cluster=cluster, user=views.current_user())  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb} {cluster}")


pin_verb("pin", "Hold CLUSTER at its current revision of MODULE, whatever happens.")
pin_verb("unpin", "Let CLUSTER follow MODULE's rollout again.")


@cli.command(name="report-status")
@click.option("--cluster", required=True)
@click.option("--module", required=True)
@click.option("--revision", required=True)
@click.option("--state", required=True, type=click.Choice(["succeeded", "failed", "updating"]))
@click.option("--message", default=None)
@click.option(
    "--generation",
    type=click.IntRange(min=1),
    default=None,
    help="The module generation the report answers (as appliers send it); without it the report "
    "is matched by revision only.",
)
@verdict_options
@kafka_options
def report_status(
    ctx: Context,
    cluster: str,
    module: str,
    revision: str,
    state: str,
    message: str | None,
    generation: int | None,
    wait: Wait,
) -> None:
    """Publish a sync status, as an applier does (for simulators and tests).

    Waits for the engine's verdict: a report about an unknown cluster or module, or not
    about the assignment in force, is an error (exit 1) naming why."""
    from rollout.events import SyncStatusReported
    from rollout_cli.verdicts import decide, request

    check_name(cluster)
    check_name(module)
    event = SyncStatusReported(
        cluster=cluster,
        module=module,
        revision=revision,
        state=state,  # type: ignore[arg-type]
        message=message,
        generation=generation,
        reply=True if wait.enabled else None,
    )
    verdicts = request(ctx, wait, topic=ctx.topics.status, messages=[(cluster, event.to_bytes())], ids=[event.id])
    decide(f"{cluster}/{module}: {state} at {revision}", verdicts, event.id, wait)


# --- reading projections -----------------------------------------------------------------

GET_KINDS = {
    "modules": "module_status",
    "module": "module_status",
    "clusters": "clusters",
    "cluster": "clusters",
    "remoteassemblages": "remote",
    "remoteassemblage": "remote",
    "proxyassemblages": "proxy",
    "proxyassemblage": "proxy",
}


@cli.command()
@click.argument("kind", type=click.Choice(sorted(GET_KINDS)))
@click.argument("name", required=False)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "name", "yaml", "json"]),
    default="table",
    show_default=True,
    help="wide: more columns; name: kind/name lines; json or yaml: the documents.",
)
@click.option(
    "-l",
    "--selector",
    default=None,
    help="Only clusters (or assemblages of clusters) whose labels match, kubectl syntax: "
    "env=prod,ring!=canary,region in (eu,us),!legacy.",
)
@kafka_options
def get(ctx: Context, kind: str, name: str | None, output: str, selector: str | None) -> None:
    """List modules, clusters, remoteassemblages or proxyassemblages (from the topics)."""
    from rollout_cli import listing

    listing.get(ctx, kind=kind, role=GET_KINDS[kind], name=name, output=output, selector=selector)


@cli.command()
@click.argument("module")
@click.option("--watch", "-w", is_flag=True, help="Keep refreshing until Ctrl-C.")
@click.option("--decisions", "decision_count", default=8, show_default=True, help="Latest decisions shown.")
@click.option(
    "--wait",
    "gate",
    is_flag=True,
    help="Wait until --for holds (exit 0), the rollout fails — Halted, RollingBack, RolledBack, "
    "Aborted (exit 1) — or --timeout passes (exit 2).",
)
@click.option(
    "--for",
    "condition",
    type=ConditionType(),
    default="phase=Complete",
    show_default=True,
    help="With --wait: the condition, phase=<phase>.",
)
@click.option("--timeout", type=Duration(), default="10m", show_default=True, help="With --wait: how long.")
@output_option
@kafka_options
def status(
    ctx: Context,
    module: str,
    watch: bool,
    decision_count: int,
    gate: bool,
    condition: Condition,
    timeout: float,
    output: str,
) -> None:
    """Phase, target/stable revisions, per-stage progress and the latest decisions.

    A module with no status on the module-status topic is an error (exit 1), unless --watch
    waits for it to appear. -o json|yaml prints the module-status document. --wait gates a
    CI pipeline on the rollout: exit 0 / 1 / 2 (rollout_cli/gates.py).
    """
    from rollout_cli import views

    if gate:
        from rollout_cli.gates import gate as wait_for_rollout

        wait_for_rollout(ctx, module, condition, timeout, output)
    elif output != "table":
        document = ctx.latest(ctx.topics.module_status).get(module)
        if document is None:
            fail(f"module {module} not found", code=1)
        from rollout_cli.status_values import module_values

        decisions = views.decisions_for(ctx.records(ctx.topics.decisions), module)
        values = module_values(ctx, module, document, decisions)  # a Helm module: its values per cluster
        emit(document if values is None else {**document, "values": values}, output)
    else:
        views.show_status(ctx, module, watch=watch, decision_count=decision_count)


@cli.command()
@click.argument("module")
@output_option
@kafka_options
def history(ctx: Context, module: str, output: str) -> None:
    """Every decision taken for MODULE, oldest first, from the decisions topic.

    A module with neither decisions nor a status is an error (exit 1).
    """
    from rollout_cli import views

    decisions = views.decisions_for(ctx.records(ctx.topics.decisions), module)
    if not decisions and module not in ctx.latest(ctx.topics.module_status):
        fail(f"module {module} not found", code=1)
    if output != "table":
        emit(decisions, output)
    else:
        views.print_decisions(decisions)


@cli.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    type=click.Path(exists=True),
    help="Module/BootstrapModule manifests to plan (nothing is published).",
)
@click.option(
    "--clusters",
    "cluster_files",
    multiple=True,
    type=click.Path(exists=True),
    help="Plan against these Cluster manifests instead of the fleet on the topics.",
)
@output_option
@kafka_options
def plan(ctx: Context, files: tuple[str, ...], cluster_files: tuple[str, ...], output: str) -> None:
    """Show which clusters each stage would move, in order and in batches, without publishing.

    A module or stage that would move no cluster gets a `warning:` line (as in `apply`). A
    Helm module also shows each cluster's values and which layer and policy decided each path."""
    from rollout.plan import plan_rollout
    from rollout.surprises import surprises
    from rollout_cli import applying, values_view, views

    manifests = [item.manifest for item in applying.load(files, outcome="nothing was planned")]
    if cluster_files:
        loaded = applying.load(cluster_files, outcome="nothing was planned")
        fleet = [item.manifest for item in loaded if item.manifest.kind == "Cluster"]
    else:
        fleet = applying.known_fleet(views.clusters_from_records(ctx.records(ctx.topics.clusters)))
    modules = [m for m in manifests if m.kind != "Cluster"]
    if not modules:
        fail("no Module or BootstrapModule in the given files")
    plans = [plan_rollout(m, fleet, now=time.time()) for m in modules]  # windows: open now?
    for module, rollout_plan in zip(modules, plans, strict=True):
        for warning in surprises(module, rollout_plan):
            click.echo(f"warning: {warning}", err=True)
    if output != "table":
        emit([p.model_dump() for p in plans], output)
    else:
        for rollout_plan in plans:
            views.print_plan(rollout_plan)
            values_view.print_values(rollout_plan)


@cli.command(name="dead-letters")
@click.option(
    "--since",
    type=Duration(),
    default=None,
    help="Only inputs rejected within this long before now (30s, 15m, 1h30m, 2d).",
)
@output_option
@kafka_options
def dead_letters(ctx: Context, since: float | None, output: str) -> None:
    """Inputs the engine rejected, oldest first: when, the stage that refused, where the input
    was (topic[partition]@offset), its key and size, and the reason."""
    import time

    from rollout_cli import views

    cutoff = time.time() - since if since is not None else None
    letters = views.dead_letters_from_records(ctx.records(ctx.topics.dead_letters), since=cutoff)
    if output != "table":
        emit(letters, output)
    elif not letters:
        click.echo("no dead letters" + (" in that time" if since is not None else ""))
    else:
        views.print_dead_letters(letters)


# --- processes ---------------------------------------------------------------------------


@cli.group()
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


@cli.command()
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


@cli.command()
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


@cli.command()
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
@worker_options
@kafka_options
def up(
    ctx: Context,
    example: bool,
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
    )


@cli.command()
@click.option("--check", is_flag=True, help="Exit 1 unless the refold equals what is on the topics.")
@kafka_options
def replay(ctx: Context, check: bool) -> None:
    """Refold the journal and the assignments log; compare with the live topics."""
    from rollout_cli.replaying import replay_and_compare

    report = replay_and_compare(ctx)
    click.echo(report.summary())
    if check and not report.identical:
        sys.exit(1)


if __name__ == "__main__":
    cli()
