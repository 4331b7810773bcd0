"""How a rollout moves: stages in order, concurrency and its rounding, sorting, soak and
approval in tick time, failures (halt or rollback), progress deadlines, the commands, late
joiners, supersession by a new revision — one given/when/then test per rule of
docs/rollout-semantics.md."""

from __future__ import annotations

from typing import Any

from tests.rollout.builders import T0, Fleet, cluster, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}


def ring_clusters(canaries: int = 2, waves: int = 4) -> list[Any]:
    return [cluster(f"canary-{i}", CANARY) for i in range(1, canaries + 1)] + [
        cluster(f"wave-{i}", WAVE) for i in range(1, waves + 1)
    ]


def app(tag: str = "v1", *, canary: dict[str, Any] | None = None, wave: dict[str, Any] | None = None, **kwargs: Any):
    return module(
        "app",
        {},
        tag,
        stage("canary", CANARY, **(canary or {})),
        stage("wave", WAVE, **(wave or {})),
        **kwargs,
    )


CANARIES = ["canary-1", "canary-2"]
WAVES = ["wave-1", "wave-2", "wave-3", "wave-4"]


def completed(tag: str = "v1", **kwargs: Any) -> Fleet:
    """A fleet whose `tag` rollout is complete (so `tag` is stable)."""
    fleet = given(*ring_clusters(), app(tag, **kwargs))
    fleet.succeed("app", *CANARIES)
    if fleet.phase("app") == "AwaitingApproval":
        fleet.approve("app", "wave")
    fleet.succeed("app", *WAVES)
    assert fleet.phase("app") == "Complete"
    return fleet


# --- stages -------------------------------------------------------------------------------


def test_stages_run_in_order() -> None:
    fleet = given(*ring_clusters(), app())
    assert fleet.on("app", "v1") == CANARIES
    assert all(fleet.revision("app", w) is None for w in WAVES)  # no stable revision: nothing yet
    fleet.succeed("app", "canary-1")
    assert fleet.on("app", "v1") == CANARIES
    fleet.succeed("app", "canary-2")
    assert fleet.on("app", "v1") == CANARIES + WAVES
    assert fleet.actions("app").count("stage-started") == 2


def test_rollout_completes_and_target_becomes_stable() -> None:
    fleet = completed("v1")
    view = fleet.status("app")
    assert (view["targetRevision"], view["stableRevision"], view["phase"]) == ("v1", "v1", "Complete")
    assert [s["state"] for s in view["stages"]] == ["Succeeded", "Succeeded"]
    assert fleet.actions("app")[-1] == "complete"


def test_assignment_reasons_explain_the_move() -> None:
    fleet = given(*ring_clusters(), app(canary={"concurrency": 1}))
    [decision] = [d for d in fleet.decisions if d.action == "assign"]
    assert decision.reason == "canary-1 → v1: stage canary 1/2"
    assert (decision.cluster, decision.revision, decision.generation) == ("canary-1", "v1", 1)


def test_empty_stage_is_passed_through() -> None:
    fleet = given(*[cluster(f"wave-{i}", WAVE) for i in range(1, 3)], app())
    assert fleet.on("app", "v1") == ["wave-1", "wave-2"]


def test_stage_of_only_not_ready_members_is_done_without_soak() -> None:
    fleet = given(
        cluster("canary-1", CANARY, ready=False),
        cluster("wave-1", WAVE),
        app(canary={"soak": "1h"}),
    )
    assert fleet.revision("app", "wave-1") == "v1"
    assert fleet.category("app", "canary-1") == "not_ready"


# --- concurrency and order ----------------------------------------------------------------


def test_max_concurrency_int_moves_as_slots_free() -> None:
    fleet = given(*ring_clusters(waves=5), app(wave={"concurrency": 2}))
    fleet.succeed("app", *CANARIES)
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2"]
    fleet.succeed("app", "wave-1")
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2", "wave-3"]
    fleet.fail("app", "wave-2")  # a failure frees its slot too (and halts: maxFailures 0)
    assert fleet.phase("app") == "Halted"
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2", "wave-3"]


