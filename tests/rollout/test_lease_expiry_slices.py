"""A mass lease expiry is taken in slices (docs/rollout-semantics.md, "Cluster leases", rule
"Mass expiries in slices"): a Tick takes at most EXPIRIES_PER_EVENT clusters offline —
the clusters' own leases earliest first, then each expired holder's clusters in (chunk,
name) order — and its LeasesContinued (or the next ticks, whichever comes first) the rest,
each holder keeping where it stopped on its record (EXPIRIES_PER_EVENT = MOVES_PER_EVENT). A
cluster not taken yet is still ready. One given/when/then test per rule; the slice is
lowered to 3 so that seven clusters take three events. Most tests hold the continuations
back (`fleet.feedback` off: a router slower than the ticks), so that the ticks take the
slices; those under "Continued without ticks" feed them back."""

from __future__ import annotations

from typing import Any

from rollout.engine.outcome import Outcome
from rollout.wire.events import LeasesContinued, claim_chunk
from tests.rollout.builders import (
    Fleet,
    as_event,
    cluster,
    command,
    heartbeat,
    module,
    next_id,
    observed,
    serialize,
    stage,
    tick,
)
from tests.rollout.test_holder_leases import Replica

WAVE = {"ring": "wave"}


def app() -> Any:
    return module("app", {}, "v1", stage("wave", WAVE))


NAMES = [f"w{i}" for i in range(7)]
SLICE = 3


def fleet_of(sliced: bool, *items: Any, continued: bool = False) -> Fleet:
    events = [tick(1000.0), *(observed(cluster(name, WAVE)) for name in NAMES), *items]
    fleet = fleet_given(sliced, events, continued=continued)
    fleet.send(app())
    fleet.pause("app")
    return fleet


def fleet_given(sliced: bool, events: list[Any], *, continued: bool = False) -> Fleet:
    fleet = Fleet()
    fleet.feedback = continued  # off: the continuations never come, the ticks take the slices
    if sliced:
        fleet.expiries_per_event = fleet.engine.leases.expiries_per_event = SLICE
    fleet.send(*events)
    return fleet


def offline(fleet: Fleet) -> list[str]:
    return [name for name in NAMES if not fleet.clusters[name].ready]


def in_claim_order(names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: (claim_chunk(name), name))


def test_a_dead_holders_clusters_go_offline_a_slice_a_tick_in_claim_order() -> None:
    """Given a holder claiming seven clusters, slice 3; when it stops beating and its lease
    runs out; then the tick that expires it takes three clusters offline, the next three
    more, the next the last — in (chunk, name) order — each a readiness decision, and the
    clusters not taken yet are still ready."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    order = in_claim_order(NAMES)
    fleet.run_for(50)
    assert offline(fleet) == []
    taken: list[str] = []
    for step in (3, 3, 1):
        fleet.run_for(10)
        decided = [d.cluster for d in fleet.last.decisions if d.action == "readiness"]
        assert len(decided) == step
        assert sorted(decided) == sorted(order[len(taken) : len(taken) + step])
        taken += decided
        assert sorted(offline(fleet)) == sorted(taken)
        assert all(fleet.targets[f"app/{name}"].ready for name in NAMES if name not in taken)
    assert fleet.state["holders"]["a-0"].settling is None


def test_own_leases_running_out_at_once_go_offline_a_slice_a_tick() -> None:
    """Given seven clusters on their own leases renewed together, slice 3; when their beats
    stop; then they go offline three, three and one a tick, by name (their expiries equal)."""
    fleet = fleet_of(True, *(heartbeat(name) for name in NAMES))
    fleet.run_for(50)
    seen = []
    for _ in range(3):
        fleet.run_for(10)
        seen.append(offline(fleet))
    assert seen == [NAMES[:3], NAMES[:6], NAMES]


def test_a_sliced_mass_expiry_ends_in_the_state_an_unsliced_one_reaches() -> None:
    """Given the same fleet, holder and own leases, sliced at 3 and not; when the leases run
    out and the ticks take them; then the clusters and targets are the same."""
    a = Replica("a-0")
    events = [tick(1000.0), *(observed(cluster(name, WAVE)) for name in NAMES)]
    events += [*a.reach(*NAMES[:5]), a.beat(), heartbeat("w5"), heartbeat("w6"), as_event(app())]
    events += [command("app", "pause")]  # its members are refreshed, none moves: the states compare
    events += [tick(1000.0 + seconds) for seconds in range(10, 101, 10)]
    fleets = [fleet_given(sliced, events) for sliced in (True, False)]
    sliced_fleet, whole = fleets
    assert offline(whole) == NAMES and offline(sliced_fleet) == NAMES
    per_event = [[sum(d.action == "readiness" for d in o.decisions) for o in f.outcomes] for f in fleets]
    assert max(per_event[0]) == SLICE and max(per_event[1]) == len(NAMES)
    assert sliced_fleet.snapshot()["clusters"] == whole.snapshot()["clusters"]
    assert sliced_fleet.snapshot()["targets"] == whole.snapshot()["targets"]


def test_a_restart_in_the_middle_of_a_mass_expiry_goes_on_where_it_stopped() -> None:
    """Given a holder's expiry taken halfway (its record says where); when the engine
    restarts from its stored state; then the next ticks take the rest, once each."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    fleet.run_for(60)
    assert len(offline(fleet)) == 3 and fleet.state["holders"]["a-0"].settling
    fleet.restart()
    fleet.run_for(10)
    decided = [d.cluster for d in fleet.last.decisions if d.action == "readiness"]
    assert sorted(decided) == sorted(in_claim_order(NAMES)[3:6])
    fleet.run_for(10)
    assert offline(fleet) == NAMES


