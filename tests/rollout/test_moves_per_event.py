"""Moves per event (docs/rollout-semantics.md, "How a rollout moves", rules 6 and 7;
rollout/engine/stages.py, membership.py): one fold moves at most `moves_per_event` clusters,
or considers as many clusters of the fleet for a module joining it; a module stopped at the
limit sends itself a RolloutContinued that carries on where it stopped. What is moved or
joined, and in which order, is what one unbounded fold would have done."""

from __future__ import annotations

from typing import Any

from rollout.engine.outcome import Outcome
from rollout.engine.stages import MOVES_PER_EVENT
from rollout.wire.events import RolloutContinued
from tests.rollout.builders import T0, Fleet, cluster, module, removed, serialize, stage

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


def joined(fleet: Fleet, *modules: Any) -> int:
    """Apply `modules` and feed back their continuations until they joined the fleet
    (whatever `fleet.feedback` says after); the continuations that took."""
    feedback, fleet.feedback = fleet.feedback, True
    fleet.send(*modules)
    fleet.feedback = feedback
    assert all(record.joining is None for record in fleet.modules.values())
    return len(continuations(fleet))


def decided(fleet: Fleet) -> list[tuple[str, str | None, str]]:
    return [(d.action, d.cluster, d.reason) for d in fleet.decisions]


def test_the_engine_limit_is_far_above_a_stage_of_the_test_fleets() -> None:
    assert MOVES_PER_EVENT >= 1_000  # slicing is for fleet-sized stages, not for everyday ones


def test_a_stage_start_moves_at_most_the_limit_per_event_and_continues_until_every_member_moved() -> None:
    fleet = fleet_of(12)
    asked = joined(fleet, app())
    fleet.succeed("app", "c-00", "c-01")  # the canary passes: the wave of 10 starts
    assert fleet.on("app", "v1") == sorted(f"c-{i:02d}" for i in range(12))
    assert all(len(outcome.assignments) <= LIMIT for outcome in fleet.outcomes)
    slices = [event.slice for event in continuations(fleet)][asked:]
    assert slices == [asked + 1, asked + 2, asked + 3]  # 3 + 3 + 3 + 1 moves
    assert fleet.record("app").continuations == fleet.record("app").continued == asked + 3


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
    joined(fleet, app())
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
    asked = joined(fleet, app())
    fleet.succeed("app", "c-00", "c-01")
    (first,) = fleet.last.dependency_events
    fleet.send(first)  # moves 3 more and asks again
    (second,) = fleet.last.dependency_events
    assert second.slice == asked + 2
    stale = RolloutContinued(id="stale", module="app", slice=asked + 1)
    before = fleet.snapshot()
    outcome = fleet.engine.handle(stale)
    assert not outcome.assignments and not outcome.dependency_events
    assert fleet.snapshot() == before
    fleet.send(second)
    assert len(fleet.on("app", "v1")) == 2 + 3 + 3 + 3


def test_only_one_continuation_is_outstanding_per_module() -> None:
    fleet = fleet_of(12, feedback=False)
    asked = joined(fleet, app())
    fleet.succeed("app", "c-00", "c-01")
    assert len(fleet.last.dependency_events) == 1  # asked once
    fleet.succeed("app", "c-02")  # a report frees a slot: this event moves, but asks nothing more
    assert fleet.last.dependency_events == []
    assert fleet.record("app").continuations == asked + 1 and fleet.record("app").continued == asked


def test_a_continuation_for_a_deleted_module_changes_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    joined(fleet, app())
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


# -- joins per event (rule 7) ------------------------------------------------------------------


def join_the_rest(fleet: Fleet) -> None:
    """Feed the latest continuation asked for, one at a time, until "app" joined the fleet."""
    while fleet.record("app").joining is not None:
        latest = next(outcome for outcome in reversed(fleet.outcomes) if outcome.dependency_events)
        fleet.send(latest.dependency_events[-1])


def test_a_module_applied_to_a_fleet_larger_than_the_limit_joins_it_in_slices_before_any_stage_starts() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    assert len(fleet.last.decisions) == 1 + LIMIT  # created, and the first three clusters joined
    assert fleet.record("app").joining == "c-02"
    assert fleet.phase("app") == "Progressing" and not fleet.assemblages  # no stage started on part of the fleet
    assert "joining the fleet's clusters (3 members so far)" in fleet.status("app")["waiting"]
    while fleet.record("app").joining is not None:
        (more,) = fleet.last.dependency_events
        fleet.send(more)
        assert len(fleet.last.decisions) <= LIMIT + 1  # its joins, and at most a stage started
    assert len(fleet.targets) == 12
    assert fleet.record("app").counts["canary"].members == 2 and fleet.record("app").counts["wave"].members == 10
    assert "waiting" not in fleet.status("app") or "joining" not in fleet.status("app")["waiting"]


def test_a_sliced_join_decides_what_one_unbounded_fold_decides() -> None:
    runs = []
    for limit in (LIMIT, None):
        fleet = fleet_of(12, limit=limit)
        fleet.send(app())
        fleet.succeed("app", "c-00", "c-01")
        fleet.succeed("app", *[f"c-{i:02d}" for i in range(2, 12)])
        runs.append(fleet)
    sliced, unbounded = runs
    assert decided(sliced) == decided(unbounded)
    assert [d.action for d in sliced.decisions][:13] == ["created"] + ["joined"] * 12
    assert sliced.phase("app") == unbounded.phase("app") == "Complete"


def test_a_cluster_observed_while_a_module_joins_is_a_member_once() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.send(cluster("c-99", {"ring": "wave"}), cluster("c-00a", {"ring": "wave"}))  # after and before the cursor
    assert {"c-99", "c-00a"} <= {t.cluster for t in fleet.targets.values()}
    join_the_rest(fleet)
    joins = [d.cluster for d in fleet.decisions if d.action == "joined"]
    assert sorted(joins) == sorted({*[f"c-{i:02d}" for i in range(12)], "c-99", "c-00a"})  # each once
    assert fleet.record("app").counts["wave"].members == 12


def test_a_cluster_removed_while_a_module_joins_never_becomes_a_member() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.send(removed("c-10"))
    join_the_rest(fleet)
    assert "app/c-10" not in fleet.targets
    assert fleet.record("app").counts["wave"].members == 9


def test_a_module_applied_again_while_it_joins_takes_the_whole_fleet_in_at_once() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.send(app("v2"))  # a new revision: refreshed against every cluster (as before slices)
    assert fleet.record("app").joining is None
    assert len(fleet.targets) == 12


def test_a_redelivered_continuation_of_a_join_changes_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    before = fleet.snapshot()
    assert serialize(fleet.engine.handle(first)) == serialize(Outcome())
    assert fleet.snapshot() == before
