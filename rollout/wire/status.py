"""The status documents: where each module's rollout stands, and each cluster in it.

    module-status    (compacted, key: module)          ModuleStatus, or a tombstone: deleted
    rollout-targets  (compacted, key: module/cluster)  TargetStatus, or a tombstone: gone

The engine builds them (rollout/engine/views.py) whenever it stores a record; the decider
publishes them (streams/decider.py). Every reader parses them with these models
(`ModuleStatus.read`, `TargetStatus.read`: rollout/wire/documents.py) and reads attributes:
`rollout status` / `get modules` / `status --wait` (rollout_cli/), `rollout up`'s summary
(rollout_cli/views/status_summary.py), the dashboard (projections/dashboard/), the module watcher's
status writer (projections/module_status.py) and the gate runner (projections/gate_runner.py).

A module-status document has one of these shapes — one model, the fields a shape lacks at
their defaults:

* **staged** — the engine holds the module's record: `kind`, `generation`, revisions,
  `phase` (one of `ROLLOUT_PHASES`), `currentStage`, `stages` with their member `counts`,
  and, when they apply: `deleting` (waiting for its dependents), `waiting` (every stage
  passed, members not on the target yet; or a new module still joining the fleet's
  clusters, no stage started), `awaiting`, `restricted`, `held` (a later intent
  waits for cluster observations);
* **pending** — the module's first apply waits for cluster observations (causal order,
  rollout/engine/causal.py): phase `Pending`, `reason`, `held`, and no record yet — no kind,
  no generation, no stages (`staged` is False);
* **deleted** — no document: the record's value is a tombstone (readers get None).

Phases and states are strings here, not enums: a reader shows a phase a newer worker added
as it is (the module watcher's conditions treat an unknown phase as Progressing) instead of
refusing the whole document.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollout.api.windows import iso
from rollout.wire.assemblages import ModuleKind
from rollout.wire.documents import Part, VersionedDocument

ROLLOUT_PHASES = (
    "Progressing",
    "Soaking",
    "AwaitingApproval",
    "Paused",
    "Halted",
    "RollingBack",
    "RolledBack",
    "Complete",
    "Aborted",
)
"""The phases of a staged module (rollout.engine.state.Phase)."""
PENDING = "Pending"
"""The phase of a module not staged yet (the pending shape)."""
DELETING = "Deleting"
"""The phase of a module deleted while its members' syncs are still being removed, a slice
an event (rollout/engine/deletions.py; the pending shape, with `waiting` saying how many are left)."""
FAILED_PHASES = frozenset({"Halted", "RollingBack", "RolledBack", "Aborted"})
STAGE_STATES = ("Pending", "Running", "Soaking", "AwaitingApproval", "Succeeded")
TARGET_STATES = (
    "pending",
    "updating",
    "succeeded",
    "failed",
    "not_ready",
    "pinned",
    "blocked",
    "held",
    "awaiting_release",
    "deferred",
    "excluded",
    "awaited",
)
"""Where one cluster stands in a module's rollout (rollout.engine.state.Category)."""
RUN_STATES = (
    "Succeeded",
    "Failed",
    "SkippedOffline",
    "DeferredByWindow",
    "Pinned",
    "Held",
    "Left",
    "Excluded",
    "DeferredToNextRun",
    "AwaitingReturn",
    "Pending",
    "Updating",
    "Blocked",
    "AwaitingRelease",
)
"""Where one member stands in the module's run (rollout/engine/runs.py, `run_state`): the
first nine are where a member ends in this run (a late joiner kept out of it, `lateJoiners`:
Excluded, or DeferredToNextRun — the next run moves it); the last five say it is still on
its way (AwaitingReturn: offline, its stage waits for it — `rollout.offline`;
AwaitingRelease: on its target, waiting for its Release's other members there)."""
SETTLED_RUN_STATES = frozenset(RUN_STATES[:9])
OFFLINE_REASONS = {
    "lease": "its lease expired (no heartbeat from its applier)",
    "left": "it left the fleet (rollout cluster leave)",
    "not-ready": "it is not ready (control plane or kubeconfig secret)",
}
"""Why a member is not ready (TargetStatus.offline), as `rollout status` says it."""
DEPARTURE_REASONS = {
    "removed": "removed from the fleet",
    "unselected": "its labels no longer match the module's selector",
    "not-allowed": "outside its namespace's ModuleRestriction",
}
"""Why a member left the run (Departure.reason), as `rollout status` says it."""


