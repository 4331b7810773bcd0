"""Moves per event (docs/rollout-semantics.md, "How a rollout moves", rules 6 and 7;
rollout/engine/stages.py, membership.py): one fold moves at most `moves_per_event` clusters,
or considers as many clusters of the fleet for a module joining it; a module stopped at the
limit sends itself a RolloutContinued that carries on where it stopped. What is moved or
joined, and in which order, is what one unbounded fold would have done."""

from __future__ import annotations

from typing import Any

from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stages import MOVES_PER_EVENT
from rollout.wire.events import DependencyCurrent, DependencyReported, DependentLinked, RolloutContinued
from tests.rollout.builders import T0, Fleet, applied, cluster, module, promotion, removed, serialize, stage

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


def test_a_module_applied_again_while_it_joins_re_sorts_the_whole_fleet_in_slices() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    fleet.send(app("v2"))  # a new revision: every cluster of the fleet considered again, from the first
    record = fleet.record("app")
    assert record.joining is None and record.resorting == "c-02"
    resort_the_rest(fleet)
    assert len(fleet.targets) == 12
    joins = [d.cluster for d in fleet.decisions if d.action == "joined"]
    assert sorted(joins) == [f"c-{i:02d}" for i in range(12)]  # each once


def test_a_redelivered_continuation_of_a_join_changes_nothing() -> None:
    fleet = fleet_of(12, feedback=False)
    fleet.send(app())
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    before = fleet.snapshot()
    assert serialize(fleet.engine.handle(first)) == serialize(Outcome())
    assert fleet.snapshot() == before


# -- re-sorts per event (rule 8) ---------------------------------------------------------------


def resort_the_rest(fleet: Fleet) -> int:
    """Feed the latest continuation asked for, one at a time, until "app" re-sorted its
    members; how many events that took."""
    fed = 0
    while fleet.record("app").resorting is not None:
        latest = next(outcome for outcome in reversed(fleet.outcomes) if outcome.dependency_events)
        fleet.send(latest.dependency_events[-1])
        fed += 1
    return fed


def completed(size: int, *, limit: int | None = LIMIT, **kwargs: Any) -> Fleet:
    """A fleet of `size` whose app completed v1 (continuations fed back), feedback off after."""
    fleet = fleet_of(size, limit=limit)
    fleet.send(app(**kwargs))
    fleet.succeed("app", "c-00", "c-01")
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "Complete"
    fleet.feedback = False
    return fleet


def moved_to(fleet: Fleet, revision: str, outcomes: list[Outcome]) -> list[str | None]:
    return [
        d.cluster for o in outcomes for d in o.decisions if d.action == DecisionAction.ASSIGN and d.revision == revision
    ]


def test_a_new_revision_re_sorts_the_members_in_slices_before_any_member_moves() -> None:
    fleet = completed(12)
    start = len(fleet.outcomes)
    fleet.send(app("v2"))
    assert fleet.record("app").resorting == "c-02"  # the event's three moves: c-00, c-01, c-02 re-sorted
    assert len(fleet.last.target_status) <= LIMIT
    assert fleet.phase("app") == "Progressing"
    assert "re-sorting its 12 members in name order (up to cluster c-02)" in fleet.status("app")["waiting"]
    assert resort_the_rest(fleet) == 3  # c-03..c-05, c-06..c-08, c-09..c-11
    assert moved_to(fleet, "v2", fleet.outcomes[start:]) == []  # nothing moved on half-sorted members
    (more,) = fleet.last.dependency_events  # the last slice spent the event's moves: the canary starts next
    fleet.send(more)
    assert moved_to(fleet, "v2", fleet.outcomes[-1:]) == ["c-00", "c-01"]
    assert all(len(o.target_status) <= LIMIT for o in fleet.outcomes[start:])
    assert "re-sorting" not in fleet.status("app").get("waiting", "")


