"""Tombstones are pruned once nothing can refer to them (rollout/engine/tombstones.py).

A RemovedCluster or DeletedModule is stamped with the engine's time when it is made or takes
an id it must recognise (a heartbeat's does not count), and deleted TOMBSTONE_HORIZON
later, on the first tick that reaches it; until then a redelivered input still changes
nothing. A pruned module's last generation is kept as the partition's first generation.
Given/when/then at the real horizon (hourly ticks: the clock moves at most an hour a tick),
then properties on engines built with a short horizon: folding with restarts anywhere (cold
indexes) gives the state and outcomes of folding straight through; an event redelivered
within the horizon changes nothing; churn leaves the tombstones bounded; an event failing
anywhere — a pruning tick too — is undone by dropping its writes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.engine.core import RolloutEngine
from rollout.engine.state import ENGINE_MAPPINGS, DeletedModule, RemovedCluster
from rollout.engine.tombstones import FIRST_GENERATION, TOMBSTONE_HORIZON
from rollout.wire.events import HolderClaims, HolderHeartbeat, claim_chunk
from streams.state import PartitionState
from tests.rollout.builders import (
    AT,
    T0,
    Fleet,
    applied,
    cluster,
    cluster_command,
    command,
    deleted,
    heartbeat,
    module,
    next_id,
    observed,
    removed,
    reported,
    serialize,
    tick,
)
from tests.rollout.builders import given as given_fleet
from tests.rollout.test_failed_event_undo import Injected, Injector, committed, fold, instrument

HOUR = 3600.0
NOTHING = serialize(RolloutEngine(**{name: {} for name in ENGINE_MAPPINGS}).handle(tick(0.5)))  # type: ignore[arg-type]


def noted(fleet: Fleet, table: str, name: str) -> float | None:
    """When the tombstone `name` of `table` last took an id (its stamp)."""
    return fleet.state["tombstones_noted"].get(f"{table}/{name}")


def advance_to(fleet: Fleet, until: float) -> None:
    """Hourly ticks, then one at `until` (a tick moves the clock at most an hour)."""
    while fleet.now + HOUR < until:
        fleet.wait(HOUR)
    if fleet.now < until:
        fleet.tick(until)


# -- at the horizon ------------------------------------------------------------------------


def test_a_removed_clusters_tombstone_is_pruned_at_the_horizon_and_not_before() -> None:
    fleet = given_fleet(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.remove("b")
    assert noted(fleet, "removed_clusters", "b") == T0
    advance_to(fleet, T0 + TOMBSTONE_HORIZON - 1)
    assert "b" in fleet.state["removed_clusters"]
    fleet.tick(T0 + TOMBSTONE_HORIZON)
    assert "b" not in fleet.state["removed_clusters"]
    assert fleet.assigned("app") == {"a": "v1"}


def test_a_deleted_modules_tombstone_is_pruned_at_the_horizon_and_not_before() -> None:
    fleet = given_fleet(cluster("a"), module("app", {}, "v1"))
    fleet.delete("app")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON - 1)
    assert fleet.state["deleted_modules"]["app"].generation == 1
    fleet.tick(T0 + TOMBSTONE_HORIZON)
    assert "app" not in fleet.state["deleted_modules"]
    assert fleet.state["sequences"][FIRST_GENERATION].next == 2


def test_a_tombstone_is_kept_a_horizon_after_the_last_id_it_took() -> None:
    """A leave for b after its removal is an id b's facts take back if b is observed again:
    the tombstone is kept a horizon from it. A refused intent for a deleted module, likewise."""
    fleet = given_fleet(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.remove("b")
    fleet.delete("app")
    advance_to(fleet, T0 + 2 * HOUR)
    fleet.send(cluster_command("b", "leave"), command("app", "pause"))
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    assert "b" in fleet.state["removed_clusters"] and "app" in fleet.state["deleted_modules"]
    advance_to(fleet, T0 + 2 * HOUR + TOMBSTONE_HORIZON)
    assert "b" not in fleet.state["removed_clusters"] and "app" not in fleet.state["deleted_modules"]


def test_heartbeats_for_a_removed_cluster_do_not_keep_its_tombstone() -> None:
    """An applier goes on beating a cluster it still serves after its removal; the
    tombstone goes at the horizon all the same, and the beats then change nothing."""
    fleet = given_fleet(cluster("a"), cluster("b"), heartbeat("b"))
    fleet.remove("b")
    while fleet.now < T0 + TOMBSTONE_HORIZON:
        fleet.send(heartbeat("b"))
        fleet.wait(HOUR)
    assert "b" not in fleet.state["removed_clusters"]
    before = fleet.snapshot()
    assert serialize(fleet.send(heartbeat("b"))) == NOTHING
    assert fleet.snapshot() == before


def test_a_tombstone_noted_before_the_first_tick_is_kept_a_horizon_from_it() -> None:
    fleet = given_fleet(cluster("a"), cluster("b"), at=None)
    fleet.remove("b")
    assert noted(fleet, "removed_clusters", "b") is None
    fleet.tick(T0)
    assert noted(fleet, "removed_clusters", "b") == T0
    advance_to(fleet, T0 + TOMBSTONE_HORIZON - 1)
    assert "b" in fleet.state["removed_clusters"]
    fleet.tick(T0 + TOMBSTONE_HORIZON)
    assert "b" not in fleet.state["removed_clusters"]


def test_a_tombstone_stored_by_an_earlier_release_is_stamped_by_the_first_tick_that_finds_it() -> None:
    """Tombstones written before stamps existed have none; after a restart the first tick
    stamps them, and they go a horizon later — never earlier. They are written as the
    release before wrote them: the stamps are kept beside them."""
    fleet = given_fleet(cluster("a"))
    fleet.wait(HOUR)
    fleet.state["removed_clusters"]["old"] = RemovedCluster.model_validate_json('{"name":"old"}')
    fleet.state["deleted_modules"]["gone"] = DeletedModule.model_validate_json('{"name":"gone","generation":4}')
    fleet.restart()
    stamped_at = fleet.now + 60
    fleet.tick(stamped_at)
    assert noted(fleet, "removed_clusters", "old") == stamped_at
    assert noted(fleet, "deleted_modules", "gone") == stamped_at
    advance_to(fleet, stamped_at + TOMBSTONE_HORIZON - 1)
    assert "old" in fleet.state["removed_clusters"] and "gone" in fleet.state["deleted_modules"]
    fleet.tick(stamped_at + TOMBSTONE_HORIZON)
    assert not fleet.state["removed_clusters"] and not fleet.state["deleted_modules"]


def test_a_stamp_whose_tombstone_a_release_before_dropped_goes_at_its_time() -> None:
    """During a rolling upgrade a worker of the release before may hand a tombstone back (the
    cluster observed again) without knowing its stamp; after a restart the stamp is found
    and goes when it is due."""
    fleet = given_fleet(cluster("a"), cluster("b"))
    fleet.remove("b")
    fleet.state["removed_clusters"].pop("b")  # what the release before does on an observation
    fleet.restart()
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    assert not fleet.state["tombstones_noted"]


def test_pruning_after_a_restart_prunes_what_it_would_have_without() -> None:
    fleet = given_fleet(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.remove("b")
    fleet.wait(HOUR)
    fleet.delete("app")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    assert "b" not in fleet.state["removed_clusters"] and "app" in fleet.state["deleted_modules"]
    restarted = Fleet()
    for event in fleet.journal[:-1]:
        restarted.send(event)
    restarted.restart()  # cold indexes: the last tick rebuilds them
    restarted.send(fleet.journal[-1])
    assert restarted.snapshot() == fleet.snapshot()
    assert serialize(restarted.outcomes[-1]) == serialize(fleet.outcomes[-1])


def test_a_pruned_tombstone_is_deleted_from_the_state_topic() -> None:
    """The pruning tick's changelog deletes the tombstone and its stamp (compaction then
    drops both), and the state restored from the topic has neither."""
    state, engine = short_layered_engine()
    events = [tick(T0), observed(cluster("b")), removed("b"), applied(module("app", {}, "v1")), deleted("app")]
    topic: list[tuple[bytes, bytes | None]] = []
    for event in [*events, tick(T0 + HOUR), tick(T0 + SHORT)]:
        engine.handle(event)
        state.keep_event()
        written = state.changelog()
        state.commit_batch()
        topic += written
    assert (b"removed_clusters:b", None) in written and (b"tombstones_noted:removed_clusters/b", None) in written
    assert (b"deleted_modules:app", None) in written and (b"tombstones_noted:deleted_modules/app", None) in written
    restored = PartitionState(ENGINE_MAPPINGS)
    restored.restore(topic)
    assert not restored.mappings["removed_clusters"].committed and not restored.mappings["deleted_modules"].committed
    assert not restored.mappings["tombstones_noted"].committed


# -- redelivery within the horizon ---------------------------------------------------------


def test_a_redelivered_observation_within_the_horizon_does_not_bring_a_removed_cluster_back() -> None:
    seen = observed(cluster("b"))
    fleet = given_fleet(cluster("a"), seen, module("app", {}, "v1"))
    fleet.remove("b")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON - 1)
    before = fleet.snapshot()
    assert serialize(fleet.send(seen)) == NOTHING
    assert fleet.snapshot() == before and "b" not in fleet.clusters


def test_a_redelivered_apply_within_the_horizon_does_not_recreate_a_deleted_module() -> None:
    apply = applied(module("app", {}, "v1"))
    fleet = given_fleet(cluster("a"), apply)
    fleet.delete("app")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON - 1)
    before = fleet.snapshot()
    assert serialize(fleet.send(apply)) == NOTHING
    assert fleet.snapshot() == before and "app" not in fleet.modules


def test_an_observation_redelivered_after_the_horizon_is_a_new_cluster() -> None:
    """What the horizon gives up: an event older than it is not recognised."""
    seen = observed(cluster("b"))
    fleet = given_fleet(cluster("a"), seen, module("app", {}, "v1"))
    fleet.remove("b")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    fleet.send(seen)
    assert "b" in fleet.clusters and fleet.assigned("app") == {"a": "v1", "b": "v1"}


# -- after pruning -------------------------------------------------------------------------


def test_a_module_created_again_after_its_tombstone_was_pruned_continues_its_generations() -> None:
    fleet = given_fleet(cluster("a"), module("app", {}, "v1"))
    fleet.apply(module("app", {}, "v2"))
    fleet.delete("app")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    assert not fleet.state["deleted_modules"]
    fleet.apply(module("app", {}, "v2"))
    assert fleet.record("app").target == 3
    assert fleet.assemblages[("a", "app")].generation == 3
    # a late report about generation 2 of the module deleted, same tag, does not count
    fleet.send(reported("app", "a", "v2", "succeeded", generation=2))
    assert fleet.category("app", "a") == "updating"
    fleet.send(reported("app", "a", "v2", "succeeded", generation=3))
    assert fleet.category("app", "a") == "succeeded"


def test_a_new_module_after_a_tombstone_was_pruned_starts_above_its_generations() -> None:
    """Where a name with no tombstone was never used and where it was, the engine cannot
    tell: every module created after a pruning starts above what was pruned."""
    fleet = given_fleet(cluster("a"), module("old", {}, "v1"))
    fleet.apply(module("old", {}, "v2"), module("old", {}, "v3"))
    fleet.delete("old")
    fleet.apply(module("before", {}, "v1"))
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    fleet.apply(module("after", {}, "v1"))
    assert fleet.record("before").generation == 1
    assert fleet.record("after").generation == 4


def test_a_removed_cluster_observed_again_after_its_tombstone_was_pruned_joins_as_a_new_cluster() -> None:
    fleet = given_fleet(cluster("a"), cluster("b"), heartbeat("b"), module("app", {}, "v1"))
    fleet.succeed("app", "a", "b")
    fleet.remove("b")
    advance_to(fleet, T0 + TOMBSTONE_HORIZON)
    assert not fleet.state["removed_clusters"]
    fleet.apply(cluster("b"))
    facts = fleet.clusters["b"]
    assert facts.lease is None and facts.ready and len(facts.observation_ids) == 1
    assert fleet.category("app", "b") == "updating" and fleet.revision("app", "b") == "v1"
    fleet.succeed("app", "b")
    assert fleet.phase("app") == "Complete"


def test_churn_leaves_the_tombstones_bounded() -> None:
    """30 days, each day 5 modules and 5 clusters made and gone: the tombstones are those
    of the last horizon's days, and the state after day 30 holds as many records as after
    day 15."""
    fleet = given_fleet(cluster("keep"), module("base", {}, "v1"))
    sizes = {}
    for day in range(1, 31):
        for n in range(5):
            fleet.apply(cluster(f"c{day}-{n}"), module(f"m{day}-{n}", {}, "v1"))
            fleet.remove(f"c{day}-{n}")
            fleet.delete(f"m{day}-{n}")
        advance_to(fleet, T0 + day * 24 * HOUR)
        sizes[day] = sum(len(mapping) for mapping in fleet.state.values())
    # noted at the start of days 25..30: within the horizon of the end of day 30
    assert TOMBSTONE_HORIZON == 7 * 24 * HOUR
    assert len(fleet.state["removed_clusters"]) == len(fleet.state["deleted_modules"]) == 5 * 6
    assert sizes[30] == sizes[15]


# -- properties, with a short horizon ------------------------------------------------------

SHORT = 2 * HOUR  # the horizon of the engines below
PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def short(engine: RolloutEngine) -> RolloutEngine:
    engine.tombstones.horizon = engine.leases.holder_horizon = SHORT
    return engine


class ShortFleet(Fleet):
    """A Fleet whose engine keeps tombstones, and holders expired, SHORT seconds."""

    def _new_engine(self) -> RolloutEngine:
        return short(super()._new_engine())


CLUSTERS = ["a", "b", "c"]
MODULES = ["app", "web"]
STEP = st.one_of(
    st.tuples(st.just("observe"), st.sampled_from(CLUSTERS)),
    st.tuples(st.just("remove"), st.sampled_from(CLUSTERS)),
    st.tuples(st.just("apply"), st.sampled_from(MODULES), st.sampled_from(["v1", "v2"])),
    st.tuples(st.just("delete"), st.sampled_from(MODULES)),
    st.tuples(st.just("pause"), st.sampled_from(MODULES)),
    st.tuples(st.just("leave"), st.sampled_from(CLUSTERS)),
    st.tuples(st.just("beat"), st.sampled_from(CLUSTERS)),
    st.tuples(st.just("report"), st.sampled_from(MODULES), st.sampled_from(CLUSTERS)),
    *[st.tuples(st.just("tick"), st.sampled_from([60, 1800, 3600, 3600]))] * 4,  # enough time passes to prune
    st.tuples(st.just("hours"), st.integers(2, 4)),  # hourly ticks: a holder that stops is forgotten
    st.tuples(st.just("dup"), st.integers(0, 10_000)),
    # an applier replica (leases.py): its beat, or a claim as the clusters it reaches change;
    # one that stops is forgotten SHORT after its lease ran out (test_forgotten_holders.py)
    st.tuples(
        st.just("holder"),
        st.sampled_from(["h-0", "h-1"]),
        st.sampled_from(["beat", "claim", "release"]),
        st.sampled_from(CLUSTERS),
        st.sampled_from([60.0, 600.0, 3600.0]),
    ),
)


def holder_event(reached: dict[str, set[str]], holder: str, what: str, name: str, seconds: float) -> Any:
    """The replica's beat, or its claim of the chunk of `name` as it gains or drops it."""
    if what == "beat":
        return HolderHeartbeat(id=next_id(), at=AT, holder=holder, lease_seconds=seconds)
    clusters = reached.setdefault(holder, set())
    clusters.add(name) if what == "claim" else clusters.discard(name)
    chunk = claim_chunk(name)
    named = sorted(other for other in clusters if claim_chunk(other) == chunk)
    return HolderClaims(id=next_id(), at=AT, holder=holder, chunk=chunk, clusters=named, lease_seconds=seconds)


