"""What every decision the engine makes in a test must be: its reason (`because`) one its
action may have, rendered to the decision's `reason`, read back from its JSON as it was.
`Fleet.send` (builders.py) checks every outcome, and the property tests every event."""

from __future__ import annotations

from rollout.engine.outcome import Outcome
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import REASON_ADAPTER, ReasonCode, render

A, R = DecisionAction, ReasonCode
REASONS_OF: dict[DecisionAction, set[ReasonCode]] = {
    A.ASSIGN: {R.MOVED_TO_TARGET, R.ROLLED_BACK, R.STABLE_UNTIL_STAGE},
    A.UNASSIGN: {R.ROLLED_BACK, R.CLUSTER_REMOVED, R.CLUSTER_UNSELECTED, R.CLUSTER_NOT_ALLOWED, R.MODULE_DELETED},
    A.SUCCEEDED: {R.SYNC_SUCCEEDED},
    A.FAILED: {R.SYNC_FAILED, R.PROGRESS_DEADLINE_EXCEEDED, R.OFFLINE_WAIT_OVER},
    A.JOINED: {R.CLUSTER_JOINED},
    A.READINESS: {R.READINESS_CHANGED, R.OFFLINE_WAIT, R.OFFLINE_WAIT_OVER},
    A.VALUES: {R.LIVE_VALUES_CHANGED},
    A.VALUES_REFUSED: {R.VALUES_REFUSED},
    A.CREATED: {R.MODULE_CREATED},
    A.NEW_REVISION: {R.NEW_REVISION},
    A.DELETED: {R.MODULE_DELETED},
    A.DELETE_WAITS: {R.DELETE_WAITS_FOR_DEPENDENTS},
    A.DELETE_CANCELLED: {R.DELETE_CANCELLED},
    A.HELD: {R.HELD_FOR_FLEET, R.HELD_FOR_DELETION, R.HELD_BEHIND_INTENTS},
    A.STAGE_STARTED: {R.STAGE_STARTED},
    A.STAGE_SKIPPED: {R.STAGE_SKIPPED},
    A.STAGE_SUCCEEDED: {R.STAGE_SUCCEEDED},
    A.WAVE_STARTED: {R.WAVE_STARTED},
    A.STAGE_WAITING: {R.STAGE_WAITING},
    A.AWAITING_APPROVAL: {R.AWAITING_APPROVAL},
    A.AWAITING_WINDOW: {R.AWAITING_WINDOW},
    A.AWAITING_FREEZE: {R.AWAITING_FREEZE},
    A.GATE_PASSED: {R.GATE_PASSED},
    A.GATE_FAILED: {R.GATE_FAILED},
    A.GATE_INCONCLUSIVE: {R.GATE_INCONCLUSIVE},
    A.COMPLETE: {R.ROLLOUT_COMPLETE, R.STAGES_PASSED},
    A.HALTED: {R.HALTED, R.STORED_SPEC_REFUSED},
    A.ROLLBACK: {R.ROLLBACK},
    A.RESTRICTION_MET: {R.RESTRICTION_MET},
    A.PAUSED: {R.PAUSED},
    A.RESUMED: {R.RESUMED},
    A.ABORTED: {R.ABORTED},
    A.APPROVED: {R.APPROVED},
    A.PINNED: {R.PINNED},
    A.UNPINNED: {R.UNPINNED},
    A.PROMOTED: {R.PROMOTED},
    A.PROMOTION_HELD: {R.PROMOTION_HELD},
    A.RELEASE_PROMOTED: {R.RELEASE_PROMOTED},
    A.RELEASE_PROMOTION_HELD: {R.RELEASE_PROMOTION_HELD},
    A.RELEASE_APPROVED: {R.RELEASE_APPROVED},
    A.PROMOTION_HOLD: {R.PROMOTION_HOLD},
    A.PROMOTION_RESUMED: {R.PROMOTION_RESUMED},
    A.BREAK_GLASS: {R.BROKE_GLASS},
    A.BREAK_GLASS_ENDED: {R.BREAK_GLASS_ENDED},
}
"""The reasons each action may have (a rollback returns a cluster to nothing when there is
no stable revision: an unassign)."""


def check_reasons(outcome: Outcome) -> None:
    """Every decision has a reason its action may have, whose sentence is the decision's
    `reason` and which reads back from its JSON as it was."""
    for decision in outcome.decisions:
        because = decision.because
        assert because.code in REASONS_OF[decision.action], f"{decision.action} {because.code}: {decision.reason}"
        assert render(because) == decision.reason, f"{because!r} renders {render(because)!r}, not {decision.reason!r}"
        assert REASON_ADAPTER.validate_json(because.model_dump_json()) == because, f"{because!r} does not round-trip"
