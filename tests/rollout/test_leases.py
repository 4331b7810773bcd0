"""Cluster leases and leave/join (docs/rollout-semantics.md, "Cluster leases"): one
given/when/then test per rule."""

from __future__ import annotations

from tests.rollout.builders import T0, cluster, cluster_command, given, heartbeat, heartbeats, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}


def app(tag: str = "v1"):
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE, concurrency=1))


def test_cluster_without_heartbeats_has_no_lease_and_moves() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.run_for(3600)
    assert fleet.revision("app", "c1") == "v1"
    assert fleet.clusters["c1"].lease is None


def test_expired_lease_makes_a_cluster_not_ready_for_new_moves() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE))
    fleet.send(heartbeat("w1", 60), heartbeat("w2", 60))
    fleet.run_for(61)  # neither renewed: both leases expire
    assert not fleet.clusters["w1"].ready
    fleet.apply(app())
    fleet.succeed("app", "c1")
    assert fleet.category("app", "w1") == "not_ready"
    assert fleet.revision("app", "w1") is None and fleet.revision("app", "w2") is None


def test_expired_lease_never_blocks_a_stage() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), cluster("w1", WAVE), app())
    fleet.send(heartbeat("c2", 60))
    fleet.succeed("app", "c1")
    fleet.run_for(30)
    fleet.send(heartbeat("c1", 60))  # c1 keeps heartbeating, c2 does not
    fleet.run_for(40)  # c2's lease ran out at T0+60; c2 had been assigned and never reported
    assert fleet.category("app", "c2") == "updating"  # an updating cluster stays counted: it finishes
    fleet.succeed("app", "c2")
    assert fleet.revision("app", "w1") == "v1"


def test_lease_expiring_before_the_move_leaves_the_stage_done_without_it() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), cluster("w1", WAVE))
    fleet.send(heartbeat("c2", 30))
    fleet.run_for(31)
    fleet.apply(app())
    fleet.succeed("app", "c1")
    assert fleet.category("app", "c2") == "not_ready"
    assert fleet.revision("app", "w1") == "v1"  # the wave started: c2 did not block the canary stage


def test_heartbeats_returning_bring_the_cluster_back() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE))
    fleet.send(heartbeat("c1", 60))
    fleet.run_for(61)
    fleet.apply(app())
    assert fleet.revision("app", "c1") is None
    fleet.send(heartbeat("c1", 60))
    assert fleet.clusters["c1"].ready
    assert fleet.revision("app", "c1") == "v1"
    assert "readiness" in fleet.last_actions()


def test_lease_expiry_is_explained_in_the_decision() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(heartbeat("c1", 60))
    fleet.run_for(60)
    reasons = [d.reason for d in fleet.last.decisions if d.action == "readiness"]
    assert reasons == ["c1 is not ready: its lease expired (no heartbeat for 60s)"]


def test_heartbeat_renews_the_lease_from_the_latest_tick() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(heartbeat("c1", 60))
    fleet.run_for(50)
    fleet.send(heartbeat("c1", 60))
    fleet.run_for(50)  # T0+100: 50 s after the renewal
    assert fleet.clusters["c1"].ready
    assert fleet.clusters["c1"].lease.expires_at == T0 + 110  # type: ignore[union-attr]


def test_heartbeat_before_any_tick_runs_from_the_first_tick() -> None:
    fleet = given(cluster("c1", CANARY), at=None)
    fleet.send(heartbeat("c1", 60))
    fleet.tick(T0)
    assert fleet.clusters["c1"].lease.expires_at == T0 + 60  # type: ignore[union-attr]
    assert fleet.clusters["c1"].ready


def test_heartbeat_for_an_unknown_cluster_changes_nothing() -> None:
    fleet = given(cluster("c1", CANARY))
    before = fleet.snapshot()
    fleet.send(heartbeat("ghost", 60))
    assert fleet.snapshot() == before


