"""What one event decides: the `Outcome` `RolloutEngine.handle` returns.

* `Assignment` — to the assemblage builder (assembly.py): the sync record of one module in
  one cluster's assemblage, or None to remove it;
* `Decision`   — to the decisions topic: why an assignment changed or a phase moved; its
  `action` is a `DecisionAction` (rollout/wire/decision_actions.py: the strings on the wire),
  its `because` a reason model (rollout/wire/decision_reasons.py) and `reason` its sentence;
* `Verdict`    — to the verdicts topic: the engine's answer to one event that asks for
  one (every module intent; a status report with `reply`), accepted or refused with the
  reason, and which of the outcome's decisions it caused. `rollout approve` & co. wait for it;
* `Outcome`    — everything one event decided: assignments, decisions, the module/target
  status views (views.py), rejections (dead letters) and verdicts. The caller ships all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rollout.wire.assemblages import AssignedSync
from rollout.wire.decision_actions import DecisionAction as DecisionAction  # re-exported: what a Decision did
from rollout.wire.decision_reasons import DecisionReason
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


class Decision(BaseModel):
    """What was done (`action`) and why: `because`, the reason's model (its code and the
    facts: rollout/wire/decision_reasons.py), and `reason`, the sentence rendered from it
    (`render(because)`; `TargetBook.decide` sets both). The decisions topic's record of it is
    a `rollout.wire.decisions.DecisionDocument`."""

    model_config = ConfigDict(frozen=True)

    module: str
    action: DecisionAction
    reason: str
    because: DecisionReason
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    at: float = 0.0
    stage: str | None = None  # the stage a stage-* / awaiting-approval decision is about
    stage_seconds: float | None = None  # stage-succeeded: engine seconds since the stage started
    user: str | None = None  # a command's decision: who asked (RolloutCommanded.user)
    via: CommandDoor | None = None  # a command's decision: through which door (cli, dashboard, crd)


_set = object.__setattr__


def assignment(
    *, cluster: str, cluster_namespace: str, module: str, assemblage: str, sync: AssignedSync | None, reason: str
) -> Assignment:
    """`Assignment(...)` of these values — typed here, so mypy checks every caller's — without
    validating them again: what pydantic's validation makes of values of their declared types
    is the values themselves (tests/rollout/test_outcome_models.py). Validated, one was ~2 µs
    standalone and ~12 in the decider's fold of a status report (its caches cold), for an
    object the engine made from its own typed state; one per cluster moved (targets.py `assign`)."""
    fields = {
        "cluster": cluster,
        "cluster_namespace": cluster_namespace,
        "module": module,
        "assemblage": assemblage,
        "sync": sync,
        "reason": reason,
    }
    return _trusted(Assignment, fields, set(fields))


def decision(
    *,
    module: str,
    action: DecisionAction,
    reason: str,
    because: DecisionReason,
    cluster: str | None,
    generation: int | None,
    revision: str | None,
    at: float,
    stage: str | None,
    stage_seconds: float | None,
) -> Decision:
    """`Decision(...)` of these values (the fields `TargetBook.decide` sets: a command's `user`
    and `via` left at None, unset), not validated again — as `assignment`; two per status
    report that moves a cluster, ~8 µs each validated in the decider's fold."""
    given = {
        "module": module,
        "action": action,
        "reason": reason,
        "because": because,
        "cluster": cluster,
        "revision": revision,
        "generation": generation,
        "at": float(at),  # as validation makes an int of a clock set by hand
        "stage": stage,
        "stage_seconds": None if stage_seconds is None else float(stage_seconds),
    }
    return _trusted(Decision, {**given, "user": None, "via": None}, set(given))


M = TypeVar("M", bound=BaseModel)


def _trusted(model: type[M], fields: dict[str, Any], given: set[str]) -> M:
    """An instance of `model` holding `fields` (every field of it), `given` the ones set
    explicitly — what `model(**given fields)` makes of valid values, without validating
    them (pydantic's `model_construct` without its generic steps)."""
    made = model.__new__(model)
    _set(made, "__dict__", fields)
    _set(made, "__pydantic_fields_set__", given)
    _set(made, "__pydantic_extra__", None)
    _set(made, "__pydantic_private__", None)
    return made


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
