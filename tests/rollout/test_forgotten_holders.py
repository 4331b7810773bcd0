"""Dead lease holders are forgotten (rollout/engine/leases.py, "Dead holders are forgotten").

The holder is the applier pod's host name: every restart of the applier Deployment makes a
new one. A holder whose lease expired HOLDER_HORIZON (7 days of engine time) ago is
forgotten on the tick that reaches it — its HolderLease, its ClaimChunks and its name in
ClusterClaims deleted — and no cluster's readiness changes by it. Given/when/then at the
real horizon (hourly ticks: the clock moves at most an hour a tick); the properties over
journals with holders, on engines with a short horizon, are in test_tombstones.py.
"""

from __future__ import annotations

from typing import Any

from rollout.engine.core import RolloutEngine
from rollout.engine.leases import HOLDER_HORIZON
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.engine.tombstones import TOMBSTONE_HORIZON
from rollout.wire.events import CLAIM_CHUNKS, HolderClaims, claim_chunk
from streams.state import PartitionState
from tests.rollout.builders import AT, T0, Fleet, cluster, given, next_id, observed, serialize, tick
from tests.rollout.test_holder_leases import CANARY, Replica, app

HOUR = 3600.0
DAY = 24 * HOUR


def hourly_until(fleet: Fleet, until: float, *beating: Replica) -> None:
    """Hourly ticks up to `until` (the last one at it); each replica in `beating` beats
    after every tick. These tests simulate days, not gaps in the engine's clock: the engine
    counts each hourly tick toward leases in full (clock.py LEASE_TICK_STEP)."""
    fleet.lease_tick_step = fleet.engine.ticks.lease_tick_step = HOUR
    while fleet.now < until:
        fleet.tick(min(fleet.now + HOUR, until))
        fleet.send(*(replica.beat() for replica in beating))


def starting(holder: str, *clusters: str, lease_seconds: float = 2 * HOUR) -> tuple[Replica, list[HolderClaims]]:
    """A replica as it starts (projections/heartbeats.py): every chunk of its claims, empty
    ones too, then it claims only what changes."""
    replica = Replica(holder, lease_seconds)
    replica.reached = set(clusters)
    claims = [
        HolderClaims(
            id=next_id(),
            at=AT,
            holder=holder,
            chunk=chunk,
            clusters=sorted(name for name in clusters if claim_chunk(name) == chunk),
            lease_seconds=lease_seconds,
        )
        for chunk in range(CLAIM_CHUNKS)
    ]
    return replica, claims


def records_of(fleet: Fleet, holder: str) -> dict[str, Any]:
    """What the partition holds of `holder`: its lease, its chunks, the clusters naming it."""
    return {
        "lease": fleet.state["holders"].get(holder),
        "chunks": sorted(key for key in fleet.state["holder_claims"] if key.startswith(f"{holder}/")),
        "named by": sorted(name for name, claim in fleet.state["claims"].items() if holder in claim.holders),
    }


def test_the_horizon_is_a_tombstones() -> None:
    assert HOLDER_HORIZON == TOMBSTONE_HORIZON == 7 * DAY


def test_a_dead_holder_is_forgotten_a_horizon_after_its_lease_ran_out_and_not_before() -> None:
    _, claims = starting("a-0", "c1", "c2", lease_seconds=60)
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *claims)  # a-0 runs out at T0+60
    assert len(records_of(fleet, "a-0")["chunks"]) == CLAIM_CHUNKS
    hourly_until(fleet, T0 + 60 + HOLDER_HORIZON - 1)
    held = records_of(fleet, "a-0")
    assert held["lease"].expired and len(held["chunks"]) == CLAIM_CHUNKS and held["named by"] == ["c1", "c2"]
    fleet.tick(T0 + 60 + HOLDER_HORIZON)
    assert records_of(fleet, "a-0") == {"lease": None, "chunks": [], "named by": []}
    assert not fleet.state["claims"]  # no ClusterClaims left with no holder