def test_max_concurrency_percent_rounds_down_but_at_least_one() -> None:
    fleet = given(*ring_clusters(canaries=3, waves=7), app(canary={"concurrency": "10%"}, wave={"concurrency": "30%"}))
    assert len(fleet.on("app", "v1")) == 1  # 10 % of 3 is 0.3: at least 1
    fleet.succeed("app", "canary-1")
    fleet.succeed("app", "canary-2")
    fleet.succeed("app", "canary-3")
    assert fleet.on("app", "v1") == ["canary-1", "canary-2", "canary-3", "wave-1", "wave-2"]  # 30 % of 7 is 2.1: 2
    assert fleet.status("app")["stages"][1]["maxConcurrency"] == 2


def test_sorting_label_orders_moves_then_name() -> None:
    order = "rollout.dev/order"
    fleet = given(
        cluster("a", {order: "10"}),
        cluster("b", {order: "2"}),
        cluster("c", {order: "x"}),  # not numeric: after the numbered ones, by name
        cluster("d"),
        cluster("e", {order: "2"}),
        cluster("f", {order: "007"}),
        module("app", {}, "v1", stage("all", concurrency=1), sorting=order),
    )
    sequence = []
    for _ in range(6):
        [moved] = [c for c in fleet.on("app", "v1") if c not in sequence]
        sequence.append(moved)
        fleet.succeed("app", moved)
    assert sequence == ["b", "e", "f", "a", "c", "d"]


def moving_order(fleet: Fleet, count: int) -> list[str]:
    """The next `count` clusters moved to v1, one at a time (maxConcurrency 1)."""
    sequence: list[str] = []
    for _ in range(count):
        [moved] = [c for c in fleet.on("app", "v1") if c not in sequence]
        sequence.append(moved)
        fleet.succeed("app", moved)
    return sequence


def test_a_relabelled_pending_cluster_keeps_its_place_unless_its_sorting_label_moved() -> None:
    order = "rollout.dev/order"
    for restart in (False, True):
        fleet = given(
            *[cluster(name, {order: str(i)}) for i, name in enumerate("abcde", start=1)],
            module("app", {}, "v1", stage("all", concurrency=1), sorting=order),
        )
        fleet.apply(cluster("c", {order: "3", "team": "x"}))  # another label: same place
        fleet.apply(cluster("e", {order: "0"}))  # its sorting key: ahead of every pending one
        fleet.apply(cluster("b", {order: "9", "team": "y"}))  # both: last
        if restart:
            fleet.restart()  # the pending queues are rebuilt from the stored targets
        assert moving_order(fleet, 5) == ["a", "e", "c", "d", "b"]


def test_without_sorting_label_moves_go_by_name() -> None:
    fleet = given(*[cluster(n) for n in ("m", "b", "z", "a")], module("app", {}, "v1", stage("all", concurrency=2)))
    assert fleet.on("app", "v1") == ["a", "b"]


# --- soak and approval --------------------------------------------------------------------


def test_stage_waits_for_soak_measured_in_ticks() -> None:
    fleet = given(*ring_clusters(), app(canary={"soak": "5m"}))
    fleet.succeed("app", *CANARIES)
    assert fleet.phase("app") == "Soaking"
    assert fleet.status("app")["stages"][0]["state"] == "Soaking"
    fleet.tick(T0 + 299)
    assert fleet.phase("app") == "Soaking"
    assert all(fleet.revision("app", w) is None for w in WAVES)
    fleet.tick(T0 + 300)
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v1") == CANARIES + WAVES


def test_a_member_failing_within_budget_during_the_soak_does_not_cut_it_short() -> None:
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        module("app", {}, "v1", stage("canary", {"ring": "canary"}, failures=1, soak="5m"), stage("wave")),
    )
    fleet.succeed("app", "c1")
    fleet.fail("app", "c1")  # the stage's only success turns into a failure it tolerates
    assert fleet.phase("app") == "Soaking"
    assert fleet.revision("app", "w1") is None
    fleet.wait(300)
    assert fleet.revision("app", "w1") == "v1"


def test_soak_begins_at_first_tick_when_stage_finished_before_any() -> None:
    fleet = given(*ring_clusters(), app(canary={"soak": "5m"}), at=None)
    fleet.succeed("app", *CANARIES)
    fleet.tick(T0)  # the engine's first idea of time: the soak starts now, not at 0
    assert fleet.phase("app") == "Soaking"
    fleet.tick(T0 + 299)
    assert fleet.phase("app") == "Soaking"
    fleet.tick(T0 + 300)
    assert fleet.revision("app", "wave-1") == "v1"


