"""Delivery: redelivery, causal order across topics, clock jumps, status matched by
generation, and the state the runtime changelogs (docs/rollout-semantics.md, "Delivery").

Given/when/then, one rule a test, named after the rule.
"""

from __future__ import annotations

import copy
import inspect
import json
from typing import Any

from rollout.engine.core import MAX_TICK_STEP, Outcome, RolloutEngine, new_engine
from rollout.engine.state import ENGINE_MAPPINGS, HELD_INTENTS_PER_MODULE, ModuleRecord, held_key
from rollout.wire.events import HolderClaims, RestrictionApplied, claim_chunk
from tests.rollout.builders import (
    T0,
    Fleet,
    applied,
    cluster,
    command,
    deleted,
    fleet_seen,
    freeze_calendar,
    given,
    module,
    observed,
    removed,
    reported,
    restriction,
    serialize,
    stage,
    tick,
)
from tests.rollout.test_helm_releases import helm_module, values_observed

NOTHING = serialize(Outcome())
STAGED = (stage("canary", {"ring": "canary"}), stage("wave"))


def staged(tag: str, **kwargs: Any) -> Any:
    return module("app", {}, tag, *STAGED, **kwargs)


# --- redelivery ---------------------------------------------------------------------------


def test_redelivered_module_applied_pair_does_not_raise_generation() -> None:
    fleet = given(cluster("c", {"ring": "canary"}), cluster("w"), staged("1.0.0"))
    fleet.succeed("app", "c")
    first, second = applied(staged("1.1.0")), applied(staged("1.2.0"))
    fleet.send(first, second)
    assert fleet.record("app").target == 3 and fleet.revision("app", "c") == "1.2.0"
    before = fleet.snapshot()
    assert serialize(fleet.send(first, second)) == NOTHING
    assert fleet.snapshot() == before
    assert fleet.record("app").target == 3 and fleet.revision("app", "c") == "1.2.0"


def test_redelivered_module_applied_after_delete_does_not_recreate_module() -> None:
    apply = applied(module("app", {}, "v1"))
    fleet = given(cluster("a"), apply)
    fleet.delete("app")
    before = fleet.snapshot()
    assert serialize(fleet.send(apply)) == NOTHING
    assert "app" not in fleet.modules and fleet.snapshot() == before


def test_redelivered_module_deleted_after_recreation_does_not_delete_it() -> None:
    delete = deleted("app")
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.send(delete)
    fleet.apply(module("app", {}, "v2"))
    assert serialize(fleet.send(delete)) == NOTHING
    assert fleet.revision("app", "a") == "v2"


def test_module_created_again_continues_its_generations() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.apply(module("app", {}, "v2"))
    fleet.delete("app")
    fleet.apply(module("app", {}, "v1"))
    assert fleet.record("app").target == 3
    assert fleet.assemblages[("a", "app")].generation == 3


def test_redelivered_command_after_delete_is_not_rejected_again() -> None:
    pause = command("app", "pause")
    fleet = given(cluster("a"), module("app", {}, "v1"), pause)
    fleet.delete("app")
    assert serialize(fleet.send(pause)) == NOTHING


def test_redelivered_command_to_unknown_module_does_not_apply_once_it_exists() -> None:
    pause = command("app", "pause")
    fleet = given(cluster("a"), pause)
    assert fleet.rejections == ["module 'app' not found"]
    fleet.apply(module("app", {}, "v1"))
    fleet.send(pause)
    assert not fleet.record("app").paused


def test_removed_cluster_does_not_come_back_on_redelivered_observation() -> None:
    seen = observed(cluster("b"))
    fleet = given(cluster("a"), seen, module("app", {}, "v1"))
    fleet.remove("b")
    before = fleet.snapshot()
    assert serialize(fleet.send(seen)) == NOTHING
    assert "b" not in fleet.clusters and fleet.snapshot() == before
    assert fleet.assigned("app") == {"a": "v1"}


