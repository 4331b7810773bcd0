"""The Kubernetes-object side of the API: approvals, commands and break-glass as objects, and the status
`rollout watch-modules` writes back on Module and BootstrapModule objects.

Modules and BootstrapModules are the manifests of `rollout/api/manifests.py`, stored as custom
resources (`rollout.dev/v1alpha1`, CRDs generated from those models by
`projections/crd_schema.py`). This module adds what only exists as Kubernetes objects:

- `RolloutApproval` (`ApprovalSpec`): "stage S of module M may start", approved by
  `spec.approver`. The chart's ValidatingAdmissionPolicy admits the object only when
  `spec.approver` is the Kubernetes user who creates it, and makes the spec immutable, so
  the approver recorded in the engine's history is the authenticated user and RBAC (who
  may create `rolloutapprovals`) decides who may approve. `spec.approverGroups`, admitted
  only when each is a group of that user, are the groups a stage's `approval.groups`
  counts (rollout/engine/approvals.py).
- `RolloutCommand` (`CommandSpec`): pause / resume / abort / rollback a module, or pin /
  unpin one of its clusters; `spec.requestedBy` checked the same way. A kind of its own,
  so that "may approve" and "may roll back" are separate RBAC grants.
- `RolloutBreakGlass` (`BreakGlassSpec`): lifts one FreezeCalendar of the object's own
  namespace for every module it governs until `spec.until`, saying why; `spec.requestedBy`
  checked the same way. A kind of its own, so that "may break a freeze" is granted apart
  from commands and approvals (RBAC: `create rolloutbreakglasses`, the permission the
  dashboard's break-glass button asks for too). A namespaced object can only lift its
  namespace's calendars: a ClusterFreezeCalendar is lifted through the CLI or dashboard.
- `ModuleResourceStatus`: what `kubectl get modules` shows — phase, target and stable
  revision, per-stage counts, `observedGeneration` and Flux-style `Ready` / `Progressing`
  / `Stalled` conditions (`conditions_for`, `condition_message`) — computed by the module
  watcher's status writer from the engine's module-status document
  (`projections/module_status.py`, `resource_status`; the document: `rollout/wire/status.py`).
  `phase_change` names the Kubernetes Event to record when the phase or the current stage
  changes.

Pure: timestamps come in as arguments.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.api.formats import check_dns1123_label

RESOURCE_COMMANDS = ("pause", "resume", "abort", "rollback", "pin", "unpin", "hold-promotion", "resume-promotion")
ConditionStatus = Literal["True", "False", "Unknown"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class ApprovalSpec(_Spec):
    """Approves one stage of one module's rollout. Immutable once created."""

    module: str = Field(description="The Module or BootstrapModule whose stage is approved.")
    stage: str = Field(description="The stage that may start.")
    approver: str = Field(
        description="The Kubernetes user creating this object; the admission policy refuses any other value."
    )
    approver_groups: list[str] | None = Field(
        default=None,
        alias="approverGroups",
        description=(
            "Groups of the approver that a stage's approval.groups may count; the admission policy refuses any "
            "group the user creating this object is not in."
        ),
    )
    release: str | None = Field(
        default=None,
        description=(
            "Approve the stage for every member of this Release (module is any of its members): one decision, "
            "each member counting it by its own approval policy of the stage."
        ),
    )

    @field_validator("module", "stage")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("release")
    @classmethod
    def _release(cls, value: str | None) -> str | None:
        return check_dns1123_label(value) if value is not None else None


class CommandSpec(_Spec):
    """A command on one module's rollout. Immutable once created."""

    module: str = Field(description="The Module or BootstrapModule the command is for.")
    command: Literal["pause", "resume", "abort", "rollback", "pin", "unpin", "hold-promotion", "resume-promotion"] = (
        Field(
            description="pause, resume, abort, rollback; pin/unpin need `cluster`; hold-promotion (needs `reason`) "
            "and resume-promotion hold or resume the module's auto-promotion — a Release's at its leader, its "
            "first member by name."
        )
    )
    cluster: str | None = Field(default=None, description="The cluster to pin or unpin.")
    reason: str | None = Field(
        default=None, max_length=1000, description="Why: required by hold-promotion, recorded in the decision."
    )
    requested_by: str = Field(
        alias="requestedBy",
        description="The Kubernetes user creating this object; the admission policy refuses any other value.",
    )

    @field_validator("module", "cluster")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return check_dns1123_label(value) if value is not None else None


