"""Leases per applier replica — a *holder* (docs/rollout-semantics.md, "Cluster leases"):
appliers claim the clusters they reach when that set changes (HolderClaims, per chunk) and
beat once per lease/3 for themselves (HolderHeartbeat); a cluster's readiness follows its
holders' leases. One given/when/then test per rule, and the cost of a beat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rollout.engine.core import RolloutEngine
from rollout.engine.state import ENGINE_MAPPINGS, Lease
from rollout.wire.events import HolderClaims, HolderHeartbeat, Tick, claim_chunk
from streams.state import PartitionState
from tests.rollout.builders import (
    AT,
    T0,
    cluster,
    cluster_command,
    given,
    heartbeat,
    module,
    next_id,
    observed,
    stage,
)

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}


def app(tag: str = "v1") -> Any:
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE, concurrency=1))


class Replica:
    """An applier replica as the engine hears it: its claims (only the chunks that change)
    and its beats."""

    def __init__(self, holder: str, lease_seconds: float = 60.0) -> None:
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.reached: set[str] = set()

    def reach(self, *clusters: str) -> list[HolderClaims]:
        """It now reaches exactly `clusters`: a claim for every chunk that changed."""
        now = set(clusters)
        chunks = sorted({claim_chunk(name) for name in now ^ self.reached})
        self.reached = now
        return [
            HolderClaims(
                id=next_id(),
                at=AT,
                holder=self.holder,
                chunk=chunk,
                clusters=sorted(name for name in now if claim_chunk(name) == chunk),
                lease_seconds=self.lease_seconds,
            )
            for chunk in chunks
        ]

    def beat(self) -> HolderHeartbeat:
        return HolderHeartbeat(id=next_id(), at=AT, holder=self.holder, lease_seconds=self.lease_seconds)


def test_a_holders_clusters_are_ready_while_it_beats() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(), *a.reach("c1", "w1"))
    for _ in range(10):
        fleet.run_for(20)
        fleet.send(a.beat())
    assert fleet.clusters["c1"].ready and fleet.clusters["w1"].ready
    assert fleet.state["holders"]["a-0"].expires_at == T0 + 200 + 60
    assert fleet.revision("app", "c1") == "v1"


def test_a_holder_that_stops_beating_makes_its_clusters_not_ready_together() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), *a.reach("w1", "w2"))
    fleet.run_for(30)
    fleet.send(a.beat())
    fleet.run_for(59)  # T0+89: renewed at T0+30, not yet run out
    assert fleet.clusters["w1"].ready and fleet.clusters["w2"].ready
    fleet.run_for(1)  # T0+90: one tick expires the holder, and both its clusters
    assert not fleet.clusters["w1"].ready and not fleet.clusters["w2"].ready
    assert fleet.clusters["c1"].ready  # claimed by no holder: no lease applies
    fleet.apply(app())
    fleet.succeed("app", "c1")
    assert fleet.category("app", "w1") == "not_ready" and fleet.revision("app", "w1") is None


def test_a_holder_lease_expiry_is_explained_in_the_decision_never_a_failure() -> None:
    a = Replica("a-0", lease_seconds=60)
    fleet = given(cluster("c1", CANARY), app(), *a.reach("c1"))
    fleet.run_for(60)
    reasons = [d.reason for d in fleet.last.decisions if d.action == "readiness"]
    assert reasons == ["c1 is not ready: its lease expired (no heartbeat for 60s)"]
    assert "failed" not in fleet.actions("app")


def test_a_beat_bringing_a_holder_back_makes_its_clusters_ready_and_move() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), *a.reach("c1", "w1"))
    fleet.run_for(61)
    fleet.apply(app())
    assert fleet.revision("app", "c1") is None
    fleet.send(a.beat())
    assert fleet.clusters["c1"].ready and fleet.clusters["w1"].ready
    assert fleet.revision("app", "c1") == "v1"
    assert "readiness" in fleet.last_actions()


def test_a_holders_beat_rewrites_its_lease_and_no_cluster_facts() -> None:
    a = Replica("a-0")
    names = [f"c{i}" for i in range(50)]
    fleet = given(*(cluster(name, CANARY) for name in names), app(), *a.reach(*names))
    fleet.run_for(20)
    before = fleet.snapshot()
    outcome = fleet.send(a.beat())
    after = fleet.snapshot()
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"holders"} and not outcome.decisions and not outcome.assignments
    assert after["holders"]["a-0"]["expires_at"] == T0 + 20 + 60


def test_a_cluster_handed_to_another_holder_stays_ready_whichever_word_comes_first() -> None:
    for claim_first in (True, False):
        a, b = Replica("a-0"), Replica("b-0")
        fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), app(), *a.reach("c1", "c2"))
        fleet.send(b.beat())
        gained, dropped = b.reach("c2"), a.reach("c1")  # the rebalance: c2 moves from a-0 to b-0
        fleet.send(*(gained + dropped if claim_first else dropped + gained))
        assert fleet.clusters["c2"].ready and not fleet.last.decisions
        for _ in range(5):  # only b-0 is left beating
            fleet.run_for(20)
            fleet.send(b.beat())
        assert fleet.clusters["c2"].ready, f"claim first: {claim_first}"
        assert not fleet.clusters["c1"].ready  # a-0 stopped: its cluster ran out with it
        assert fleet.state["claims"]["c2"].holders == ["b-0"]


def test_a_cluster_no_holder_claims_any_more_runs_out_one_lease_after_its_release() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a.reach("c1", "c2"))
    fleet.run_for(30)
    fleet.send(*a.reach("c1"))  # c2 no longer reached (a failing write, or handed over)
    lease = fleet.clusters["c2"].lease
    assert lease is not None and not lease.claimed and lease.expires_at == T0 + 90
    fleet.run_for(40)
    fleet.send(a.beat())  # a-0 lives on, but no longer for c2
    fleet.run_for(30)  # T0+100
    assert fleet.clusters["c1"].ready and not fleet.clusters["c2"].ready
    fleet.send(*a.reach("c1", "c2"))  # reached again
    assert fleet.clusters["c2"].ready


def test_claims_before_the_holders_first_beat_renew_it() -> None:
    a = Replica("a-0", lease_seconds=30)
    fleet = given(cluster("c1", CANARY), *a.reach("c1"))
    assert fleet.state["holders"]["a-0"].expires_at == T0 + 30
    fleet.run_for(20)
    fleet.send(a.beat())
    fleet.run_for(20)
    assert fleet.clusters["c1"].ready


def test_a_beat_before_any_claim_renews_the_holder_and_touches_no_cluster() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY))
    fleet.send(a.beat())
    assert fleet.clusters["c1"].lease is None
    fleet.run_for(20)
    fleet.send(*a.reach("c1"))
    fleet.run_for(50)  # T0+70: the claim at T0+20 renewed a-0 until T0+80
    assert fleet.clusters["c1"].ready


def test_a_claim_of_a_cluster_not_yet_observed_holds_once_it_is() -> None:
    a = Replica("a-0")
    fleet = given(*a.reach("c1"))
    assert "c1" not in fleet.clusters
    fleet.send(cluster("c1", CANARY))
    lease = fleet.clusters["c1"].lease
    assert lease is not None and lease.claimed and fleet.clusters["c1"].ready
    fleet.run_for(61)
    assert not fleet.clusters["c1"].ready


def test_a_removed_cluster_observed_again_follows_the_holders_that_still_claim_it() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a.reach("c1", "c2"))
    fleet.remove("c1")
    fleet.send(cluster("c1", CANARY))
    assert fleet.clusters["c1"].ready and fleet.clusters["c1"].lease.claimed  # type: ignore[union-attr]
    fleet.remove("c1")
    fleet.run_for(61)  # a-0 stopped while c1 was gone
    fleet.apply(app())
    fleet.send(cluster("c1", CANARY))
    assert not fleet.clusters["c1"].ready and fleet.revision("app", "c1") is None
    fleet.send(a.beat())
    assert fleet.revision("app", "c1") == "v1"


def test_redelivered_beats_and_claims_change_nothing() -> None:
    a = Replica("a-0")
    claims = a.reach("c1", "w1")
    beat = a.beat()
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(), *claims, beat)
    fleet.run_for(30)
    before = fleet.snapshot()
    outcome = fleet.send(beat, *claims)
    assert fleet.snapshot() == before and not outcome.decisions


def test_an_older_claim_redelivered_after_a_newer_one_claims_nothing_again() -> None:
    a = Replica("a-0")
    first = a.reach("c1", "c2")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *first)
    fleet.send(*a.reach("c1"))
    before = fleet.snapshot()
    fleet.send(*first)
    assert fleet.snapshot() == before


def test_a_holder_lease_renewed_before_any_tick_runs_from_the_first_tick() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), *a.reach("c1"), at=None)
    fleet.tick(T0)
    assert fleet.state["holders"]["a-0"].expires_at == T0 + 60
    fleet.run_for(59)
    assert fleet.clusters["c1"].ready
    fleet.run_for(1)
    assert not fleet.clusters["c1"].ready


def test_restart_rebuilds_the_holder_lease_index() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), app(), *a.reach("c1"))
    fleet.restart()
    fleet.run_for(61)
    assert not fleet.clusters["c1"].ready


def test_a_cluster_with_its_own_lease_and_a_holder_is_ready_while_either_holds() -> None:
    """A rolling upgrade of the appliers: one of the release before still heartbeats per
    cluster, one of this release claims it."""
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), *a.reach("c1"))
    fleet.run_for(10)
    fleet.send(heartbeat("c1", 600))  # its own lease, until T0+610
    fleet.run_for(60)  # a-0's ran out at T0+60
    assert fleet.clusters["c1"].ready
    fleet.send(a.beat())  # T0+70: a-0 until T0+130
    fleet.run_for(600)  # T0+670: its own lease ran out at T0+610, a-0's long before
    assert not fleet.clusters["c1"].ready
    fleet.send(a.beat())
    assert fleet.clusters["c1"].ready
    fleet.run_for(59)
    assert fleet.clusters["c1"].ready  # its own lease expired: it follows a-0


def test_a_claimed_lease_written_back_by_an_older_release_follows_its_holders_again() -> None:
    """An older release reads a claimed lease without `claimed` (a field it does not know)
    and may write it back so: an own lease with no times, though the clock runs."""
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a.reach("c1", "c2"))
    facts = fleet.clusters["c1"]
    fleet.clusters["c1"] = facts.model_copy(update={"lease": Lease(seconds=60.0)})
    fleet.restart()
    fleet.run_for(61)
    assert not fleet.clusters["c1"].ready and not fleet.clusters["c2"].ready
    fleet.send(a.beat())
    assert fleet.clusters["c1"].ready and fleet.clusters["c1"].lease == fleet.clusters["c2"].lease


def test_a_left_cluster_is_not_ready_whatever_its_holder_says() -> None:
    a = Replica("a-0")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a.reach("c1", "c2"))
    fleet.send(cluster_command("c1", "leave"), a.beat())
    fleet.apply(app())
    assert fleet.category("app", "c1") == "not_ready" and fleet.revision("app", "c2") == "v1"


# -- what a beat costs ---------------------------------------------------------------------


def changelog_of_a_beat(clusters: int, partition: int) -> list[tuple[bytes, bytes | None]]:
    """The state-topic records one journal partition writes for one beat of a holder that
    claims `clusters` clusters (the worker's layered state: streams/state.py)."""
    state = PartitionState(ENGINE_MAPPINGS)
    engine = RolloutEngine(**{name: state.mappings[name] for name in ENGINE_MAPPINGS}, partition=partition)  # type: ignore[arg-type]
    a = Replica("a-0")
    names = [f"c{i:05d}" for i in range(clusters)]
    setup: list[Any] = [Tick(id=next_id(), at=AT, now=T0), *(observed(cluster(n, CANARY)) for n in names)]
    for event in [*setup, *a.reach(*names), Tick(id=next_id(), at=AT, now=T0 + 20)]:
        engine.handle(event)
        state.keep_event()
    state.commit_batch()
    engine.handle(a.beat())
    state.keep_event()
    return state.changelog()


def test_a_holders_beat_writes_one_state_record_per_partition_whatever_it_claims() -> None:
    for partition in (0, 3):
        small, large = changelog_of_a_beat(10, partition), changelog_of_a_beat(10_000, partition)
        assert [key for key, _ in large] == [b"holders:a-0"] == [key for key, _ in small]
        assert len(large[0][1] or b"") == len(small[0][1] or b"")  # nor do its bytes grow


def test_a_holder_and_a_cluster_lease_expiring_on_one_tick_move_nothing_between_them() -> None:
    # c1's own lease and holder a-0's (which alone claims w1) run out on one tick: c1 going
    # offline passes the canary (its window closed), yet w1 — offline on that tick — is not moved
    monday_20h = datetime(2026, 3, 2, 20, 0, tzinfo=UTC).timestamp()  # 21:00 in Berlin: closed
    evenings = {"schedule": "0 22 * * 1-5", "duration": "4h", "timeZone": "Europe/Berlin"}
    a = Replica("a-0", lease_seconds=30)
    canary = {**stage("canary", CANARY), "windows": [evenings]}
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        module("app", {}, "v1", canary, stage("wave", WAVE)),
        at=monday_20h,
    )
    fleet.send(heartbeat("c1", 30), *a.reach("w1"))
    fleet.run_for(30)
    assert not fleet.clusters["c1"].ready and not fleet.clusters["w1"].ready
    assert fleet.revision("app", "w2") == "v1"  # the wave started on that tick
    assert fleet.revision("app", "w1") is None
    assert fleet.category("app", "w1") == "not_ready"
