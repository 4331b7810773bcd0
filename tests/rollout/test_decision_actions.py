"""`DecisionAction` is the decisions topic's vocabulary (rollout/wire/decision_actions.py): the
engine decides with its members, readers compare with them — and the strings on the wire
are the ones every release before wrote, so records already on the topic read the same."""

from __future__ import annotations

import orjson

from rollout.engine.outcome import Decision
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import StageSkipped, render
from streams.chain import decision_body

WIRE = {
    "assign", "unassign", "succeeded", "failed", "joined", "readiness", "values", "values-refused",
    "created", "new-revision", "deleted", "delete-waits", "delete-cancelled", "held",
    "stage-started", "stage-skipped", "stage-succeeded", "wave-started", "stage-waiting", "awaiting-approval",
    "awaiting-window",
    "awaiting-freeze",
    "gate-passed", "gate-failed", "gate-inconclusive", "complete", "halted", "rollback", "restriction-met",
    "paused", "resumed", "aborted", "approved", "pinned", "unpinned",
    "promoted", "promotion-held", "promotion-hold", "promotion-resumed",  # auto-promotion, added
    "release-promoted", "release-promotion-held",  # a release auto-promoted as a unit, added
    "release-approved",  # a release's stage approved for every member, added
    "break-glass", "break-glass-ended",
}  # fmt: skip


def test_the_actions_are_the_strings_the_decisions_topic_has_always_carried() -> None:
    assert {action.value for action in DecisionAction} == WIRE


def test_a_decision_record_carries_its_action_as_the_plain_string_and_reads_back_as_the_member() -> None:
    because = StageSkipped(stage="canary")
    decision = Decision(module="app", action=DecisionAction.STAGE_SUCCEEDED, reason=render(because), because=because)
    assert orjson.dumps(decision_body(0, 1, 0, decision)).count(b'"action":"stage-succeeded"') == 1
    assert decision.model_dump(mode="json")["action"] == "stage-succeeded"
    read = Decision.model_validate(
        {
            "module": "app",
            "action": "stage-succeeded",
            "reason": "r",
            "because": {"code": "stage-skipped", "stage": "a"},
        }
    )
    assert read.action is DecisionAction.STAGE_SUCCEEDED and read.action == "stage-succeeded"