def test_forgetting_a_dead_holder_changes_no_clusters_readiness() -> None:
    """c1 only a-0 claims: not ready since a-0 expired, and after it is forgotten. c2 a-0
    and the live b-0 claim: ready, and b-0's alone after. No ClusterFacts is rewritten and
    nothing is decided; a module applied after moves exactly where it would have."""
    _, a_claims = starting("a-0", "c1", "c2", lease_seconds=60)
    b, b_claims = starting("b-0", "c2", "c3")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), cluster("c3", CANARY), cluster("c4", CANARY))
    fleet.send(*a_claims, *b_claims)
    hourly_until(fleet, T0 + 60 + HOLDER_HORIZON - 1, b)
    before = fleet.snapshot()["clusters"]
    outcome = fleet.tick(T0 + 60 + HOLDER_HORIZON)
    assert records_of(fleet, "a-0")["lease"] is None
    assert fleet.snapshot()["clusters"] == before and not outcome.decisions
    assert [fleet.clusters[name].ready for name in ("c1", "c2", "c3", "c4")] == [False, True, True, True]
    assert fleet.state["claims"]["c2"].holders == ["b-0"] and "c1" not in fleet.state["claims"]
    fleet.apply(app())
    assert fleet.category("app", "c1") == "not_ready" and fleet.revision("app", "c2") == "v1"


def test_a_live_holder_is_never_forgotten() -> None:
    """b-0 beats throughout; a-0 ran out, came back before the horizon and beats on: it is
    not forgotten a horizon after its first expiry."""
    a, a_claims = starting("a-0", "c1", lease_seconds=60)
    b, b_claims = starting("b-0", "c2")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a_claims, *b_claims)
    hourly_until(fleet, T0 + HOLDER_HORIZON / 2, b)
    assert fleet.state["holders"]["a-0"].expired
    a.lease_seconds = 2 * HOUR
    fleet.send(a.beat())
    hourly_until(fleet, T0 + 3 * HOLDER_HORIZON, a, b)
    for holder in ("a-0", "b-0"):
        held = records_of(fleet, holder)
        assert not held["lease"].expired and len(held["chunks"]) == CLAIM_CHUNKS, holder
    assert fleet.clusters["c1"].ready and fleet.clusters["c2"].ready


def test_thirty_days_of_applier_restarts_leave_a_bounded_number_of_holder_records() -> None:
    """A new applier pod (a new host name) every day, claiming the same five clusters: the
    holders kept are those expired within the horizon and the live one, and the state after
    day 30 holds as many records as after day 15. The clusters stay ready throughout."""
    names = [f"c{i}" for i in range(5)]
    fleet = given(*(cluster(name, CANARY) for name in names))
    fleet.check_each_event = False
    sizes = {}
    for day in range(30):
        replica, claims = starting(f"applier-{day}", *names)
        fleet.send(*claims)
        hourly_until(fleet, T0 + (day + 1) * DAY, replica)
        assert all(fleet.clusters[name].ready for name in names), day
        sizes[day + 1] = sum(len(mapping) for mapping in fleet.state.values())
    # applier-d beat last at the end of day d+1 and ran out 2 hours later: those of days 22..29
    assert sorted(fleet.state["holders"]) == sorted(f"applier-{day}" for day in range(22, 30))
    assert len(fleet.state["holder_claims"]) == 8 * CLAIM_CHUNKS
    assert all(len(claim.holders) == 8 for claim in fleet.state["claims"].values())
    assert sizes[30] == sizes[15]


def test_a_forgotten_holders_late_beat_makes_it_a_holder_anew() -> None:
    """A beat renews a lease that claims nothing (its clusters stay as they were); a claim
    claims what it names, and the cluster is ready again."""
    a, claims = starting("a-0", "c1", lease_seconds=60)
    fleet = given(cluster("c1", CANARY), *claims)
    hourly_until(fleet, T0 + 60 + HOLDER_HORIZON)
    assert records_of(fleet, "a-0")["lease"] is None
    beat = a.beat()
    fleet.send(beat)
    held = records_of(fleet, "a-0")
    assert held["lease"].expires_at == fleet.now + 60 and held["lease"].beat_ids == [beat.id]
    assert held["chunks"] == [] and not fleet.clusters["c1"].ready
    fleet.send(*Replica("a-0").reach("c1"))
    assert records_of(fleet, "a-0")["named by"] == ["c1"] and fleet.clusters["c1"].ready


