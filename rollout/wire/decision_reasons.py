"""Why a decision was taken: the `because` of every record on the decisions topic.

    engine (Decision.because, a model below) ──► decisions topic {"action": …, "because":
        {"code": "stage-started", "stage": "canary", "pending": 3, …}, "reason": "stage canary
        started: 3 to move, 0 not ready, 1 pinned"} ──► readers: history, status, dashboard, replay

A decision's reason is a model: a `ReasonCode` (its `code`, a constant on the wire, as
Flux's `meta.*Reason`) and the facts its sentence mentions — the cluster, stage, counts,
budget, revision, gate and its message, when a window opens, who gave a command and through
which door, the dependents waited for, the rule broken, the readOnly path. The sentence a
person reads (the record's `reason`) is rendered from those facts by the model's
`sentence()` — one per code — and nothing else: a reader that needs a fact reads its field,
never the sentence. `render(because)` is the sentence.

Two reasons are made of another: a halt (`Halted`) and a rollback (`RollbackStarted`) carry
their `cause` — the failure budget exceeded, a gate failed (the same model as the
`gate-failed` decision's), a ModuleRestriction rule broken, a rollback requested.

Reading and writing: the decision record holds `because` as the JSON object of
`model_dump(mode="json")` (streams/chain.py: `decision_body`), every field written;
`REASON_ADAPTER` reads one back. A code a reader does not know (a newer worker's) is read
as an `UnrecognisedReason` by the decision document (decisions.py), whose `reason` still
says it. Adding a code or a field is additive; renaming one changes the topic's format.
The engine module that decides each group is named beside it.

Cost: the model and its sentence make a decision 2.8 µs dearer — building it, its record and
linking it 7.0 → 9.8 µs (measured on the 2-core machine, best of 5), a few percent of the
70 to 150 µs a status report costs the decider; a reason of plain fields is written from its
__dict__ (streams/chain.py: `PLAIN_REASONS`), not dumped.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from rollout.api.restrictions import Rule
from rollout.api.windows import iso
from rollout.wire.documents import Part
from rollout.wire.events import CommandDoor


class ReasonCode(StrEnum):
    """Why a decision was taken: the `code` of its `because`. Each member is its string on
    the wire."""

    # a cluster's assignment (stages.py, membership.py, intents.py)
    MOVED_TO_TARGET = "moved-to-target"
    ROLLED_BACK = "rolled-back"
    STABLE_UNTIL_STAGE = "stable-until-stage"
    CLUSTER_REMOVED = "cluster-removed"
    CLUSTER_UNSELECTED = "cluster-unselected"
    CLUSTER_NOT_ALLOWED = "cluster-not-allowed"
    # a Helm release's values (targets.py, live_values.py)
    VALUES_REFUSED = "values-refused"
    LIVE_VALUES_CHANGED = "live-values-changed"
    # one cluster's status, membership or readiness (reports.py, clock.py, membership.py)
    SYNC_SUCCEEDED = "sync-succeeded"
    SYNC_FAILED = "sync-failed"
    PROGRESS_DEADLINE_EXCEEDED = "progress-deadline-exceeded"
    CLUSTER_JOINED = "cluster-joined"
    READINESS_CHANGED = "readiness-changed"
    OFFLINE_WAIT = "offline-wait"  # (runs.py: rollout.offline)
    OFFLINE_WAIT_OVER = "offline-wait-over"
    # the module's life (intents.py, dependencies.py, causal.py)
    MODULE_CREATED = "module-created"
    NEW_REVISION = "new-revision"
    MODULE_DELETED = "module-deleted"
    DELETE_WAITS_FOR_DEPENDENTS = "delete-waits-for-dependents"
    DELETE_CANCELLED = "delete-cancelled"
    HELD_FOR_FLEET = "held-for-fleet"
    HELD_BEHIND_INTENTS = "held-behind-intents"
    HELD_FOR_DELETION = "held-for-deletion"  # (deletions.py)
    # the stages (stages.py, window_gate.py, gate_results.py, restriction_rules.py)
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
    ROLLOUT_COMPLETE = "rollout-complete"
    STAGES_PASSED = "stages-passed"
    HALTED = "halted"
    STORED_SPEC_REFUSED = "stored-spec-refused"
    ROLLBACK = "rollback"
    RESTRICTION_MET = "restriction-met"
    # what halts a rollout or rolls it back: a `cause` (stages.py, gate_results.py, restriction_rules.py)
    FAILURE_BUDGET_EXCEEDED = "failure-budget-exceeded"
    RESTRICTION_BROKEN = "restriction-broken"
    ROLLBACK_REQUESTED = "rollback-requested"
    REJECTED = "rejected"
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
    # freezes overridden (freeze_gate.py, intents.py, clock.py)
    BROKE_GLASS = "broke-glass"
    BREAK_GLASS_ENDED = "break-glass-ended"


class Reason(Part):
    """What every reason is: a `code` (a `ReasonCode` in each model) and the facts its
    `sentence()` says."""

    code: str

    def sentence(self) -> str:
        raise NotImplementedError


class CommandReason(Reason):
    """A command's reason: who gave it (RolloutCommanded.user) and through which door;
    either may be absent."""

    user: str | None = None
    via: CommandDoor | None = None

    def by(self) -> str:
        """ " by USER via DOOR", as the reason says it; either part left out when absent."""
        by = f" by {self.user}" if self.user else ""
        return f"{by} via {self.via}" if self.via else by


# -- a cluster's assignment ----------------------------------------------------------------


class MovedToTarget(Reason):
    """A cluster of a started stage moved to the target: the `slot`-th of `movable`."""

    code: Literal[ReasonCode.MOVED_TO_TARGET] = ReasonCode.MOVED_TO_TARGET
    cluster: str
    revision: str
    stage: str
    slot: int
    movable: int

    def sentence(self) -> str:
        return f"{self.cluster} → {self.revision}: stage {self.stage} {self.slot}/{self.movable}"


class RolledBack(Reason):
    """A cluster returned to the stable revision (`revision` None: there is none, nothing runs)."""

    code: Literal[ReasonCode.ROLLED_BACK] = ReasonCode.ROLLED_BACK
    cluster: str
    revision: str | None

    def sentence(self) -> str:
        return f"{self.cluster} → {self.revision or 'nothing'}: rollback"


class StableUntilStage(Reason):
    """A cluster of a stage the rollout has not reached gets the stable revision."""

    code: Literal[ReasonCode.STABLE_UNTIL_STAGE] = ReasonCode.STABLE_UNTIL_STAGE
    cluster: str
    revision: str
    stage: str
    # a late joiner deferred to the next run (`lateJoiners: NextRun`, runs.py): stable until
    # that run, whatever its stage; left out when False (the record as before)
    deferred: bool = Field(default=False, exclude_if=lambda value: not value)

    def sentence(self) -> str:
        if self.deferred:
            deferred = "joined mid-run, deferred to the next run"
            return f"{self.cluster} → {self.revision}: {deferred}; it runs the stable revision"
        return f"{self.cluster} → {self.revision}: stage {self.stage} has not started, it runs the stable revision"


class ClusterWasRemoved(Reason):
    code: Literal[ReasonCode.CLUSTER_REMOVED] = ReasonCode.CLUSTER_REMOVED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster}: cluster removed"


class ClusterUnselected(Reason):
    code: Literal[ReasonCode.CLUSTER_UNSELECTED] = ReasonCode.CLUSTER_UNSELECTED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster}: cluster no longer matches the selector"


class ClusterNotAllowed(Reason):
    """The cluster is outside `allowedClusters` of the module's namespace's ModuleRestriction."""

    code: Literal[ReasonCode.CLUSTER_NOT_ALLOWED] = ReasonCode.CLUSTER_NOT_ALLOWED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster}: cluster is outside allowedClusters of its namespace's ModuleRestriction"


# -- a Helm release's values ----------------------------------------------------------------


def _shown(value: Any) -> str:
    """A Helm value as a refusal quotes it (rollout/values/layers.py): its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ValuesRefused(Reason):
    """A readOnly Helm values `path` kept the cluster's value (`current`) against the
    `layer` that wanted `wanted`. `current` and `wanted` are the values as JSON (an
    object's keys may come back sorted from a stored record: the record's `reason` says
    what the engine saw)."""

    code: Literal[ReasonCode.VALUES_REFUSED] = ReasonCode.VALUES_REFUSED
    cluster: str
    path: str  # a JSON pointer, "/image/tag"
    current: Any = None
    wanted: Any = None
    layer: str

    def sentence(self) -> str:
        return (
            f"{self.cluster}: {self.path} is readOnly: the cluster has {_shown(self.current)}, the {self.layer} "
            f"layer wants {_shown(self.wanted)}; the change is refused and the cluster's value stays"
        )