def test_a_holder_back_in_the_middle_of_a_mass_expiry_has_all_its_clusters_ready() -> None:
    """Given a holder's expiry taken halfway; when it beats again; then every cluster it
    claims is ready, and no later tick takes any offline."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    fleet.run_for(60)
    assert len(offline(fleet)) == 3
    fleet.send(a.beat())
    assert offline(fleet) == []
    fleet.run_for(30)
    assert offline(fleet) == [] and fleet.state["holders"]["a-0"].settling is None


# -- holders back in slices ---------------------------------------------------------------------


def test_a_holder_back_brings_its_clusters_back_a_slice_its_beat_then_a_slice_a_tick() -> None:
    """Given a dead holder's seven clusters all offline, slice 3; when it beats again; then
    its beat brings three back, in (chunk, name) order, and the next two ticks the rest —
    each a readiness decision, the clusters not reached yet still offline."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    for _ in range(9):
        fleet.run_for(10)
    assert offline(fleet) == NAMES
    order = in_claim_order(NAMES)
    fleet.send(a.beat())
    back: list[str] = []
    for step in (3, 3, 1):
        decided = [d.cluster for d in fleet.last.decisions if d.action == "readiness"]
        assert sorted(decided) == sorted(order[len(back) : len(back) + step])
        back += decided
        assert sorted(offline(fleet)) == sorted(set(NAMES) - set(back))
        assert fleet.state["holders"]["a-0"].returning is not None or step == 1
        fleet.run_for(10)
    assert offline(fleet) == [] and fleet.state["holders"]["a-0"].returning is None


def test_a_sliced_return_ends_in_the_state_an_unsliced_one_reaches() -> None:
    """Given the same fleet and a holder dead, then back, sliced at 3 and not; when the
    ticks after its beat pass; then the clusters and targets are the same."""
    a = Replica("a-0")
    events = [tick(1000.0), *(observed(cluster(name, WAVE)) for name in NAMES), *a.reach(*NAMES), a.beat()]
    events += [as_event(app()), command("app", "pause")]
    events += [tick(1000.0 + seconds) for seconds in range(10, 101, 10)]
    events += [a.beat(), *(tick(1100.0 + seconds) for seconds in range(10, 31, 10))]
    fleets = [fleet_given(sliced, events) for sliced in (True, False)]
    sliced_fleet, whole = fleets
    assert offline(whole) == [] and offline(sliced_fleet) == []
    per_event = [[sum(d.action == "readiness" for d in o.decisions) for o in f.outcomes] for f in fleets]
    assert max(per_event[0]) == SLICE and max(per_event[1]) == len(NAMES)
    assert sliced_fleet.snapshot()["clusters"] == whole.snapshot()["clusters"]
    assert sliced_fleet.snapshot()["targets"] == whole.snapshot()["targets"]


