"""What a decision did: the `action` of every record on the decisions topic.

    engine (rollout/engine/outcome.py: Decision.action) ──► decisions topic, verdicts
        ──► readers: the CLI (history, verdicts, status values), the dashboard, metrics

One `StrEnum`, imported by the engine that decides and by every reader that compares
actions, so that none spells one by hand. It imports nothing but `enum`: the CLI may use it
without loading the domain's models. The engine module of each group is named beside it.
"""

from __future__ import annotations

from enum import StrEnum


class DecisionAction(StrEnum):
    """What a decision did. Each member is its string on the wire: a reader compares
    `record["action"] == DecisionAction.HALTED`, and a plain string compares alike. Adding
    a member changes what readers may see (dashboard, CLI, the metrics' `action` label);
    renaming one changes the decisions topic's format."""

    # one cluster's assignment (targets.py)
    ASSIGN = "assign"
    UNASSIGN = "unassign"
    # one cluster's status, membership or readiness (reports.py, clock.py, membership.py)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    JOINED = "joined"
    READINESS = "readiness"
    # a Helm release's values (live_values.py, targets.py)
    VALUES = "values"
    VALUES_REFUSED = "values-refused"
    # the module's life (intents.py, dependencies.py, causal.py)
    CREATED = "created"
    NEW_REVISION = "new-revision"
    DELETED = "deleted"
    DELETE_WAITS = "delete-waits"
    DELETE_CANCELLED = "delete-cancelled"
    HELD = "held"
    # the stages (stages.py, window_gate.py, gate_results.py)
    STAGE_STARTED = "stage-started"
    STAGE_SKIPPED = "stage-skipped"
    STAGE_SUCCEEDED = "stage-succeeded"
    WAVE_STARTED = "wave-started"  # (waves.py)
    STAGE_WAITING = "stage-waiting"  # on its upstream stages (stage_graph.py)
    AWAITING_APPROVAL = "awaiting-approval"
    AWAITING_WINDOW = "awaiting-window"
    AWAITING_FREEZE = "awaiting-freeze"  # (freeze_gate.py)
    GATE_PASSED = "gate-passed"
    GATE_FAILED = "gate-failed"
    GATE_INCONCLUSIVE = "gate-inconclusive"
    COMPLETE = "complete"
    HALTED = "halted"
    ROLLBACK = "rollback"
    RESTRICTION_MET = "restriction-met"
    # commands (intents.py)
    PAUSED = "paused"
    RESUMED = "resumed"
    ABORTED = "aborted"
    APPROVED = "approved"
    PINNED = "pinned"
    UNPINNED = "unpinned"
    # auto-promotion (promotions.py)
    PROMOTED = "promoted"
    PROMOTION_HELD = "promotion-held"
    PROMOTION_HOLD = "promotion-hold"
    PROMOTION_RESUMED = "promotion-resumed"
    RELEASE_PROMOTED = "release-promoted"
    RELEASE_PROMOTION_HELD = "release-promotion-held"
    RELEASE_APPROVED = "release-approved"
    BREAK_GLASS = "break-glass"  # a freeze overridden (freeze_gate.py)
    BREAK_GLASS_ENDED = "break-glass-ended"  # (clock.py)
