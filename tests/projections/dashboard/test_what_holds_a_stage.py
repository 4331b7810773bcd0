"""What holds a stage or a cluster, as the dashboard shows it (issue 11): maintenance
windows, health gates, dependencies (blocked) and cluster leases — pure fold and pages."""

from __future__ import annotations

from typing import Any

from projections.dashboard import pages
from projections.dashboard.fleet import FleetView, absorb
from tests.projections.dashboard.test_fleet_view import cluster_event, record, stage, status


def gate(name: str, passed: bool | None, since: float | None = None, message: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "prometheus": {"url": "http://prom:9090", "query": "up", "min": 1},
        "passed": passed,
        "passingSince": since,
        "message": message,
    }


def test_a_stage_shows_its_window_as_the_module_status_has_it() -> None:
    window = {"open": False, "nextOpen": 1_800_000_000.0, "nextOpenAt": "2027-01-15T08:00:00Z", "closesAt": None}
    view = FleetView()
    absorb(view, "module_status", record("shop", status("shop", stage("canary", "Running") | {"window": window})))
    page = pages.module_page(view, "shop")
    assert page is not None
    assert page["status"]["stages"][0]["window"] == window


def test_gates_show_pass_with_when_their_soak_ends_fail_and_pending() -> None:
    gates = [
        gate("errors", True, since=1000.0),
        gate("latency", False, message="p99 0.9 > max 0.5"),
        gate("hook", None, message="unreachable"),
    ]
    view = FleetView()
    absorb(
        view, "module_status", record("shop", status("shop", stage("canary", "Soaking", soak="5m") | {"gates": gates}))
    )
    page = pages.module_page(view, "shop")
    assert page is not None
    shown = page["status"]["stages"][0]["gateStates"]
    assert [(g["name"], g["state"]) for g in shown] == [("errors", "pass"), ("latency", "fail"), ("hook", "pending")]
    assert shown[0]["soakedAt"] == 1300.0 and shown[0]["kind"] == "prometheus"
    assert shown[1]["soakedAt"] is None and shown[1]["message"] == "p99 0.9 > max 0.5"


def test_a_stage_shows_how_many_clusters_wait_for_the_modules_dependencies() -> None:
    view = FleetView()
    doc = status("web", stage("all", "Running", succeeded=1, blocked=3)) | {"dependsOn": ["flux-install"]}
    absorb(view, "module_status", record("web", doc))
    page = pages.module_page(view, "web")
    assert page is not None
    assert page["status"]["stages"][0]["blocked"] == 3
    assert page["status"]["dependsOn"] == ["flux-install"]
    assert page["status"]["stages"][0]["gateStates"] == []


def heartbeat(cluster: str, at: str, seconds: float = 60.0) -> dict[str, Any]:
    return {"type": "ClusterHeartbeat", "cluster": cluster, "leaseSeconds": seconds, "holder": "applier-0", "at": at}


def test_a_heartbeat_gives_the_cluster_a_lease_that_expires_after_its_seconds() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {})))
    changes = absorb(view, "heartbeats", record("eu-1", heartbeat("eu-1", "2026-01-01T00:00:00+00:00", 30.0)))
    assert changes.clusters == {"eu-1"}
    lease = pages.cluster_list(view, pages.Query())["items"][0]["lease"]
    assert lease["heartbeatAt"] == 1_767_225_600.0 and lease["expiresAt"] == 1_767_225_630.0
    assert lease["holder"] == "applier-0" and lease["left"] is False


def test_a_cluster_without_heartbeats_has_no_lease_and_a_tombstone_drops_it() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {})))
    assert pages.lease(view, "eu-1") == {"left": False, "heartbeatAt": None, "expiresAt": None}
    absorb(view, "heartbeats", record("eu-1", heartbeat("eu-1", "2026-01-01T00:00:00+00:00")))
    absorb(view, "heartbeats", record("eu-1", None))
    assert pages.lease(view, "eu-1")["heartbeatAt"] is None


def test_a_heartbeat_without_a_readable_time_is_skipped() -> None:
    view = FleetView()
    assert not absorb(view, "heartbeats", record("eu-1", heartbeat("eu-1", "yesterday")))
    assert view.heartbeats == {}


def test_leave_and_join_show_on_the_cluster_page() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {})))
    absorb(view, "clusters", record("eu-1", {"type": "ClusterCommanded", "cluster": "eu-1", "command": "leave"}))
    page = pages.cluster_page(view, "eu-1")
    assert page is not None and page["lease"]["left"] is True
    absorb(view, "clusters", record("eu-1", {"type": "ClusterCommanded", "cluster": "eu-1", "command": "join"}))
    assert pages.lease(view, "eu-1")["left"] is False


def heartbeats(*clusters: str, at: str, seconds: float = 60.0) -> dict[str, Any]:
    return {"type": "ClusterHeartbeats", "clusters": list(clusters), "leaseSeconds": seconds, "holder": "a-0", "at": at}


