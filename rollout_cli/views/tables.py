"""`rollout get`'s tables: the columns of each kind, `-o wide`'s extra ones, a row per document.

READY of a cluster is the engine's readiness, not only what Cluster API observed: a cluster
that left, or whose lease expired, is not ready (`-o wide` keeps CONTROL PLANE READY and
KUBECONFIG SECRET for that)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table

from rollout_cli.views import terminal

if TYPE_CHECKING:
    from rollout.wire.status import ModuleStatus


def module_row(name: str, status: ModuleStatus, wide: bool) -> list[str]:
    """Any module-status shape (rollout/wire/status.py): a pending module has no stages,
    kind or target yet."""
    row = [name, status.kind or "-", status.phase, status.target_revision or "-", status.stable_revision or "-"]
    row += [status.current_stage or "-", f"{status.succeeded}/{status.members}"]
    if wide:
        generation = "-" if status.generation is None else str(status.generation)
        release = status.release.name if status.release is not None else "-"  # moves with a Release
        row += [release, status.namespace or "-", generation, str(status.count("failed"))]
        row += [str(status.paused), status.last_decision or (status.held.reason if status.held else "")]
    return row


def cluster_row(name: str, doc: dict[str, Any], wide: bool) -> list[str]:
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


def assemblage_row(name: str, doc: dict[str, Any], wide: bool) -> list[str]:
    syncs = doc["spec"]["syncs"]
    row = [name, doc["metadata"]["namespace"], str(doc["version"])]
    if wide:
        row += [", ".join(f"{s['module']}@{s['revision']} (generation {s.get('generation') or '-'})" for s in syncs)]
    else:
        row += [", ".join(f"{s['module']}@{s['revision']}" for s in syncs)]
    return row


COLUMNS: dict[str, tuple[list[str], Callable[[str, Any, bool], list[str]]]] = {
    "module_status": (["NAME", "KIND", "PHASE", "TARGET", "STABLE", "STAGE", "PROGRESS"], module_row),
    "clusters": (["NAME", "NAMESPACE", "READY", "LEASE", "LABELS"], cluster_row),
    "remote": (["CLUSTER", "NAMESPACE", "VERSION", "SYNCS"], assemblage_row),
    "proxy": (["CLUSTER", "NAMESPACE", "VERSION", "SYNCS"], assemblage_row),
}
WIDE_COLUMNS = {
    "module_status": ["RELEASE", "NAMESPACE", "GENERATION", "FAILED", "PAUSED", "LAST DECISION"],
    "clusters": ["CONTROL PLANE READY", "KUBECONFIG SECRET", "ANNOTATIONS"],
}


def print_table(role: str, documents: dict[str, Any], *, wide: bool = False) -> None:
    headers, row = COLUMNS[role]
    table = Table(*headers, *(WIDE_COLUMNS.get(role, []) if wide else []), box=None)
    for name, doc in documents.items():
        table.add_row(*row(name, doc, wide))
    terminal.console.print(table)
