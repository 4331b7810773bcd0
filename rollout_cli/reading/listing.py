"""`rollout get KIND [NAME] [-l SELECTOR] [-o table|wide|name|json|yaml]`: list what the
topics hold.

    modules             the module-status topic (latest document per module)
    clusters            the cluster-observations topic, folded (known_clusters.py),
                        with leave/join and the lease age from cluster-heartbeats
    remote/proxy        the assemblage topics (latest snapshot per cluster)

`-l` filters by labels, kubectl syntax (selecting.py): a cluster's own labels, and for an
assemblage the labels of the cluster it belongs to. Module statuses carry no labels, so
`get modules -l` is an error rather than an empty list. `-o name` prints `kind/name` lines
(for `xargs`), `-o wide` adds columns (`print_table`), json/yaml print the documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from rollout.wire.beats import latest_beats
from rollout.wire.status import ModuleStatus
from rollout_cli.options import Context, fail
from rollout_cli.output import emit

SINGULAR = {"module_status": "module", "clusters": "cluster", "remote": "remoteassemblage", "proxy": "proxyassemblage"}


def get(ctx: Context, *, kind: str, role: str, name: str | None, output: str, selector: str | None) -> None:
    from rollout_cli.known_clusters import clusters_from_records, with_leases

    known = clusters_from_records(ctx.records(ctx.topics.clusters)) if role != "module_status" else {}
    if role == "clusters":
        documents = with_leases(known, latest_beats(ctx.latest(ctx.topics.heartbeats)), time.time())
    elif role == "module_status":  # each read with its model (rollout/wire/status.py)
        from rollout_cli.documents import module_statuses

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
    from rollout_cli.selecting import matching, parse_label_selector

    if role == "module_status":
        fail("-l selects clusters and assemblages by cluster labels; module statuses carry no labels")
    try:
        parsed = parse_label_selector(selector)
    except ValueError as error:
        fail(f"-l: {error}")
    return matching(documents, parsed, labels)


def _module_row(name: str, status: ModuleStatus, wide: bool) -> list[str]:
    """Any module-status shape (rollout/wire/status.py): a pending module has no stages,
    kind or target yet."""
    row = [name, status.kind or "-", status.phase, status.target_revision or "-", status.stable_revision or "-"]
    row += [status.current_stage or "-", f"{status.succeeded}/{status.members}"]
    if wide:
        generation = "-" if status.generation is None else str(status.generation)
        row += [status.namespace or "-", generation, str(status.count("failed"))]
        row += [str(status.paused), status.last_decision or (status.held.reason if status.held else "")]
    return row


def _cluster_row(name: str, doc: dict[str, Any], wide: bool) -> list[str]:
    status = doc.get("status", {})
    ready = status.get("controlPlaneReady") and status.get("kubeconfigSecret") and _lease_holds(doc)
    labels = ",".join(f"{k}={v}" for k, v in sorted((doc["metadata"].get("labels") or {}).items()))
    row = [name, doc["metadata"].get("namespace", "default"), "True" if ready else "False", _lease(doc), labels]
    if wide:
        row += [str(bool(status.get("controlPlaneReady"))), str(bool(status.get("kubeconfigSecret")))]
        row += [",".join(f"{k}={v}" for k, v in sorted((doc["metadata"].get("annotations") or {}).items()))]
    return row


def _lease_holds(doc: dict[str, Any]) -> bool:
    """READY is the engine's readiness (ClusterFacts.readiness), not only the observed one:
    a cluster that left, or whose lease expired, is not ready — whatever CAPI says (wide
    output keeps CONTROL PLANE READY and KUBECONFIG SECRET for that)."""
    fleet = doc.get("fleet") or {}
    lease = fleet.get("lease") or {}
    return not fleet.get("left") and not lease.get("expired")


def _lease(doc: dict[str, Any]) -> str:
    """LEASE: `left` after `rollout cluster leave`; the age of the latest heartbeat (and
    `expired` past its lease); `-` when no applier ever heartbeated for the cluster."""
    fleet = doc.get("fleet") or {}
    if fleet.get("left"):
        return "left"
    lease = fleet.get("lease")
    if not lease:
        return "-"
    age = lease.get("ageSeconds")
    shown = "?" if age is None else f"{age:.0f}s"
    return f"{shown} (expired)" if lease.get("expired") else shown


def _assemblage_row(name: str, doc: dict[str, Any], wide: bool) -> list[str]:
    syncs = doc["spec"]["syncs"]
    row = [name, doc["metadata"]["namespace"], str(doc["version"])]
    if wide:
        row += [", ".join(f"{s['module']}@{s['revision']} (generation {s.get('generation') or '-'})" for s in syncs)]
    else:
        row += [", ".join(f"{s['module']}@{s['revision']}" for s in syncs)]
    return row


COLUMNS: dict[str, tuple[list[str], Callable[[str, Any, bool], list[str]]]] = {
    "module_status": (["NAME", "KIND", "PHASE", "TARGET", "STABLE", "STAGE", "PROGRESS"], _module_row),
    "clusters": (["NAME", "NAMESPACE", "READY", "LEASE", "LABELS"], _cluster_row),
    "remote": (["CLUSTER", "NAMESPACE", "VERSION", "SYNCS"], _assemblage_row),
    "proxy": (["CLUSTER", "NAMESPACE", "VERSION", "SYNCS"], _assemblage_row),
}
WIDE_COLUMNS = {
    "module_status": ["NAMESPACE", "GENERATION", "FAILED", "PAUSED", "LAST DECISION"],
    "clusters": ["CONTROL PLANE READY", "KUBECONFIG SECRET", "ANNOTATIONS"],
}


def print_table(role: str, documents: dict[str, Any], *, wide: bool = False) -> None:
    from rich.table import Table

    from rollout_cli.views import console

    headers, row = COLUMNS[role]
    table = Table(*headers, *(WIDE_COLUMNS.get(role, []) if wide else []), box=None)
    for name, doc in documents.items():
        table.add_row(*row(name, doc, wide))
    console.print(table)