def journal(steps: list[tuple[Any, ...]]) -> list[Any]:
    """The events of `steps` as one journal, folded once on a ShortFleet to draw reports
    about what is assigned; a `dup` sends again an event of the journal so far."""
    fleet = ShortFleet()
    fleet.check_each_event = False
    fleet.send(tick(T0))
    reached: dict[str, set[str]] = {}
    for step in steps:
        kind = step[0]
        if kind == "observe":
            event: Any = observed(cluster(step[1]))
        elif kind == "remove":
            event = removed(step[1])
        elif kind == "apply":
            event = applied(module(step[1], {}, step[2]))
        elif kind == "delete":
            event = deleted(step[1])
        elif kind == "pause":
            event = command(step[1], "pause")
        elif kind == "leave":
            event = cluster_command(step[1], "leave")
        elif kind == "beat":
            event = heartbeat(step[1])
        elif kind == "report":
            revision = fleet.revision(step[1], step[2]) or "v1"
            event = reported(step[1], step[2], revision, "succeeded")
        elif kind == "tick":
            event = tick(fleet.now + step[1])
        elif kind == "hours":
            for _ in range(step[1] - 1):
                fleet.send(tick(fleet.now + HOUR))
            event = tick(fleet.now + HOUR)
        elif kind == "holder":
            event = holder_event(reached, *step[1:])
        else:
            event = fleet.journal[step[1] % len(fleet.journal)]
        fleet.send(event)
    return list(fleet.journal)


