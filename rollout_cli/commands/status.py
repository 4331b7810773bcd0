"""Commands that read the projections: `get`, `status`, `history`, `plan`, `dead-letters`."""

import sys
import time

import click

from rollout_cli.gates import Condition, ConditionType
from rollout_cli.options import (
    Context,
    Duration,
    fail,
    kafka_options,
)
from rollout_cli.output import emit, output_option

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


@click.command()
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


@click.command()
@click.argument("module")
@click.option("--watch", "-w", is_flag=True, help="Keep refreshing until Ctrl-C.")
@click.option("--decisions", "decision_count", default=8, show_default=True, help="Latest decisions shown.")
@click.option(
    "--wait",
    "gate",
    is_flag=True,
    help="Wait until --for holds (exit 0), the rollout fails — Halted, RollingBack, RolledBack, "
    "Aborted (exit 1; --for phase=RolledBack waits through RollingBack) — or --timeout passes (exit 2).",
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
        from rollout_cli.documents import module_status
        from rollout_cli.status_values import module_values

        status = module_status(module, document)
        decisions = views.decisions_for(ctx.records(ctx.topics.decisions), module)
        values = module_values(ctx, module, status, decisions)  # a Helm module: its values per cluster
        emit(status.as_json() if values is None else {**status.as_json(), "values": values}, output)
    else:
        views.show_status(ctx, module, watch=watch, decision_count=decision_count)


@click.command()
@click.argument("module", required=False)
@click.option(
    "--verify",
    is_flag=True,
    help="Check the hash chains of the decision records instead (all of them, or those holding "
    "MODULE's records): exit 0 if every record matches, 1 naming the first record that does not.",
)
@output_option
@kafka_options
def history(ctx: Context, module: str | None, verify: bool, output: str) -> None:
    """Every decision taken for MODULE, oldest first, from the decisions topic.

    A module with neither decisions nor a status is an error (exit 1).

    --verify: each decision record carries `seq`, `prev` (the previous record's hash in the
    chain of its journal partition) and `hash` (SHA-256 of the record without `hash`, as JSON
    with sorted keys and no whitespace). Every chain is recomputed record by record and its tip
    compared with the head the decider committed (decide-state). Prints OK per chain with its
    head — record the heads elsewhere to pin the history down — or the first record that does
    not match: its id, its place on the topic and what differs. Records older than the chain
    (written before decisions were hashed) are reported as unchained; the oldest record left
    by retention starts its chain unchecked (said in a note).
    """
    from rollout_cli import views

    if verify:
        from rollout_cli import verifying

        report = verifying.verify_history(ctx, module)
        if module is not None and not report.chains and not report.breaks:
            fail(f"module {module} has no decision records", code=1)
        if output != "table":
            emit(verifying.report_document(report), output)
        else:
            verifying.print_report(report, module)
        if not report.ok:
            sys.exit(1)
        return
    if module is None:
        fail("history needs a MODULE (or --verify, which checks every chain)")
        return
    decisions = views.decisions_for(ctx.records(ctx.topics.decisions), module)
    if not decisions and module not in ctx.latest(ctx.topics.module_status):
        fail(f"module {module} not found", code=1)
    if output != "table":
        emit(decisions, output)
    else:
        views.print_decisions(decisions)


@click.command()
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

    A module or stage that would move no cluster gets a `warning:` line (as in `apply`), and so
    does a dependsOn naming a module that exists nowhere; a dependsOn cycle is refused as
    `apply` refuses it; a module its namespace's ModuleRestriction refuses, an `error:` line
    naming the rule (and exit 2). A Helm module also shows each cluster's values and which layer and policy
    decided each path."""
    from rollout.planning.plan import plan_rollout
    from rollout.planning.surprises import surprises
    from rollout_cli import applying, values_view, views
    from rollout_cli.known_clusters import clusters_from_records

    planned = applying.load(files, outcome="nothing was planned")
    left: set[str] = set()
    # dependsOn: a cycle refused as apply refuses it; without --clusters, against the
    # modules the engine knows too, and a dependency that exists nowhere is warned about
    known_modules = {} if cluster_files else applying.dependencies_from_records(ctx.records(ctx.topics.module_status))
    applying.refuse_cycles(planned, known_modules, outcome="nothing was planned")
    if cluster_files:
        loaded = applying.load(cluster_files, outcome="nothing was planned")
        fleet = [item.manifest for item in loaded if item.manifest.kind == "Cluster"]
        restrictions = applying.restrictions_from_loaded(loaded, {})
    else:
        records = ctx.records(ctx.topics.clusters)
        known = clusters_from_records(records)
        fleet = applying.known_fleet(known)
        left = {name for name, cluster in known.items() if cluster.left}
        restrictions = applying.restrictions_from_records(records)
    refused = applying.violations(planned, applying.restrictions_from_loaded(planned, restrictions))
    for _, problem in refused:
        click.echo(f"error: {problem}", err=True)
    refused_items = [id(item) for item, _ in refused]
    modules = [
        i.manifest for i in planned if i.manifest.kind in ("Module", "BootstrapModule") and id(i) not in refused_items
    ]
    if not modules:
        fail("no Module or BootstrapModule in the given files" + (" that its restriction admits" if refused else ""))
    plans = [plan_rollout(m, fleet, now=time.time(), left=left) for m in modules]  # windows: open now?
    for module, rollout_plan in zip(modules, plans, strict=True):
        for warning in surprises(module, rollout_plan):
            click.echo(f"warning: {warning}", err=True)
    for warning in applying.dependency_warnings(planned, known_modules) if not cluster_files else []:
        click.echo(f"warning: {warning}", err=True)
    if output != "table":
        emit([p.model_dump() for p in plans], output)
    else:
        for rollout_plan in plans:
            views.print_plan(rollout_plan)
            values_view.print_values(rollout_plan)
    if refused:
        fail(f"{len(refused)} module(s) would be refused by their namespace's ModuleRestriction")


@click.command(name="dead-letters")
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
        emit(views.dead_letters_json(letters), output)
    elif not letters:
        click.echo("no dead letters" + (" in that time" if since is not None else ""))
    else:
        views.print_dead_letters(letters)


# --- processes ---------------------------------------------------------------------------


COMMANDS: list[click.Command] = [get, status, history, plan, dead_letters]