def test_redelivered_removal_does_not_remove_a_cluster_observed_again() -> None:
    remove = removed("b")
    fleet = given(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.send(remove)
    fleet.apply(cluster("b"))
    assert serialize(fleet.send(remove)) == NOTHING
    assert fleet.revision("app", "b") == "v1"


def test_redelivered_status_report_after_the_cluster_rejoined_changes_nothing() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    report = reported("app", "a", "v1", "succeeded")
    fleet.send(report)
    fleet.remove("a")
    fleet.apply(cluster("a"))
    assert fleet.category("app", "a") == "updating"
    assert serialize(fleet.send(report)) == NOTHING
    assert fleet.category("app", "a") == "updating"


def test_redelivered_status_report_after_its_module_came_back_changes_nothing() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    report = reported("app", "a", "v1", "succeeded")
    fleet.send(report)
    fleet.delete("app")  # the target goes: its report ids stay with the cluster
    fleet.apply(module("app", {}, "v1"))
    assert fleet.category("app", "a") == "updating"
    assert serialize(fleet.send(report)) == NOTHING
    assert fleet.category("app", "a") == "updating"


def test_redelivered_status_report_after_the_cluster_was_reselected_changes_nothing() -> None:
    fleet = given(cluster("a", {"env": "prod"}), module("app", {"env": "prod"}, "v1"))
    report = reported("app", "a", "v1", "succeeded")
    fleet.send(report)
    fleet.apply(cluster("a", {"env": "dev"}))  # deselected: its target is deleted
    fleet.apply(cluster("a", {"env": "prod"}))
    assert fleet.category("app", "a") == "updating"
    assert serialize(fleet.send(report)) == NOTHING
    assert fleet.category("app", "a") == "updating"


def test_a_counted_report_is_remembered_on_its_target_not_on_the_cluster() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    before = fleet.snapshot()["clusters"]
    report = reported("app", "a", "v1", "succeeded")
    fleet.send(report)
    snapshot = fleet.snapshot()
    assert snapshot["clusters"] == before  # one state record per report: the target's
    assert snapshot["targets"]["app/a"]["report_ids"] == [report.id]


def test_redelivered_suffix_of_a_scenario_emits_nothing() -> None:
    fleet = given(cluster("c", {"ring": "canary"}), cluster("w"), cluster("x", ready=False))
    fleet.apply(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=True)))
    fleet.succeed("app", "c")
    fleet.approve("app", "wave")
    fleet.succeed("app", "w")
    fleet.remove("w")
    fleet.apply(module("app", {}, "v2", stage("canary", {"ring": "canary"}), stage("wave", approval=True)))
    fleet.delete("app")
    journal = list(fleet.journal)
    expected = fleet.snapshot()
    for start in range(len(journal)):
        for event in journal[start:]:
            assert serialize(fleet.engine.handle(event)) == NOTHING, f"re-fed {event.type} emitted"
        assert fleet.snapshot() == expected


# --- clock ---------------------------------------------------------------------------------


def test_first_tick_sets_the_clock_directly() -> None:
    fleet = given(at=None)
    fleet.tick(1_700_000_000.0)
    assert fleet.now == 1_700_000_000.0


def test_tick_far_ahead_moves_the_clock_by_at_most_an_hour() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1", deadline="90m"))
    fleet.tick(T0 + 10 * 24 * 3600)  # one bogus tick, ten days ahead
    assert fleet.now == T0 + MAX_TICK_STEP
    assert fleet.category("app", "a") == "updating"  # the 90m deadline has not passed yet
    fleet.tick(T0 + 10 * 24 * 3600 + 10)  # the next tick: another step
    assert fleet.now == T0 + 2 * MAX_TICK_STEP
    assert fleet.category("app", "a") == "failed"


def test_tick_within_an_hour_sets_the_clock_to_it() -> None:
    fleet = given()
    fleet.tick(T0 + MAX_TICK_STEP)
    assert fleet.now == T0 + MAX_TICK_STEP


def test_redelivered_capped_tick_does_not_move_the_clock_again() -> None:
    jump = tick(T0 + 5 * MAX_TICK_STEP)
    fleet = given()
    fleet.send(jump)
    before = fleet.snapshot()
    assert serialize(fleet.send(jump)) == NOTHING
    assert fleet.snapshot() == before and fleet.now == T0 + MAX_TICK_STEP


# --- status matched by generation ----------------------------------------------------------


def test_report_for_another_generation_with_the_same_tag_is_ignored() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1", path="./one"))
    fleet.apply(module("app", {}, "v1", path="./two"))  # same tag, new generation
    assert fleet.assemblages[("a", "app")].generation == 2
    late = fleet.send(reported("app", "a", "v1", "succeeded", generation=1))
    assert serialize(late) == NOTHING and fleet.category("app", "a") == "updating"
    fleet.send(reported("app", "a", "v1", "succeeded", generation=2))
    assert fleet.category("app", "a") == "succeeded"


def test_report_without_generation_is_matched_by_revision() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.send(reported("app", "a", "v1", "succeeded"))
    assert fleet.category("app", "a") == "succeeded"


def test_assigned_sync_carries_its_generation() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.apply(module("app", {}, "v2"))
    sync = fleet.assemblages[("a", "app")]
    assert sync.generation == 2
    assert sync.model_dump(by_alias=True)["generation"] == 2