class MemberCounts(Part):
    """How many members of a stage (or unstaged clusters) are in each target state."""

    members: int = 0
    pending: int = 0
    updating: int = 0
    succeeded: int = 0
    failed: int = 0
    not_ready: int = 0
    pinned: int = 0
    blocked: int = 0  # ready, waiting for its dependencies there
    held: int = 0  # held by its owner (rollout.dev/hold on its Cluster)
    awaiting_release: int = 0  # on its target, waiting for its Release's other members there
    deferred: int = 0  # joined mid-run, deferred to the next run (lateJoiners: NextRun)
    excluded: int = 0  # joined mid-run, excluded from it (lateJoiners: Exclude)
    awaited: int = 0  # offline before it moved, the stage waiting for it (rollout.offline)


class WindowSpec(Part):
    """One maintenance window as the module's manifest gives it (rollout/api/windows.py)."""

    kind: str = "allow"
    schedule: str
    duration: str
    time_zone: str = Field(default="UTC", alias="timeZone")


class StageWindow(Part):
    """A stage's maintenance windows at `observedAt`: open or not, when that changes."""

    open: bool
    next_open: float | None = Field(default=None, alias="nextOpen")  # seconds since the epoch
    next_open_at: str | None = Field(default=None, alias="nextOpenAt")  # the same, ISO 8601 UTC
    closes_at: str | None = Field(default=None, alias="closesAt")
    windows: list[WindowSpec] = Field(default_factory=list)


class PrometheusQuery(Part):
    url: str
    query: str
    min: float | None = None
    max: float | None = None


class WebhookTarget(Part):
    url: str


class CompareQuery(Part):
    """A comparative canary (rollout/api/gates.py `compare`): `query` with `$clusters`."""

    url: str
    query: str
    max_ratio: float | None = Field(default=None, alias="maxRatio")
    max_difference: float | None = Field(default=None, alias="maxDifference")


class GateAnalysisStatus(Part):
    """A gate analysis's current run (rollout/engine/gate_results.py): its measurements so
    far and its phase — Running, Successful, Failed or Inconclusive (the module paused)."""

    run: int = 1
    measured: int = 0
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    phase: str = "Running"


class StageGate(Part):
    """A health gate of a stage (rollout/api/gates.py): its definition, for the gate runner,
    and its latest result for the current target — `passed` None: none yet, or inconclusive.
    A gate with `count` also has `analysis`: the counts of its current run (None: no
    measurement counted yet); the runner measures it `interval` apart (None: its own)."""

    name: str
    prometheus: PrometheusQuery | None = None
    webhook: WebhookTarget | None = None
    compare: CompareQuery | None = None
    count: int | None = None
    interval: str | None = None
    failure_limit: int | None = Field(default=None, alias="failureLimit")
    inconclusive_limit: int | None = Field(default=None, alias="inconclusiveLimit")
    dry_run: bool = Field(default=False, alias="dryRun")
    passed: bool | None = None
    passing_since: float | None = Field(default=None, alias="passingSince")  # engine time
    message: str = ""
    analysis: GateAnalysisStatus | None = None

    def next_measurement(self) -> tuple[int, int] | None:
        """(run, measurement) the gate runner measures next for a gate with `count`; None
        when its analysis is over (Successful; a dry run that concluded)."""
        current = self.analysis
        if current is None:
            return (1, 1)
        if current.phase == "Running":
            return (current.run, current.measured + 1)
        if current.phase in ("Failed", "Inconclusive") and not self.dry_run:
            return (current.run + 1, 1)  # asked only of a soaking stage: the module was resumed
        return None


