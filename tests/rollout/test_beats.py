"""Readers of the cluster-heartbeats topic find each cluster's latest beat, whether a record
names one cluster (ClusterHeartbeat) or an applier's many (ClusterHeartbeats)."""

from __future__ import annotations

from rollout.wire.beats import beat_clusters, latest_beats


def test_each_cluster_gets_the_latest_record_naming_it() -> None:
    records = {
        "a-0/0": {"type": "ClusterHeartbeats", "clusters": ["c1", "c2"], "at": "2026-01-01T00:00:20+00:00"},
        "a-1/0": {"type": "ClusterHeartbeats", "clusters": ["c2", "c3"], "at": "2026-01-01T00:00:10+00:00"},
        "c4": {"type": "ClusterHeartbeat", "cluster": "c4", "at": "2026-01-01T00:00:05+00:00"},
        "broken": {"type": "ClusterHeartbeats", "clusters": ["c5"], "at": "yesterday"},
    }
    latest = latest_beats(records)
    assert {name: beat["at"][-14:-6] for name, beat in latest.items()} == {
        "c1": "00:00:20",
        "c2": "00:00:20",
        "c3": "00:00:10",
        "c4": "00:00:05",
    }


def test_a_single_heartbeat_names_its_cluster_or_its_key() -> None:
    assert beat_clusters({"cluster": "c1"}, "k") == ["c1"]
    assert beat_clusters({}, "k") == ["k"]
    assert beat_clusters({"clusters": ["c1", 7, "c2"]}, "k") == ["c1", "c2"]


def test_a_claimed_cluster_gets_its_holders_latest_beat() -> None:
    records = {
        "a-0/3": {
            "type": "HolderClaims",
            "holder": "a-0",
            "chunk": 3,
            "clusters": ["c1"],
            "at": "2026-01-01T00:00:00+00:00",
        },
        "a-0": {"type": "HolderHeartbeat", "holder": "a-0", "leaseSeconds": 60, "at": "2026-01-01T00:05:00+00:00"},
        "a-1/3": {
            "type": "HolderClaims",
            "holder": "a-1",
            "chunk": 3,
            "clusters": ["c2"],
            "at": "2026-01-01T00:01:00+00:00",
        },
        "c2": {"type": "ClusterHeartbeat", "cluster": "c2", "at": "2026-01-01T00:00:30+00:00"},
    }
    latest = latest_beats(records)
    assert latest["c1"]["type"] == "HolderHeartbeat" and latest["c1"]["at"].endswith("00:05:00+00:00")
    assert latest["c2"]["type"] == "HolderClaims"  # a-1 never beat: its claim renewed it last
    assert "a-0" not in latest  # a holder's beat names no cluster