class BreakGlassSpec(_Spec):
    """Overrides one FreezeCalendar of the object's own namespace for every module it governs,
    until `until` (rollout/engine/freeze_gate.py). Immutable once created."""

    calendar: str = Field(
        description="The FreezeCalendar of this object's namespace overridden, for every module it governs."
    )
    reason: str = Field(
        min_length=1, max_length=1000, description="Why the freeze is overridden: recorded in the decision and status."
    )
    until: str = Field(
        description="When the override ends: an RFC 3339 time with its offset, such as 2026-12-24T18:00:00Z."
    )
    requested_by: str = Field(
        alias="requestedBy",
        description="The Kubernetes user creating this object; the admission policy refuses any other value.",
    )

    @field_validator("calendar")
    @classmethod
    def _calendar(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("say why the freeze is overridden")
        return value

    @field_validator("until")
    @classmethod
    def _until(cls, value: str) -> str:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an RFC 3339 time such as 2026-12-24T18:00:00Z") from None
        if moment.tzinfo is None:
            raise ValueError(f"{value!r} needs its offset (Z or +01:00)")
        return value

    @property
    def until_seconds(self) -> float:
        """`until` in seconds since the epoch (the engine's time)."""
        return datetime.fromisoformat(self.until.replace("Z", "+00:00")).timestamp()


class Condition(BaseModel):
    """A Kubernetes condition (metav1.Condition)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: str = Field(alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")


class StageStatus(BaseModel):
    """One stage of the rollout: its state and how many clusters stand where."""

    name: str
    state: str = Field(description="Pending, Running, Soaking, AwaitingApproval or Succeeded.")
    members: int
    succeeded: int
    updating: int
    failed: int
    pending: int


class ModuleResourceStatus(BaseModel):
    """The status of a Module or BootstrapModule object, written by `rollout watch-modules`."""

    observed_generation: int | None = Field(
        default=None, alias="observedGeneration", description="The generation the engine has answered."
    )
    phase: str | None = Field(default=None, description="The rollout's phase (Progressing, Complete, Halted, ...).")
    target_revision: str | None = Field(default=None, alias="targetRevision")
    stable_revision: str | None = Field(default=None, alias="stableRevision")
    current_stage: str | None = Field(default=None, alias="currentStage")
    current_stages: list[str] = Field(
        default_factory=list,
        exclude_if=lambda value: not value,
        alias="currentStages",
        description="Every stage under way (running, soaking or awaiting approval): several at once in a stage "
        "graph; currentStage is the first of them.",
    )
    progress: str | None = Field(default=None, description="Clusters on the target revision / clusters selected.")
    stages: list[StageStatus] = Field(default_factory=list)
    last_decision: str | None = Field(default=None, alias="lastDecision")
    conditions: list[Condition] = Field(default_factory=list)


class CommandResourceStatus(BaseModel):
    """The status of a RolloutApproval, RolloutCommand or RolloutBreakGlass: the engine's verdict on it."""

    event_id: str | None = Field(default=None, alias="eventId", description="The intent published for it.")
    verdict: str | None = Field(default=None, description="Published, Accepted or Refused.")
    message: str | None = None


# --- conditions ----------------------------------------------------------------------------

# phase → (Ready, Progressing, Stalled) statuses; the reason is the phase itself.
_PHASE_CONDITIONS: dict[str, tuple[ConditionStatus, ConditionStatus, ConditionStatus]] = {
    "Pending": ("Unknown", "True", "False"),
    "Progressing": ("False", "True", "False"),
    "Soaking": ("False", "True", "False"),
    "AwaitingApproval": ("False", "True", "False"),
    "RollingBack": ("False", "True", "False"),
    "Paused": ("False", "False", "False"),
    "Complete": ("True", "False", "False"),
    "Halted": ("False", "False", "True"),
    "RolledBack": ("False", "False", "True"),
    "Aborted": ("False", "False", "True"),
}


def condition_message(phase: str, stage: str | None, target_revision: str | None, reason: str) -> str:
    """The conditions' message: which stage waits for approval, what completed, or the
    phase with `reason` (the engine's latest decision, or why the module is pending)."""
    if phase == "AwaitingApproval":
        return f"stage {stage} waits for approval (a RolloutApproval with stage: {stage})"
    if phase == "Complete":
        return f"{target_revision} rolled out to every stage"
    return f"{phase}: {reason}" if reason else phase


def conditions_for(
    phase: str, message: str, *, generation: int | None, previous: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Ready / Progressing / Stalled for `phase`; lastTransitionTime kept while a status holds."""
    ready, progressing, stalled = _PHASE_CONDITIONS.get(phase, ("Unknown", "True", "False"))
    before = {c.get("type"): c for c in previous}
    out = []
    for kind, status in (("Ready", ready), ("Progressing", progressing), ("Stalled", stalled)):
        old = before.get(kind) or {}
        kept = old.get("lastTransitionTime") if old.get("status") == status else None
        since = kept if isinstance(kept, str) and kept else now
        condition = Condition(
            type=kind,
            status=status,
            reason=phase,
            message=message,
            lastTransitionTime=since,
            observedGeneration=generation,
        )
        out.append(condition.model_dump(by_alias=True, exclude_none=True))
    return out


INVALID_SPEC_REASON = "InvalidSpec"  # the manifest rules refuse the spec
RESTRICTED_REASON = "Restricted"  # its namespace's ModuleRestriction refuses it (rollout/api/restrictions.py)


def invalid_status(
    message: str,
    *,
    generation: int | None,
    previous: dict[str, Any] | None,
    now: str,
    reason: str = INVALID_SPEC_REASON,
) -> dict[str, Any]:
    """The status of an object the watcher refuses to publish: Stalled with `reason`
    (InvalidSpec, or Restricted). Conditions that held before keep their
    lastTransitionTime, as in `conditions_for`."""
    before = (previous or {}).get("conditions") or []
    conditions = conditions_for("Halted", message, generation=generation, previous=before, now=now)
    conditions = [{**c, "reason": reason} for c in conditions]
    kept = {k: v for k, v in (previous or {}).items() if k not in ("conditions", "phase", "observedGeneration")}
    return {**kept, "phase": "Invalid", "observedGeneration": generation, "conditions": conditions}


# --- events --------------------------------------------------------------------------------

_EVENTS: dict[str, tuple[str, str]] = {  # phase → (reason, type)
    "AwaitingApproval": ("WaitingForApproval", "Normal"),
    "Halted": ("Halted", "Warning"),
    "RollingBack": ("RollingBack", "Warning"),
    "RolledBack": ("RolledBack", "Warning"),
    "Aborted": ("Aborted", "Warning"),
    "Paused": ("Paused", "Normal"),
    "Complete": ("Complete", "Normal"),
}


def phase_change(before: dict[str, Any] | None, after: dict[str, Any]) -> tuple[str, str, str] | None:
    """(reason, type, message) of the Event to record on the object, or None.

    A new current stage that is running is `StageStarted`; a phase entered is named after
    the phase (`WaitingForApproval`, `Halted`, `RolledBack`, `Complete`, ...)."""
    before = before or {}
    phase, stage = after.get("phase"), after.get("currentStage")
    if phase == before.get("phase") and stage == before.get("currentStage"):
        return None
    if phase in _EVENTS and phase != before.get("phase"):
        reason, kind = _EVENTS[phase]
        message = condition_message(phase, stage, after.get("targetRevision"), after.get("lastDecision") or "")
        return reason, kind, message
    stages: list[dict[str, Any]] = after.get("stages") or []
    running = any(s.get("name") == stage and s.get("state") == "Running" for s in stages)
    if phase in ("Progressing", "Soaking") and stage is not None and running:
        return "StageStarted", "Normal", f"stage {stage} started ({after.get('targetRevision')})"
    return None