def test_a_sliced_re_sort_decides_what_one_unbounded_fold_decides() -> None:
    runs = []
    for limit in (LIMIT, None):
        fleet = completed(12, limit=limit)
        fleet.feedback = True
        fleet.send(app("v2", sorting="rollout.dev/order"))  # a new revision and a new moving order
        fleet.send(cluster("c-05", {"ring": "canary"}))  # relabelled into the canary after its re-sort
        fleet.succeed_all("app", "v2")
        fleet.succeed_all("app", "v2")
        runs.append(fleet)
    sliced, unbounded = runs
    assert decided(sliced) == decided(unbounded)
    assert sliced.assigned("app") == unbounded.assigned("app")
    assert sliced.phase("app") == unbounded.phase("app") == "Complete"


def test_a_module_applied_again_while_it_re_sorts_starts_the_re_sort_again() -> None:
    fleet = completed(12)
    fleet.send(app("v2"))
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    assert fleet.record("app").resorting == "c-05"
    fleet.send(app("v3"))  # every member's place depends on the newest spec: from the first cluster again
    assert fleet.record("app").resorting == "c-02"
    resort_the_rest(fleet)
    fleet.feedback = True
    fleet.send(*fleet.last.dependency_events)  # the continuation the last slice asked for: the canary moves
    fleet.succeed_all("app", "v3")
    fleet.succeed_all("app", "v3")
    assert fleet.on("app", "v2") == []  # superseded before a member moved to it
    assert fleet.on("app", "v3") == [f"c-{i:02d}" for i in range(12)]
    assert fleet.phase("app") == "Complete"


def test_a_rollback_re_sort_moves_each_member_back_as_it_reaches_it() -> None:
    fleet = completed(12)
    fleet.feedback = True
    fleet.send(app("v2"))
    fleet.succeed_all("app", "v2")
    fleet.succeed_all("app", "v2")
    assert fleet.on("app", "v2") == [f"c-{i:02d}" for i in range(12)] and fleet.phase("app") == "Complete"
    fleet.send(app("v3"))  # the wave of v3 updates; then rolled back by hand
    fleet.succeed("app", "c-00", "c-01")
    fleet.feedback = False
    start = len(fleet.outcomes)
    fleet.rollback("app")
    assert fleet.record("app").resorting == "c-02" and fleet.phase("app") == "RollingBack"
    assert moved_to(fleet, "v2", fleet.outcomes[start:]) == ["c-00", "c-01", "c-02"]  # protected from the first event
    assert "each member goes back to stable as it is reached" in fleet.status("app")["waiting"]
    events = resort_the_rest(fleet)
    assert events == 3  # as many events as the moves themselves: one per three members
    assert all(len(o.assignments) <= LIMIT for o in fleet.outcomes[start:])
    assert set(fleet.assigned("app").values()) == {"v2"}
    fleet.succeed_all("app", "v2")
    assert fleet.phase("app") == "RolledBack"


def test_a_rollback_while_the_module_re_sorts_re_sorts_again_from_the_first_member() -> None:
    fleet = completed(12)
    fleet.send(app("v2"))
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    assert fleet.record("app").resorting == "c-05"
    fleet.rollback("app")  # every category changes with the mode: the re-sort starts again
    record = fleet.record("app")
    assert record.mode == "rollback" and record.resorting == "c-02"
    resort_the_rest(fleet)
    assert set(fleet.assigned("app").values()) == {"v1"}  # v2 never reached a member
    assert fleet.phase("app") == "RolledBack"


def test_members_updating_on_the_superseded_revision_are_not_failed_by_the_deadline_during_a_re_sort() -> None:
    fleet = fleet_of(12, feedback=True)
    fleet.send(app(deadline="5m"))
    fleet.succeed("app", "c-00", "c-01")
    fleet.succeed_all("app", "v1")
    fleet.send(app("v2", deadline="5m"))
    fleet.succeed_all("app", "v2")  # the canary succeeds: the wave of ten updates to v2
    fleet.feedback = False
    fleet.send(app("v3", deadline="5m"))  # c-00..c-02 re-sorted in this event, c-03..c-11 not yet
    fleet.wait(600)  # the wave updating for longer than its deadline, but on v2, no longer the target
    assert [d.cluster for d in fleet.last.decisions if d.action == DecisionAction.FAILED] == []
    assert fleet.record("app").resorting is not None


