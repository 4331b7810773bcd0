"""Churn-proof runs (docs/rollout-semantics.md, "Churn-proof runs"; rollout/engine/runs.py):
one given/when/then test per rule."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from rollout.engine.state import DEPARTURES_KEPT
from tests.rollout.builders import (
    T0,
    cluster,
    cluster_command,
    given,
    heartbeat,
    module,
    stage,
)

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
EVENINGS = {"schedule": "0 22 * * 1-5", "duration": "4h", "timeZone": "Europe/Berlin"}


def app(tag: str = "v1", **limits: Any) -> Any:
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE, **limits))


def held(name: str, labels: dict[str, str], *, reason: str = "", until: float | None = None) -> Any:
    annotations = {"rollout.dev/hold": "true"}
    if reason:
        annotations["rollout.dev/hold-reason"] = reason
    if until is not None:
        annotations["rollout.dev/hold-until"] = datetime.fromtimestamp(until, tz=UTC).isoformat()
    return cluster(name, labels, annotations=annotations)


# -- a run fixes its membership ------------------------------------------------------------


def test_a_run_fixes_its_membership_per_stage_when_it_starts() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), app())
    run = fleet.run("app")
    assert (run["number"], run["mode"], run["generation"]) == (1, "rollout", 1)
    assert run["stages"] == {"canary": {"members": 1, "left": 0}, "wave": {"members": 2, "left": 0}}
    assert run["startedAt"] == T0


def test_each_new_generation_and_each_rollback_starts_a_run_of_its_own() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app("v1"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(app("v2"))
    assert (fleet.run("app")["number"], fleet.run("app")["generation"]) == (2, 2)
    fleet.rollback("app")
    run = fleet.run("app")
    assert (run["number"], run["mode"], run["generation"]) == (3, "rollback", 1)


def test_stage_budget_counts_against_the_fixed_member_set() -> None:
    # the wave's 4 members at 50 %: 2 at once, however many of them leave mid-run
    fleet = given(cluster("c1", CANARY), *(cluster(f"w{i}", WAVE) for i in range(1, 5)), app(concurrency="50%"))
    fleet.succeed("app", "c1")
    assert fleet.on("app", "v1") == ["c1", "w1", "w2"]
    fleet.remove("w3")  # 3 members now: 50 % of them would be 1
    fleet.succeed("app", "w1")
    assert fleet.revision("app", "w4") == "v1"  # still 2 at once: w2 updating, w4 moved
    wave = next(s for s in fleet.status("app")["stages"] if s["name"] == "wave")
    assert wave["maxConcurrency"] == 2
    assert fleet.run("app")["stages"]["wave"] == {"members": 4, "left": 1}


def test_failure_budget_counts_against_the_fixed_member_set() -> None:
    # maxFailures 50 % of 4 is 2: two failures are within it even after two members left
    fleet = given(
        cluster("c1", CANARY),
        *(cluster(f"w{i}", WAVE) for i in range(1, 5)),
        module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE, failures="50%", concurrency=2)),
    )
    fleet.succeed("app", "c1")
    fleet.remove("w3")
    fleet.remove("w4")
    fleet.fail("app", "w1", "w2")
    assert fleet.phase("app") == "Complete"  # 2 failures ≤ 2: over a set of 2 it would be 1, halted


def test_a_cluster_joining_mid_run_is_taken_into_the_run_in_its_stage() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.send(cluster("w2", WAVE))
    assert fleet.run("app")["stages"]["wave"] == {"members": 2, "left": 0}
    fleet.succeed("app", "c1")
    assert fleet.on("app", "v1") == ["c1", "w1", "w2"]


def test_a_member_leaving_mid_run_drops_out_with_the_state_left() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), app())
    fleet.succeed("app", "c1")
    fleet.remove("w1")
    fleet.succeed("app", "w2")
    assert fleet.phase("app") == "Complete"
    departed = fleet.run("app")["departed"]
    assert [(d["cluster"], d["stage"], d["reason"]) for d in departed] == [("w1", "wave", "removed")]
    assert departed[0]["generation"] == 1  # it had been assigned the target
    assert fleet.run_members("app")["w1"] == ("Left", "removed from the fleet")


def test_a_member_unselected_mid_run_is_left_saying_why() -> None:
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", {**WAVE, "env": "prod"}),
        module("app", {"env": "prod"}, "v1", stage("canary", {"ring": "canary"}), stage("wave")),
    )
    fleet.send(cluster("w1", WAVE))  # its env label gone: the selector no longer matches it
    assert fleet.run_members("app")["w1"] == ("Left", "its labels no longer match the module's selector")


def test_a_cluster_that_left_the_fleet_is_left_in_the_run() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.send(cluster_command("w1", "leave"))
    fleet.succeed("app", "c1")
    assert fleet.run_members("app")["w1"] == ("Left", "it left the fleet (rollout cluster leave)")


def test_a_member_that_left_and_came_back_is_the_member_it_was() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.remove("w1")
    fleet.send(cluster("w1", WAVE))
    assert fleet.run("app")["stages"]["wave"] == {"members": 1, "left": 0}
    assert fleet.run("app")["departed"] == []


def test_offline_member_is_skipped_and_the_run_goes_on() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE))
    fleet.send(heartbeat("w1", 30))
    fleet.apply(app())
    fleet.wait(31)  # w1's lease runs out before its stage starts
    fleet.succeed("app", "c1")
    fleet.succeed("app", "w2")
    assert fleet.run_members("app")["w1"] == ("SkippedOffline", "its lease expired (no heartbeat from its applier)")
    stages = {s["name"]: s["state"] for s in fleet.status("app")["stages"]}
    assert stages == {"canary": "Succeeded", "wave": "Succeeded"}  # the run went on without it
    assert fleet.phase("app") == "Progressing"  # and says so: not Complete while w1 runs nothing
    assert fleet.status("app")["waiting"] == "1 cluster not ready"
    fleet.send(heartbeat("w1", 30))
    assert fleet.revision("app", "w1") == "v1"  # back: it gets the revision its stage is at
    fleet.succeed("app", "w1")
    assert fleet.phase("app") == "Complete"


def test_a_member_leaving_during_the_soak_does_not_cut_it_short() -> None:
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        module("app", {}, "v1", stage("canary", CANARY, soak="5m"), stage("wave", WAVE)),
    )
    fleet.succeed("app", "c1")
    fleet.remove("c1")  # the canary that ran leaves while its stage soaks
    assert fleet.revision("app", "w1") is None
    fleet.wait(300)
    assert fleet.revision("app", "w1") == "v1"


def test_a_member_relabelled_out_of_its_stage_during_the_soak_does_not_cut_it_short() -> None:
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        module("app", {}, "v1", stage("canary", CANARY, soak="5m"), stage("wave", WAVE)),
    )
    fleet.succeed("app", "c1")
    fleet.apply(cluster("c1", WAVE))  # the canary that ran is relabelled into the next stage while its stage soaks
    assert fleet.revision("app", "w1") is None
    fleet.restart()  # what the run remembers of the stage is stored, not only in memory
    fleet.wait(299)
    assert fleet.revision("app", "w1") is None
    fleet.wait(1)
    assert fleet.revision("app", "w1") == "v1"


# -- cluster-side holds -------------------------------------------------------------------


def test_held_cluster_is_deferred_without_failing_the_run() -> None:
    fleet = given(
        cluster("c1", CANARY), held("w1", WAVE, reason="retail peak until Monday"), cluster("w2", WAVE), app()
    )
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w1") is None  # not moved
    assert fleet.category("app", "w1") == "held"
    fleet.succeed("app", "w2")
    stages = {s["name"]: s["state"] for s in fleet.status("app")["stages"]}
    assert stages == {"canary": "Succeeded", "wave": "Succeeded"}  # the stage was done with it held
    assert "halted" not in fleet.actions("app")
    assert fleet.phase("app") == "Progressing"  # the truth: not every member runs the target
    assert fleet.status("app")["waiting"] == "1 cluster held by its owner"
    assert fleet.run_members("app")["w1"] == ("Held", "held by its owner: retail peak until Monday")
    assert fleet.counts("app", "wave")["held"] == 1


def test_a_held_cluster_moves_once_its_owner_lifts_the_hold() -> None:
    fleet = given(cluster("c1", CANARY), held("w1", WAVE), app())
    fleet.succeed("app", "c1")
    fleet.send(cluster("w1", WAVE))  # the annotation removed
    assert fleet.revision("app", "w1") == "v1"
    fleet.succeed("app", "w1")
    assert fleet.phase("app") == "Complete"


def test_a_hold_until_lapses_at_the_engines_time() -> None:
    fleet = given(cluster("c1", CANARY), held("w1", WAVE, until=T0 + 600), app())
    fleet.succeed("app", "c1")
    fleet.wait(599)
    assert fleet.revision("app", "w1") is None
    fleet.wait(1)
    assert fleet.revision("app", "w1") == "v1"


def test_a_held_cluster_of_a_stage_not_reached_gets_nothing_until_released() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app("v1"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(app("v2"))
    fleet.send(held("w2", WAVE))  # joins while v2's canary runs: not given stable either
    assert fleet.revision("app", "w2") is None
    fleet.send(cluster("w2", WAVE))
    assert fleet.revision("app", "w2") == "v1"  # released: the stable revision its stage is at


def test_an_updating_cluster_held_finishes_and_counts() -> None:
    fleet = given(cluster("c1", CANARY), app())
    fleet.send(held("c1", CANARY))
    assert fleet.category("app", "c1") == "updating"
    fleet.succeed("app", "c1")
    assert fleet.category("app", "c1") == "succeeded"


def test_a_rollback_is_not_held() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app("v1"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(app("v2"))
    fleet.succeed("app", "c1")
    fleet.send(held("c1", CANARY))
    fleet.rollback("app")
    assert fleet.revision("app", "c1") == "v1"


# -- every member ends in an explicit state --------------------------------------------------


def test_every_member_ends_in_an_explicit_state() -> None:
    fleet = given(
        cluster("c1", CANARY),
        cluster("c2", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        held("w3", WAVE, reason="freeze"),
        cluster("w4", WAVE),
        cluster("w5", WAVE),
        cluster("w6", WAVE),
        module("app", {}, "v1", stage("canary", CANARY, failures=1), stage("wave", WAVE)),
    )
    fleet.send(heartbeat("w4", 30))
    fleet.pin("app", "w5")
    fleet.wait(31)  # w4's lease ran out
    fleet.remove("w6")
    fleet.send(cluster_command("w2", "leave"))
    fleet.succeed("app", "c1")
    fleet.fail("app", "c2")
    fleet.succeed("app", "w1")
    states = {name: state for name, (state, _) in fleet.run_members("app").items()}
    assert states == {
        "c1": "Succeeded",
        "c2": "Failed",
        "w1": "Succeeded",
        "w2": "Left",
        "w3": "Held",
        "w4": "SkippedOffline",
        "w5": "Pinned",
        "w6": "Left",
    }


def test_a_member_waiting_for_a_maintenance_window_is_deferred_by_it() -> None:
    monday_20h = datetime(2026, 3, 2, 20, 0, tzinfo=UTC).timestamp()  # 21:00 in Berlin
    fleet = given(
        cluster("c1", CANARY),
        module("app", {}, "v1", stage("canary", CANARY), rollout=True, windows=[EVENINGS]),
        at=monday_20h,
    )
    state, why = fleet.run_members("app")["c1"]
    assert state == "DeferredByWindow"
    assert why == "stage canary waits for a maintenance window, next opens at 2026-03-02T21:00:00Z"


def test_only_the_latest_departures_are_listed_and_every_one_is_counted() -> None:
    names = [f"w{i:02d}" for i in range(DEPARTURES_KEPT + 5)]
    fleet = given(cluster("c1", CANARY), *(cluster(name, WAVE) for name in names), app())
    for name in names:
        fleet.remove(name)
    run = fleet.run("app")
    assert run["stages"]["wave"] == {"members": len(names), "left": len(names)}
    assert [d["cluster"] for d in run["departed"]] == names[-DEPARTURES_KEPT:]


# -- upgrades -----------------------------------------------------------------------------------


def test_a_rollout_stored_before_runs_existed_adopts_a_run_and_goes_on() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), app(concurrency=1))
    fleet.succeed("app", "c1")
    # the state as the release before left it: no runs; its targets written as it wrote them
    fleet.state["runs"].clear()
    for key, target in list(fleet.targets.items()):
        data = json.loads(target.model_dump_json())
        assert "hold" not in data  # nobody holds: byte for byte as before
        fleet.targets[key] = type(target).model_validate(data)
    fleet.restart()
    fleet.succeed("app", "w1")
    run = fleet.run("app")
    assert (run["number"], run["generation"], run["adopted"]) == (1, 1, True)
    assert run["stages"] == {"canary": {"members": 1, "left": 0}, "wave": {"members": 2, "left": 0}}
    fleet.succeed("app", "w2")
    assert fleet.phase("app") == "Complete"


# -- leases expiring on the same tick -------------------------------------------------------


def test_clusters_whose_leases_expire_on_the_same_tick_are_all_offline_before_anything_moves() -> None:
    # c1 holds the canary (its window is closed); c1's and w1's leases run out on one tick:
    # c1 offline passes the canary, but w1 — offline on that tick too — is not moved
    monday_20h = datetime(2026, 3, 2, 20, 0, tzinfo=UTC).timestamp()  # 21:00 in Berlin: closed
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        module("app", {}, "v1", {**stage("canary", CANARY), "windows": [EVENINGS]}, stage("wave", WAVE)),
        at=monday_20h,
    )
    fleet.send(heartbeat("c1", 30), heartbeat("w1", 30))
    assert fleet.run_members("app")["c1"][0] == "DeferredByWindow"
    fleet.wait(31)
    assert fleet.revision("app", "w1") is None  # offline on the tick its stage started
    assert fleet.revision("app", "w2") == "v1"
    assert fleet.run_members("app")["w1"][0] == "SkippedOffline"


# -- late joiners: lateJoiners Include | NextRun | Exclude ----------------------------------


def late_app(tag: str, late: str, **limits: Any) -> Any:
    return module(
        "app", {"env": "prod"}, tag, stage("canary", CANARY), stage("wave", WAVE, **limits), late_joiners=late
    )


PROD_CANARY = {"env": "prod", **CANARY}
PROD_WAVE = {"env": "prod", **WAVE}


def test_a_next_run_joiner_runs_stable_and_is_moved_by_the_next_run() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), late_app("v1", "NextRun"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(late_app("v2", "NextRun"))
    fleet.send(cluster("w2", PROD_WAVE))  # joins while run 2 (v2) runs its canary
    assert fleet.revision("app", "w2") == "v1"  # the fleet's stable revision, at once
    assert fleet.category("app", "w2") == "deferred"
    assert fleet.run("app")["stages"]["wave"] == {"members": 1, "left": 0}  # not taken in
    assert fleet.run_members("app")["w2"] == (
        "DeferredToNextRun",
        "joined mid-run (lateJoiners: NextRun): the next run moves it",
    )
    joined = fleet.decisions_of("app", "joined")[-1].reason
    assert (
        joined
        == "w2 matches the selector (stage wave) after run 2 started: deferred to the next run (lateJoiners: NextRun)"
    )
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w1") == "v2" and fleet.revision("app", "w2") == "v1"  # not moved by run 2
    fleet.apply(late_app("v3", "NextRun"))
    run = fleet.run("app")
    assert (run["number"], run["joiners"], run["stages"]["wave"]["members"]) == (3, 1, 2)  # the next run takes it in
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w2") == "v3"


def test_a_run_that_passes_its_stages_with_next_run_joiners_starts_the_next_run_for_them() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), late_app("v1", "NextRun"))
    fleet.send(cluster("w2", PROD_WAVE))  # joins run 1, the module's first: no stable to run meanwhile
    assert fleet.revision("app", "w2") is None
    fleet.succeed("app", "c1", "w1")
    run = fleet.run("app")
    assert (run["number"], run["generation"], run["followUp"], run["joiners"]) == (2, 1, True, 1)
    assert fleet.revision("app", "w2") == "v1"  # moved by the next run, at once
    assert fleet.phase("app") == "Progressing"  # not Complete while the joiner is on its way
    fleet.succeed("app", "w2")
    assert fleet.phase("app") == "Complete"
    assert fleet.run_members("app")["w2"][0] == "Succeeded"


def test_an_excluded_joiner_is_never_moved_by_the_run_and_the_next_revision_takes_it_in() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), late_app("v1", "Exclude"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(late_app("v2", "Exclude"))
    fleet.send(cluster("w2", PROD_WAVE))
    fleet.succeed("app", "c1", "w1")
    assert fleet.revision("app", "w2") is None  # not even the stable revision: this run leaves it alone
    assert fleet.phase("app") == "Complete"  # an excluded joiner is not waited for
    assert fleet.run_members("app")["w2"] == (
        "Excluded",
        "joined mid-run (lateJoiners: Exclude): this run does not move it",
    )
    assert fleet.counts("app", "wave")["excluded"] == 1
    fleet.apply(late_app("v3", "Exclude"))
    assert fleet.revision("app", "w2") == "v2"  # a member of run 3: stable until its stage starts
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w2") == "v3"


def test_late_joiners_kept_out_do_not_change_the_run_budgets() -> None:
    fleet = given(
        cluster("c1", PROD_CANARY),
        cluster("w1", PROD_WAVE),
        cluster("w2", PROD_WAVE),
        late_app("v1", "NextRun", concurrency="50%"),
    )
    fleet.send(cluster("w3", PROD_WAVE), cluster("w4", PROD_WAVE))  # would make 50 % two at once
    fleet.succeed("app", "c1")
    assert fleet.on("app", "v1") == ["c1", "w1"]  # one at once, of the run's two
    wave = next(s for s in fleet.status("app")["stages"] if s["name"] == "wave")
    assert (wave["maxConcurrency"], wave["counts"]["deferred"]) == (1, 2)


def test_what_joins_late_is_a_new_member_not_a_member_coming_back_or_relabelled() -> None:
    fleet = given(
        cluster("c1", PROD_CANARY),
        cluster("w1", PROD_WAVE),
        cluster("w2", PROD_WAVE),
        cluster("x1", WAVE),  # not selected
        late_app("v1", "NextRun"),
    )
    fleet.send(cluster("x1", PROD_WAVE))  # relabelled into the selector: a late joiner
    fleet.send(cluster("n1", PROD_WAVE))  # a new cluster: a late joiner
    fleet.remove("w1")
    fleet.send(cluster("w1", PROD_WAVE))  # left and came back, still listed: the member it was
    fleet.send(cluster_command("w2", "leave"), cluster_command("w2", "join"))  # never stopped being a member
    fleet.send(cluster("c1", PROD_WAVE))  # relabelled into another stage: still a member
    # (the canary, now empty, passed: the wave moved its members — not the late joiners)
    states = {name: state for name, (state, _) in fleet.run_members("app").items()}
    assert states == {
        "c1": "Updating",
        "n1": "DeferredToNextRun",
        "w1": "Updating",
        "w2": "Updating",
        "x1": "DeferredToNextRun",
    }
    assert fleet.run("app")["stages"] == {"canary": {"members": 0, "left": 0}, "wave": {"members": 3, "left": 0}}


def test_a_late_joiner_that_leaves_was_never_in_the_run() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), late_app("v1", "Exclude"))
    fleet.send(cluster("w2", PROD_WAVE))
    fleet.remove("w2")
    assert fleet.run("app")["departed"] == []
    assert fleet.run("app")["stages"]["wave"] == {"members": 1, "left": 0}


def test_a_rollback_takes_late_joiners_back_with_everyone() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), late_app("v1", "Exclude"))
    fleet.succeed("app", "c1", "w1")
    fleet.apply(late_app("v2", "Exclude"))
    fleet.send(cluster("w2", PROD_WAVE))
    fleet.rollback("app")
    assert fleet.revision("app", "w2") == "v1"  # the rollback's run takes it in: everyone on stable
    assert fleet.target("app", "w2").late is None  # type: ignore[union-attr]


# -- offline: {wait, then: Skip | Fail} ---------------------------------------------------------


def offline_app(wait: str, then: str = "Skip", **limits: Any) -> Any:
    policy = {"wait": wait, "then": then}
    return module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE, **limits), offline=policy)


def wave_state(fleet: Any) -> str:
    return next(s["state"] for s in fleet.status("app")["stages"] if s["name"] == "wave")


def test_a_stage_waits_for_an_offline_member_up_to_offline_wait_then_skips_it() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), heartbeat("w1", 30))
    fleet.apply(offline_app("10m"))
    fleet.wait(31)  # w1's lease ran out before its stage started
    fleet.succeed("app", "c1")  # the wave starts at T0+31: it waits for w1 until T0+631
    until = datetime.fromtimestamp(T0 + 631, tz=UTC).isoformat().replace("+00:00", "Z")
    assert fleet.decisions_of("app", "readiness")[-1].reason == (
        f"w1 is offline: stage wave waits for it until {until}, then skips it"
    )
    fleet.succeed("app", "w2")
    assert (wave_state(fleet), fleet.category("app", "w1")) == ("Running", "awaited")  # not done without w1
    assert fleet.run_members("app")["w1"] == (
        "AwaitingReturn",
        f"its lease expired (no heartbeat from its applier); stage wave waits for it until {until}",
    )
    assert fleet.counts("app", "wave")["awaited"] == 1
    fleet.wait(599)
    assert wave_state(fleet) == "Running"
    fleet.wait(1)  # T0+631: the wait is over
    assert fleet.decisions_of("app", "readiness")[-1].reason == "w1 stayed offline for offline.wait 10m: skipped"
    assert fleet.run_members("app")["w1"][0] == "SkippedOffline"
    assert wave_state(fleet) == "Succeeded"
    assert fleet.phase("app") == "Progressing" and fleet.status("app")["waiting"] == "1 cluster not ready"


def test_an_offline_member_back_within_the_wait_is_moved_and_the_run_completes() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), heartbeat("w1", 30))
    fleet.apply(offline_app("10m"))
    fleet.wait(31)
    fleet.succeed("app", "c1")
    fleet.wait(300)
    fleet.send(heartbeat("w1", 30))  # back
    assert fleet.revision("app", "w1") == "v1"
    fleet.succeed("app", "w1")
    assert fleet.phase("app") == "Complete"
    assert "offline-wait-over" not in [d.because.code for d in fleet.decisions]


def test_an_offline_member_past_the_wait_fails_against_max_failures_with_then_fail() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), heartbeat("w1", 30))
    fleet.apply(offline_app("5m", "Fail"))
    fleet.wait(31)
    fleet.succeed("app", "c1", "w2")
    fleet.wait(300)
    assert fleet.decisions_of("app", "failed")[-1].reason == "w1 stayed offline for offline.wait 5m: failed"
    assert fleet.category("app", "w1") == "failed"
    assert fleet.run_members("app")["w1"] == (
        "Failed",
        "its lease expired (no heartbeat from its applier), past its stage's offline.wait",
    )
    assert fleet.phase("app") == "Halted"  # maxFailures 0: halted, as onFailure says


def test_an_offline_member_failed_within_max_failures_lets_the_stage_pass() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), heartbeat("w1", 30))
    fleet.apply(offline_app("5m", "Fail", failures=1))
    fleet.wait(31)
    fleet.succeed("app", "c1", "w2")
    fleet.wait(300)
    assert wave_state(fleet) == "Succeeded" and "halted" not in fleet.actions("app")
    fleet.send(heartbeat("w1", 30))  # back: its failure cleared, it moves like any member back
    assert (fleet.category("app", "w1"), fleet.revision("app", "w1")) == ("updating", "v1")


def test_a_member_going_offline_in_a_started_stage_is_waited_for_from_then() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), heartbeat("w2", 120))
    fleet.apply(offline_app("1m", concurrency=1))
    fleet.succeed("app", "c1")  # the wave starts: w1 updating, w2 waits for a slot
    fleet.run_for(120)  # w2's lease runs out while its stage runs
    fleet.succeed("app", "w1")
    assert fleet.category("app", "w2") == "awaited" and wave_state(fleet) == "Running"
    fleet.wait(60)
    assert fleet.category("app", "w2") == "not_ready" and wave_state(fleet) == "Succeeded"


@pytest.mark.parametrize("restarts", [False, True], ids=["one-engine", "restarted-before-every-event"])
def test_a_cluster_removed_from_the_fleet_changes_no_other_members_offline_wait(restarts: bool) -> None:
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        cluster("l1", WAVE),
        cluster("l2", WAVE),
        heartbeat("w1", 30),
    )
    fleet.apply(offline_app("10m"))
    fleet.wait(31)  # w1 offline before its stage started
    step = fleet.restart if restarts else (lambda: None)
    step()
    fleet.remove("l1")  # a removal before the wave starts: the wave still finds w1 offline
    step()
    fleet.succeed("app", "c1")
    assert fleet.category("app", "w1") == "awaited"
    step()
    fleet.remove("l2")  # and one during the wait: the wait still ends at its time
    step()
    fleet.succeed("app", "w2")
    assert wave_state(fleet) == "Running"
    step()
    fleet.wait(600)
    assert fleet.category("app", "w1") == "not_ready" and wave_state(fleet) == "Succeeded"
    assert fleet.decisions_of("app", "readiness")[-1].reason == "w1 stayed offline for offline.wait 10m: skipped"


def test_a_cluster_that_left_the_fleet_is_not_waited_for() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), offline_app("10m"))
    fleet.send(cluster_command("w1", "leave"))
    fleet.succeed("app", "c1")
    assert fleet.run_members("app")["w1"][0] == "Left" and wave_state(fleet) == "Succeeded"


def test_a_new_run_waits_afresh_and_nothing_of_the_run_before() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), cluster("w2", WAVE), heartbeat("w1", 30))
    fleet.apply(offline_app("5m", "Fail", failures=1))
    fleet.wait(31)
    fleet.succeed("app", "c1", "w2")
    fleet.wait(300)  # w1 failed by its wait, within budget
    fleet.apply(module("app", {}, "v2", stage("canary", CANARY), stage("wave", WAVE), offline={"wait": "5m"}))
    assert fleet.category("app", "w1") == "not_ready"  # no failure carried into run 2
    fleet.succeed("app", "c1")
    assert fleet.category("app", "w1") == "awaited"  # run 2's wave waits for it again


def test_clusters_a_selector_widened_mid_run_takes_in_join_late_and_a_new_revision_takes_them_in() -> None:
    fleet = given(cluster("c1", PROD_CANARY), cluster("w1", PROD_WAVE), cluster("d1", WAVE), late_app("v1", "NextRun"))
    widened = module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE), late_joiners="NextRun")
    fleet.apply(widened)  # same revision, every cluster selected now: d1 joins run 1 late
    assert fleet.category("app", "d1") == "deferred"
    fleet.apply(
        module("app", {"env": "prod"}, "v2", stage("canary", CANARY), stage("wave", WAVE), late_joiners="NextRun")
    )
    fleet.apply(module("app", {}, "v3", stage("canary", CANARY), stage("wave", WAVE), late_joiners="NextRun"))
    # a new revision and a wider selector at once: d1 is a member of the run that revision starts
    assert fleet.category("app", "d1") != "deferred"
    assert fleet.run("app")["stages"]["wave"]["members"] == 2


def test_in_a_stage_graph_each_running_stage_waits_for_its_offline_members_and_late_joiners_wait_too() -> None:
    # canary → {eu, us}: eu and us run at once; eu waits for its offline member, us passes
    stages = [
        stage("canary", {"ring": "canary"}),
        {**stage("eu", {"ring": "eu"}), "after": [{"stage": "canary"}]},
        {**stage("us", {"ring": "us"}), "after": [{"stage": "canary"}]},
    ]
    spec = {"late_joiners": "NextRun", "offline": {"wait": "5m"}}
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("eu-1", {"ring": "eu"}),
        cluster("eu-2", {"ring": "eu"}),
        cluster("us-1", {"ring": "us"}),
        heartbeat("eu-2", 30),
    )
    fleet.apply(module("app", {}, "v1", *stages, **spec))
    fleet.wait(31)  # eu-2 offline
    fleet.send(cluster("us-2", {"ring": "us"}))  # joins mid-run: deferred
    fleet.succeed("app", "c1")
    fleet.succeed("app", "eu-1", "us-1")
    states = {s["name"]: s["state"] for s in fleet.status("app")["stages"]}
    assert fleet.category("app", "eu-2") == "awaited" and fleet.category("app", "us-2") == "deferred"
    assert states["us"] == "Succeeded" and states["eu"] != "Succeeded"
    fleet.wait(300)  # eu's wait for eu-2 is over: skipped; the run's stages pass, the next run moves us-2
    assert fleet.category("app", "eu-2") == "not_ready"
    assert fleet.run("app")["followUp"] and fleet.revision("app", "us-2") == "v1"