class LiveValuesChanged(Reason):
    code: Literal[ReasonCode.LIVE_VALUES_CHANGED] = ReasonCode.LIVE_VALUES_CHANGED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster}: values observed on the cluster changed its merged values"


# -- one cluster's status, membership or readiness -----------------------------------------


class SyncSucceeded(Reason):
    code: Literal[ReasonCode.SYNC_SUCCEEDED] = ReasonCode.SYNC_SUCCEEDED
    cluster: str
    revision: str

    def sentence(self) -> str:
        return f"{self.cluster} runs {self.revision}"


class SyncFailed(Reason):
    """The cluster reported the revision failed, with its message (None: none given)."""

    code: Literal[ReasonCode.SYNC_FAILED] = ReasonCode.SYNC_FAILED
    cluster: str
    revision: str
    message: str | None = None

    def sentence(self) -> str:
        return f"{self.cluster} failed on {self.revision}" + (f": {self.message}" if self.message else "")


class ProgressDeadlineExceeded(Reason):
    code: Literal[ReasonCode.PROGRESS_DEADLINE_EXCEEDED] = ReasonCode.PROGRESS_DEADLINE_EXCEEDED
    cluster: str
    deadline: str  # the module's progressDeadline, as written ("10m")

    def sentence(self) -> str:
        return f"{self.cluster}: updating for longer than progressDeadline {self.deadline}"


