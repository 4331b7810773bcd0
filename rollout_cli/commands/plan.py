"""`rollout plan -f FILE|DIR`: the flags and what is printed; the plans — apply's checks,
nothing published — are rollout_cli/publishing/planning.py."""

from __future__ import annotations

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
    from rollout_cli.publishing.planning import plan as plan_modules
    from rollout_cli.views.plan import print_plan
    from rollout_cli.views.values import print_values

    planned = plan_modules(ctx, files, cluster_files)
    for problem in planned.refused:
        click.echo(f"error: {problem}", err=True)
    if not planned.plans:
        what = " that its restriction admits" if planned.refused else ""
        fail(f"no Module or BootstrapModule in the given files{what}")
    for warning in planned.warnings:
        click.echo(f"warning: {warning}", err=True)
    if output != "table":
        emit([p.model_dump() for p in planned.plans], output)
    else:
        for rollout_plan in planned.plans:
            print_plan(rollout_plan)
            print_values(rollout_plan)
    if planned.refused:
        fail(f"{len(planned.refused)} module(s) would be refused by their namespace's ModuleRestriction")