def test_stage_with_require_approval_waits_for_approve() -> None:
    fleet = given(*ring_clusters(), app(wave={"approval": True}))
    fleet.succeed("app", *CANARIES)
    assert fleet.phase("app") == "AwaitingApproval"
    assert fleet.actions("app").count("awaiting-approval") == 1
    fleet.tick(T0 + 3600)
    assert all(fleet.revision("app", w) is None for w in WAVES)
    assert fleet.actions("app").count("awaiting-approval") == 1  # said once
    fleet.approve("app", "wave")
    assert fleet.on("app", "v1") == CANARIES + WAVES


def test_approval_given_early_lets_stage_start_at_once() -> None:
    fleet = given(*ring_clusters(), app(wave={"approval": True}))
    fleet.approve("app", "wave")
    fleet.succeed("app", *CANARIES)
    assert fleet.on("app", "v1") == CANARIES + WAVES


def test_approvals_are_reset_by_a_new_target() -> None:
    fleet = completed("v1", wave={"approval": True})
    fleet.apply(app("v2", wave={"approval": True}))
    fleet.approve("app", "wave")
    fleet.apply(app("v3", wave={"approval": True}))
    fleet.succeed("app", *CANARIES)
    assert fleet.phase("app") == "AwaitingApproval"
    assert all(fleet.revision("app", w) == "v1" for w in WAVES)


# --- failures -----------------------------------------------------------------------------


def test_failed_canary_halts_before_wave_1() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2"))
    fleet.succeed("app", "canary-1")
    fleet.fail("app", "canary-2")
    assert fleet.phase("app") == "Halted"
    assert "halted: stage canary failures 1 > maxFailures 0" in fleet.record("app").last_reason
    fleet.tick(T0 + 3600)
    fleet.succeed("app", "canary-2")  # even a recovery does not lift the halt by itself
    assert fleet.phase("app") == "Halted"
    assert all(fleet.revision("app", w) == "v1" for w in WAVES)


def test_failures_within_max_failures_let_the_stage_finish() -> None:
    fleet = given(*ring_clusters(), app(canary={"failures": 1}))
    fleet.succeed("app", "canary-1")
    fleet.fail("app", "canary-2")
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v1") == CANARIES + WAVES
    assert fleet.counts("app", "canary")["failed"] == 1


def test_failed_canary_rolls_back_with_on_failure_rollback() -> None:
    fleet = completed("v1", on_failure="Rollback")
    fleet.apply(cluster("canary-3", CANARY, ready=False))
    fleet.apply(app("v2", on_failure="Rollback"))
    assert fleet.on("app", "v2") == CANARIES
    fleet.fail("app", "canary-1")
    assert fleet.phase("app") == "RollingBack"
    assert fleet.actions("app").count("rollback") == 1
    assert fleet.assigned("app") == {c: "v1" for c in [*CANARIES, "canary-3", *WAVES]}
    fleet.succeed("app", "canary-1", "canary-2")
    fleet.succeed("app", "canary-3")
    assert fleet.phase("app") == "RolledBack"
    assert fleet.status("app")["stableRevision"] == "v1"


def test_rollback_without_stable_removes_the_sync_everywhere() -> None:
    fleet = given(*ring_clusters(), app(on_failure="Rollback"))
    fleet.fail("app", "canary-1")
    assert fleet.assemblages == {}
    assert fleet.phase("app") == "RolledBack"


def test_rollback_command_returns_to_stable_at_once() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2"))
    fleet.succeed("app", *CANARIES)
    fleet.rollback("app")
    assert set(fleet.assigned("app").values()) == {"v1"}
    assert fleet.phase("app") == "RollingBack"
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "RolledBack"


def test_rollback_reaches_not_ready_and_unstaged_members() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2"))
    fleet.succeed("app", *CANARIES)
    fleet.apply(cluster("canary-1", {"ring": "elsewhere"}), cluster("wave-1", WAVE, ready=False))
    fleet.rollback("app")
    assert fleet.revision("app", "canary-1") == "v1"  # unstaged now, but it held the target
    assert fleet.revision("app", "wave-1") == "v1"


def test_rollback_leaves_unstaged_members_that_had_nothing_alone() -> None:
    fleet = completed("v1")
    fleet.apply(cluster("stray", {"ring": "none"}))
    assert fleet.revision("app", "stray") is None  # unstaged: never rolled out
    fleet.apply(app("v2"))
    fleet.rollback("app")
    assert fleet.revision("app", "stray") is None  # nothing to undo: still not rolled out
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "RolledBack"