class StageWaves(Part):
    """A stage's waves (rollout/engine/waves.py): `size` members each, `count` of them, in
    the order `seed` shuffles (None: `order: Sorted`); `current` the open wave (1-based;
    None: none started yet), `nextWave` when the next one starts — engine time, and ISO
    8601 UTC to the second (rounded up) in `nextWaveAt` — once the open one is done (None:
    it is not, or none is left)."""

    size: int
    count: int
    order: Literal["Random", "Sorted"] = "Random"
    seed: int | None = None
    delay: str | None = None
    current: int | None = None
    next_wave: float | None = Field(default=None, alias="nextWave")
    next_wave_at: str | None = Field(default=None, alias="nextWaveAt")


class StageApprover(Part):
    """One person's approval of a stage for the target (rollout/engine/approvals.py);
    `counted`: it counts toward the stage's `approval` policy (a verified person, in one of
    its groups)."""

    user: str | None = None
    via: str | None = None
    counted: bool = True


class RejectionStatus(Part):
    """The target was rejected at `stage` by `user` via `via`, because `reason`: it stays
    halted (or rolls back, per onFailure) until a new revision is applied."""

    stage: str
    reason: str
    user: str | None = None
    via: str | None = None


class StageEdge(Part):
    """One upstream edge of a stage in a stage graph (rollout/engine/stage_graph.py): its
    stage, its soak; whether that stage passed and whether the edge counts toward the
    quorum now (passed and soaked); while it soaks, until when."""

    stage: str
    soak: str | None = None
    passed: bool = False
    counts: bool = False
    soak_until: float | None = Field(default=None, alias="soakUntil")  # engine time
    soak_until_at: str | None = Field(default=None, alias="soakUntilAt")  # ISO 8601, UTC


class FrozenStatus(Part):
    """The module's moves wait for freeze calendars (rollout/engine/freeze_gate.py): which
    (`namespace/name`, or a ClusterFreezeCalendar's name) and when the freeze ends (engine
    seconds and ISO 8601 in UTC; None: unknown — no tick yet, or a calendar this release
    cannot read)."""

    calendars: list[str]
    until: float | None = None
    until_at: str | None = Field(default=None, alias="untilAt")


class BreakGlassStatus(Part):
    """An operator's break-glass override of the module's freeze calendars, in force until
    `until` (rollout/engine/freeze_gate.py): which calendar (None: every one), who, through
    which door, why."""

    calendar: str | None = None
    until: float
    until_at: str | None = Field(default=None, alias="untilAt")
    reason: str
    user: str | None = None
    via: str | None = None


class StageStatus(Part):
    """One stage of the module's rollout, in the order the stages run."""

    name: str
    state: str = "Pending"  # one of STAGE_STATES
    max_concurrency: int = Field(default=1, alias="maxConcurrency")
    max_failures: int = Field(default=0, alias="maxFailures")
    min_success_time: str | None = Field(default=None, alias="minSuccessTime")  # the soak, "10m"
    require_approval: bool = Field(default=False, alias="requireApproval")  # requireApproval or approval
    approved: bool = False  # the approvals it needs are in
    # its `approval` policy: distinct verified approvers needed (None: one by anyone), from these groups
    approvals_required: int | None = Field(default=None, alias="approvalsRequired")
    approval_groups: list[str] = Field(default_factory=list, alias="approvalGroups")
    approvals: list[StageApprover] = Field(default_factory=list)  # who approved, for the target
    counts: MemberCounts = Field(default_factory=MemberCounts)
    window: StageWindow | None = None  # absent: the stage has no maintenance windows
    gates: list[StageGate] = Field(default_factory=list)  # absent: the stage has no gates
    waves: StageWaves | None = None  # absent: the stage has no waves
    # a stage graph's (absent for a chain of stages): its upstream edges, the quorum, how
    # many edges must count (the stage waits while fewer do)
    after: list[StageEdge] | None = None
    quorum: str | None = None
    needed: int | None = None


