"""Moves per event (docs/rollout-semantics.md, "How a rollout moves", rule 6;
rollout/engine/stages.py): one fold moves at most `moves_per_event` clusters; a module
stopped at the limit sends itself a RolloutContinued that carries on where it stopped.
What is moved, and in which order, is what one unbounded fold would have moved."""

from __future__ import annotations

from typing import Any

from rollout.engine.outcome import Outcome
from rollout.engine.stages import MOVES_PER_EVENT
from rollout.wire.events import RolloutContinued
from tests.rollout.builders import T0, Fleet, cluster, module, serialize, stage

LIMIT = 3


def fleet_of(size: int, *, limit: int | None = LIMIT, feedback: bool = True) -> Fleet:
    fleet = Fleet(moves_per_event=limit)
    fleet.feedback = feedback
    fleet.tick(T0)
    fleet.send(*[cluster(f"c-{i:02d}", {"ring": "canary" if i < 2 else "wave"}) for i in range(size)])
    return fleet


def app(tag: str = "v1", **kwargs: Any) -> Any:
    return module("app", {}, tag, stage("canary", {"ring": "canary"}), stage("wave", {"ring": "wave"}), **kwargs)


def continuations(fleet: Fleet) -> list[RolloutContinued]:
    return [event for event in fleet.journal if isinstance(event, RolloutContinued)]


def decided(fleet: Fleet) -> list[tuple[str, str | None, str]]:
    return [(d.action, d.cluster, d.reason) for d in fleet.decisions]


def test_the_engine_limit_is_far_above_a_stage_of_the_test_fleets() -> None:
    assert MOVES_PER_EVENT >= 1_000  # slicing is for fleet-sized stages, not for everyday ones


def test_a_stage_start_moves_at_most_the_limit_per_event_and_continues_until_every_member_moved() -> None:
    fleet = fleet_of(12)
    fleet.send(app())
    fleet.succeed("app", "c-00", "c-01")  # the canary passes: the wave of 10 starts
    assert fleet.on("app", "v1") == sorted(f"c-{i:02d}" for i in range(12))
    assert all(len(outcome.assignments) <= LIMIT for outcome in fleet.outcomes)
    assert [event.slice for event in continuations(fleet)] == [1, 2, 3]  # 3 + 3 + 3 + 1 moves
    assert fleet.record("app").continuations == fleet.record("app").continued == 3


def test_a_sliced_rollout_decides_what_one_unbounded_fold_decides() -> None:
    runs = []
    for limit in (LIMIT, None):
        fleet = fleet_of(12, limit=limit)
        fleet.send(app(on_failure="Rollback"))
        fleet.succeed("app", "c-00", "c-01")
        fleet.succeed("app", *[f"c-{i:02d}" for i in range(2, 12)])
        fleet.send(app("v2", on_failure="Rollback"))
        fleet.fail("app", "c-00")  # v2 rolls back to v1 everywhere
        runs.append(fleet)
    sliced, unbounded = runs
    assert continuations(sliced) and not continuations(unbounded)
    assert decided(sliced) == decided(unbounded)
    assert sliced.assigned("app") == unbounded.assigned("app")
    assert sliced.phase("app") == unbounded.phase("app") == "RollingBack"  # till the clusters report v1


def test_a_rollback_of_the_fleet_is_sliced_too() -> None:
    fleet = fleet_of(12)
    fleet.send(app(on_failure="Rollback"))
    fleet.succeed("app", "c-00", "c-01")
    fleet.succeed("app", *[f"c-{i:02d}" for i in range(2, 12)])
    fleet.send(app("v2", on_failure="Rollback"))
    fleet.succeed("app", "c-00", "c-01")  # the canary passes on v2: the wave moves in slices
    asked = len(continuations(fleet))
    fleet.fail("app", "c-05")  # over budget: every cluster returns to v1
    assert len(continuations(fleet)) > asked
    assert all(len(outcome.assignments) <= LIMIT for outcome in fleet.outcomes)
    assert set(fleet.assigned("app").values()) == {"v1"}
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "RolledBack"


def test_a_redelivered_continuation_changes_nothing_and_emits_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.succeed("app", "c-00", "c-01")
    (first,) = fleet.last.dependency_events
    fleet.send(first)  # carries on: 3 more moves, and asks again
    fleet.succeed("app", "c-02")  # a slot freed, so a refold of `first` would have a move to make
    before = fleet.snapshot()
    again = fleet.engine.handle(first)
    assert serialize(again) == serialize(Outcome())
    assert fleet.snapshot() == before


def test_a_superseded_continuation_changes_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.succeed("app", "c-00", "c-01")
    (first,) = fleet.last.dependency_events
    fleet.send(first)  # moves 3 more and asks again (slice 2)
    (second,) = fleet.last.dependency_events
    assert second.slice == 2
    stale = RolloutContinued(id="stale", module="app", slice=1)
    before = fleet.snapshot()
    outcome = fleet.engine.handle(stale)
    assert not outcome.assignments and not outcome.dependency_events
    assert fleet.snapshot() == before
    fleet.send(second)
    assert len(fleet.on("app", "v1")) == 2 + 3 + 3 + 3


def test_only_one_continuation_is_outstanding_per_module() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.succeed("app", "c-00", "c-01")
    assert len(fleet.last.dependency_events) == 1  # asked once
    fleet.succeed("app", "c-02")  # a report frees a slot: this event moves, but asks nothing more
    assert fleet.last.dependency_events == []
    assert fleet.record("app").continuations == 1 and fleet.record("app").continued == 0


def test_a_continuation_for_a_deleted_module_changes_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.succeed("app", "c-00", "c-01")
    (first,) = fleet.last.dependency_events
    fleet.delete("app")
    outcome = fleet.send(first)
    assert not outcome.assignments and not outcome.decisions and not outcome.rejections


def test_the_limit_is_shared_by_every_module_a_tick_advances() -> None:
    fleet = fleet_of(12)
    fleet.send(
        module("one", {}, "v1", stage("all", None, soak="1m")),
        module("two", {}, "v1", stage("all", None, soak="1m")),
    )
    assert all(len(outcome.assignments) <= LIMIT for outcome in fleet.outcomes)
    assert len(fleet.on("one", "v1")) == len(fleet.on("two", "v1")) == 12
    modules = {event.module for event in continuations(fleet)}
    assert modules == {"one", "two"}