def test_progress_deadline_turns_updating_into_failed() -> None:
    fleet = given(*ring_clusters(), app(deadline="10m"))
    fleet.succeed("app", "canary-1")
    fleet.tick(T0 + 599)
    assert fleet.category("app", "canary-2") == "updating"
    fleet.tick(T0 + 600)
    assert fleet.category("app", "canary-2") == "failed"
    assert fleet.phase("app") == "Halted"
    fleet.report("app", "canary-2", "updating")  # still reconciling: still failed
    assert fleet.category("app", "canary-2") == "failed"


def test_progress_deadline_clock_starts_at_first_tick() -> None:
    fleet = given(*ring_clusters(), app(deadline="10m"), at=None)
    assert fleet.target("app", "canary-1").updating_since is None
    fleet.tick(T0)
    fleet.tick(T0 + 599)
    assert fleet.category("app", "canary-1") == "updating"
    fleet.tick(T0 + 600)
    assert fleet.category("app", "canary-1") == "failed"


# --- commands -----------------------------------------------------------------------------


def test_pause_stops_new_moves_resume_continues() -> None:
    fleet = given(*ring_clusters(), app(wave={"concurrency": 1}))
    fleet.succeed("app", *CANARIES)
    fleet.pause("app")
    assert fleet.phase("app") == "Paused"
    fleet.succeed("app", "wave-1")  # updating clusters finish
    fleet.tick(T0 + 60)
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1"]
    fleet.resume("app")
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2"]
    assert fleet.phase("app") == "Progressing"


def test_abort_stops_where_it_stands() -> None:
    fleet = given(*ring_clusters(), app(wave={"concurrency": 1}))
    fleet.succeed("app", *CANARIES)
    fleet.abort("app")
    fleet.succeed("app", "wave-1")
    fleet.resume("app")
    assert fleet.phase("app") == "Aborted"
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1"]
    fleet.apply(app("v2", wave={"concurrency": 1}))  # only a new revision moves it again
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v2") == CANARIES


def test_resume_lifts_a_halt_but_halts_again_while_over_budget() -> None:
    fleet = given(*ring_clusters(), app())
    fleet.fail("app", "canary-1")
    fleet.resume("app")
    assert fleet.phase("app") == "Halted"
    assert fleet.last_actions() == ["resumed", "halted"]
    fleet.succeed("app", "canary-1", "canary-2")
    fleet.resume("app")
    assert fleet.on("app", "v1") == CANARIES + WAVES


def test_pause_and_resume_of_a_completed_rollout_do_not_complete_it_again() -> None:
    fleet = completed("v1")
    fleet.pause("app")
    fleet.resume("app")
    assert fleet.phase("app") == "Complete"
    assert fleet.actions("app").count("complete") == 1


# --- joins and readiness mid-rollout ------------------------------------------------------


def test_cluster_joining_mid_rollout_gets_its_stage_revision() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2", wave={"concurrency": 1}))
    fleet.apply(cluster("wave-9", WAVE))
    assert fleet.revision("app", "wave-9") == "v1"  # wave has not started: it runs stable
    fleet.apply(cluster("canary-9", CANARY))
    assert fleet.revision("app", "canary-9") == "v2"  # canary has started: the target
    fleet.succeed("app", "canary-1", "canary-2", "canary-9")
    assert fleet.on("app", "v2") == ["canary-1", "canary-2", "canary-9", "wave-1"]
    fleet.apply(cluster("wave-0", WAVE))
    assert fleet.revision("app", "wave-0") is None  # started stage: waits for a slot, for the target
    assert fleet.category("app", "wave-0") == "pending"
    fleet.succeed("app", "wave-1")
    assert fleet.revision("app", "wave-0") == "v2"  # first in name order


def test_cluster_ready_later_gets_its_stage_revision() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2"))
    fleet.apply(cluster("wave-9", WAVE, ready=False), cluster("canary-9", CANARY, ready=False))
    assert fleet.revision("app", "wave-9") is None
    assert fleet.revision("app", "canary-9") is None
    fleet.apply(cluster("wave-9", WAVE), cluster("canary-9", CANARY))
    assert fleet.revision("app", "wave-9") == "v1"
    assert fleet.revision("app", "canary-9") == "v2"


