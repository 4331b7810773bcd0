"""The engine answers every module intent (and every status report that asks) with a verdict:
refused with a reason a user can act on, or accepted with the decisions it caused."""

from __future__ import annotations

from rollout.engine.core import Outcome, RolloutEngine
from rollout.engine.outcome import Verdict
from rollout.engine.state import ENGINE_MAPPINGS
from tests.rollout.builders import (
    applied,
    cluster,
    command,
    deleted,
    fleet_seen,
    given,
    module,
    removed,
    reported,
    stage,
)


def only_verdict(outcome: Outcome) -> Verdict:
    assert len(outcome.verdicts) == 1, outcome.verdicts
    return outcome.verdicts[0]


def staged_podinfo() -> list[object]:
    return [
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        module("podinfo", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave-1", approval=True)),
    ]


def test_approve_of_an_unknown_stage_is_refused_naming_the_stages() -> None:
    fleet = given(*staged_podinfo())
    event = command("podinfo", "approve", stage="no-such-stage")
    verdict = only_verdict(fleet.send(event))
    assert verdict == Verdict(
        event.id, "podinfo", False, "module podinfo has no stage 'no-such-stage' (stages: canary, wave-1)", (0, 0)
    )
    assert fleet.rejections == [verdict.reason]


def test_commands_on_an_unknown_module_are_refused() -> None:
    fleet = given(cluster("a"))
    for name in ("approve", "pause", "resume", "abort", "rollback"):
        verdict = only_verdict(fleet.send(command("nosuchmodule", name, stage="s" if name == "approve" else None)))
        assert (verdict.accepted, verdict.reason) == (False, "module 'nosuchmodule' not found"), name


def test_delete_of_an_unknown_module_is_refused_and_of_another_kind_says_which() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    verdict = only_verdict(fleet.send(deleted("nosuchmodule")))
    assert (verdict.accepted, verdict.reason) == (False, "module 'nosuchmodule' not found")
    verdict = only_verdict(fleet.send(deleted("app", "BootstrapModule")))
    assert (verdict.accepted, verdict.reason) == (False, "bootstrapmodule 'app' not found; app is a Module")
    assert "app" in fleet.modules


def test_accepted_command_carries_the_decisions_it_caused() -> None:
    fleet = given(*staged_podinfo())
    outcome = fleet.send(command("podinfo", "pause"))
    verdict = only_verdict(outcome)
    assert verdict.accepted and verdict.reason.startswith("paused")
    start, stop = verdict.decisions
    assert [d.action for d in outcome.decisions[start:stop]] == ["paused"]
    again = only_verdict(fleet.send(command("podinfo", "pause")))
    assert (again.accepted, again.reason, again.decisions) == (True, "nothing to change", (0, 0))


def test_apply_is_answered_with_created_and_a_new_revision() -> None:
    fleet = given(cluster("a"))
    verdict = only_verdict(fleet.send(applied(module("app", {}, "v1"))))
    assert verdict.accepted and verdict.reason == "Module app created at v1"
    verdict = only_verdict(fleet.send(applied(module("app", {}, "v2"))))
    assert verdict.accepted and verdict.reason.startswith("target v2 (generation 2)")


def test_held_intent_is_answered_when_released_not_when_held() -> None:
    fleet = given(cluster("a"))
    apply = applied(module("app", {}, "v1"), fleet={0: 5})
    assert fleet.send(apply).verdicts == []
    outcome = fleet.send(fleet_seen(0, 5))
    verdict = only_verdict(outcome)
    assert (verdict.event, verdict.accepted) == (apply.id, True)
    start, _ = verdict.decisions
    assert outcome.decisions[start].action == "created"


def test_pin_and_unpin_of_an_unknown_cluster_are_refused() -> None:
    fleet = given(*staged_podinfo())
    for verb in ("pin", "unpin"):
        verdict = only_verdict(fleet.send(command("podinfo", verb, cluster="nosuchcluster")))
        assert (verdict.accepted, verdict.reason) == (False, "cluster 'nosuchcluster' not found"), verb


def test_redelivered_intent_is_not_answered_again() -> None:
    fleet = given(*staged_podinfo())
    pause = command("podinfo", "pause")
    assert len(fleet.send(pause).verdicts) == 1
    assert fleet.send(pause).verdicts == []


def test_status_report_without_reply_gets_no_verdict() -> None:
    fleet = given(*staged_podinfo())
    assert fleet.send(reported("podinfo", "nosuchcluster", "v1", "succeeded")).verdicts == []
    assert fleet.send(reported("podinfo", "c1", "v1", "succeeded")).verdicts == []
    assert fleet.rejections == []


def test_status_report_asking_for_a_reply_is_refused_unless_it_counts() -> None:
    fleet = given(*staged_podinfo())

    def answer(module_name: str, cluster_name: str, revision: str, generation: int | None = None) -> Verdict:
        event = reported(module_name, cluster_name, revision, "succeeded", generation=generation)
        return only_verdict(fleet.send(event.model_copy(update={"reply": True})))

    assert answer("podinfo", "nosuchcluster", "v1").reason == "cluster 'nosuchcluster' not found"
    assert answer("nosuchmodule", "c1", "v1").reason == "module 'nosuchmodule' not found"
    assert answer("podinfo", "w1", "v1").reason == "module podinfo has assigned nothing to cluster w1 yet"
    stale = answer("podinfo", "c1", "v0")
    assert (stale.accepted, stale.reason) == (
        False,
        "cluster c1 is assigned generation 1 (v1) of module podinfo, not revision v0",
    )
    assert answer("podinfo", "c1", "v1", generation=7).reason.endswith("not generation 7")
    accepted = answer("podinfo", "c1", "v1", generation=1)
    assert (accepted.accepted, accepted.reason) == (True, "c1 runs v1")
    assert len(fleet.rejections) == 5


def test_cluster_removal_asking_for_a_reply_is_answered_once_by_partition_zero() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    unknown = only_verdict(fleet.send(removed("nosuchcluster").model_copy(update={"reply": True})))
    assert (unknown.accepted, unknown.reason) == (False, "cluster 'nosuchcluster' not found")
    gone = only_verdict(fleet.send(removed("a").model_copy(update={"reply": True})))
    assert (gone.accepted, gone.reason) == (True, "a: cluster removed")
    assert fleet.send(removed("b")).verdicts == []  # watchers do not ask
    other = RolloutEngine(**{name: {} for name in ENGINE_MAPPINGS}, partition=1)  # type: ignore[arg-type]
    assert other.handle(removed("x").model_copy(update={"reply": True})).verdicts == []