JOURNALS = st.lists(STEP, min_size=10, max_size=60).map(journal)
ONE_MODULE_JOURNALS = st.lists(STEP.filter(lambda step: "web" not in step), min_size=10, max_size=60).map(journal)


@PROPERTY_SETTINGS
@given(JOURNALS, st.sets(st.integers(0, 80)))
def test_a_journal_folded_with_restarts_anywhere_prunes_as_folded_straight_through(
    events: list[Any], restarts: set[int]
) -> None:
    """Replay equality: pruning is a function of the stored state and the engine's time,
    not of when the index was built."""
    straight, restarted = ShortFleet(), ShortFleet()
    straight.check_each_event = restarted.check_each_event = False
    straight.send(*events)
    for position, event in enumerate(events):
        if position in restarts:
            restarted.restart()
        restarted.send(event)
    assert [serialize(o) for o in restarted.outcomes] == [serialize(o) for o in straight.outcomes]
    assert restarted.snapshot() == straight.snapshot()


class KeepingFleet(Fleet):
    """A Fleet whose engine never prunes a tombstone nor forgets a holder, as before."""

    def _new_engine(self) -> RolloutEngine:
        engine = super()._new_engine()
        engine.tombstones.horizon = engine.leases.holder_horizon = float("inf")
        return engine


