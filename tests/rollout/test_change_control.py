"""Change control: approvals by N of M distinct verified people (optionally from groups) and
explicit rejection — one given/when/then test per rule of docs/rollout-semantics.md,
"Change control" (rollout/engine/approvals.py)."""

from __future__ import annotations

from typing import Any

from rollout.wire.decision_reasons import Halted, Rejected, RollbackStarted
from rollout.wire.events import RolloutCommanded
from rollout.wire.status import ModuleStatus
from tests.rollout.builders import Fleet, cluster, command, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
TWO_SRES = {"required": 2, "groups": ["sre", "release-managers"]}


def app(tag: str = "v1", approval: bool | dict[str, Any] = TWO_SRES, **kwargs: Any) -> Any:
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE, approval=approval), **kwargs)


def fleet_at_the_gate(approval: bool | dict[str, Any] = TWO_SRES, **kwargs: Any) -> Fleet:
    """canary-1 succeeded on v1: stage wave waits for its approvals."""
    fleet = given(cluster("canary-1", CANARY), cluster("wave-1", WAVE), app(approval=approval, **kwargs))
    fleet.succeed("app", "canary-1")
    assert fleet.phase("app") == "AwaitingApproval"
    return fleet


def approve(user: str, *, via: str = "dashboard", groups: list[str] | None = None, stage_name: str = "wave") -> Any:
    return command("app", "approve", stage=stage_name, user=user, via=via, groups=groups)


def status(fleet: Fleet) -> ModuleStatus:
    return ModuleStatus.read(fleet.status("app"))


def test_a_stage_asking_for_two_approvers_waits_for_the_second_distinct_person() -> None:
    fleet = fleet_at_the_gate()
    [waits] = [d for d in fleet.decisions if d.action == "awaiting-approval"]
    assert waits.reason == "stage wave waits for approval by 2 distinct approvers from sre or release-managers"
    fleet.send(approve("alice@example.com", groups=["sre"]))
    assert fleet.phase("app") == "AwaitingApproval" and fleet.revision("app", "wave-1") is None
    fleet.send(approve("bob@example.com", groups=["release-managers", "staff"], via="crd"))
    assert fleet.revision("app", "wave-1") == "v1"
    approved = [d.reason for d in fleet.decisions if d.action == "approved"]
    assert approved == [
        "stage wave approved by alice@example.com via dashboard (1 of 2)",
        "stage wave approved by bob@example.com via crd (2 of 2)",
    ]


def test_the_same_person_approving_twice_counts_once() -> None:
    fleet = fleet_at_the_gate()
    fleet.send(approve("alice@example.com", groups=["sre"]))
    outcome = fleet.send(approve("alice@example.com", groups=["sre"], via="crd"))
    assert outcome.decisions == [] and outcome.rejections == []
    assert fleet.phase("app") == "AwaitingApproval" and fleet.revision("app", "wave-1") is None
    assert [a.user for a in status(fleet).stage("wave").approvals] == ["alice@example.com"]  # type: ignore[union-attr]


def test_an_approver_in_none_of_the_required_groups_is_refused_and_does_not_count() -> None:
    fleet = fleet_at_the_gate()
    outcome = fleet.send(approve("mallory@example.com", groups=["developers"]))
    assert outcome.rejections == [
        "approve app: stage wave counts approvals by members of sre, release-managers; mallory@example.com is in none"
    ]
    fleet.send(approve("alice@example.com", groups=["sre"]))
    assert fleet.revision("app", "wave-1") is None


def test_an_unverified_cli_approval_does_not_count_toward_an_approval_policy() -> None:
    fleet = fleet_at_the_gate(approval={"required": 1})
    outcome = fleet.send(approve("alice", via="cli"))
    [refusal] = outcome.rejections
    assert "is not a verified identity" in refusal and "alice via cli" in refusal
    assert fleet.revision("app", "wave-1") is None
    fleet.send(approve("alice@example.com"))  # the dashboard: verified; no groups asked for
    assert fleet.revision("app", "wave-1") == "v1"


def test_require_approval_alone_is_still_one_approval_by_anyone() -> None:
    fleet = fleet_at_the_gate(approval=True)
    fleet.send(approve("alice", via="cli"))
    assert fleet.revision("app", "wave-1") == "v1"
    wave = status(fleet).stage("wave")
    assert wave is not None and wave.approved and wave.approvals_required is None
    assert [(a.user, a.via) for a in wave.approvals] == [("alice", "cli")]