class OfflineWait(Reason):
    """A member offline before it moved, in its started stage: the stage waits for it until
    `until` (engine time; `rollout.offline.wait`), then skips it or fails it (`then`)."""

    code: Literal[ReasonCode.OFFLINE_WAIT] = ReasonCode.OFFLINE_WAIT
    cluster: str
    stage: str
    until: float
    then: Literal["Skip", "Fail"] = "Skip"

    def sentence(self) -> str:
        after = "skips it" if self.then == "Skip" else "fails it"
        return f"{self.cluster} is offline: stage {self.stage} waits for it until {iso(self.until)}, then {after}"


class OfflineWaitOver(Reason):
    """A member its stage waited for stayed offline for `wait`: skipped (SkippedOffline) or,
    with `then: Fail`, failed — counted against the stage's maxFailures."""

    code: Literal[ReasonCode.OFFLINE_WAIT_OVER] = ReasonCode.OFFLINE_WAIT_OVER
    cluster: str
    stage: str
    wait: str
    then: Literal["Skip", "Fail"] = "Skip"

    def sentence(self) -> str:
        verdict = "skipped" if self.then == "Skip" else "failed"
        return f"{self.cluster} stayed offline for offline.wait {self.wait}: {verdict}"


class ClusterJoined(Reason):
    """A cluster matches the module's selector: a member of `stage` ("-": none), ready or not."""

    code: Literal[ReasonCode.CLUSTER_JOINED] = ReasonCode.CLUSTER_JOINED
    cluster: str
    stage: str
    ready: bool
    # it joined after run `run` started and `lateJoiners` kept it out of it (runs.py):
    # `next-run` (deferred: the next run moves it) or `excluded`; absent: taken into the run
    late: Literal["next-run", "excluded"] | None = Field(default=None, exclude_if=lambda value: value is None)
    run: int | None = Field(default=None, exclude_if=lambda value: value is None)

    def sentence(self) -> str:
        late = f"{self.cluster} matches the selector (stage {self.stage}) after run {self.run} started"
        if self.late == "next-run":
            return f"{late}: deferred to the next run (lateJoiners: NextRun)"
        if self.late == "excluded":
            return f"{late}: excluded from it (lateJoiners: Exclude)"
        skipped = "" if self.ready else "; not ready, skipped until it is"
        return f"{self.cluster} matches the selector (stage {self.stage}){skipped}"


class ReadinessChanged(Reason):
    """A member became ready or not ready; why not: it `left` the fleet, or its lease
    expired (`lease_seconds`: the lease it did not renew)."""

    code: Literal[ReasonCode.READINESS_CHANGED] = ReasonCode.READINESS_CHANGED
    cluster: str
    ready: bool
    left: bool = False
    lease_seconds: float | None = None  # set when its lease expired

    def not_ready_because(self) -> str:
        if self.left:
            return "it left the fleet (rollout cluster leave)"
        if self.lease_seconds is not None:
            return f"its lease expired (no heartbeat for {self.lease_seconds:.0f}s)"
        return ""

    def sentence(self) -> str:
        because = self.not_ready_because()
        return f"{self.cluster} is {'ready' if self.ready else 'not ready'}" + (f": {because}" if because else "")


# -- the module's life ------------------------------------------------------------------------


class ModuleCreated(Reason):
    code: Literal[ReasonCode.MODULE_CREATED] = ReasonCode.MODULE_CREATED
    kind: str  # Module | BootstrapModule
    module: str
    revision: str

    def sentence(self) -> str:
        return f"{self.kind} {self.module} created at {self.revision}"


class NewRevision(Reason):
    """A new target: `revision` as `generation`; `supersedes`: the revision whose rollout it
    replaces before it finished (None: the last one had finished)."""

    code: Literal[ReasonCode.NEW_REVISION] = ReasonCode.NEW_REVISION
    revision: str
    generation: int
    supersedes: str | None = None

    def sentence(self) -> str:
        note = f" (supersedes the rollout of {self.supersedes})" if self.supersedes is not None else ""
        return f"target {self.revision} (generation {self.generation}){note}; starting again from the first stage"


class ModuleWasDeleted(Reason):
    """The module was deleted: its own decision, and each cluster's unassignment."""

    code: Literal[ReasonCode.MODULE_DELETED] = ReasonCode.MODULE_DELETED
    kind: str
    module: str

    def sentence(self) -> str:
        return f"{self.kind} {self.module} deleted"


class DeleteWaitsForDependents(Reason):
    """A delete held while modules depend on it: they go first (reverse dependency order)."""

    code: Literal[ReasonCode.DELETE_WAITS_FOR_DEPENDENTS] = ReasonCode.DELETE_WAITS_FOR_DEPENDENTS
    kind: str
    module: str
    dependents: list[str]

    def sentence(self) -> str:
        return (
            f"{self.kind} {self.module} is deleted once the modules depending on it are: "
            f"{', '.join(self.dependents)} (reverse dependency order)"
        )


class DeleteCancelled(Reason):
    code: Literal[ReasonCode.DELETE_CANCELLED] = ReasonCode.DELETE_CANCELLED
    kind: str
    module: str

    def sentence(self) -> str:
        return f"{self.kind} {self.module} applied again: not deleted"