@PROPERTY_SETTINGS
@given(ONE_MODULE_JOURNALS, st.integers(0, 10_000))
def test_an_event_redelivered_within_the_horizon_does_what_it_did_when_nothing_was_pruned(
    events: list[Any], pick: int
) -> None:
    """Within the horizon of its first delivery, a redelivered event does on an engine that
    prunes what it does on one that never does — nothing, but where the engine never
    remembered it (a report about a cluster it did not know yet). Heartbeats aside: their ids
    do not keep a tombstone, and one redelivered after its cluster came back renews its
    lease (tombstones.py). One module: a name created again after a pruning continues above
    the partition's first generation, one that kept its tombstone above its own."""
    pruning, keeping = ShortFleet(), KeepingFleet()
    pruning.check_each_event = keeping.check_each_event = False
    first: dict[str, float] = {}
    for event in events:
        pruning.send(event)
        keeping.send(event)
        first.setdefault(event.id, pruning.now)
    recent = sorted(
        {event.id: event for event in events if pruning.now - first[event.id] < SHORT}.values(), key=lambda e: e.id
    )
    recent = [event for event in recent if event.type not in ("Tick", "ClusterHeartbeat")]
    if not recent:
        return
    event = recent[pick % len(recent)]
    before = pruning.snapshot(), keeping.snapshot()
    assert serialize(pruning.send(event)) == serialize(keeping.send(event))
    assert (pruning.snapshot() == before[0]) == (keeping.snapshot() == before[1])


