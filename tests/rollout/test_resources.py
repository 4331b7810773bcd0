"""The Kubernetes-object side of the API (rollout/api/resources.py, pure): which phase
changes become Kubernetes Events, and the specs of RolloutApproval / RolloutCommand objects.
(The status written on Module objects from the module-status document:
tests/projections/test_module_resource_status.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.resources import ApprovalSpec, CommandSpec, phase_change

# --- events ----------------------------------------------------------------------------------------


def status_of(phase: str, stage: str | None = "canary", state: str = "Running") -> dict[str, Any]:
    return {
        "phase": phase,
        "currentStage": stage,
        "targetRevision": "6.7.0",
        "stages": [{"name": stage, "state": state}] if stage else [],
    }


@pytest.mark.parametrize(
    ("phase", "reason", "kind"),
    [
        ("AwaitingApproval", "WaitingForApproval", "Normal"),
        ("Halted", "Halted", "Warning"),
        ("RollingBack", "RollingBack", "Warning"),
        ("RolledBack", "RolledBack", "Warning"),
        ("Aborted", "Aborted", "Warning"),
        ("Paused", "Paused", "Normal"),
        ("Complete", "Complete", "Normal"),
    ],
)
def test_entering_a_phase_records_an_event_named_after_it(phase: str, reason: str, kind: str) -> None:
    change = phase_change(status_of("Progressing"), status_of(phase))
    assert change is not None
    assert change[:2] == (reason, kind)


def test_a_stage_that_starts_records_stage_started() -> None:
    assert phase_change(status_of("Progressing", "canary"), status_of("Progressing", "prod")) == (
        "StageStarted",
        "Normal",
        "stage prod started (6.7.0)",
    )
    assert phase_change(None, status_of("Progressing", "canary")) == (
        "StageStarted",
        "Normal",
        "stage canary started (6.7.0)",
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (status_of("Progressing"), status_of("Progressing")),  # nothing changed
        (status_of("Progressing"), status_of("Soaking", state="Soaking")),  # soaking is no new step
        (status_of("Halted"), status_of("Halted", "prod", "Pending")),  # a stage that is not running
        (status_of("Progressing", "canary"), status_of("Progressing", "prod", "Pending")),
    ],
    ids=["unchanged", "soaking", "halted-stage-moves", "next-stage-not-running"],
)
def test_changes_that_are_not_a_step_of_the_rollout_record_no_event(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    assert phase_change(before, after) is None


def test_the_approval_event_names_the_stage_and_the_object_to_create() -> None:
    change = phase_change(status_of("Progressing", "canary"), status_of("AwaitingApproval", "prod", "AwaitingApproval"))
    assert change == (
        "WaitingForApproval",
        "Normal",
        "stage prod waits for approval (a RolloutApproval with stage: prod)",
    )


# --- approval and command objects ----------------------------------------------------------------


def test_approval_and_command_specs_take_the_kubernetes_field_names() -> None:
    approval = ApprovalSpec.model_validate({"module": "web", "stage": "prod", "approver": "alice"})
    assert (approval.module, approval.stage, approval.approver) == ("web", "prod", "alice")
    command = CommandSpec.model_validate({"module": "web", "command": "pin", "cluster": "c1", "requestedBy": "bob"})
    assert (command.command, command.cluster, command.requested_by) == ("pin", "c1", "bob")


@pytest.mark.parametrize(
    ("model", "document", "field"),
    [
        (ApprovalSpec, {"module": "Web_1", "stage": "prod", "approver": "alice"}, "module"),
        (ApprovalSpec, {"module": "web", "stage": "prod", "approver": "alice", "extra": 1}, "extra"),
        (ApprovalSpec, {"module": "web", "stage": "prod"}, "approver"),
        (CommandSpec, {"module": "web", "command": "delete", "requestedBy": "bob"}, "command"),
        (CommandSpec, {"module": "web", "command": "pin", "cluster": "C 1", "requestedBy": "bob"}, "cluster"),
    ],
    ids=["bad-module-name", "unknown-field", "no-approver", "unknown-command", "bad-cluster-name"],
)
def test_bad_approval_and_command_specs_are_refused_naming_the_field(
    model: type[ApprovalSpec] | type[CommandSpec], document: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(document)
    assert field in {str(part) for error in refused.value.errors() for part in error["loc"]}
