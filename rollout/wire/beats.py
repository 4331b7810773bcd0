"""What the cluster-heartbeats topic says, for its readers (`rollout get clusters`, the
dashboard): which clusters each record renews, and per cluster the latest record naming it.

Appliers write one `ClusterHeartbeats` per beat per chunk of clusters, keyed
`<applier>/<chunk>`; a `ClusterHeartbeat` (one cluster, keyed by it) is still valid input.
The topic is compacted per key, so a reader sees the latest record of each key, and a
cluster's lease is the latest of those that name it — a cluster an applier stopped
reaching keeps its last beat and ages from there, as the engine's lease does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any


def beat_clusters(beat: Mapping[str, Any], key: str | None) -> list[str]:
    """The clusters a heartbeat record renews (a ClusterHeartbeats names many)."""
    names = beat.get("clusters")
    if isinstance(names, list):
        return [name for name in names if isinstance(name, str)]
    name = beat.get("cluster", key)
    return [name] if isinstance(name, str) else []


def beat_time(beat: Mapping[str, Any]) -> float | None:
    """Epoch seconds of the record's `at` (the applier's clock); None when it has none."""
    stamp = beat.get("at")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def latest_beats(records: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per cluster, the latest heartbeat record (by `at`) among the latest record of each key."""
    latest: dict[str, dict[str, Any]] = {}
    stamps: dict[str, float] = {}
    for key, beat in records.items():
        if not isinstance(beat, dict):
            continue
        at = beat_time(beat)
        if at is None:
            continue
        for name in beat_clusters(beat, key):
            if name not in stamps or at > stamps[name]:
                stamps[name], latest[name] = at, beat
    return latest
