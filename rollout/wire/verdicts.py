"""The verdict document: the engine's answer to one event that asked for one.

    journal ──► decide ──► verdicts (key: the id of the event answered)

The engine answers every module intent, and every status report or cluster removal with
`reply`, with a `rollout.engine.outcome.Verdict`; the decider writes it as a `VerdictDocument`
(streams/verdicts.py) in the same transaction as the decisions it names. Readers: the CLI,
waiting for the answer to the event it published (rollout_cli/publishing/verdicts.py), the module
watcher's status writer (RolloutApproval / RolloutCommand status, observedGeneration:
projections/module_status.py) and the dashboard (projections/dashboard/fleet.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollout.wire.decision_actions import DecisionAction
from rollout.wire.documents import Part, VersionedDocument

DECISIONS_LISTED = 20
"""At most this many of the decisions an event caused are listed (an apply to a large
fleet causes one per cluster); `decisionCount` counts them all."""


class ListedDecision(Part):
    """One decision the event caused, as the decisions topic has it under `id`."""

    id: str
    action: str
    reason: str
    cluster: str | None = None  # absent: a decision about the module as a whole


class VerdictDocument(VersionedDocument):
    """Accepted, with what the event caused; or refused, with the reason (then also a dead
    letter naming the event: rollout/wire/dead_letters.py)."""

    KIND = "verdict"

    event: str  # the id of the event answered (the record's key)
    verdict: Literal["accepted", "refused"]
    reason: str = ""  # a refusal's reason; an acceptance's: its first decision's, or "nothing to change"
    module: str = ""
    decisions: list[ListedDecision] = Field(default_factory=list)  # the first DECISIONS_LISTED
    decision_count: int = Field(default=0, alias="decisionCount")

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    @property
    def created(self) -> bool:
        """An accepted apply that created the module (its first decision: `created`)."""
        return bool(self.decisions) and self.decisions[0].action == DecisionAction.CREATED
