"""What the cluster-heartbeats topic says, for its readers (`rollout get clusters`, the
dashboard): which clusters each record renews, and per cluster the latest beat for it.

Appliers write, per replica (a *holder*), a `HolderHeartbeat` per beat keyed `<holder>`
and, when the clusters they reach change, a `HolderClaims` per chunk of those clusters keyed
`<holder>/<chunk>`: a claimed cluster's latest beat is its holder's latest record (a claim
renews the holder too). Appliers of the release before claims wrote one `ClusterHeartbeats`
per beat per chunk of clusters, keyed `<applier>/<chunk>`, and a `ClusterHeartbeat` (one
cluster, keyed by it) is still valid input: those renew the clusters they name. The topic
is compacted per key, so a reader sees the latest record of each key, and a cluster's lease
is the latest of those that concern it — a cluster no record names any more keeps no
lease here (the engine gives one its holder dropped a lease more: rollout/engine/leases.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

HOLDER_HEARTBEAT = "HolderHeartbeat"
HOLDER_CLAIMS = "HolderClaims"


def beat_clusters(beat: Mapping[str, Any], key: str | None) -> list[str]:
    """The clusters a heartbeat record names (a ClusterHeartbeats or HolderClaims many, a
    HolderHeartbeat none: it renews its holder's claims)."""
    if beat.get("type") == HOLDER_HEARTBEAT:
        return []
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


def holder_beats(records: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per holder, its latest HolderHeartbeat or HolderClaims record (by `at`)."""
    latest: dict[str, dict[str, Any]] = {}
    stamps: dict[str, float] = {}
    for beat in records.values():
        if not isinstance(beat, dict) or beat.get("type") not in (HOLDER_HEARTBEAT, HOLDER_CLAIMS):
            continue
        holder, at = beat.get("holder"), beat_time(beat)
        if isinstance(holder, str) and at is not None and (holder not in stamps or at > stamps[holder]):
            stamps[holder], latest[holder] = at, beat
    return latest


def latest_beats(records: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per cluster, the latest beat concerning it (by `at`) among the latest record of each
    key: a record naming it, or — named by a claim — its holder's latest record."""
    holders = holder_beats(records)
    latest: dict[str, dict[str, Any]] = {}
    stamps: dict[str, float] = {}
    for key, record in records.items():
        if not isinstance(record, dict):
            continue
        beat = holders.get(str(record.get("holder")), record) if record.get("type") == HOLDER_CLAIMS else record
        at = beat_time(beat)
        if at is None:
            continue
        for name in beat_clusters(record, key):
            if name not in stamps or at > stamps[name]:
                stamps[name], latest[name] = at, beat
    return latest