def test_a_holder_expiring_again_while_it_comes_back_takes_its_clusters_offline_again() -> None:
    """Given a holder back, three of its seven clusters brought back; when it stops beating
    again and its lease runs out; then no more come back, and the slices take them all offline."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    for _ in range(9):
        fleet.run_for(10)
    fleet.send(a.beat())
    assert len(offline(fleet)) == 4
    fleet.restart()  # where it stopped is on its record
    for _ in range(12):
        fleet.run_for(10)
    assert offline(fleet) == NAMES
    holder = fleet.state["holders"]["a-0"]
    assert holder.expired and holder.returning is None and holder.settling is None


def test_a_holder_beating_while_it_comes_back_goes_on_bringing_its_clusters_back() -> None:
    """Given a holder back, three of its seven clusters brought back; when it beats again
    before the ticks brought the rest; then the ticks still bring them all back."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    for _ in range(9):
        fleet.run_for(10)
    fleet.send(a.beat())
    fleet.send(a.beat())  # its next beat, before any tick
    assert len(offline(fleet)) == 4 and fleet.state["holders"]["a-0"].returning
    fleet.run_for(10)
    fleet.run_for(10)
    assert offline(fleet) == [] and fleet.state["holders"]["a-0"].returning is None


# -- continued without ticks ----------------------------------------------------------------------


def readiness_per_event(outcomes: list[Outcome]) -> list[list[str]]:
    return [[d.cluster for d in o.decisions if d.action == "readiness"] for o in outcomes]


def in_slices(names: list[str]) -> list[list[str]]:
    """`names` in claim order, cut into slices, each sorted (a slice's decisions come by name)."""
    order = in_claim_order(names)
    return [sorted(order[start : start + SLICE]) for start in range(0, len(order), SLICE)]


def continued(fleet: Fleet) -> list[LeasesContinued]:
    return [event for event in fleet.journal if isinstance(event, LeasesContinued)]


def test_a_mass_expiry_continues_itself_a_slice_an_event_without_waiting_for_a_tick() -> None:
    """Given a holder claiming seven clusters, slice 3, its continuations folded as they come;
    when its lease runs out; then the tick that expires it takes three clusters offline, its
    LeasesContinued three more and the next the last — in (chunk, name) order, no other tick
    in between, no event taking more than a slice."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat(), continued=True)
    fleet.run_for(50)
    start, ticks = len(fleet.outcomes), len([e for e in fleet.journal if e.type == "Tick"])
    fleet.run_for(10)  # one tick
    assert len([e for e in fleet.journal if e.type == "Tick"]) == ticks + 1
    taken = [clusters for clusters in readiness_per_event(fleet.outcomes[start:]) if clusters]
    assert [sorted(clusters) for clusters in taken] == in_slices(NAMES)
    assert [event.slice for event in continued(fleet)] == [1, 2]
    assert offline(fleet) == NAMES and fleet.state["holders"]["a-0"].settling is None


def test_own_leases_running_out_at_once_continue_themselves_without_waiting_for_a_tick() -> None:
    """Given seven clusters on their own leases renewed together, slice 3, continuations
    folded; when their beats stop; then one tick and its continuations take them all, by name."""
    fleet = fleet_of(True, *(heartbeat(name) for name in NAMES), continued=True)
    fleet.run_for(50)
    start = len(fleet.outcomes)
    fleet.run_for(10)
    taken = [clusters for clusters in readiness_per_event(fleet.outcomes[start:]) if clusters]
    assert taken == [NAMES[:3], NAMES[3:6], NAMES[6:]]


def test_a_holder_back_brings_its_clusters_back_a_slice_an_event_without_waiting_for_a_tick() -> None:
    """Given a dead holder's seven clusters all offline, slice 3, continuations folded; when
    it beats again; then its beat brings three back and its continuations the rest, before
    any tick."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat(), continued=True)
    fleet.run_for(90)
    assert offline(fleet) == NAMES
    start = len(fleet.outcomes)
    fleet.send(a.beat())
    back = [clusters for clusters in readiness_per_event(fleet.outcomes[start:]) if clusters]
    assert [sorted(clusters) for clusters in back] == in_slices(NAMES)
    assert all(e.type != "Tick" for e in fleet.journal[start:])
    assert offline(fleet) == [] and fleet.state["holders"]["a-0"].returning is None