class HeldForFleet(Reason):
    """An intent (`intent`: its event type) held until the engine has folded the cluster
    observations its publisher knew: `positions`, journal partition → offset."""

    code: Literal[ReasonCode.HELD_FOR_FLEET] = ReasonCode.HELD_FOR_FLEET
    intent: str
    positions: dict[int, int]

    def sentence(self) -> str:
        upto = ", ".join(f"partition {p} offset {o}" for p, o in sorted(self.positions.items())) or "nothing"
        return f"{self.intent} held: waiting for cluster observations up to {upto}"


class HeldForDeletion(Reason):
    """An apply (`intent`: its event type) of `module` held while the module's deletion
    still removes its syncs from `members` members (rollout/engine/deletions.py): it
    creates the module again once they are all removed."""

    code: Literal[ReasonCode.HELD_FOR_DELETION] = ReasonCode.HELD_FOR_DELETION
    intent: str
    module: str
    members: int

    def sentence(self) -> str:
        return (
            f"{self.intent} held: module {self.module} is still being deleted "
            f"({self.members} members' syncs left to remove)"
        )


class HeldBehindIntents(Reason):
    """An intent held behind `earlier` intents of `module` that wait already."""

    code: Literal[ReasonCode.HELD_BEHIND_INTENTS] = ReasonCode.HELD_BEHIND_INTENTS
    intent: str
    earlier: int
    module: str

    def sentence(self) -> str:
        return f"{self.intent} held behind {self.earlier} earlier intent(s) of {self.module}"


# -- the stages -------------------------------------------------------------------------------


class StageStarted(Reason):
    """The stage's counts when it started."""

    code: Literal[ReasonCode.STAGE_STARTED] = ReasonCode.STAGE_STARTED
    stage: str
    pending: int
    not_ready: int
    pinned: int

    def sentence(self) -> str:
        return f"stage {self.stage} started: {self.pending} to move, {self.not_ready} not ready, {self.pinned} pinned"


class StageSkipped(Reason):
    code: Literal[ReasonCode.STAGE_SKIPPED] = ReasonCode.STAGE_SKIPPED
    stage: str

    def sentence(self) -> str:
        return f"stage {self.stage} has no members: skipped"


class WaveStarted(Reason):
    """A wave of a stage started (rollout/engine/waves.py): the `wave`-th of `waves`, of
    `size` members, in the order `seed` shuffles (None: `order: Sorted`, the sorting order);
    `members` it takes, in order — the first 100 named in `clusters` — and the SHA-256
    (16 hex digits) of all their names, one a line."""

    code: Literal[ReasonCode.WAVE_STARTED] = ReasonCode.WAVE_STARTED
    stage: str
    wave: int
    waves: int
    size: int
    order: Literal["Random", "Sorted"]
    seed: int | None
    clusters: list[str]
    members: int
    digest: str

    def sentence(self) -> str:
        named = ", ".join(self.clusters) + (
            f" and {self.members - len(self.clusters)} more" if self.members > len(self.clusters) else ""
        )
        order = f"seed {self.seed}" if self.seed is not None else "sorted"
        return f"stage {self.stage} wave {self.wave}/{self.waves} started ({order}, size {self.size}): " + (
            named if named else "no member to move yet"
        )


class EdgeSoaking(Part):
    """An upstream edge whose stage passed and which soaks `until` (engine time; None:
    before the first tick, its soak starts at it)."""

    upstream: str
    until: float | None = None
    until_at: str | None = None  # `until` in ISO 8601 (UTC), rounded up to the second


class StageWaiting(Reason):
    """A stage of a stage graph waits on its upstream stages (rollout/engine/stage_graph.py):
    its `quorum` asks for `needed` counting edges; `counting` do, `missing` have not
    passed, `soaking` passed and soak until when."""

    code: Literal[ReasonCode.STAGE_WAITING] = ReasonCode.STAGE_WAITING
    stage: str
    quorum: str
    needed: int
    counting: list[str]
    missing: list[str]
    soaking: list[EdgeSoaking]

    def sentence(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"waiting for {', '.join(self.missing)}")
        for edge in self.soaking:
            until = edge.until_at or ("the first tick" if edge.until is None else f"{edge.until:g}")
            parts.append(f"after {edge.upstream} soaking until {until}")
        return (
            f"stage {self.stage} waits for its upstream stages ({self.quorum}: "
            f"{len(self.counting)} of {self.needed} needed): " + "; ".join(parts)
        )


class StageSucceeded(Reason):
    """The stage's counts when it was done (its failures within maxFailures)."""

    code: Literal[ReasonCode.STAGE_SUCCEEDED] = ReasonCode.STAGE_SUCCEEDED
    stage: str
    succeeded: int
    failed: int
    not_ready: int
    pinned: int

    def sentence(self) -> str:
        return (
            f"stage {self.stage} succeeded: {self.succeeded} succeeded, {self.failed} failed, "
            f"{self.not_ready} not ready, {self.pinned} pinned"
        )


