"""`rollout plan -f FILE|DIR`: which clusters each stage would move, nothing published. The
same checks as `apply` (rollout_cli/publishing/applying.py) against the fleet on the topics
or `--clusters` files, then rollout.planning.plan per module."""

from __future__ import annotations

import time

import click

from rollout_cli.options import Context, fail, kafka_options
from rollout_cli.views.output import emit, output_option


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
    from rollout_cli.publishing import applying
    from rollout_cli.reading.known_clusters import clusters_from_records
    from rollout_cli.views.plan import print_plan
    from rollout_cli.views.values import print_values

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
            print_plan(rollout_plan)
            print_values(rollout_plan)
    if refused:
        fail(f"{len(refused)} module(s) would be refused by their namespace's ModuleRestriction")