def test_an_auto_promotion_re_sorts_the_members_in_slices_before_any_member_moves() -> None:
    fleet = fleet_of(12)
    auto = {"semver": ">=1.0.0 <2.0.0"}
    fleet.send(app("1.0.0", auto_promote=auto))
    fleet.succeed("app", "c-00", "c-01")
    fleet.succeed_all("app", "1.0.0")
    assert fleet.phase("app") == "Complete"
    fleet.feedback = False
    start = len(fleet.outcomes)
    fleet.send(promotion("app", "1.1.0"))  # a new target: every member pending again, in slices
    assert fleet.record("app").resorting == "c-02"
    assert resort_the_rest(fleet) == 3
    assert moved_to(fleet, "1.1.0", fleet.outcomes[start:]) == []
    fleet.send(*fleet.last.dependency_events)
    assert moved_to(fleet, "1.1.0", fleet.outcomes[-1:]) == ["c-00", "c-01"]
    assert all(len(o.target_status) <= LIMIT for o in fleet.outcomes[start:])


def test_a_redelivered_continuation_of_a_re_sort_changes_nothing() -> None:
    fleet = completed(12)
    fleet.send(app("v2"))
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    before = fleet.snapshot()
    assert serialize(fleet.engine.handle(first)) == serialize(Outcome())
    assert fleet.snapshot() == before