def test_lease_survives_a_new_observation_of_the_cluster() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(heartbeat("c1", 60))
    fleet.run_for(61)
    fleet.send(cluster("c1", {**CANARY, "team": "a"}))
    assert not fleet.clusters["c1"].ready


def test_left_cluster_is_not_ready_whatever_its_heartbeats_say() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY))
    fleet.send(cluster_command("c1", "leave"), heartbeat("c1", 60))
    fleet.apply(app())
    assert fleet.category("app", "c1") == "not_ready"
    assert fleet.revision("app", "c2") == "v1"


def test_leave_keeps_what_the_cluster_runs() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(cluster_command("c1", "leave"))
    assert fleet.revision("app", "c1") == "v1"


def test_joined_cluster_moves_again() -> None:
    fleet = given(cluster("c1", CANARY))
    fleet.send(cluster_command("c1", "leave"))
    fleet.apply(app())
    assert fleet.revision("app", "c1") is None
    fleet.send(cluster_command("c1", "join"))
    assert fleet.revision("app", "c1") == "v1"


def test_leave_with_reply_is_answered_by_partition_zero() -> None:
    fleet = given(cluster("c1", CANARY), app())
    outcome = fleet.send(cluster_command("c1", "leave", reply=True))
    assert [v.accepted for v in outcome.verdicts] == [True]
    refused = fleet.send(cluster_command("ghost", "leave", reply=True))
    assert [v.reason for v in refused.verdicts] == ["cluster 'ghost' not found"]


def test_redelivered_heartbeat_does_not_renew_the_lease_again() -> None:
    fleet = given(cluster("c1", CANARY), app())
    beat = heartbeat("c1", 60)
    fleet.send(beat)
    fleet.run_for(30)
    before = fleet.snapshot()
    outcome = fleet.send(beat)
    assert fleet.snapshot() == before and not outcome.decisions


def test_restart_rebuilds_the_lease_index() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(heartbeat("c1", 60))
    fleet.restart()
    fleet.run_for(61)
    assert not fleet.clusters["c1"].ready


def test_one_heartbeats_event_renews_every_cluster_it_names() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.send(heartbeats("c1", "w1", "ghost", lease_seconds=60))
    fleet.run_for(30)
    fleet.send(heartbeats("c1", lease_seconds=60))  # w1 is no longer reached
    fleet.run_for(40)  # T0+70: c1 renewed at T0+30, w1's lease ran out at T0+60
    assert fleet.clusters["c1"].ready and fleet.clusters["c1"].lease.expires_at == T0 + 90  # type: ignore[union-attr]
    assert not fleet.clusters["w1"].ready and fleet.clusters["w1"].lease.expired  # type: ignore[union-attr]
    assert "ghost" not in fleet.clusters


def test_redelivered_heartbeats_event_renews_nothing_again() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app())
    beat = heartbeats("c1", "w1", lease_seconds=60)
    fleet.send(beat)
    fleet.run_for(30)
    before = fleet.snapshot()
    outcome = fleet.send(beat)
    assert fleet.snapshot() == before and not outcome.decisions


def test_a_cluster_whose_only_module_was_deleted_gets_the_next_once_its_heartbeats_resume() -> None:
    fleet = given(cluster("c1", CANARY), module("first", {}, "v1"))
    fleet.send(heartbeats("c1", lease_seconds=60))
    fleet.succeed("first", "c1")
    fleet.delete("first")  # its assemblage empties; an applier that stops beating for it…
    fleet.run_for(61)
    assert not fleet.clusters["c1"].ready
    fleet.apply(module("second", {}, "v1"))
    assert fleet.revision("second", "c1") is None
    assert fleet.status("second")["waiting"] == "1 cluster not ready"  # not Complete: it runs nothing
    fleet.send(heartbeats("c1", lease_seconds=60))  # …and beats again (it serves the emptied cluster)
    assert fleet.clusters["c1"].ready
    assert fleet.revision("second", "c1") == "v1"
    fleet.succeed("second", "c1")
    assert fleet.phase("second") == "Complete"
