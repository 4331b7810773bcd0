"""The events the benchmarks publish and fold: a fleet of clusters, modules, status reports."""

from __future__ import annotations

from typing import Any

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported


def cluster_name(i: int) -> str:
    return f"b-{i:06d}"


def cluster_event(i: int, labels: dict[str, str]) -> ClusterObserved:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": cluster_name(i), "labels": labels},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest)


def module_event(name: str, rollout: dict[str, Any] | None = None, fleet: dict[int, int] | None = None) -> bytes:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"env": "bench"}},
        "sync": {"source": {"git": {"url": "https://example.com/r", "version": {"tag": "1.0.0"}}}},
    }
    if rollout is not None:
        spec["rollout"] = rollout
    manifest = MANIFEST_ADAPTER.validate_python(
        {"apiVersion": "rollout.dev/v1alpha1", "kind": "Module", "metadata": {"name": name}, "spec": spec}
    )
    return ModuleApplied(module=manifest, fleet=fleet or {}).to_bytes()


def report(cluster: str, module: str, generation: int | None = 1) -> bytes:
    return SyncStatusReported(
        cluster=cluster, module=module, revision="1.0.0", state="succeeded", generation=generation
    ).to_bytes()
