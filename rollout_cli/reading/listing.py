"""`rollout get KIND [NAME] [-l SELECTOR] [-o table|wide|name|json|yaml]`: list what the
topics hold.

    modules             the module-status topic (latest document per module)
    clusters            the cluster-observations topic, folded (known_clusters.py),
                        with leave/join and the lease age from cluster-heartbeats
    remote/proxy        the assemblage topics (latest snapshot per cluster)

`-l` filters by labels, kubectl syntax (selecting.py): a cluster's own labels, and for an
assemblage the labels of the cluster it belongs to. Module statuses carry no labels, so
`get modules -l` is an error rather than an empty list. `-o name` prints `kind/name` lines
(for `xargs`), `-o wide` adds columns (the tables: views/tables.py), json/yaml print the
documents.
"""

from __future__ import annotations

import time
from typing import Any

import click

from rollout.wire.beats import latest_beats
from rollout.wire.status import ModuleStatus
from rollout_cli.options import Context, fail
from rollout_cli.views.output import emit
from rollout_cli.views.tables import print_table

SINGULAR = {"module_status": "module", "clusters": "cluster", "remote": "remoteassemblage", "proxy": "proxyassemblage"}


def get(ctx: Context, *, kind: str, role: str, name: str | None, output: str, selector: str | None) -> None:
    from rollout_cli.reading.known_clusters import clusters_from_records, with_leases

    known = clusters_from_records(ctx.records(ctx.topics.clusters)) if role != "module_status" else {}
    if role == "clusters":
        documents = with_leases(known, latest_beats(ctx.latest(ctx.topics.heartbeats)), time.time())
    elif role == "module_status":  # each read with its model (rollout/wire/status.py)
        from rollout_cli.reading.documents import module_statuses

        documents = module_statuses(ctx.latest(ctx.topics.module_status))
    else:
        documents = ctx.latest(ctx.topics.name(role))
    if selector is not None:
        documents = _selected(documents, role, selector, {name: cluster.labels for name, cluster in known.items()})
    if name is not None:
        if name not in documents:
            fail(f"{SINGULAR[role]} {name} not found", code=1)
        documents = {name: documents[name]}
    if output == "name":
        for key in documents:
            click.echo(f"{SINGULAR[role]}/{key}")
    elif output in ("json", "yaml"):
        emit([_json(d) for d in documents.values()] if name is None else _json(documents[name]), output)
    elif not documents and name is None:
        click.echo(f"no {SINGULAR[role]}s" + (f" match {selector}" if selector is not None else ""), err=True)
    else:
        print_table(role, documents, wide=output == "wide")


def _json(document: Any) -> Any:
    """A document as -o json|yaml prints it: a module status as this rollout reads it."""
    return document.as_json() if isinstance(document, ModuleStatus) else document


def _selected(documents: dict[str, Any], role: str, selector: str, labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    from rollout_cli.reading.selecting import matching, parse_label_selector

    if role == "module_status":
        fail("-l selects clusters and assemblages by cluster labels; module statuses carry no labels")
    try:
        parsed = parse_label_selector(selector)
    except ValueError as error:
        fail(f"-l: {error}")
    return matching(documents, parsed, labels)