def test_an_appliers_heartbeats_event_gives_every_cluster_it_names_its_lease() -> None:
    view = FleetView()
    for name in ("eu-1", "eu-2"):
        absorb(view, "clusters", record(name, cluster_event(name, {})))
    changes = absorb(view, "heartbeats", record("a-0/0", heartbeats("eu-1", "eu-2", at="2026-01-01T00:00:00+00:00")))
    assert changes.clusters == {"eu-1", "eu-2"}
    # the next beat no longer names eu-2: it keeps nothing from this key, eu-1 moves on
    changes = absorb(view, "heartbeats", record("a-0/0", heartbeats("eu-1", at="2026-01-01T00:00:20+00:00")))
    assert changes.clusters == {"eu-1", "eu-2"}
    leases = {item["name"]: item["lease"] for item in pages.cluster_list(view, pages.Query())["items"]}
    assert leases["eu-1"]["heartbeatAt"] == 1_767_225_620.0 and leases["eu-1"]["holder"] == "a-0"
    assert leases["eu-2"]["heartbeatAt"] is None


def test_a_cluster_keeps_its_latest_beat_whichever_key_wrote_it() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {})))
    absorb(view, "heartbeats", record("a-1/0", heartbeats("eu-1", at="2026-01-01T00:00:20+00:00")))
    absorb(view, "heartbeats", record("a-0/0", heartbeats("eu-1", at="2026-01-01T00:00:00+00:00")))  # older
    (item,) = pages.cluster_list(view, pages.Query())["items"]
    assert item["lease"]["heartbeatAt"] == 1_767_225_620.0


def test_a_claimed_cluster_takes_its_lease_from_its_holders_latest_beat() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {})))
    claims = {"type": "HolderClaims", "holder": "a-0", "chunk": 5, "clusters": ["eu-1"], "leaseSeconds": 30.0}
    absorb(view, "heartbeats", record("a-0/5", claims | {"at": "2026-01-01T00:00:00+00:00"}))
    beat = {"type": "HolderHeartbeat", "holder": "a-0", "leaseSeconds": 30.0, "at": "2026-01-01T00:00:10+00:00"}
    changes = absorb(view, "heartbeats", record("a-0", beat))
    assert changes.clusters == {"eu-1"}
    lease = pages.lease(view, "eu-1")
    assert (
        lease["heartbeatAt"] == 1_767_225_610.0 and lease["expiresAt"] == 1_767_225_640.0 and lease["holder"] == "a-0"
    )
    assert "a-0" not in view.heartbeats  # a holder's beat names no cluster
    absorb(view, "heartbeats", record("a-0/5", claims | {"clusters": [], "at": "2026-01-01T00:00:20+00:00"}))
    assert pages.lease(view, "eu-1")["heartbeatAt"] is None  # no longer claimed


def test_an_analysis_shows_its_phase_counts_and_limits_and_a_dry_run_says_so() -> None:
    counted = {"run": 2, "measured": 2, "successful": 1, "failed": 0, "inconclusive": 1, "phase": "Inconclusive"}
    gates = [
        gate("errors", None, message="no samples") | {"count": 3, "inconclusiveLimit": 0, "analysis": counted},
        gate("latency", True, since=1000.0) | {"dryRun": True},
        {"name": "vs-baseline", "compare": {"url": "http://p", "query": 'q{c=~"$clusters"}', "maxRatio": 1.2}},
    ]
    view = FleetView()
    absorb(view, "module_status", record("shop", status("shop", stage("canary", "Soaking") | {"gates": gates})))
    page = pages.module_page(view, "shop")
    assert page is not None
    errors, latency, compared = page["status"]["stages"][0]["gateStates"]
    assert compared["kind"] == "compare" and compared["state"] == "pending"
    assert errors["state"] == "inconclusive" and errors["soakedAt"] is None
    assert errors["analysis"] == {
        "count": 3, "interval": None, "failureLimit": 0, "inconclusiveLimit": 0,
        "run": 2, "measured": 2, "successful": 1, "failed": 0, "inconclusive": 1, "phase": "Inconclusive",
    }  # fmt: skip
    assert latency["dryRun"] is True and latency["analysis"] is None and latency["state"] == "pass"


def test_a_stage_with_waves_shows_the_open_wave_its_members_and_when_the_next_starts() -> None:
    from rollout.wire.decision_reasons import WaveStarted, render

    waves = {"size": 2, "count": 3, "order": "Random", "seed": 7, "delay": "10m", "current": 2, "nextWave": 1600.0}
    view = FleetView()
    absorb(view, "module_status", record("shop", status("shop", stage("all", "Running") | {"waves": waves})))
    for wave, clusters in ((1, ["eu-3", "eu-1"]), (2, ["eu-2", "eu-5"])):
        because = WaveStarted(
            stage="all", wave=wave, waves=3, size=2, order="Random", seed=7, clusters=clusters, members=2, digest="0"
        )
        decision = {
            "id": f"d{wave}",
            "module": "shop",
            "action": "wave-started",
            "reason": render(because),
            "because": because.model_dump(mode="json"),
        }
        absorb(view, "decisions", record("shop", decision))
    page = pages.module_page(view, "shop")
    assert page is not None
    shown = page["status"]["stages"][0]
    assert shown["waves"] == waves
    assert shown["waveMembers"] == {"wave": 2, "clusters": ["eu-2", "eu-5"], "more": 0}