class Held(Part):
    """Intents of the module held back until the journal partition has seen the cluster
    observations they were published after (rollout/engine/causal.py)."""

    intents: int
    waiting_for: dict[str, int] = Field(default_factory=dict, alias="waitingFor")  # partition → offset
    reason: str = ""


class RunStage(Part):
    """One stage of the run: the members it covers (fixed at the run's start, plus the late
    joiners it took in) — its budgets are resolved against them — and how many left it."""

    members: int = 0
    left: int = 0


class RunDeparture(Part):
    """A member that left the run, and why (`DEPARTURE_REASONS`)."""

    cluster: str
    stage: str
    reason: str  # removed | unselected | not-allowed
    at: float = 0.0  # engine time
    generation: int | None = None  # what it was assigned when it left


class RunStatus(Part):
    """The module's current run (rollout/engine/runs.py): one per target generation and
    per rollback, its membership fixed when it started."""

    number: int
    mode: Literal["rollout", "rollback"] = "rollout"
    generation: int | None = None  # what it drives (rollback: the stable generation)
    started_at: float = Field(default=0.0, alias="startedAt")  # engine time
    adopted: bool = False  # started by a release that found the rollout going
    joiners: int = 0  # late joiners of the run before it took in when it started (lateJoiners)
    # started for the NextRun joiners of the run before, which had passed its stages (same generation)
    follow_up: bool = Field(default=False, alias="followUp")
    stages: dict[str, RunStage] = Field(default_factory=dict)
    departed: list[RunDeparture] = Field(default_factory=list)  # the latest, newest last

    @property
    def left(self) -> int:
        """Members that left the run, every stage (`departed` lists the latest)."""
        return sum(stage.left for stage in self.stages.values())


class PromotionSourceStatus(Part):
    """Where `rollout promoter` looks for versions: the source's kind, URL and (helm) chart,
    and how to reach it — the name of its credentials' Secret, never its data."""

    kind: Literal["git", "oci", "helm"]
    url: str
    chart: str | None = None
    secret_ref: str | None = Field(default=None, alias="secretRef")
    insecure: bool = False


class PromotionHoldStatus(Part):
    """Who held auto-promotion by `rollout promotion hold`, through which door, and why."""

    reason: str
    user: str | None = None
    via: str | None = None


class PromotionStatus(Part):
    """The module's auto-promotion (rollout/engine/promotions.py): the range followed, where
    from, whether and by what it is held, the newest version seen but held (`available`), and
    the latest the promoter promoted."""

    semver: str
    source: PromotionSourceStatus
    hold: bool = False  # the manifest's autoPromote.hold
    held_by: PromotionHoldStatus | None = Field(default=None, alias="heldBy")  # rollout promotion hold
    available: str | None = None  # seen in range, newer than the target, not promoted: held
    available_from: str | None = Field(default=None, alias="availableFrom")  # the promoter that saw it
    promoted: str | None = None  # the latest version promoted

    @property
    def held(self) -> bool:
        return self.hold or self.held_by is not None


class FollowedRange(Part):
    """A release member that follows a semver range."""

    module: str
    semver: str


class ReleasePromotionStatus(Part):
    """A release auto-promoted as a unit (rollout/engine/promotions.py, "Releases"): its
    leader (who decides each combination and keeps the hold), the manifest's hold, the
    members' ranges — and, in the leader's document only, the command's hold, the newer
    versions available while held (member → version, and who saw them) and the combination
    last promoted."""

    leader: str
    hold: bool = False  # the Release's autoPromote.hold
    follow: list[FollowedRange] = Field(default_factory=list)
    held_by: PromotionHoldStatus | None = Field(default=None, alias="heldBy")
    available: dict[str, str] = Field(default_factory=dict)
    available_from: str | None = Field(default=None, alias="availableFrom")
    promoted: dict[str, str] = Field(default_factory=dict)

    @property
    def held(self) -> bool:
        return self.hold or self.held_by is not None