class AwaitingApproval(Reason):
    """The stage waits for approval: by anyone (`required` None: requireApproval), or by
    `required` distinct verified people, from one of `groups` when given (approvals.py)."""

    code: Literal[ReasonCode.AWAITING_APPROVAL] = ReasonCode.AWAITING_APPROVAL
    stage: str
    # left out when unset: a plain requireApproval's reason is written as it always was
    required: int | None = Field(default=None, exclude_if=lambda value: value is None)
    groups: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)

    def sentence(self) -> str:
        if self.required is None:
            return f"stage {self.stage} waits for approval"
        people = f"{self.required} distinct approver{'s' if self.required != 1 else ''}"
        return f"stage {self.stage} waits for approval by {people}" + (
            f" from {' or '.join(self.groups)}" if self.groups else ""
        )


class AwaitingWindow(Reason):
    """The stage waits for a maintenance window: `next_open` (epoch seconds) when the next
    opens, None when none is ahead — or when the engine has seen no tick (`ticked` False)
    and cannot tell."""

    code: Literal[ReasonCode.AWAITING_WINDOW] = ReasonCode.AWAITING_WINDOW
    stage: str
    next_open: float | None = None
    ticked: bool = True

    def sentence(self) -> str:
        if not self.ticked:
            when = "the engine has seen no tick yet"
        elif self.next_open is not None:
            when = f"next opens at {iso(self.next_open)}"
        else:
            when = "no window ahead"
        return f"stage {self.stage} waits for a maintenance window: {when}"


class AwaitingFreeze(Reason):
    """The module's moves wait for freeze calendars (`namespace/name`, or a
    ClusterFreezeCalendar's name): `until` (epoch seconds) when the latest of their deny
    windows holding now ends — None when the engine has seen no tick (`ticked` False) or a
    calendar this release cannot read holds it."""

    code: Literal[ReasonCode.AWAITING_FREEZE] = ReasonCode.AWAITING_FREEZE
    calendars: list[str]
    until: float | None = None
    ticked: bool = True

    def sentence(self) -> str:
        if not self.ticked:
            when = "the engine has seen no tick yet"
        elif self.until is not None:
            when = f"until {iso(self.until)}"
        else:
            when = "until the calendar is applied again"
        return f"frozen by calendar {', '.join(self.calendars)}: {when}"


class GateAnalysisCounts(Part):
    """A gate analysis's measurements when it concluded (rollout/api/gates.py `count`):
    its run, how many passed, failed and were inconclusive, and the gate's limits."""

    run: int
    count: int
    successful: int
    failed: int
    inconclusive: int
    failure_limit: int
    inconclusive_limit: int

    def said(self) -> str:
        return (
            f"{self.successful} passed, {self.failed} failed (failureLimit {self.failure_limit}), "
            f"{self.inconclusive} inconclusive (inconclusiveLimit {self.inconclusive_limit}) "
            f"of {self.count} measurements"
        )


def _gate_sentence(
    verdict: str, gate: str, stage: str, analysis: GateAnalysisCounts | None, message: str | None, dry_run: bool
) -> str:
    dry = " (dry run: it holds nothing)" if dry_run else ""
    counted = f" — {analysis.said()}" if analysis is not None else ""
    return f"gate {gate} of stage {stage} {verdict}{dry}{counted}" + (f": {message}" if message else "")


class GatePassed(Reason):
    code: Literal[ReasonCode.GATE_PASSED] = ReasonCode.GATE_PASSED
    gate: str
    stage: str
    message: str | None = None  # what the gate runner said (None: nothing)
    analysis: GateAnalysisCounts | None = None  # a gate with `count`: its measurements
    dry_run: bool = False

    def sentence(self) -> str:
        return _gate_sentence("passes", self.gate, self.stage, self.analysis, self.message, self.dry_run)


class GateFailed(Reason):
    code: Literal[ReasonCode.GATE_FAILED] = ReasonCode.GATE_FAILED
    gate: str
    stage: str
    message: str | None = None
    analysis: GateAnalysisCounts | None = None
    dry_run: bool = False

    def sentence(self) -> str:
        return _gate_sentence("failed", self.gate, self.stage, self.analysis, self.message, self.dry_run)


class GateInconclusive(Reason):
    """A gate analysis had more inconclusive measurements (no data, an error answer, NaN)
    than its inconclusiveLimit: the rollout pauses until `rollout resume` (unless dry run)."""

    code: Literal[ReasonCode.GATE_INCONCLUSIVE] = ReasonCode.GATE_INCONCLUSIVE
    gate: str
    stage: str
    analysis: GateAnalysisCounts
    message: str | None = None
    dry_run: bool = False

    def sentence(self) -> str:
        then = "" if self.dry_run else "; paused until resume"
        return _gate_sentence("inconclusive", self.gate, self.stage, self.analysis, self.message, self.dry_run) + then


class RolloutComplete(Reason):
    """The last stage passed and every member runs the target: it is the stable revision."""

    code: Literal[ReasonCode.ROLLOUT_COMPLETE] = ReasonCode.ROLLOUT_COMPLETE
    revision: str

    def sentence(self) -> str:
        return f"rollout of {self.revision} complete; it is the stable revision"


class WindowWait(Part):
    """A stage waiting for a maintenance window; `next_open` None: not known (no tick yet, or none ahead)."""

    stage: str
    next_open: float | None = None