def test_a_continued_mass_expiry_ends_in_the_state_a_tick_by_tick_one_reaches() -> None:
    """Given the same fleet, holder and own leases, sliced at 3, continued and tick by tick,
    and unsliced; when the leases run out, then the holder comes back; then the clusters and
    targets are the same each time."""
    a = Replica("a-0")
    events = [tick(1000.0), *(observed(cluster(name, WAVE)) for name in NAMES)]
    events += [*a.reach(*NAMES[:5]), a.beat(), heartbeat("w5"), heartbeat("w6"), as_event(app())]
    events += [command("app", "pause"), *(tick(1000.0 + seconds) for seconds in range(10, 101, 10))]
    middle = [fleet_given(sliced, events, continued=c) for sliced, c in ((True, True), (True, False), (False, True))]
    assert all(offline(fleet) == NAMES for fleet in middle)
    back = [a.beat(), *(tick(1100.0 + seconds) for seconds in range(10, 31, 10))]
    for fleet in middle:
        fleet.send(*back)
    continued_fleet, ticked, whole = middle
    assert continued(continued_fleet) and not continued(whole)
    for fleet in (ticked, whole):
        assert continued_fleet.snapshot()["clusters"] == fleet.snapshot()["clusters"]
        assert continued_fleet.snapshot()["targets"] == fleet.snapshot()["targets"]


def test_a_redelivered_lease_continuation_changes_nothing() -> None:
    """Given a mass expiry's first continuation folded; when it is delivered again; then
    nothing is emitted and the state is unchanged."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    fleet.run_for(60)
    (first,) = [e for e in fleet.last.dependency_events if isinstance(e, LeasesContinued)]
    fleet.send(first)
    assert len(offline(fleet)) == 6
    state = fleet.snapshot()
    assert serialize(fleet.engine.handle(first)) == serialize(Outcome())
    assert fleet.snapshot() == state


def test_a_lease_continuation_for_another_partition_or_not_asked_for_changes_nothing() -> None:
    """Given a mass expiry taken a slice; when a LeasesContinued naming another partition,
    or a slice never asked for, arrives; then it changes nothing."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    fleet.run_for(60)
    state = fleet.snapshot()
    for stray in (
        LeasesContinued(id=next_id(), at="2026-01-01T00:00:00Z", partition=1, slice=1),
        LeasesContinued(id=next_id(), at="2026-01-01T00:00:00Z", partition=0, slice=2),
    ):
        assert serialize(fleet.engine.handle(stray)) == serialize(Outcome())
    assert fleet.snapshot() == state


def test_a_restart_between_lease_continuations_goes_on_where_it_stopped() -> None:
    """Given a mass expiry taken a slice and its continuation not folded yet; when the engine
    restarts from its stored state and the continuation arrives; then it takes the next
    slice, and its own continuation the last."""
    a = Replica("a-0")
    fleet = fleet_of(True, *a.reach(*NAMES), a.beat())
    fleet.run_for(60)
    (first,) = [e for e in fleet.last.dependency_events if isinstance(e, LeasesContinued)]
    fleet.restart()
    fleet.feedback = True
    start = len(fleet.outcomes)
    fleet.send(first)
    taken = [clusters for clusters in readiness_per_event(fleet.outcomes[start:]) if clusters]
    assert [sorted(clusters) for clusters in taken] == in_slices(NAMES)[1:]
    assert offline(fleet) == NAMES