class ModuleRelease(Part):
    """The Release a module moves with: a cluster is done for it only when every member
    is on its target there and succeeded (rollout/engine/dependencies.py, "Releases")."""

    name: str
    members: list[str] = Field(default_factory=list)
    auto_promote: ReleasePromotionStatus | None = Field(default=None, alias="autoPromote")

    @property
    def leader(self) -> str:
        """The member that decides for the release (rollout/api/manifests.py `ReleaseMembership.leader`)."""
        return min(self.members)


UNDER_WAY = ("Running", "Soaking", "AwaitingApproval")
"""The states of a stage under way: started and not passed, or waiting only for its approvals."""


class ModuleStatus(VersionedDocument):
    """The module-status document: one module's rollout, compacted — O(stages), never
    O(clusters). Its shapes (staged, pending) are described in the module docstring."""

    KIND = "module-status"

    module: str
    phase: str  # ROLLOUT_PHASES, or PENDING, or DELETING
    kind: ModuleKind | None = None  # None: not staged yet (pending)
    namespace: str | None = None
    generation: int | None = None  # the target generation; None: not staged yet
    target_revision: str | None = Field(default=None, alias="targetRevision")
    stable_revision: str | None = Field(default=None, alias="stableRevision")  # None: nothing rolled out yet
    mode: Literal["rollout", "rollback"] | None = None
    paused: bool = False
    current_stage: str | None = Field(default=None, alias="currentStage")
    stages: list[StageStatus] = Field(default_factory=list)
    unstaged: MemberCounts = Field(default_factory=MemberCounts)  # selected clusters matching no stage
    pinned: list[str] = Field(default_factory=list)  # clusters pinned to their revision
    depends_on: list[str] = Field(default_factory=list, alias="dependsOn")
    # the Release it moves with (rollout/api/module_releases.py): its name and members
    release: ModuleRelease | None = None
    deleting: bool = False  # deleted, held until the modules depending on it are deleted
    # dependencies applied with it whose partitions have not said they folded that apply:
    # none of their readiness counts until then (rollout/engine/dependencies.py)
    awaiting: list[str] = Field(default_factory=list)
    last_decision: str = Field(default="", alias="lastDecision")  # the reason of its latest decision
    # why a module whose stages all passed is not Complete: members not ready or waiting
    # (or why none started: a new module still joining the fleet, rollout/engine/membership.py)
    waiting: str = ""
    observed_at: float = Field(default=0.0, alias="observedAt")  # engine time (0: before the first tick)
    # the rule of its namespace's ModuleRestriction it breaks (halted until it complies)
    restricted: str | None = None
    held: Held | None = None
    rejection: RejectionStatus | None = None  # the target was rejected (halted or rolled back)
    frozen: FrozenStatus | None = None  # its moves wait for freeze calendars
    break_glass: BreakGlassStatus | None = Field(default=None, alias="breakGlass")  # a freeze overridden, in force
    # the break-glass of calendars governing it (`rollout break-glass calendar/NAME`: every
    # module the calendar governs), in force: the fleet's, then its namespace's, by name
    calendar_break_glass: list[BreakGlassStatus] = Field(default_factory=list, alias="calendarBreakGlass")
    reason: str | None = None  # pending: why it is not staged yet
    run: RunStatus | None = None  # the current run (None: not staged yet, or none started)
    promotion: PromotionStatus | None = None  # its source's autoPromote (None: it has none)

    @property
    def stages_under_way(self) -> list[str]:
        """Every stage under way — running, soaking or awaiting its approval — in list order:
        in a stage graph several at once (rollout/engine/stage_graph.py); a chain's current
        stage alone; none once every stage passed but `currentStage` (the last)."""
        busy = [stage.name for stage in self.stages if stage.state in UNDER_WAY]
        if busy:
            return busy
        return [self.current_stage] if self.current_stage else []

    @property
    def staged(self) -> bool:
        """The engine holds the module's record (False: pending, its apply held back)."""
        return self.generation is not None

    @property
    def members(self) -> int:
        """Staged members, every stage."""
        return sum(stage.counts.members for stage in self.stages)

    @property
    def succeeded(self) -> int:
        """Staged members that run the target and succeeded."""
        return sum(stage.counts.succeeded for stage in self.stages)

    def count(self, category: str) -> int:
        """Staged members in `category` (a TARGET_STATES name), every stage."""
        return sum(getattr(stage.counts, category, 0) for stage in self.stages)

    def stage(self, name: str | None) -> StageStatus | None:
        return next((stage for stage in self.stages if stage.name == name), None)