class Outstanding(Part):
    """Why a module whose stages all passed is not Complete: members not ready, members not
    on the target yet (pending, updating, blocked), members on it waiting for their
    Release's other members there, stages waiting for a window."""

    not_ready: int = 0
    moving: int = 0
    windows: list[WindowWait] = Field(default_factory=list)
    held: int = 0  # held by their owners (rollout.dev/hold on the Cluster: rollout/engine/runs.py)
    # on the target, waiting for their Release's other members there (rollout/engine/dependencies.py)
    awaiting_release: int = 0

    def sentence(self) -> str:
        """E.g. "2 clusters not ready; stage wave waits for a maintenance window" ('': nothing)."""
        reasons: list[str] = []
        if self.not_ready:
            reasons.append(f"{self.not_ready} cluster{'s' if self.not_ready != 1 else ''} not ready")
        if self.moving:
            reasons.append(f"{self.moving} cluster{'s' if self.moving != 1 else ''} not on the target yet")
        if self.held:
            whose = "their owners" if self.held != 1 else "its owner"
            reasons.append(f"{self.held} cluster{'s' if self.held != 1 else ''} held by {whose}")
        if self.awaiting_release:
            many = self.awaiting_release != 1
            reasons.append(
                f"{self.awaiting_release} cluster{'s' if many else ''} waiting for the release's other members"
            )
        for wait in self.windows:
            opens = f", next opens at {iso(wait.next_open)}" if wait.next_open else ""
            reasons.append(f"stage {wait.stage} waits for a maintenance window{opens}")
        return "; ".join(reasons)


class StagesPassed(Reason):
    """The last stage passed — the target is the stable revision — but members are outstanding."""

    code: Literal[ReasonCode.STAGES_PASSED] = ReasonCode.STAGES_PASSED
    revision: str
    outstanding: Outstanding

    def sentence(self) -> str:
        return (
            f"every stage of {self.revision} passed; it is the stable revision, not yet on every cluster: "
            f"{self.outstanding.sentence()}"
        )


class FailureBudgetExceeded(Reason):
    """A started stage has more failed members than its maxFailures."""

    code: Literal[ReasonCode.FAILURE_BUDGET_EXCEEDED] = ReasonCode.FAILURE_BUDGET_EXCEEDED
    stage: str
    failed: int
    max_failures: int

    def sentence(self) -> str:
        return f"stage {self.stage} failures {self.failed} > maxFailures {self.max_failures}"


class RestrictionBroken(Reason):
    """The module breaks `rule` of the ModuleRestriction `restriction` (namespace/name) with
    `value`; `why` says how (rollout/api/restrictions.py: RestrictionViolation)."""

    code: Literal[ReasonCode.RESTRICTION_BROKEN] = ReasonCode.RESTRICTION_BROKEN
    restriction: str
    rule: Rule
    value: str
    why: str

    def sentence(self) -> str:
        return f"refused by ModuleRestriction {self.restriction}: {self.rule}: {self.why}"


class RollbackRequested(CommandReason):
    code: Literal[ReasonCode.ROLLBACK_REQUESTED] = ReasonCode.ROLLBACK_REQUESTED

    def sentence(self) -> str:
        return f"rollback requested{self.by()}"


class Rejected(CommandReason):
    """An operator rejected the target at `stage`, saying why (`reason`, their words)."""

    code: Literal[ReasonCode.REJECTED] = ReasonCode.REJECTED
    stage: str
    reason: str

    def sentence(self) -> str:
        return f"stage {self.stage} rejected{self.by()}: {self.reason}"


HaltCause = Annotated[FailureBudgetExceeded | GateFailed | RestrictionBroken | Rejected, Field(discriminator="code")]
"""What halts a rollout (onFailure Halt, or a rule broken)."""
RollbackCause = Annotated[
    FailureBudgetExceeded | GateFailed | RollbackRequested | Rejected, Field(discriminator="code")
]
"""What rolls a rollout back (onFailure Rollback, or a command)."""


class Halted(Reason):
    code: Literal[ReasonCode.HALTED] = ReasonCode.HALTED
    cause: HaltCause

    def sentence(self) -> str:
        return f"halted: {self.cause.sentence()}"


STORED_SPEC_REFUSED = "StoredSpecRefused"
"""The name a halt over a stored spec gives itself in its sentence (rollout/engine/applied_documents.py)."""


class StoredSpecRefused(Reason):
    """The module halts: this release's rules refuse the spec an earlier release stored
    (one line per rule broken); applying it again with a spec they accept lifts it."""

    code: Literal[ReasonCode.STORED_SPEC_REFUSED] = ReasonCode.STORED_SPEC_REFUSED
    problems: list[str]

    def sentence(self) -> str:
        return (
            f"halted ({STORED_SPEC_REFUSED}): the spec stored by an earlier release breaks this release's "
            f"rules — {'; '.join(self.problems)} — re-apply the module with a spec this release accepts "
            "(rollout resume does not lift this)"
        )


class RollbackStarted(Reason):
    """Every cluster on the target returns to the stable revision (`stable` None: there is none)."""

    code: Literal[ReasonCode.ROLLBACK] = ReasonCode.ROLLBACK
    cause: RollbackCause
    stable: str | None

    def sentence(self) -> str:
        return f"{self.cause.sentence()}: every cluster on the target returns to {self.stable or 'nothing'}"


