"""`rollout get clusters` (rollout_cli/views/tables.py): one truthful state per cluster — READY is
the engine's readiness, so a cluster whose lease expired or that left is not READY."""

from __future__ import annotations

from datetime import UTC, datetime

from rollout_cli.reading.known_clusters import KnownCluster, with_leases
from rollout_cli.views.tables import cluster_row

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()


def known(name: str, *, left: bool = False) -> KnownCluster:
    manifest = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "fleet", "labels": {}},
        "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
    }
    return KnownCluster(manifest=manifest, left=left)


def beat(age: float) -> dict[str, object]:
    at = datetime.fromtimestamp(NOW - age, tz=UTC).isoformat()
    return {"type": "ClusterHeartbeats", "clusters": ["c1"], "leaseSeconds": 60.0, "holder": "applier-0", "at": at}


def row(cluster: KnownCluster, beats: dict[str, object]) -> tuple[str, str]:
    name = cluster.manifest["metadata"]["name"]
    doc = with_leases({name: cluster}, beats, NOW)[name]
    _, _, ready, lease, _ = cluster_row(name, doc, wide=False)
    return ready, lease


def test_a_cluster_whose_lease_expired_is_not_shown_ready() -> None:
    assert row(known("c1"), {"c1": beat(90)}) == ("False", "90s (expired)")


def test_a_cluster_with_a_live_lease_or_none_is_shown_ready() -> None:
    assert row(known("c1"), {"c1": beat(10)}) == ("True", "10s")
    assert row(known("c1"), {}) == ("True", "-")


def test_a_cluster_that_left_is_not_shown_ready() -> None:
    assert row(known("c1", left=True), {"c1": beat(10)}) == ("False", "left")