@PROPERTY_SETTINGS
@given(JOURNALS)
def test_the_tombstones_held_are_exactly_those_noted_within_the_horizon(events: list[Any]) -> None:
    fleet = ShortFleet()
    fleet.check_each_event = False
    fleet.send(*events)
    for table in ("removed_clusters", "deleted_modules"):
        for name in fleet.state[table]:
            at = noted(fleet, table, name)
            assert at is not None and fleet.now - at < SHORT, (table, name)
    tables = ("removed_clusters", "deleted_modules")
    stamped = {tuple(key.split("/", 1)) for key in fleet.state["tombstones_noted"]}
    assert stamped == {(table, name) for table in tables for name in fleet.state[table]}


@PROPERTY_SETTINGS
@given(JOURNALS)
def test_the_holders_held_are_live_or_expired_within_the_horizon(events: list[Any]) -> None:
    """And nothing of a forgotten holder is left: no claim chunk, no ClusterClaims naming it."""
    fleet = ShortFleet()
    fleet.check_each_event = False
    fleet.send(*events)
    holders = fleet.state["holders"]
    for name, holder in holders.items():
        assert not holder.expired or fleet.now - holder.expires_at < SHORT, name
    assert {chunk.holder for chunk in fleet.state["holder_claims"].values()} <= set(holders)
    assert all(claim.holders and set(claim.holders) <= set(holders) for claim in fleet.state["claims"].values())