class RestrictionMet(Reason):
    """A module halted by its namespace's ModuleRestriction complies again."""

    code: Literal[ReasonCode.RESTRICTION_MET] = ReasonCode.RESTRICTION_MET

    def sentence(self) -> str:
        return "the module complies with its namespace's restriction"


# -- commands -----------------------------------------------------------------------------


class Paused(CommandReason):
    code: Literal[ReasonCode.PAUSED] = ReasonCode.PAUSED

    def sentence(self) -> str:
        return f"paused{self.by()}: no new moves until resume"


class Resumed(CommandReason):
    code: Literal[ReasonCode.RESUMED] = ReasonCode.RESUMED

    def sentence(self) -> str:
        return f"resumed{self.by()}"


class Aborted(CommandReason):
    code: Literal[ReasonCode.ABORTED] = ReasonCode.ABORTED

    def sentence(self) -> str:
        return f"aborted{self.by()}: the rollout stops where it stands"


class Approved(CommandReason):
    """A stage approved; under an `approval` policy, the `approvals` counted so far of the
    `required` (None: requireApproval, one approval by anyone)."""

    code: Literal[ReasonCode.APPROVED] = ReasonCode.APPROVED
    stage: str
    # left out when unset: a plain requireApproval's reason is written as it always was
    approvals: int | None = Field(default=None, exclude_if=lambda value: value is None)
    required: int | None = Field(default=None, exclude_if=lambda value: value is None)

    def sentence(self) -> str:
        counted = f" ({self.approvals} of {self.required})" if self.required is not None else ""
        return f"stage {self.stage} approved{self.by()}{counted}"


class BrokeGlass(CommandReason):
    """An operator overrode the freeze calendars holding the module (`calendar`: one of
    them; None: every one) until `until` (epoch seconds), saying why (`reason`)."""

    code: Literal[ReasonCode.BROKE_GLASS] = ReasonCode.BROKE_GLASS
    calendar: str | None = None
    until: float
    reason: str
    # the calendar's own break-glass (CalendarBreakGlass, decided once, about `calendar/NAME`):
    # every module it governs, those applied later too; False: this module's only
    every_module: bool = False

    def sentence(self) -> str:
        which = f"freeze calendar {self.calendar}" if self.calendar else "every freeze calendar"
        scope = " for every module it governs" if self.every_module else ""
        return f"break-glass{self.by()}: {which} overridden{scope} until {iso(self.until)}: {self.reason}"


class BreakGlassEnded(Reason):
    """The break-glass override of `calendar` (None: every calendar) ended at `until`: the
    freeze calendars hold the module again."""

    code: Literal[ReasonCode.BREAK_GLASS_ENDED] = ReasonCode.BREAK_GLASS_ENDED
    calendar: str | None = None
    until: float
    every_module: bool = False  # the calendar's own break-glass ended (BrokeGlass.every_module)

    def sentence(self) -> str:
        which = f"of freeze calendar {self.calendar}" if self.calendar else ""
        return f"break-glass {which + ' ' if which else ''}ended at {iso(self.until)}: freezes hold again"


class Pinned(CommandReason):
    code: Literal[ReasonCode.PINNED] = ReasonCode.PINNED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster} pinned at its current revision{self.by()}"


class Unpinned(CommandReason):
    code: Literal[ReasonCode.UNPINNED] = ReasonCode.UNPINNED
    cluster: str

    def sentence(self) -> str:
        return f"{self.cluster} unpinned{self.by()}"


# -- auto-promotion (promotions.py) ------------------------------------------------------


class Promoted(CommandReason):
    """`version` of the module's `source` (kind and URL), seen in its autoPromote range by
    `promoter`, becomes the target in place of `previous`. `user`/`via`: who resumed a held
    promotion (absent when the promoter's observation promoted it at once)."""

    code: Literal[ReasonCode.PROMOTED] = ReasonCode.PROMOTED
    version: str
    previous: str
    source: str  # "oci oci://registry/app", "helm https://charts.example.com podinfo"
    promoter: str | None = None
    release: str | None = Field(default=None, exclude_if=lambda value: value is None)  # with its release

    def sentence(self) -> str:
        seen = f", seen by {self.promoter}" if self.promoter else ""
        resumed = f", resumed{self.by()}" if self.user or self.via else ""
        unit = f" with release {self.release}" if self.release else ""
        return f"promoted {self.previous} → {self.version} from {self.source}{unit}{seen}{resumed}"


class PromotionHeld(Reason):
    """`version` is available (seen by `promoter`) but not promoted: promotion is held —
    by the manifest (`autoPromote.hold`) or a command (`by` "command")."""

    code: Literal[ReasonCode.PROMOTION_HELD] = ReasonCode.PROMOTION_HELD
    version: str
    current: str
    by: Literal["manifest", "command"]
    promoter: str | None = None

    def sentence(self) -> str:
        hold = "autoPromote.hold" if self.by == "manifest" else "rollout promotion hold"
        return f"{self.version} available, held ({hold}); the target stays {self.current}"