class TargetStatus(VersionedDocument):
    """The rollout-targets document: one cluster's place in one module's rollout."""

    KIND = "rollout-target"

    module: str
    cluster: str
    stage: str = "-"  # "-": the cluster matches no stage (not rolled out)
    state: str = "pending"  # one of TARGET_STATES
    ready: bool = False
    pinned: bool = False
    revision: str | None = None  # the revision assigned; None: none
    generation: int | None = None
    status: str = "none"  # the latest report about the assignment: none, updating, succeeded, failed
    message: str = ""  # the report's message, or why a blocked member waits
    updating_since: float | None = Field(default=None, alias="updatingSince")  # engine time
    offline: str | None = None  # why it is not ready: lease | left | not-ready (OFFLINE_REASONS)
    hold: str | None = None  # held by its owner: the hold's reason ("" none given); None: not held
    # a late joiner the run kept out (lateJoiners): next-run | excluded; None: a member of the run
    late: str | None = None
    # offline before it moved: its stage waits for it until then (engine time; rollout.offline)
    offline_until: float | None = Field(default=None, alias="offlineUntil")
    offline_failed: bool = Field(default=False, alias="offlineFailed")  # failed: offline past offline.wait


class RunMember(Part):
    """One member of a module's run in its explicit state (`RUN_STATES`) and why — what
    `rollout status` lists and the dashboard shows, from the documents (`run_members`)."""

    cluster: str
    stage: str
    state: str  # one of RUN_STATES
    why: str = ""


def run_state(target: TargetStatus, status: ModuleStatus) -> RunMember:
    """The explicit run state of a present member: its target state, read against the
    module's run (a `not_ready` member whose cluster left the fleet is Left; a pending one
    whose stage waits for a window, DeferredByWindow)."""
    state, why = "Pending", ""
    if target.state == "succeeded":
        state = "Succeeded"
    elif target.state == "failed":
        state, why = "Failed", target.message
        if target.offline_failed:
            why = f"{OFFLINE_REASONS.get(target.offline or 'not-ready', 'not ready')}, past its stage's offline.wait"
    elif target.state == "awaited":
        until = f" until {iso(target.offline_until)}" if target.offline_until is not None else ""
        reason = OFFLINE_REASONS.get(target.offline or "not-ready", "not ready")
        state, why = "AwaitingReturn", f"{reason}; stage {target.stage} waits for it{until}"
    elif target.state == "pinned":
        state, why = "Pinned", "pinned (rollout pin)"
    elif target.state == "held":
        state, why = "Held", "held by its owner" + (f": {target.hold}" if target.hold else "")
    elif target.state == "not_ready":
        state = "Left" if target.offline == "left" else "SkippedOffline"
        why = OFFLINE_REASONS.get(target.offline or "not-ready", "not ready")
    elif target.state == "updating":  # it finishes, offline or not: its report counts
        state = "Updating"
        why = f"assigned before {OFFLINE_REASONS[target.offline]}" if target.offline in OFFLINE_REASONS else ""
    elif target.state == "blocked":
        state, why = "Blocked", target.message
    elif target.state == "awaiting_release":
        state, why = "AwaitingRelease", target.message
    elif target.state == "deferred":
        state, why = "DeferredToNextRun", "joined mid-run (lateJoiners: NextRun): the next run moves it"
    elif target.state == "excluded":
        state, why = "Excluded", "joined mid-run (lateJoiners: Exclude): this run does not move it"
    else:
        stage = status.stage(target.stage)
        waits = stage is not None and stage.state != "Pending" and stage.window is not None
        if waits and stage is not None and stage.window is not None and not stage.window.open:
            opens = f", next opens at {stage.window.next_open_at}" if stage.window.next_open_at else ""
            state, why = "DeferredByWindow", f"stage {target.stage} waits for a maintenance window{opens}"
    return RunMember(cluster=target.cluster, stage=target.stage, state=state, why=why)


