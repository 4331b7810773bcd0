"""What one event decides: the `Outcome` `RolloutEngine.handle` returns.

* `Assignment` — to the assemblage builder (assembly.py): the sync record of one module in
  one cluster's assemblage, or None to remove it;
* `Decision`   — to the decisions topic: why an assignment changed or a phase moved; its
  `action` is one of `DecisionAction` (the strings on the wire are the enum's values);
* `Verdict`    — to the verdicts topic: the engine's answer to one event that asks for
  one (every module intent; a status report with `reply`), accepted or refused with the
  reason, and which of the outcome's decisions it caused. `rollout approve` & co. wait for it;
* `Outcome`    — everything one event decided: assignments, decisions, the module/target
  status views (views.py), rejections (dead letters) and verdicts. The caller ships all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.wire.assemblages import AssignedSync
from rollout.wire.events import CommandDoor

# A module-status entry the caller renders itself, once per batch (`TargetBook.defer_views`,
# `status_of`); recognised by identity, never sent as is.
DEFERRED: dict[str, Any] = {"deferred": True}


class Assignment(BaseModel):
    """The sync record of `module` in `cluster`'s assemblage; `sync` None removes it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    cluster: str
    cluster_namespace: str = Field(alias="clusterNamespace")
    module: str
    assemblage: str  # RemoteAssemblage | ProxyAssemblage
    sync: AssignedSync | None
    reason: str


class DecisionAction(StrEnum):
    """What a decision did. A `StrEnum`: each member is its string on the wire, so a reader
    of the decisions topic compares `record["action"] == DecisionAction.HALTED` or with the
    plain string alike. Adding a member is a change of the decisions' format: readers
    (dashboard, CLI, metrics labels) may see it."""

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
    AWAITING_APPROVAL = "awaiting-approval"
    AWAITING_WINDOW = "awaiting-window"
    GATE_PASSED = "gate-passed"
    GATE_FAILED = "gate-failed"
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


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    module: str
    action: DecisionAction
    reason: str
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    at: float = 0.0
    stage: str | None = None  # the stage a stage-* / awaiting-approval decision is about
    stage_seconds: float | None = None  # stage-succeeded: engine seconds since the stage started
    user: str | None = None  # a command's decision: who asked (RolloutCommanded.user)
    via: CommandDoor | None = None  # a command's decision: through which door (cli, dashboard, crd)
    path: str | None = None  # values-refused: the readOnly Helm values path that kept its value


@dataclass(frozen=True)
class Verdict:
    """The engine's answer to the event `event` (its id) about `module`.

    Refused: `reason` is the refusal, also in the outcome's `rejections` (a dead letter).
    Accepted: `reason` says what happened (the first decision's reason, or that nothing
    had to change). `decisions` is the slice [start, stop) of the outcome's decisions the
    event caused (a held intent released by a FleetSeen shares its outcome with others).
    """

    event: str
    module: str
    accepted: bool
    reason: str
    decisions: tuple[int, int] = (0, 0)


def verdict(
    event: str, module: str, out: Outcome, *, rejections: int, decisions: int, quiet: str = "nothing to change"
) -> Verdict:
    """The verdict on `event`, given the sizes of `out`'s rejections and decisions before
    the engine handled it: a new rejection is a refusal, anything else an acceptance (its
    reason: the first decision's, or `quiet` when it caused none)."""
    caused = (decisions, len(out.decisions))
    if len(out.rejections) > rejections:
        return Verdict(event, module, False, "; ".join(out.rejections[rejections:]), caused)
    reason = out.decisions[decisions].reason if caused[1] > caused[0] else quiet
    return Verdict(event, module, True, reason, caused)


@dataclass
class Outcome:
    assignments: list[Assignment] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    module_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    target_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    rejections: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    # DependentLinked/DependencyReported for other modules' partitions (dependencies.py):
    # the decider publishes them on the dependencies topic, keyed by the receiving module
    dependency_events: list[Any] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        shift = len(self.decisions)
        self.verdicts += [
            replace(v, decisions=(v.decisions[0] + shift, v.decisions[1] + shift)) for v in other.verdicts
        ]
        self.assignments += other.assignments
        self.decisions += other.decisions
        self.module_status.update(other.module_status)
        self.target_status.update(other.target_status)
        self.rejections += other.rejections
        self.dependency_events += other.dependency_events