def test_a_removed_cluster_observed_again_after_its_only_holder_was_forgotten_is_a_new_cluster() -> None:
    """Before, it follows its dead holder (not ready); once that holder is forgotten nothing
    claims it, and it joins with no lease — as a cluster observed again after its tombstone
    was pruned."""
    _, claims = starting("a-0", "c1", "c2", lease_seconds=60)
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *claims)
    fleet.remove("c1")
    hourly_until(fleet, T0 + HOUR)
    fleet.send(cluster("c1", CANARY))
    assert not fleet.clusters["c1"].ready
    fleet.remove("c1")
    hourly_until(fleet, T0 + 60 + HOLDER_HORIZON)
    assert "c1" not in fleet.state["claims"]
    fleet.send(cluster("c1", CANARY))
    assert fleet.clusters["c1"].lease is None and fleet.clusters["c1"].ready


def test_forgetting_after_a_restart_forgets_what_it_would_have_without() -> None:
    _, a_claims = starting("a-0", "c1", "c2", lease_seconds=60)
    b, b_claims = starting("b-0", "c2")
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), *a_claims, *b_claims)
    hourly_until(fleet, T0 + 60 + HOLDER_HORIZON, b)
    assert records_of(fleet, "a-0")["lease"] is None
    forgetting = next(i for i, e in enumerate(fleet.journal) if e.type == "Tick" and e.now == T0 + 60 + HOLDER_HORIZON)
    restarted = Fleet()
    restarted.lease_tick_step = restarted.engine.ticks.lease_tick_step = HOUR  # as hourly_until
    for event in fleet.journal[:forgetting]:
        restarted.send(event)
    restarted.restart()  # cold indexes: the forgetting tick rebuilds them
    for event in fleet.journal[forgetting:]:
        restarted.send(event)
    assert restarted.snapshot() == fleet.snapshot()
    assert [serialize(o) for o in restarted.outcomes] == [serialize(o) for o in fleet.outcomes]


def test_a_forgotten_holder_is_deleted_from_the_state_topic() -> None:
    """The forgetting tick's changelog deletes the holder's lease, its chunks and the
    ClusterClaims naming only it (compaction then drops them), rewrites the one it shares,
    and writes no ClusterFacts; the state restored from the topic holds none of it."""
    state = PartitionState(ENGINE_MAPPINGS)
    engine = RolloutEngine(**{name: state.mappings[name] for name in ENGINE_MAPPINGS})  # type: ignore[arg-type]
    _, a_claims = starting("a-0", "c1", "c2", lease_seconds=60)
    b, b_claims = starting("b-0", "c2")
    topic: list[tuple[bytes, bytes | None]] = []
    events: list[Any] = [tick(T0), observed(cluster("c1", CANARY)), observed(cluster("c2", CANARY))]
    now = T0
    while now < T0 + 60 + HOLDER_HORIZON:
        now = min(now + HOUR, T0 + 60 + HOLDER_HORIZON)
        events += [tick(now), b.beat()]
    for event in [*events[:3], *a_claims, *b_claims, *events[3:]]:
        engine.handle(event)
        state.keep_event()
        written = state.changelog()
        state.commit_batch()
        topic += written
        if event.type == "Tick" and event.now == T0 + 60 + HOLDER_HORIZON:
            forgetting = dict(written)
    assert forgetting[b"holders:a-0"] is None and forgetting[b"claims:c1"] is None
    assert all(forgetting[f"holder_claims:a-0/{chunk}".encode()] is None for chunk in range(CLAIM_CHUNKS))
    assert b'"holders":["b-0"]' in (forgetting[b"claims:c2"] or b"")
    assert not [key for key in forgetting if key.startswith(b"clusters:")]
    restored = PartitionState(ENGINE_MAPPINGS)
    restored.restore(topic)
    assert set(restored.mappings["holders"].committed) == {"b-0"}
    assert {key.split("/")[0] for key in restored.mappings["holder_claims"].committed} == {"b-0"}
    assert set(restored.mappings["claims"].committed) == {"c2"}