def test_status_says_who_approved_and_how_many_more_are_needed() -> None:
    fleet = fleet_at_the_gate()
    fleet.send(approve("alice@example.com", groups=["sre"]))
    wave = status(fleet).stage("wave")
    assert wave is not None
    assert (wave.state, wave.approved, wave.approvals_required, wave.approval_groups) == (
        "AwaitingApproval",
        False,
        2,
        ["sre", "release-managers"],
    )
    assert [(a.user, a.via, a.counted) for a in wave.approvals] == [("alice@example.com", "dashboard", True)]


def test_approvals_count_for_the_target_they_were_given_for() -> None:
    fleet = fleet_at_the_gate()
    fleet.send(approve("alice@example.com", groups=["sre"]))
    fleet.apply(app("v2"))  # a new target: the approvals start from none
    fleet.succeed("app", "canary-1")
    fleet.send(approve("bob@example.com", groups=["sre"]))
    assert fleet.phase("app") == "AwaitingApproval" and fleet.revision("app", "wave-1") is None
    assert [a.user for a in status(fleet).stage("wave").approvals] == ["bob@example.com"]  # type: ignore[union-attr]


def test_a_rejection_halts_the_rollout_and_records_who_and_why() -> None:
    fleet = fleet_at_the_gate()
    outcome = fleet.send(
        command("app", "reject", stage="wave", user="carol@example.com", via="dashboard", reason="p99 doubled")
    )
    [halted] = outcome.decisions
    assert halted.action == "halted" and (halted.user, halted.via) == ("carol@example.com", "dashboard")
    assert halted.because == Halted(
        cause=Rejected(stage="wave", reason="p99 doubled", user="carol@example.com", via="dashboard")
    )
    assert halted.reason == "halted: stage wave rejected by carol@example.com via dashboard: p99 doubled"
    assert fleet.phase("app") == "Halted"
    rejection = status(fleet).rejection
    assert rejection is not None and (rejection.user, rejection.reason, rejection.stage) == (
        "carol@example.com",
        "p99 doubled",
        "wave",
    )


def test_a_rejection_rolls_back_when_on_failure_says_rollback() -> None:
    fleet = given(cluster("canary-1", CANARY), cluster("wave-1", WAVE), app("v1", on_failure="Rollback"))
    fleet.succeed("app", "canary-1")
    fleet.send(approve("alice@example.com", groups=["sre"]))
    fleet.send(approve("bob@example.com", groups=["sre"]))
    fleet.succeed("app", "wave-1")
    fleet.apply(app("v2", on_failure="Rollback"))
    fleet.succeed("app", "canary-1")
    outcome = fleet.send(command("app", "reject", stage="wave", user="carol", via="crd", reason="bad build"))
    [rollback] = [d for d in outcome.decisions if d.action == "rollback"]
    assert rollback.because == RollbackStarted(
        cause=Rejected(stage="wave", reason="bad build", user="carol", via="crd"), stable="v1"
    )
    assert fleet.revision("app", "canary-1") == "v1"


def test_a_rejected_target_stays_halted_until_a_new_revision() -> None:
    fleet = fleet_at_the_gate()
    fleet.send(command("app", "reject", stage="wave", user="carol", via="dashboard", reason="no"))
    resumed = fleet.resume("app")
    assert resumed.rejections == [
        "module app stays halted: stage wave rejected by carol: no; apply a new revision to roll out again"
    ]
    late = fleet.send(approve("alice@example.com", groups=["sre"]))
    assert late.rejections and fleet.phase("app") == "Halted"
    fleet.apply(app("v2"))
    assert fleet.phase("app") == "Progressing" and status(fleet).rejection is None


def test_a_rejection_needs_a_reason_and_the_stage() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="reject needs the stage rejected and a reason"):
        RolloutCommanded(module="app", command="reject", stage="wave", user="carol")


def test_a_completed_rollout_cannot_be_rejected() -> None:
    fleet = fleet_at_the_gate(approval=True)
    fleet.send(approve("alice"))
    fleet.succeed("app", "wave-1")
    assert fleet.phase("app") == "Complete"
    outcome = fleet.send(command("app", "reject", stage="wave", user="carol", via="cli", reason="late"))
    assert outcome.rejections == ["reject app: the rollout of generation 1 is complete; roll it back instead"]
    assert fleet.phase("app") == "Complete"