def test_late_joiner_after_complete_gets_the_target() -> None:
    fleet = completed("v1")
    fleet.apply(cluster("wave-9", WAVE))
    assert fleet.revision("app", "wave-9") == "v1"
    assert fleet.phase("app") == "Progressing"  # until the joiner runs it too
    fleet.succeed("app", "wave-9")
    assert fleet.phase("app") == "Complete"


# --- new revisions ------------------------------------------------------------------------


def test_new_revision_after_complete_rolls_out() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2"))
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v2") == CANARIES
    fleet.succeed("app", *CANARIES)
    fleet.succeed("app", *WAVES)
    assert fleet.status("app")["stableRevision"] == "v2"
    assert fleet.phase("app") == "Complete"


def test_new_revision_supersedes_and_restarts_from_first_stage() -> None:
    fleet = completed("v1")
    fleet.apply(app("v2", wave={"concurrency": 2}))
    fleet.succeed("app", *CANARIES)
    assert fleet.on("app", "v2") == [*CANARIES, "wave-1", "wave-2"]
    fleet.pause("app")
    fleet.apply(app("v3", wave={"concurrency": 2}))
    [superseding] = [d for d in fleet.last.decisions if d.action == "new-revision"]
    assert "supersedes the rollout of v2" in superseding.reason
    assert fleet.phase("app") == "Paused"  # a pause stays
    assert fleet.assigned("app") == {  # nobody is rolled back
        "canary-1": "v2",
        "canary-2": "v2",
        "wave-1": "v2",
        "wave-2": "v2",
        "wave-3": "v1",
        "wave-4": "v1",
    }
    fleet.resume("app")
    assert fleet.on("app", "v3") == CANARIES  # from the first stage
    assert fleet.status("app")["stableRevision"] == "v1"  # stable: the last completed
    fleet.succeed("app", *CANARIES)
    assert fleet.on("app", "v3") == [*CANARIES, "wave-1", "wave-2"]


def test_new_revision_lifts_halt() -> None:
    fleet = given(*ring_clusters(), app())
    fleet.fail("app", "canary-1")
    fleet.apply(app("v2"))
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v2") == CANARIES


def test_new_revision_after_rollback_rolls_out_again() -> None:
    fleet = completed("v1", on_failure="Rollback")
    fleet.apply(app("v2", on_failure="Rollback"))
    fleet.fail("app", "canary-1")
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "RolledBack"
    fleet.apply(app("v3", on_failure="Rollback"))
    assert fleet.on("app", "v3") == CANARIES
    assert fleet.phase("app") == "Progressing"


# --- strategy changes and recovery --------------------------------------------------------


def test_strategy_change_keeps_the_rollout_going() -> None:
    fleet = given(*ring_clusters(), app(wave={"concurrency": 1}))
    fleet.succeed("app", *CANARIES)
    fleet.apply(app(wave={"concurrency": 3}))
    assert fleet.record("app").target == 1
    assert len(fleet.on("app", "v1")) == 2 + 3


def test_strategy_change_to_fewer_stages_continues_from_the_last_one() -> None:
    fleet = given(*ring_clusters(), app(wave={"approval": True}))
    fleet.succeed("app", *CANARIES)
    assert fleet.phase("app") == "AwaitingApproval"
    fleet.apply(module("app", {}, "v1", stage("canary", CANARY)))
    assert fleet.phase("app") == "Complete"
    assert fleet.counts("app", "-")["members"] == 4


def test_stage_added_after_complete_gets_the_stable_revision() -> None:
    fleet = given(*ring_clusters(), module("app", {}, "v1", stage("canary", CANARY)))
    fleet.succeed("app", *CANARIES)
    assert fleet.phase("app") == "Complete"
    assert all(fleet.revision("app", w) is None for w in WAVES)  # unstaged
    fleet.apply(app("v1"))
    assert fleet.on("app", "v1") == CANARIES + WAVES
    fleet.succeed("app", *WAVES)
    assert fleet.phase("app") == "Complete"


def test_restart_mid_rollout_continues_with_cold_indexes() -> None:
    fleet = given(*ring_clusters(), app(wave={"approval": True, "concurrency": 2}))
    fleet.succeed("app", *CANARIES)
    fleet.restart()
    fleet.approve("app", "wave")
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2"]
    fleet.restart()
    fleet.succeed("app", "wave-1")
    assert fleet.on("app", "v1") == [*CANARIES, "wave-1", "wave-2", "wave-3"]