# --- causal order --------------------------------------------------------------------------


def test_module_applied_before_its_fleet_is_seen_is_not_staged() -> None:
    fleet = given(cluster("w"))
    outcome = fleet.send(applied(staged("v1"), fleet={0: 2}))
    assert outcome.assignments == [] and "app" not in fleet.modules
    status = fleet.status("app")
    assert status["phase"] == "Pending"
    assert status["held"]["waitingFor"] == {"0": 2}
    assert "waiting for cluster observations up to partition 0 offset 2" in status["reason"]
    fleet.send(fleet_seen(0, 1))  # not far enough yet
    assert "app" not in fleet.modules


def test_canaries_move_first_once_the_fleet_is_seen() -> None:
    fleet = given(cluster("w"))
    fleet.send(applied(staged("v1"), fleet={0: 2}))
    fleet.apply(cluster("c", {"ring": "canary"}))  # the observation the publisher knew of
    fleet.send(fleet_seen(0, 2))
    assert fleet.moved() == [("c", "v1")]
    assert "stage-skipped" not in fleet.actions("app")
    assert fleet.revision("app", "w") is None
    fleet.succeed("app", "c")
    assert fleet.revision("app", "w") == "v1"


def test_command_sent_after_a_held_apply_is_applied_after_it() -> None:
    fleet = given(cluster("c", {"ring": "canary"}), cluster("w"))
    fleet.send(applied(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=True))))
    fleet.succeed("app", "c")
    assert fleet.phase("app") == "AwaitingApproval"
    fleet.send(applied(module("app", {}, "v2", *STAGED[:1], stage("wave", approval=True)), fleet={0: 5}))
    outcome = fleet.send(command("app", "approve", stage="wave"))  # meant for v2
    assert outcome.rejections == [] and fleet.record("app").approvals == []
    assert fleet.status("app")["held"]["intents"] == 2
    fleet.send(fleet_seen(0, 5))
    assert fleet.record("app").target == 2
    assert fleet.record("app").approvals == ["wave"]
    assert "held" not in fleet.status("app")


def test_intents_of_a_module_keep_their_order_behind_a_held_apply() -> None:
    fleet = given(cluster("a"))
    fleet.send(applied(module("app", {}, "v1"), fleet={0: 1}), deleted("app"), applied(module("app", {}, "v2")))
    assert fleet.modules == {}
    fleet.send(fleet_seen(0, 1))
    assert fleet.revision("app", "a") == "v2"
    lifecycle = [a for a in fleet.actions("app") if a in ("held", "created", "deleted")]
    assert lifecycle == ["held", "held", "held", "created", "deleted", "created"]


def test_redelivered_held_apply_is_held_once() -> None:
    apply = applied(module("app", {}, "v1"), fleet={0: 1})
    fleet = given(cluster("a"), apply)
    assert serialize(fleet.send(apply)) == NOTHING
    fleet.send(fleet_seen(0, 1))
    assert fleet.actions("app").count("created") == 1
    assert serialize(fleet.send(apply)) == NOTHING


def test_held_intents_beyond_the_bound_are_dead_lettered() -> None:
    fleet = given(cluster("a"), applied(module("app", {}, "v1"), fleet={0: 1}))
    for _ in range(HELD_INTENTS_PER_MODULE - 1):
        fleet.send(command("app", "pause"))
    assert fleet.rejections == []
    fleet.send(command("app", "resume"))
    assert len(fleet.rejections) == 1 and "dropped" in fleet.rejections[0]


def test_fleet_seen_positions_only_grow() -> None:
    fleet = given(cluster("a"))
    fleet.send(fleet_seen(0, 5), fleet_seen(0, 3))
    fleet.send(applied(module("app", {}, "v1"), fleet={0: 4}))
    assert fleet.revision("app", "a") == "v1"


def test_stage_without_members_is_skipped_with_a_decision() -> None:
    fleet = given(cluster("w"), staged("v1"))
    skipped = [d.reason for d in fleet.decisions if d.action == "stage-skipped"]
    assert skipped == ["stage canary has no members: skipped"]
    assert fleet.revision("app", "w") == "v1"


def test_empty_stage_still_waits_for_its_approval() -> None:
    fleet = given(
        cluster("w"), module("app", {}, "v1", stage("canary", {"ring": "canary"}, approval=True), stage("wave"))
    )
    assert fleet.phase("app") == "AwaitingApproval" and fleet.revision("app", "w") is None
    fleet.approve("app", "canary")
    assert fleet.revision("app", "w") == "v1"


