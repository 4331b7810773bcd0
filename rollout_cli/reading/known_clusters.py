"""The fleet as the CLI knows it: the cluster-observations topic folded into a `KnownCluster`
per cluster (its latest manifest as published, and whether it left the rollouts), and the
documents `rollout get clusters` shows — those with each cluster's lease from the
cluster-heartbeats topic. Read by apply, plan, status and get.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra import client


@dataclass(frozen=True)
class KnownCluster:
    """One cluster as the cluster-observations topic holds it: `manifest`, the Cluster
    document of its latest ClusterObserved exactly as published (what `apply`, `plan` and
    `status` validate as a ClusterManifest), and `left`, whether `rollout cluster leave`
    took it out of the rollouts (until `join`; a later observation keeps it, as the engine
    does). Kept apart: the manifest has no room for what the fleet says about it."""

    manifest: dict[str, Any]
    left: bool = False

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.manifest.get("metadata", {}).get("labels") or {})


def clusters_from_records(records: list[client.Record]) -> dict[str, KnownCluster]:
    """Latest facts per cluster from the cluster-observations topic (removals drop it)."""
    clusters: dict[str, KnownCluster] = {}
    for record in records:
        try:
            event = record.json()
        except ValueError:
            continue  # malformed events are the dead-letter topic's business
        if not isinstance(event, dict):
            continue
        if event.get("type") == "ClusterObserved":
            name = event["cluster"]["metadata"]["name"]
            known = clusters.get(name)
            clusters[name] = KnownCluster(event["cluster"], left=known is not None and known.left)
        elif event.get("type") == "ClusterRemoved":
            clusters.pop(str(event.get("name")), None)
        elif event.get("type") == "ClusterCommanded" and event.get("cluster") in clusters:
            name = event["cluster"]
            clusters[name] = replace(clusters[name], left=event.get("command") == "leave")
    return dict(sorted(clusters.items()))


def with_leases(clusters: dict[str, KnownCluster], heartbeats: dict[str, Any], now: float) -> dict[str, Any]:
    """The documents `rollout get clusters` shows: each cluster's manifest with `fleet`:
    `left`, and its lease from its latest heartbeat (cluster-heartbeats topic): `fleet.lease` =
    holder, leaseSeconds, ageSeconds (wall clock now - the heartbeat's `at`) and expired
    (age > leaseSeconds; the engine decides in tick time, a tick later at most)."""
    from datetime import datetime

    shown: dict[str, Any] = {}
    for name, known in clusters.items():
        fleet: dict[str, Any] = {"left": known.left}
        beat = heartbeats.get(name)
        if isinstance(beat, dict) and isinstance(beat.get("at"), str):
            try:
                age = max(now - datetime.fromisoformat(beat["at"]).timestamp(), 0.0)
            except ValueError:
                age = None
            seconds = beat.get("leaseSeconds", 60.0)
            fleet["lease"] = {
                "holder": beat.get("holder"),
                "leaseSeconds": seconds,
                "ageSeconds": None if age is None else round(age, 1),
                "expired": age is None or age > seconds,
            }
        shown[name] = {**known.manifest, "fleet": fleet}
    return shown