def held(fleet: Fleet) -> int:
    """The tombstones and holders the fleet's partition holds."""
    return sum(len(fleet.state[table]) for table in ("removed_clusters", "deleted_modules", "holders"))


def pruning_ticks(events: list[Any]) -> list[int]:
    """The positions of the ticks that prune a tombstone or forget a holder."""
    fleet = ShortFleet()
    fleet.check_each_event = False
    found = []
    for position, event in enumerate(events):
        before = held(fleet)
        fleet.send(event)
        if event.type == "Tick" and held(fleet) < before:
            found.append(position)
    return found


def short_layered_engine() -> tuple[PartitionState, RolloutEngine]:
    state = PartitionState(ENGINE_MAPPINGS)
    mappings = {name: state.mappings[name] for name in ENGINE_MAPPINGS}
    return state, short(RolloutEngine(**mappings))  # type: ignore[arg-type]


@PROPERTY_SETTINGS
@given(JOURNALS, st.data())
def test_an_event_failing_anywhere_a_pruning_tick_too_is_undone_by_dropping_its_writes(
    events: list[Any], data: st.DataObject
) -> None:
    """test_failed_event_undo.py's property over journals that prune: the committed state
    is as it was, and the rest folds as if the event had never come."""
    pruning = pruning_ticks(events)
    anywhere = st.integers(0, len(events) - 1)
    position = data.draw(st.sampled_from(pruning) | anywhere if pruning else anywhere, label="the failing event")
    injector = Injector()
    injector.at = data.draw(st.integers(0, 200), label="the checkpoint it fails at")
    state, engine = short_layered_engine()
    instrument(engine, injector)
    fold(state, engine, events[:position])
    before = committed(state)
    injector.arm(injector.at)
    with pytest.raises(Injected):
        engine.handle(events[position])
    state.drop_event()
    engine.reset_indexes()
    assert committed(state) == before
    reference_state, reference = short_layered_engine()
    fold(reference_state, reference, events[:position])
    rest = events[position + 1 :]
    assert fold(state, engine, rest) == fold(reference_state, reference, rest)
    assert committed(state) == committed(reference_state)