def run_members(status: ModuleStatus, targets: list[TargetStatus]) -> list[RunMember]:
    """Every member of the module's run in its explicit state: the present members (its
    targets, unstaged ones left out: they are not rolled out), then those that left it."""
    members = [run_state(target, status) for target in sorted(targets, key=lambda t: t.cluster) if target.stage != "-"]
    present = {member.cluster for member in members}
    for departure in status.run.departed if status.run is not None else []:
        if departure.cluster not in present:
            why = DEPARTURE_REASONS.get(departure.reason, departure.reason)
            members.append(RunMember(cluster=departure.cluster, stage=departure.stage, state="Left", why=why))
    return members


# --- a Release's members together (read side: `rollout status`, the dashboard) ----------

RELEASE_PHASE_ORDER = ("RollingBack", "RolledBack", "Halted", "Aborted", "Paused", "Pending")


class ReleaseMember(Part):
    """One member of a Release as its module status says."""

    module: str
    phase: str = "Pending"  # Pending: no status yet (not applied, or held)
    target_revision: str | None = Field(default=None, alias="targetRevision")
    stable_revision: str | None = Field(default=None, alias="stableRevision")


class ReleaseCluster(Part):
    """Where each member stands on one cluster: module → its revision and state there."""

    cluster: str
    members: dict[str, TargetStatus] = Field(default_factory=dict)

    @property
    def done(self) -> bool:
        """Every member succeeded here: the cluster is done for the release."""
        return bool(self.members) and all(t.state == "succeeded" for t in self.members.values())


class ReleaseStatus(Part):
    """A Release, read from its members' module statuses and targets (the engine keeps no
    Release record: rollout/api/module_releases.py). `phase`: the members' worst —
    RollingBack, RolledBack, Halted, Aborted, Paused, Pending before the others — Complete
    when every member is, else Progressing."""

    name: str
    phase: str
    members: list[ReleaseMember] = Field(default_factory=list)
    clusters: list[ReleaseCluster] = Field(default_factory=list)
    # auto-promoted as a unit: as its leader's status says it (its hold, what is available)
    auto_promote: ReleasePromotionStatus | None = Field(default=None, alias="autoPromote")

    @classmethod
    def of(
        cls, release: ModuleRelease, statuses: dict[str, ModuleStatus], targets: list[TargetStatus]
    ) -> ReleaseStatus:
        """The release `release` names, from every module status and its members' targets."""
        members = []
        for name in release.members:
            status = statuses.get(name)
            members.append(
                ReleaseMember(module=name)
                if status is None or not status.staged
                else ReleaseMember(
                    module=name,
                    phase=status.phase,
                    target_revision=status.target_revision,
                    stable_revision=status.stable_revision,
                )
            )
        clusters: dict[str, ReleaseCluster] = {}
        for target in targets:
            if target.module in release.members:
                clusters.setdefault(target.cluster, ReleaseCluster(cluster=target.cluster)).members[target.module] = (
                    target
                )
        auto = release.auto_promote
        leader = statuses.get(auto.leader) if auto is not None else None
        if leader is not None and leader.release is not None and leader.release.auto_promote is not None:
            auto = leader.release.auto_promote  # the leader's: its hold and what is available
        return cls(
            name=release.name,
            phase=release_phase([m.phase for m in members]),
            members=members,
            clusters=[clusters[name] for name in sorted(clusters)],
            auto_promote=auto,
        )


def release_phase(phases: list[str]) -> str:
    """A release's phase from its members' (see ReleaseStatus)."""
    for phase in RELEASE_PHASE_ORDER:
        if phase in phases:
            return phase
    return "Complete" if phases and all(p == "Complete" for p in phases) else "Progressing"