# --- the state the runtime keeps -----------------------------------------------------------


def test_engine_mappings_name_every_constructor_argument() -> None:
    parameters = inspect.signature(RolloutEngine.__init__).parameters
    assert set(parameters) - {"self", "partition"} == set(ENGINE_MAPPINGS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in parameters.items() if name != "self")
    engine = new_engine(3)
    assert engine.partition == 3


def test_module_record_written_with_handled_commands_still_loads() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    stored = fleet.record("app").model_dump(mode="json")
    stored["handled_commands"] = [*stored.pop("handled_intents"), "old"]
    assert ModuleRecord.model_validate(stored).handled_intents[-1] == "old"


def run_journal(journal: list[Any], *, discard_every: int | None) -> list[dict[str, Any]]:
    """Fold `journal`; with `discard_every`, each such event is first handled, its writes
    discarded (the mappings put back as they were) and indexes reset, then handled again —
    what the runtime does after an error before the commit."""
    fleet = Fleet()
    fleet.check_each_event = False
    outcomes = []
    for position, event in enumerate(journal):
        if discard_every and position % discard_every == 0:
            saved = copy.deepcopy(fleet.state)
            fleet.engine.handle(event)
            for name, mapping in fleet.state.items():
                mapping.clear()
                mapping.update(saved[name])
            fleet.engine.reset_indexes()
        outcomes.append(serialize(fleet.engine.handle(event)))
    return outcomes


def test_discarded_writes_and_reset_indexes_give_the_same_outcomes() -> None:
    source = given(cluster("c", {"ring": "canary"}), cluster("w"), cluster("v"))
    source.apply(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", concurrency=1)))
    source.succeed("app", "c")
    source.wait(60)
    source.succeed("app", "v")
    source.remove("w")
    source.apply(module("app", {}, "v2", stage("canary", {"ring": "canary"}), stage("wave", concurrency=1)))
    journal = list(source.journal)
    assert run_journal(journal, discard_every=2) == run_journal(journal, discard_every=None)


def test_every_state_value_is_json() -> None:
    fleet = given(cluster("a"), cluster("b"), applied(module("app", {}, "v1"), fleet={0: 1}))
    fleet.send(fleet_seen(0, 0), applied(module("base", {}, "v1")), tick(T0 + 5 * MAX_TICK_STEP))
    fleet.send(helm_module(), values_observed("a", {"replicaCount": 3}))
    fleet.send(applied(module("dep", {}, "d1")), applied(module("top", {}, "v1", depends_on=["dep"])))
    fleet.send(reported("dep", "a", "d1", "succeeded"))
    fleet.delete("base")
    fleet.remove("b")
    fleet.send(RestrictionApplied(restriction=restriction("tenant-a")))
    fleet.send(HolderClaims(holder="applier-0", chunk=claim_chunk("a"), clusters=["a"]))
    weekend = {"name": "weekend", "schedule": "0 16 * * 5", "duration": "64h", "timeZone": "Europe/Berlin"}
    fleet.send(freeze_calendar("weekends", weekend))
    for name, mapping in fleet.snapshot().items():
        assert mapping or name in ("modules", "targets"), f"the scenario left {name} empty"
        json.dumps(mapping, allow_nan=False)


def test_a_held_intent_this_release_can_no_longer_read_is_dead_lettered_and_the_ones_behind_it_go_on() -> None:
    # given an apply held by an earlier release, whose JSON a tightened rule now refuses,
    # with a later apply of the same module held behind it
    fleet = given(cluster("a"))
    fleet.send(applied(module("app", {}, "v1"), fleet={0: 1}), applied(module("app", {}, "v2")))
    held = fleet.state["held_intents"]
    first = min(held.values(), key=lambda intent: intent.seq)
    stored = json.loads(first.event)
    stored["module"]["metadata"]["name"] = "App_As_Once_Allowed"  # what today's rules refuse
    held[held_key("app", first.seq)] = first.model_copy(update={"event": json.dumps(stored)})
    # when the fleet it waited for has been seen
    out = fleet.send(fleet_seen(0, 1))
    # then it is dropped with a dead letter and a refused verdict saying what to do, and the
    # apply behind it is applied: nothing is stuck
    [reason] = out.rejections
    assert reason.startswith(f"held ModuleApplied {first.id} of module app can no longer be read by this release")
    assert "metadata.name" in reason and reason.endswith("dropped; apply the module again")
    assert (out.verdicts[0].event, out.verdicts[0].accepted) == (first.id, False)
    assert fleet.revision("app", "a") == "v2" and fleet.state["held_queues"] == {} and held == {}
