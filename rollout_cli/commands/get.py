"""`rollout get KIND [NAME]`: the flags; what the topics hold is listed by
rollout_cli/reading/listing.py."""

from __future__ import annotations

import click

from rollout_cli.options import Context, kafka_options

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
    from rollout_cli.reading import listing

    listing.get(ctx, kind=kind, role=GET_KINDS[kind], name=name, output=output, selector=selector)
