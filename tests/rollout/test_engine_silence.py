"""The engine's own silence does not count against leases (docs/rollout-semantics.md,
"Cluster leases", rule "The engine's own silence"): a Tick counts at most LEASE_TICK_STEP
of its step toward leases (clock.py), so a worker stopped or held longer than a lease —
its first tick after it routed before the beats that kept coming — expires no lease; an
applier that really died still runs out one lease after the ticks resume. One
given/when/then test per rule."""

from __future__ import annotations

from typing import Any

from rollout.engine.clock import LEASE_TICK_STEP
from rollout.engine.state import Lease
from tests.rollout.builders import T0, cluster, given, heartbeat, module, stage, tick
from tests.rollout.test_holder_leases import Replica

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}


def app() -> Any:
    return module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE))


def test_a_clock_gap_longer_than_the_lease_expires_no_lease() -> None:
    """Given clusters on their own leases and on a holder's, renewed 10 s before the worker
    stops; when its first tick after 65 s — and then after an hour — comes before their
    beats; then no lease expired, no cluster left the rollout, and the beats renew them."""
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), *a.reach("w2"))
    fleet.send(heartbeat("c1"), heartbeat("w1"), a.beat())
    fleet.apply(app())
    fleet.run_for(10)
    for gap in (65, 3600):
        fleet.wait(gap)  # one tick: the worker was stopped this long
        assert all(fleet.clusters[name].ready for name in ("c1", "w1", "w2")), gap
        assert not fleet.clusters["c1"].lease.expired and not fleet.state["holders"]["a-0"].expired  # type: ignore[union-attr]
        assert "readiness" not in fleet.actions("app")
        fleet.send(heartbeat("c1"), heartbeat("w1"), a.beat())  # the beats routed behind it
        fleet.run_for(10)
    assert fleet.clusters["c1"].lease.expires_at == fleet.now - 10 + 60  # type: ignore[union-attr]


def test_a_cluster_whose_heartbeats_stopped_goes_offline_one_lease_after_ticks_resume() -> None:
    """Given w1's own lease and a-0's (claiming w2), renewed at T0; when the engine is silent
    ten minutes and no beat comes after it; then both are ready until a lease of live time
    has passed — LEASE_TICK_STEP of the gap and the rest after the ticks resume — and not
    ready from then, with the lease's reason."""
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), *a.reach("w2"))
    fleet.send(heartbeat("w1"), a.beat())
    fleet.apply(app())
    fleet.wait(600)  # the gap: counts LEASE_TICK_STEP
    fleet.run_for(60 - LEASE_TICK_STEP - 1)
    assert fleet.clusters["w1"].ready and fleet.clusters["w2"].ready
    fleet.run_for(1)
    assert not fleet.clusters["w1"].ready and not fleet.clusters["w2"].ready
    assert fleet.clusters["w1"].lease.expired and fleet.state["holders"]["a-0"].expired  # type: ignore[union-attr]
    assert sorted(d.reason for d in fleet.last.decisions if d.action == "readiness") == [
        "w1 is not ready: its lease expired (no heartbeat for 60s)",
        "w2 is not ready: its lease expired (no heartbeat for 60s)",
    ]


def test_a_far_future_tick_expires_no_lease_and_ticks_after_it_count_in_full() -> None:
    """Given a lease of 90 s renewed at T0; when a tick a day ahead comes (capped: it moves
    the clock an hour a tick), twice; then each counts LEASE_TICK_STEP, ordinary ticks after
    them count in full, and the lease runs out one lease of live time after T0."""
    fleet = given(cluster("w1", WAVE), heartbeat("w1", 90))
    fleet.tick(T0 + 86_400)
    assert fleet.now == T0 + 3600 and fleet.clusters["w1"].ready
    fleet.tick(T0 + 86_400)  # another: the clock moves a second hour, leases another step
    assert fleet.now == T0 + 7200 and fleet.clusters["w1"].ready
    fleet.run_for(90 - 2 * LEASE_TICK_STEP - 1)
    assert fleet.clusters["w1"].ready
    fleet.run_for(1)
    assert not fleet.clusters["w1"].ready


def test_a_gap_is_counted_once_when_its_tick_is_redelivered_and_across_a_restart() -> None:
    """Given a lease renewed at T0; when the gap's tick is redelivered and the engine
    restarts from its stored state; then live time is where one engine alone puts it."""
    fleet = given(cluster("w1", WAVE), heartbeat("w1"))
    gap = tick(T0 + 600)
    fleet.send(gap, gap)
    fleet.restart()
    assert fleet.clock["paused"] == 600 - LEASE_TICK_STEP
    fleet.run_for(60 - LEASE_TICK_STEP - 1)
    assert fleet.clusters["w1"].ready
    fleet.restart()  # cold indexes: rebuilt from the stored live expiries
    fleet.run_for(1)
    assert not fleet.clusters["w1"].ready


def test_a_lease_written_without_a_live_expiry_runs_out_at_its_expiry_or_later() -> None:
    """Given w1's lease as a release before live time wrote it (no `expires_live`); when the
    engine is restarted and its clock has a gap; then it is read as expiring at `expires_at`
    in live time — the gap does not count against it either (and it never runs out early:
    live time is never ahead of the engine's)."""
    fleet = given(cluster("w1", WAVE), heartbeat("w1"))
    facts = fleet.clusters["w1"]
    old = Lease(seconds=60, renewed_at=T0, expires_at=T0 + 60)
    assert "expires_live" not in old.model_dump(mode="json")
    fleet.clusters["w1"] = facts.model_copy(update={"lease": old})
    fleet.restart()
    fleet.wait(65)  # a gap: counts LEASE_TICK_STEP
    assert fleet.clusters["w1"].ready
    fleet.run_for(60 - LEASE_TICK_STEP - 1)
    assert fleet.clusters["w1"].ready
    fleet.run_for(1)
    assert not fleet.clusters["w1"].ready
