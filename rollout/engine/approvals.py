"""Change control on a stage: who must approve it before it starts, and a rejection.

    approve (RolloutCommanded)  -> `approve`: the approver recorded for the stage, once per
                                   person; refused, saying why, when the stage's `approval`
                                   policy cannot count it (a door that verifies nobody, a
                                   person in none of its groups) or the target was rejected
    reject  (RolloutCommanded)  -> `reject`: the target generation rejected at a stage, with the
                                   operator's reason; the caller halts the module or rolls it
                                   back, per `onFailure` (intents.py)
    approval_met(record, stage) -> whether the stage may start (stages.py `_start_stage`)

Who counts. `requireApproval: true` alone is what it always was: one approval by anyone the
door let through (the CLI's local user included). A stage's `approval: {required: N,
groups: [...]}` counts distinct *verified* people: the user of an approval that came
through the dashboard (OIDC, or a Kubernetes token by TokenReview) or a RolloutApproval
object (its approver checked by admission) — `VERIFIED_DOORS`; never the CLI's, whose user
name is whatever the local account is called. With `groups`, a person counts when the
groups of that same verified identity (`RolloutCommanded.groups`, written by the door,
never asked of the user) include one of them. The same person approving again, through
any door, counts once. Counting reads the stored approvals against the policy as it is
now, so a policy changed by a new apply of the same revision counts the same approvals
anew.

Per target generation: a new target (intents.py `retarget`) clears the approvals and the
rejection. A rejection stands for its target: `resume` does not lift it and approvals after
it are refused (intents.py `standing_halt`); applying a new revision does.

Bounded: at most `MAX_STAGE_APPROVALS` approvals are kept per stage (more people than any
policy can ask for: `MAX_APPROVERS`), so a flood of approvals cannot grow the record.
"""

from __future__ import annotations

from rollout.api.manifests import MAX_APPROVERS, ApprovalPolicy, Stage
from rollout.engine.state import ModuleRecord, Rejection, StageApproval
from rollout.wire.decision_reasons import Approved, Rejected
from rollout.wire.events import RolloutCommanded

VERIFIED_DOORS = frozenset({"dashboard", "crd"})
"""The doors whose `user` is a verified identity (docs/security.md, "Who did it")."""
MAX_STAGE_APPROVALS = 2 * MAX_APPROVERS + 24


def counts_under(policy: ApprovalPolicy, approval: StageApproval) -> bool:
    """Whether `approval` counts toward `policy`: a verified person, in one of its groups."""
    if approval.user is None or approval.via not in VERIFIED_DOORS:
        return False
    return not policy.groups or not set(policy.groups).isdisjoint(approval.groups)


def counted(record: ModuleRecord, stage: Stage) -> list[StageApproval]:
    """The approvals of `stage` that count for the target, in the order they were given."""
    given = record.approvers.get(stage.name, [])
    if stage.approval is None:
        return list(given)
    return [approval for approval in given if counts_under(stage.approval, approval)]


def approval_met(record: ModuleRecord, stage: Stage) -> bool:
    """Whether `stage` has the approvals it needs to start (True when it needs none)."""
    if stage.approval is not None:
        return len(counted(record, stage)) >= stage.approval.required
    return not stage.require_approval or stage.name in record.approvals


def rejection_text(rejection: Rejection) -> str:
    by = f" by {rejection.user}" if rejection.user else ""
    return f"stage {rejection.stage} rejected{by}: {rejection.reason}"


def approve(record: ModuleRecord, stage: Stage, event: RolloutCommanded) -> Approved | str | None:
    """Record `event`'s approval of `stage` on `record`: the decision's reason; a refusal
    (why the approval cannot count); or None when this person's approval is already in."""
    if record.rejection is not None:
        return f"{rejection_text(record.rejection)}; apply a new revision to roll out again"
    policy = stage.approval
    approval = StageApproval(user=event.user, via=event.via, groups=list(event.groups or ()))
    if policy is not None:
        if approval.user is None or approval.via not in VERIFIED_DOORS:
            return (
                f"stage {stage.name} needs approvals by verified people (the dashboard or a RolloutApproval); "
                f"{event.user or 'an unnamed user'} via {event.via or 'an unknown door'} is not a verified identity"
            )
        if not counts_under(policy, approval):
            return (
                f"stage {stage.name} counts approvals by members of {', '.join(policy.groups)}; {event.user} is in none"
            )
    given = record.approvers.setdefault(stage.name, [])
    if any(previous.user == approval.user for previous in given):
        return None  # the same person again: counted once
    if len(given) >= MAX_STAGE_APPROVALS:
        return f"stage {stage.name} already holds {MAX_STAGE_APPROVALS} approvals"
    given.append(approval)
    if stage.name not in record.approvals:
        record.approvals.append(stage.name)
    if policy is None:
        return Approved(stage=stage.name, user=event.user, via=event.via)
    approvals = len(counted(record, stage))
    return Approved(stage=stage.name, user=event.user, via=event.via, approvals=approvals, required=policy.required)


def reject(record: ModuleRecord, stage: Stage, event: RolloutCommanded) -> Rejected | str | None:
    """Reject `record`'s target at `stage`: the cause to halt or roll back with; a refusal
    (nothing to reject); or None when the target is already rejected."""
    if record.rejection is not None:
        return None
    if record.mode == "rollback" or record.aborted:
        return (
            f"module {record.name} is {'rolling back' if record.mode == 'rollback' else 'aborted'}: nothing to reject"
        )
    if record.stable == record.target:
        return f"the rollout of generation {record.target} is complete; roll it back instead"
    reason = (event.reason or "").strip()
    record.rejection = Rejection(stage=stage.name, reason=reason, user=event.user, via=event.via)
    return Rejected(stage=stage.name, reason=reason, user=event.user, via=event.via)