class PromotionHoldSet(CommandReason):
    """`rollout promotion hold`: new versions are recorded, not promoted, until resumed."""

    code: Literal[ReasonCode.PROMOTION_HOLD] = ReasonCode.PROMOTION_HOLD
    reason: str

    def sentence(self) -> str:
        return f"promotion held{self.by()}: {self.reason}"


class PromotionResumed(CommandReason):
    """`rollout promotion resume`: the hold a command set is lifted (`available`: the
    version then promoted, if any)."""

    code: Literal[ReasonCode.PROMOTION_RESUMED] = ReasonCode.PROMOTION_RESUMED

    def sentence(self) -> str:
        return f"promotion resumed{self.by()}"


class MemberVersion(Part):
    """One member's move in a release's combination: `previous` → `version` (equal: kept)."""

    module: str
    version: str
    previous: str

    def said(self) -> str:
        return (
            f"{self.module} {self.previous} → {self.version}"
            if self.version != self.previous
            else (f"{self.module} {self.version}")
        )


class ReleaseCombinationPromoted(CommandReason):
    """The release's leader promoted a new combination of its members' versions, seen by
    `promoter` (`user`/`via`: who resumed it, when a held one was promoted on resume): one
    release generation, each member told its version (ReleasePromoted)."""

    code: Literal[ReasonCode.RELEASE_PROMOTED] = ReasonCode.RELEASE_PROMOTED
    release: str
    members: list[MemberVersion]
    promoter: str | None = None

    def sentence(self) -> str:
        seen = f", seen by {self.promoter}" if self.promoter else ""
        resumed = f", resumed{self.by()}" if self.user or self.via else ""
        moves = ", ".join(member.said() for member in self.members)
        return f"release {self.release} promoted as one: {moves}{seen}{resumed}"


class ReleaseCombinationHeld(Reason):
    """A newer combination of the release is available (seen by `promoter`) but held — by
    the Release's `autoPromote.hold` ("manifest") or `rollout promotion hold` ("command")."""

    code: Literal[ReasonCode.RELEASE_PROMOTION_HELD] = ReasonCode.RELEASE_PROMOTION_HELD
    release: str
    members: list[MemberVersion]
    by: Literal["manifest", "command"]
    promoter: str | None = None

    def sentence(self) -> str:
        hold = "autoPromote.hold" if self.by == "manifest" else "rollout promotion hold"
        moves = ", ".join(member.said() for member in self.members)
        return f"release {self.release}: {moves} available, held ({hold})"


class ReleaseApproved(CommandReason):
    """`rollout approve release/NAME --stage S`: the stage approved for every member of the
    release by one person, decided once by its leader; each member counts it by its own
    approval policy of the stage."""

    code: Literal[ReasonCode.RELEASE_APPROVED] = ReasonCode.RELEASE_APPROVED
    release: str
    stage: str
    members: list[str]

    def sentence(self) -> str:
        return f"stage {self.stage} of release {self.release} approved{self.by()} for {', '.join(self.members)}"


DecisionReason = Annotated[
    MovedToTarget
    | RolledBack
    | StableUntilStage
    | ClusterWasRemoved
    | ClusterUnselected
    | ClusterNotAllowed
    | ValuesRefused
    | LiveValuesChanged
    | SyncSucceeded
    | SyncFailed
    | ProgressDeadlineExceeded
    | ClusterJoined
    | ReadinessChanged
    | OfflineWait
    | OfflineWaitOver
    | ModuleCreated
    | NewRevision
    | ModuleWasDeleted
    | DeleteWaitsForDependents
    | DeleteCancelled
    | HeldForFleet
    | HeldForDeletion
    | HeldBehindIntents
    | StageStarted
    | StageSkipped
    | StageSucceeded
    | WaveStarted
    | StageWaiting
    | AwaitingApproval
    | AwaitingWindow
    | AwaitingFreeze
    | GatePassed
    | GateFailed
    | GateInconclusive
    | RolloutComplete
    | StagesPassed
    | Halted
    | StoredSpecRefused
    | RollbackStarted
    | RestrictionMet
    | Paused
    | Resumed
    | Aborted
    | Approved
    | Pinned
    | Unpinned
    | Promoted
    | PromotionHeld
    | PromotionHoldSet
    | PromotionResumed
    | ReleaseCombinationPromoted
    | ReleaseCombinationHeld
    | ReleaseApproved
    | BrokeGlass
    | BreakGlassEnded,
    Field(discriminator="code"),
]
"""The reason of a decision: one model per code (the codes that only say what halted or
rolled back a rollout are `HaltCause` / `RollbackCause`, inside `Halted` / `RollbackStarted`)."""

REASON_ADAPTER: TypeAdapter[DecisionReason] = TypeAdapter(DecisionReason)
"""Reads a decision's `because` (a JSON object, or its text)."""


class UnrecognisedReason(Reason):
    """A reason of a code this release does not know (a newer worker wrote it): its code,
    the rest kept as it was. The record's `reason` says it."""

    model_config = ConfigDict(extra="allow")

    code: str

    def sentence(self) -> str:
        return f"({self.code})"


def render(because: DecisionReason) -> str:
    """The sentence of a decision's reason: what the decision record's `reason` says."""
    return because.sentence()