def test_a_re_apply_to_5000_clusters_writes_at_most_a_slice_of_records_per_event() -> None:
    """The per-event bound at the engine's own limit: a new revision of a module on 5,000
    clusters re-sorts them in three events of at most MOVES_PER_EVENT target documents,
    decisions and assignments each — not one event of 5,000."""
    size = 5_000
    fleet = Fleet()
    fleet.check_each_event = False  # a recount of 5,000 targets after every event: too slow here
    fleet.tick(T0)
    fleet.send(*[cluster(f"c-{i:05d}", {"ring": "canary" if i < 2 else "wave"}) for i in range(size)])
    fleet.send(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", {"ring": "wave"})))
    assert len(fleet.targets) == size
    start = len(fleet.outcomes)
    fleet.send(module("app", {}, "v2", stage("canary", {"ring": "canary"}), stage("wave", {"ring": "wave"})))
    outcomes = fleet.outcomes[start:]
    assert len(outcomes) == 3  # the apply and two continuations: 1,999 + 2,000 + 1,001 members
    for outcome in outcomes:
        assert len(outcome.target_status) <= MOVES_PER_EVENT
        assert len(outcome.decisions) <= MOVES_PER_EVENT + 2  # and a new-revision, a stage started
        assert len(outcome.assignments) <= MOVES_PER_EVENT
    assert fleet.record("app").resorting is None
    assert len(fleet.on("app", "v2")) == 2  # the canary started once every member was re-sorted


# -- deletes per event (rule 9) ----------------------------------------------------------------


def delete_the_rest(fleet: Fleet, name: str = "app") -> int:
    """Feed the latest continuation asked for, one at a time, until `name`'s deletion removed
    every member's sync; how many events that took."""
    fed = 0
    while (tombstone := fleet.state["deleted_modules"].get(name)) is not None and tombstone.unassigning is not None:
        latest = next(outcome for outcome in reversed(fleet.outcomes) if outcome.dependency_events)
        fleet.send(latest.dependency_events[-1])
        fed += 1
    return fed


def unassigned(outcomes: list[Outcome]) -> list[str]:
    return [a.cluster for outcome in outcomes for a in outcome.assignments if a.sync is None]


def test_a_module_deleted_from_more_members_than_the_limit_removes_their_syncs_in_slices_in_name_order() -> None:
    fleet = completed(12)
    start = len(fleet.outcomes)
    fleet.delete("app")
    assert "app" not in fleet.modules  # deleted from the first slice on: nothing moves it any more
    assert unassigned(fleet.outcomes[start:]) == ["c-00", "c-01", "c-02"]
    status = fleet.status("app")
    assert status["phase"] == "Deleting"
    assert status["waiting"] == "deleted: removing its sync from its 9 members left, in name order (up to cluster c-02)"
    assert delete_the_rest(fleet) == 3
    assert all(len(outcome.assignments) <= LIMIT for outcome in fleet.outcomes[start:])
    assert unassigned(fleet.outcomes[start:]) == [f"c-{i:02d}" for i in range(12)]
    assert fleet.assigned("app") == {}
    assert fleet.decisions[-1].action == DecisionAction.DELETED  # once the last member's sync is gone
    assert fleet.module_status["app"] is None


def test_a_sliced_delete_decides_what_one_unbounded_fold_decides() -> None:
    runs = []
    for limit in (LIMIT, None):
        fleet = completed(12, limit=limit)
        fleet.feedback = True
        fleet.delete("app")
        runs.append(fleet)
    sliced, unbounded = runs
    assert len(continuations(sliced)) > len(continuations(unbounded))
    assert decided(sliced) == decided(unbounded)
    assert sliced.assemblages == unbounded.assemblages
    assert sliced.snapshot()["targets"] == unbounded.snapshot()["targets"] == {}


def test_a_module_with_no_more_members_than_the_limit_is_deleted_in_one_event_whatever_the_fleet() -> None:
    fleet = fleet_of(12, feedback=False)
    joined(fleet, module("small", {"ring": "canary"}, "v1", stage("all", None)))
    fleet.succeed_all("small", "v1")
    fleet.delete("small")  # 2 members in a fleet of 12: no walk of the fleet, no continuation
    assert fleet.last.dependency_events == []
    assert fleet.assigned("small") == {} and fleet.module_status["small"] is None


def test_a_cluster_removed_while_its_module_is_deleted_loses_the_modules_sync_at_once() -> None:
    fleet = completed(12)
    fleet.delete("app")
    fleet.send(removed("c-09"))  # not reached yet by the slices, which walk the fleet it has left
    assert fleet.revision("app", "c-09") is None and fleet.target("app", "c-09") is None
    assert fleet.state["deleted_modules"]["app"].members_left == 8
    delete_the_rest(fleet)
    assert fleet.assigned("app") == {}


def test_a_module_applied_again_while_it_is_deleted_is_held_until_its_syncs_are_removed() -> None:
    fleet = completed(12)
    generation = fleet.record("app").generation
    fleet.delete("app")
    fleet.send(app("v2"))
    assert [d.because.code for d in fleet.last.decisions] == ["held-for-deletion"]
    assert "app" not in fleet.modules
    assert (
        fleet.status("app")["held"]["reason"] == "waiting for the module's deletion to finish (9 members' syncs left)"
    )
    delete_the_rest(fleet)  # the last slice creates it again: a new module, joining the fleet
    record = fleet.record("app")
    assert record.generation == generation + 1 and record.revisions[record.target].revision == "v2"
    fleet.feedback = True
    fleet.send(*fleet.last.dependency_events)
    assert fleet.on("app", "v2") == ["c-00", "c-01"] and fleet.on("app", "v1") == []  # no old Target kept


def test_a_command_for_a_module_being_deleted_is_refused_as_for_a_deleted_module() -> None:
    fleet = completed(12)
    fleet.delete("app")
    fleet.rollback("app")
    assert fleet.last.rejections == ["module 'app' not found"]
    assert fleet.state["deleted_modules"]["app"].members_left == 9


def test_a_redelivered_continuation_of_a_delete_changes_nothing() -> None:
    fleet = completed(12)
    fleet.delete("app")
    (first,) = fleet.last.dependency_events
    fleet.send(first)
    before = fleet.snapshot()
    assert serialize(fleet.engine.handle(first)) == serialize(Outcome())
    assert fleet.snapshot() == before


def test_a_restart_in_the_middle_of_a_delete_goes_on_where_it_stopped() -> None:
    fleet = completed(12)
    fleet.delete("app")
    fleet.send(fleet.last.dependency_events[-1])
    fleet.restart()
    assert delete_the_rest(fleet) == 2
    assert fleet.assigned("app") == {} and fleet.targets == {}


def test_a_delete_of_5000_members_writes_at_most_a_slice_of_records_per_event() -> None:
    """The per-event bound at the engine's own limit: a module on 5,000 clusters deleted in
    three events of at most MOVES_PER_EVENT target documents, decisions and assignments each."""
    size = 5_000
    fleet = Fleet()
    fleet.check_each_event = False  # a recount of 5,000 targets after every event: too slow here
    fleet.tick(T0)
    fleet.send(*[cluster(f"c-{i:05d}", {"ring": "wave"}) for i in range(size)])
    fleet.send(module("app", {}, "v1", stage("all", None)))
    assert len(fleet.on("app", "v1")) == size
    start = len(fleet.outcomes)
    fleet.delete("app")
    outcomes = fleet.outcomes[start:]
    assert len(outcomes) == 3  # the delete and two continuations: 2,000 + 2,000 + 1,000 members
    for outcome in outcomes:
        assert len(outcome.target_status) <= MOVES_PER_EVENT
        assert len(outcome.decisions) <= MOVES_PER_EVENT + 1  # and the module's deleted
        assert len(outcome.assignments) <= MOVES_PER_EVENT
    assert fleet.targets == {} and fleet.assigned("app") == {}


# -- rule 10: first tells per event ----------------------------------------------------------


def dependent(tag: str = "d1") -> Any:
    """A module depending on app, on every cluster of the fleet."""
    return module("dep", {}, tag, stage("all", None), depends_on=["app"])


def told(outcomes: list[Outcome]) -> list[list[str]]:
    """Per event, the clusters app told dep it is ready on."""
    return [
        [e.cluster for e in outcome.dependency_events if isinstance(e, DependencyReported) and e.dependent == "dep"]
        for outcome in outcomes
    ]


def linked(fleet: Fleet) -> DependentLinked:
    """The DependentLinked the last event sent (feedback off)."""
    return next(event for event in fleet.last.dependency_events if isinstance(event, DependentLinked))


def test_a_new_dependent_is_told_where_its_dependency_is_ready_in_slices_in_name_order() -> None:
    fleet = completed(12)  # app ready on all 12
    start = len(fleet.outcomes)
    fleet.feedback = True
    fleet.send(dependent())
    slices = [clusters for clusters in told(fleet.outcomes[start:]) if clusters]
    assert all(len(clusters) <= LIMIT for clusters in slices)  # each event tells at most a slice
    assert len(slices) == 4 and [c for clusters in slices for c in clusters] == [f"c-{i:02d}" for i in range(12)]
    assert all(link.telling is None for link in fleet.state["dependents"]["app"].links.values())
    assert all(fleet.state["upstream"][f"app/c-{i:02d}"].ready for i in range(12))
    fleet.succeed_all("dep", "d1")
    assert fleet.phase("dep") == "Complete"


def test_a_sliced_first_tell_decides_what_one_unbounded_fold_decides() -> None:
    runs = []
    for limit in (LIMIT, None):
        fleet = completed(12, limit=limit)
        fleet.feedback = True
        fleet.send(dependent())
        fleet.succeed_all("dep", "d1")
        runs.append(fleet)
    sliced, unbounded = runs
    assert len(continuations(sliced)) > len(continuations(unbounded))
    assert decided(sliced) == decided(unbounded)
    assert sliced.assemblages == unbounded.assemblages
    assert sliced.snapshot()["upstream"] == unbounded.snapshot()["upstream"]


def test_a_new_dependent_of_a_module_with_few_members_is_told_in_one_event_whatever_the_fleet() -> None:
    fleet = fleet_of(12, feedback=False)
    joined(fleet, module("app", {"ring": "canary"}, "v1", stage("all", None)))
    fleet.succeed_all("app", "v1")  # app on 2 clusters of 12
    fleet.send(dependent())
    outcome = fleet.send(linked(fleet))  # the DependentLinked, in app's partition: no walk of the fleet
    assert told([outcome]) == [["c-00", "c-01"]]
    assert not any(isinstance(event, RolloutContinued) for event in outcome.dependency_events)


def test_a_dependent_awaiting_its_dependencys_apply_hears_it_after_the_last_slice_of_its_first_tell() -> None:
    fleet = completed(12)
    again = applied(app())  # app applied again as it was, with its new dependent in one apply
    fleet.send(again)
    fleet.send(applied(dependent(), after={"app": again.id}))
    first, awaiting = [event for event in fleet.last.dependency_events if isinstance(event, DependentLinked)]
    assert awaiting.after == again.id
    fleet.send(first)  # the first tell starts: a slice, and app asks to be continued
    continuation = fleet.last.dependency_events[-1]
    fleet.send(awaiting)  # dep asks for its answer while the tell goes on: none yet
    assert not any(isinstance(event, DependencyCurrent) for event in fleet.last.dependency_events)
    fleet.feedback = True
    fleet.send(continuation)  # the slices after: the answer with the last, after its reports
    answered = [o for o in fleet.outcomes if any(isinstance(e, DependencyCurrent) for e in o.dependency_events)]
    assert told(answered) == [["c-09", "c-10", "c-11"]]
    assert isinstance(answered[0].dependency_events[-1], DependencyCurrent)
    assert [c for clusters in told(fleet.outcomes) for c in clusters] == [f"c-{i:02d}" for i in range(12)]
    assert fleet.record("dep").awaiting == {}


def test_a_redelivered_continuation_of_a_first_tell_changes_nothing() -> None:
    fleet = completed(12)
    fleet.send(dependent())
    fleet.send(linked(fleet))  # the DependentLinked: a first slice, then a continuation
    continuation = fleet.last.dependency_events[-1]
    assert isinstance(continuation, RolloutContinued)
    fleet.send(continuation)
    state = fleet.snapshot()
    assert serialize(fleet.engine.handle(continuation)) == serialize(Outcome())
    assert fleet.snapshot() == state


def test_a_restart_in_the_middle_of_a_first_tell_goes_on_where_it_stopped() -> None:
    fleet = completed(12)
    fleet.send(dependent())
    fleet.send(linked(fleet))
    assert fleet.state["dependents"]["app"].links["dep"].telling == "c-02"
    fleet.restart()
    fleet.feedback = True
    fleet.send(fleet.last.dependency_events[-1])
    assert [c for clusters in told(fleet.outcomes) for c in clusters] == [f"c-{i:02d}" for i in range(12)]


class LookedUp(dict[str, Any]):
    """The targets table, counting the lookups."""

    looked = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.looked += 1
        return super().get(key, default)


def test_a_module_applied_looks_up_no_more_targets_than_the_clusters_its_first_slice_joins() -> None:
    fleet = fleet_of(12, feedback=False)
    targets = LookedUp(fleet.targets)
    fleet.state["targets"] = targets
    fleet.engine = fleet._new_engine()
    fleet.send(app())  # a new module has no Target: its indexes start empty, no look at the fleet
    assert targets.looked <= 2 * LIMIT
    assert fleet.record("app").joining == "c-02"
