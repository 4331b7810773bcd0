"""The engine's persistent state: what is remembered between events.

Everything here is a small pydantic model stored under a string key in a mutable mapping.
In tests those mappings are dicts; in the worker they are the layered, changelogged
mappings of `streams/state.py` (written to the `decide-state` topic in the same Kafka
transaction as the decisions), so the engine's state survives restarts. Keys are chosen so that one input event
rewrites only a handful of small values — never a value whose size grows with the fleet:

* ``clusters[cluster]``          ClusterFacts — labels and readiness, one per cluster
* ``holders[holder]``            HolderLease — one applier replica's lease (leases.py)
* ``holder_claims[holder/chunk]`` ClaimChunk — the clusters one chunk of its claims names
* ``claims[cluster]``            ClusterClaims — the holders that claim the cluster
* ``modules[module]``            ModuleRecord — spec, rollout phase, per-stage counters
* ``targets[module/cluster]``    Target — one cluster's place in one module's rollout
* ``clock["now"]``               the engine's time (from Ticks, at most MAX_TICK_STEP a tick)
* ``clock["paused"]``            the seconds of it leases do not count (clock.py LEASE_TICK_STEP)
* ``removed_clusters[cluster]``  RemovedCluster — tombstone: recent event ids of a removed cluster
* ``deleted_modules[module]``    DeletedModule — tombstone: recent intent ids, last generation
                                 (both pruned TOMBSTONE_HORIZON after their last id: tombstones.py)
* ``tombstones_noted[table/name]`` the engine's time a tombstone last took an id: when it is
                                 pruned (tombstones.py; beside it, so that the tombstone is
                                 written as the release before wrote it)
* ``fleet_positions[partition]`` FleetPosition — how far the cluster-observations partition
                                 has been routed into this journal partition (FleetSeen)
* ``held_queues[module]``        HeldQueue — intents of a module waiting for cluster observations
* ``held_intents[module/seq]``   HeldIntent — one waiting intent, as it came on the journal
* ``capped_ticks["recent"]``     TickLog — ids of the latest ticks whose jump was capped
* ``dependents[module]``         Dependents — the modules depending on `module`
* ``upstream[module/cluster]``   Upstream — a dependency's readiness on one cluster
* ``sequences["dependencies"]``  Sequence — numbers the DependentLinked/DependencyReported sent
* ``observed_values[module/cluster]`` ObservedValues — a Helm release's live values and
                                 chart defaults, as last observed (HelmValuesObserved)
* ``restrictions[namespace]``    RestrictionRecord — the namespace's ModuleRestriction
                                 (restrictions.py), or its tombstone once deleted
* ``freezes[scope]``             FreezeRecord — the freeze calendars of a namespace, or of the
                                 fleet (scope `*`: ClusterFreezeCalendars; freeze_gate.py)
* ``runs[module]``               RunRecord — the module's current run: its members fixed per
                                 stage, who left it (runs.py)

Per-stage counters live in the ModuleRecord and are maintained incrementally, so a sync
status report costs O(1) state writes whatever the fleet size.

Redelivery. Every input event is remembered by id in the record it touches, in a bounded
window (newest last): intents in the ModuleRecord (or, once the module is deleted, in its
DeletedModule tombstone, handed back to the module if it is created again), cluster
observations and status reports in the ClusterFacts (or the RemovedCluster tombstone). A
redelivered event whose id is in the window changes nothing.

`ENGINE_MAPPINGS` declares every mapping the engine is built over (the constructor's
keyword arguments) and the type of its values, so that a runtime can build and changelog
them generically: each value is stored as JSON (`model_dump(mode="json")`, or the float)
under ``"<mapping>:<key>"`` and rebuilt with `model_validate`.

Stored records are read by later releases (and, during a rolling upgrade or a rollback, by
the release before): they are versioned per mapping, with explicit migrations
(rollout/engine/stored.py, migrations.py — the rules for changing a field are there), and
hold the API documents they keep (a module's spec, its syncs, a restriction) as
`AppliedSpec`/`AppliedSync`/`AppliedRestriction`: read under this release's rules, or kept
as stored when those refuse them — the module then halts (applied_documents.py).
"""

from __future__ import annotations

import copy
import functools
import operator
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from rollout.api.manifests import ModuleSpec
from rollout.engine.applied_documents import AppliedFreezeCalendar, AppliedRestriction, AppliedSpec, AppliedSync
from rollout.values.releases import ObservedValues

Phase = Literal[
    "Progressing",
    "Soaking",
    "AwaitingApproval",
    "Paused",
    "Halted",
    "RollingBack",
    "RolledBack",
    "Complete",
    "Aborted",
]
# Where one cluster stands relative to the revision the rollout drives it to.
Category = Literal[
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
]
CATEGORIES: tuple[Category, ...] = get_args(Category)
LateJoin = Literal["next-run", "excluded"]
"""A late joiner's place (runs.py, `lateJoiners`): deferred to the next run, or excluded from this one."""
UNSTAGED = "-"  # the counters' key for members that match no stage

# Redelivery windows: how many recent event ids a record remembers.
INTENT_IDS_KEPT = 256  # per module: applies, deletes, commands
OBSERVATION_IDS_KEPT = 32  # per cluster: observations and removals
REPORT_IDS_KEPT = 64  # per cluster: status reports with no target (all modules), a deleted target's
TARGET_REPORT_IDS_KEPT = 32  # per target: status reports about it (reports.py)
CAPPED_TICK_IDS_KEPT = 16
HEARTBEAT_IDS_KEPT = 16  # per cluster: applier heartbeats
HOLDER_BEAT_IDS_KEPT = 16  # per holder: HolderHeartbeat (and the claims that renewed it)
CLAIM_IDS_KEPT = 16  # per claim chunk: HolderClaims
CLUSTER_COMMAND_IDS_KEPT = 16  # per cluster: leave/join
GATE_IDS_KEPT = 64  # per module: health gate results
PROMOTION_IDS_KEPT = 32  # per module: PromotionObserved (promotions.py)
RESTRICTION_IDS_KEPT = 16  # per namespace: RestrictionApplied/RestrictionDeleted
FREEZE_IDS_KEPT = 64  # per scope: FreezeCalendarApplied/FreezeCalendarDeleted/CalendarBreakGlass
HELD_INTENTS_PER_MODULE = 100  # beyond that an intent waiting for the fleet is dead-lettered
DEPARTURES_KEPT = 25  # per module: the latest members that left its current run, by name (runs.py)


def added_field(default: Any = None, *, factory: Callable[[], Any] | None = None) -> Any:
    """A field added to a stored record after the previous release (v0.26): left out of the
    stored JSON while it holds its default. v0.26 forbids unknown fields, so a record
    written with the field would be unreadable to it during a rolling upgrade or after a
    rollback (tests/upgrade/test_previous_release.py); left out, every record that does not
    use the new feature is byte for byte what v0.26 wrote, and reads back with the default.
    `factory`: for a mutable default (list, dict), which is left out while empty."""
    if factory is not None:
        return Field(default_factory=factory, exclude_if=lambda value: not value)
    return Field(default=default, exclude_if=lambda value: value == default)


def remember(ids: list[str], event_id: str, kept: int) -> list[str]:
    """A new window: `ids` with `event_id` appended, the oldest dropped beyond `kept`."""
    return [*ids, event_id][-kept:]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def working_copy(self) -> Self:
        """A copy the engine may change in place, so that dropping an event's writes undoes
        it (streams/state.py) and a batch-private copy never leaks into committed state: the
        record and, recursively, every Record and container (dict, list, set) it holds are
        copied; strings, numbers and the API's models (a module's spec, its syncs — the
        engine never changes those) are shared. What to copy is read once per class from
        the fields' types (`_field_copiers`): a new field is copied without being listed.
        Copying the spec too (a deep copy) would cost ~60 % of a status report's CPU time."""
        copied = _shallow_copy(self)
        values = copied.__dict__
        for name, copier in _field_copiers(type(self)):
            values[name] = copier(values[name])
        return copied

    def updated(self, changes: dict[str, Any]) -> Self:
        """`self.model_copy(update=changes)` without its generic steps (`_shallow_copy`): a
        status report copies its target twice — once for the report, once for the next move —
        and model_copy cost ~3 µs of it. `changes` are field values, not validated (as
        model_copy's are not)."""
        copied = _shallow_copy(self)
        copied.__dict__.update(changes)
        copied.__pydantic_fields_set__.update(changes)
        return copied


_set = object.__setattr__


def _shallow_copy(record: R) -> R:
    """`record.model_copy()` without its generic steps — a Record has no extra fields
    (`extra="forbid"`) and no private attributes: 0.8 µs instead of 1.3, and a status report
    copies a module record with its revisions and per-stage counters (test_working_copies.py
    holds it to model_copy)."""
    kind = type(record)
    copied = kind.__new__(kind)
    _set(copied, "__dict__", record.__dict__.copy())
    _set(copied, "__pydantic_fields_set__", record.__pydantic_fields_set__.copy())
    _set(copied, "__pydantic_extra__", None)
    _set(copied, "__pydantic_private__", None)
    return copied


Copier = Callable[[Any], Any]
R = TypeVar("R", bound=Record)
_SHARED = (str, int, float, bool, type(None), BaseModel)  # a Record is a BaseModel too: checked first


def _copy_value(value: Any) -> Any:
    """`value` copied so that changing the copy in place leaves it as it was (by its type
    at run time, for fields typed `Any` or a union)."""
    if isinstance(value, Record):
        return value.working_copy()
    if isinstance(value, dict):
        return {key: _copy_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_value(item) for item in value]
    if isinstance(value, _SHARED):
        return value
    return copy.deepcopy(value)


def _copier(annotation: Any) -> Copier | None:
    """How to copy a value of type `annotation` (None: share it — it is never changed in
    place). Containers of shared values are copied shallowly: a list of ids is `list`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _copier(args[0])
    if origin is Literal:
        return None
    if origin in (Union, types.UnionType):
        return _copy_value if any(_copier(arg) is not None for arg in args) else None
    if origin in (dict, list, set):
        item = _copier(args[-1]) if args else _copy_value
        return origin if item is None else _each(origin, item)
    if isinstance(annotation, type) and issubclass(annotation, Record):
        # a record of plain values (per-stage counters, a revision) is copied shallowly,
        # directly rather than through working_copy (a status report copies several)
        return operator.methodcaller("working_copy") if _field_copiers(annotation) else _shallow_copy
    if isinstance(annotation, type) and issubclass(annotation, _SHARED):
        return None
    return _copy_value


def _each(kind: type, item: Copier) -> Copier:
    """A copier of a `kind` container (dict, list or set) whose items `item` copies."""
    if kind is dict:
        return lambda mapping: {key: item(value) for key, value in mapping.items()}
    return lambda values: kind(item(value) for value in values)


@functools.cache
def _field_copiers(kind: type[Record]) -> tuple[tuple[str, Copier], ...]:
    """(field, its copier) for every field of `kind` whose value may be changed in place."""
    found = ((name, _copier(field.annotation)) for name, field in kind.model_fields.items())
    return tuple((name, copier) for name, copier in found if copier is not None)


class Lease(Record):
    """A cluster's lease (leases.py). Its own, renewed by heartbeats naming the cluster
    (`expires_at` None: renewed before the engine saw any tick; it runs from the first one)
    — or, `claimed`, its holders': `expired` then says that no applier claiming it holds a
    live lease (HolderLease), rewritten only when that flips."""

    seconds: float
    renewed_at: float | None = None
    expires_at: float | None = None
    expired: bool = False
    claimed: bool = False  # written only when True (`_own_leases_as_before`)
    # when it runs out in the engine's live time (tables.live: leases.py "The engine's own
    # silence"); None: renewed before any tick, or written by a release before live time —
    # `expires_at` then stands for it (`live_expiry`). Written only when set.
    expires_live: float | None = None

    def live_expiry(self) -> float | None:
        """When the lease runs out in live time (leases.py); None: not before the first tick."""
        return self.expires_live if self.expires_live is not None else self.expires_at

    @model_serializer(mode="wrap")
    def _own_leases_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An own lease is written without `claimed`, byte for byte as before claims: the
        release before forbids fields it does not know, and reads every ClusterFacts."""
        data: dict[str, Any] = handler(self)
        if not self.claimed:
            data.pop("claimed", None)
        if self.expires_live is None:
            data.pop("expires_live", None)
        return data


class HolderLease(Record):
    """One applier replica's lease, renewed by its HolderHeartbeat (and its claims) at the
    engine's time; every cluster it claims follows it (leases.py). `expires_at` None:
    renewed before the engine saw any tick."""

    holder: str
    seconds: float
    renewed_at: float | None = None
    expires_at: float | None = None
    expired: bool = False
    beat_ids: list[str] = Field(default_factory=list)  # HolderHeartbeat ids (HOLDER_BEAT_IDS_KEPT)
    expires_live: float | None = None  # as Lease.expires_live
    # expired, its clusters not all taken offline yet (leases.py "Mass expiries in slices"):
    # "<chunk>/<cluster>" the last one it took, "" none yet; None: none left to take
    settling: str | None = None
    # back after it expired, its clusters not all brought back yet (leases.py "Holders back in
    # slices"): "<chunk>/<cluster>" the last one it brought back, "" none yet; None: none left.
    # Written only while it is set
    returning: str | None = added_field(None)

    def live_expiry(self) -> float | None:
        """When the lease runs out in live time (leases.py); None: not before the first tick."""
        return self.expires_live if self.expires_live is not None else self.expires_at


class ClaimChunk(Record):
    """What one chunk of a holder's claims last said (HolderClaims, keyed like it
    `<holder>/<chunk>`): the clusters it reaches there, at most a chunk's worth."""

    holder: str
    chunk: int
    clusters: list[str] = Field(default_factory=list)  # sorted
    claim_ids: list[str] = Field(default_factory=list)  # CLAIM_IDS_KEPT


class ClusterClaims(Record):
    """The holders whose claims name `cluster` (sorted): it is reached while one of them
    holds a live lease. Kept while the cluster is removed, so that it follows them again
    when it is observed again."""

    cluster: str
    holders: list[str] = Field(default_factory=list)


class ClusterFacts(Record):
    """`ready`: whether the cluster may be moved — observed ready, its lease (if it has
    one) not expired, and it has not left (`rollout cluster leave`)."""

    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    ready: bool = False
    observed_ready: bool | None = None  # the observation's readiness (None: as `ready`)
    lease: Lease | None = None  # None: no applier ever heartbeated for it, no lease applies
    left: bool = False
    observation_ids: list[str] = Field(default_factory=list)  # ClusterObserved/ClusterRemoved
    report_ids: list[str] = Field(default_factory=list)  # reports without a target; a deleted target's
    command_ids: list[str] = Field(default_factory=list)  # ClusterCommanded about this cluster
    heartbeat_ids: list[str] = Field(default_factory=list)  # ClusterHeartbeat for this cluster

    def readiness(self) -> bool:
        """What `ready` must be, given the observation, the lease and leave/join."""
        observed = self.ready if self.observed_ready is None else self.observed_ready
        return observed and not self.left and not (self.lease is not None and self.lease.expired)

    def same_facts(self, other: ClusterFacts) -> bool:
        """Equal in everything but the remembered event ids."""
        return (self.name, self.namespace, self.labels, self.annotations, self.ready) == (
            other.name,
            other.namespace,
            other.labels,
            other.annotations,
            other.ready,
        )


class RemovedCluster(Record):
    """Tombstone of a removed cluster: the ids it had seen, so that a redelivered
    observation does not bring it back. Handed back if the cluster is observed again."""

    name: str
    observation_ids: list[str] = Field(default_factory=list)
    report_ids: list[str] = Field(default_factory=list)
    command_ids: list[str] = Field(default_factory=list)  # ClusterCommanded about it
    heartbeat_ids: list[str] = Field(default_factory=list)


class Revision(Record):
    """One generation of a module's sync: what clusters get when assigned it."""

    generation: int
    revision: str
    sync: AppliedSync  # as stored when this release's rules refuse it (applied_documents.py)
    bindings_digest: str = ""
    assigned: int = 0  # clusters currently assigned this generation


class StageCounts(Record):
    members: int = 0
    pending: int = 0
    updating: int = 0
    succeeded: int = 0
    failed: int = 0
    not_ready: int = 0
    pinned: int = 0
    blocked: int = 0  # ready, waiting for its dependencies there (dependencies.py)
    # held by its owner (the Cluster's rollout.dev/hold annotation: runs.py). Written only
    # when some are: counts with none are byte for byte what the release before wrote
    # (v0.26 refuses fields it does not know, and reads every module)
    held: int = added_field(0)
    # a Release member on its target and succeeded there, waiting for its peers there
    # (dependencies.py, "Releases"): started, not done. Written only when some are
    awaiting_release: int = added_field(0)
    # late joiners the run does not take in (runs.py, `lateJoiners`): deferred to the next
    # run, excluded from this one. Written only when some are, like `held`
    deferred: int = added_field(0)
    excluded: int = added_field(0)
    # offline before it moved, its stage waiting for it (runs.py, `offline.wait`). Like `held`
    awaited: int = added_field(0)


class RunStage(Record):
    """One stage of a run (runs.py): `members`, the clusters the run covers there — fixed
    when the run started, plus the late joiners it took in — of which `left` left it since.
    The stage's budgets are resolved against `members`, so churn never moves them."""

    members: int = 0
    left: int = 0
    ran: bool = False  # a member that had succeeded or failed here left: the stage ran (its soak stands)


class Departure(Record):
    """A member that left the run: `reason` `removed` (ClusterRemoved), `unselected` (its
    labels no longer match the module's selector), `not-allowed` (its namespace's
    ModuleRestriction) — a cluster that left the fleet (`rollout cluster leave`) is still a
    Target, not ready (its document's `offline`: `left`)."""

    cluster: str
    stage: str
    reason: Literal["removed", "unselected", "not-allowed"]
    at: float = 0.0  # engine time
    generation: int | None = None  # what it was assigned when it left


class RunRecord(Record):
    """A module's current run (runs.py), `runs[module]`: one per target generation, and one
    per rollback. Its membership is fixed when it starts (`stages`); kept until the next run
    replaces it."""

    number: int = 1
    mode: Literal["rollout", "rollback"] = "rollout"
    generation: int | None = None  # what it drives: the target, or (rollback) the stable generation
    started_at: float = 0.0  # engine time (0: before the first tick)
    adopted: bool = False  # started by a release that found a rollout already going (runs.py)
    stages: dict[str, RunStage] = Field(default_factory=dict)
    departed: list[Departure] = Field(default_factory=list)  # newest last, DEPARTURES_KEPT
    # late joiners of the run before that this one took in when it started (runs.py,
    # `lateJoiners`); `follow_up`: started for them alone, when the run before passed its
    # stages with NextRun joiners waiting (same generation). Written only when set
    joiners: int = added_field(0)
    follow_up: bool = added_field(False)


AnalysisPhase = Literal["Running", "Successful", "Failed", "Inconclusive"]


class GateAnalysis(Record):
    """The measurements counted in one analysis run of a gate with `count` (gate_results.py):
    measurement n of run r is counted once, when n is one more than those counted."""

    run: int = 1
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    phase: AnalysisPhase = "Running"

    @property
    def measured(self) -> int:
        return self.successful + self.failed + self.inconclusive


class GateState(Record):
    """The latest result of one health gate of one stage (gates.py); `since`: engine time
    of the first passing result in the current run of passes (None unless passing) — for
    a gate with an analysis, when the analysis succeeded. `analysis`: its counts (None: a
    gate without `count`, or one written before analyses existed)."""

    stage: str
    gate: str
    generation: int
    passed: bool | None
    since: float | None = None
    message: str = ""
    analysis: GateAnalysis | None = added_field()


class WaveProgress(Record):
    """Where a stage with waves is (waves.py): the open wave (0-based) of stage `stage` for
    target `generation`, and the engine time it was done (the next opens `delay` after)."""

    stage: str
    generation: int
    wave: int = 0
    done_at: float | None = None


class StageProgress(Record):
    """Where one stage of a stage graph is for the target (stage_graph.py): started (and
    when), done (`done_at`: none pending or updating, failures within maxFailures — as
    `stage_completed_at` for a chain), passed (its soak and gates behind it: its downstream
    edges start counting from `passed_at`), its waves (waves.py), and the last wait on its
    upstreams it decided (`waiting`: the decision is not repeated while the wait is the same)."""

    started: bool = False
    started_at: float | None = None
    done_at: float | None = None
    passed: bool = False
    passed_at: float | None = None
    waves: WaveProgress | None = None
    waiting: str = ""


class StageApproval(Record):
    """One person's approval of a stage (approvals.py): who, through which door, and the
    groups of their verified identity (empty: the door verifies none)."""

    user: str | None = None
    via: str | None = None
    groups: list[str] = Field(default_factory=list)


class Rejection(Record):
    """The target generation was rejected (approvals.py): at which stage, by whom, why."""

    stage: str
    reason: str
    user: str | None = None
    via: str | None = None


class PromotionHold(Record):
    """`rollout promotion hold`: who held the module's auto-promotion, through which door, why."""

    reason: str
    user: str | None = None
    via: str | None = None


class PromotionState(Record):
    """A module's auto-promotion (promotions.py): the hold a command set (None: none), the
    newest version seen while held (`available`, and who saw it), and the latest version
    promoted — the floor a re-applied manifest with an older tag does not go below while it
    is the target. `ids`: PromotionObserved handled (PROMOTION_IDS_KEPT)."""

    held_by: PromotionHold | None = None
    available: str | None = None
    available_from: str | None = None
    promoted: str | None = None
    ids: list[str] = Field(default_factory=list)
    # a Release's leader only (promotions.py, "Releases"): the newer versions of followed
    # members seen while the release is held (member → version), and the combination it
    # last promoted (member → version) — the release's floor, as `promoted` is a module's
    release_available: dict[str, str] = added_field(factory=dict)
    release_promoted: dict[str, str] = added_field(factory=dict)


class Frozen(Record):
    """The module's moves wait for freeze calendars (freeze_gate.py): which (`namespace/name`,
    or the name of a ClusterFreezeCalendar), and the engine time the latest of their
    windows holding now ends (None: the engine has seen no tick yet, `ticked` False, or a
    calendar this release refuses holds it)."""

    calendars: list[str]
    until: float | None = None
    ticked: bool = True


class BreakGlass(Record):
    """An operator's override of the module's freeze calendars (freeze_gate.py): `calendar`
    (None: every calendar governing it) does not hold it until `until` (engine time); who
    (`user`, `via`), why, and the engine time it was given."""

    calendar: str | None = None
    until: float
    reason: str
    user: str | None = None
    via: str | None = None
    at: float = 0.0


class ModuleRecord(Record):
    name: str
    kind: Literal["Module", "BootstrapModule"]
    namespace: str
    spec: AppliedSpec  # as stored when this release's rules refuse it: the module halts (applied_documents.py)
    partition: int = 0
    generation: int = 1
    revisions: dict[int, Revision] = Field(default_factory=dict)
    target: int = 1
    stable: int | None = None
    mode: Literal["rollout", "rollback"] = "rollout"
    phase: Phase = "Progressing"
    paused: bool = False
    aborted: bool = False
    halted: bool = False
    stage_index: int = 0
    stage_started: bool = False
    stage_started_at: float | None = None  # engine time the current stage started (time in stage)
    stage_completed_at: float | None = None
    approvals: list[str] = Field(default_factory=list)  # stages approved by anyone (requireApproval)
    # stage → the approvals given for the target, one per person (approvals.py); a stage's
    # `approval` policy counts these
    approvers: dict[str, list[StageApproval]] = added_field(factory=dict)
    rejection: Rejection | None = added_field()  # the target was rejected (approvals.py): it stays halted
    pinned: list[str] = Field(default_factory=list)
    counts: dict[str, StageCounts] = Field(default_factory=dict)
    # ids of the intents (apply, delete, command) handled, newest last (INTENT_IDS_KEPT); also
    # read under its old name, a dynamic alias: pydantic's mypy plugin then checks
    # ModuleRecord(...) loosely (every argument optional, unknown ones allowed), and says so
    handled_intents: list[str] = Field(  # type: ignore[pydantic-alias]
        default_factory=list, validation_alias=AliasChoices("handled_intents", "handled_commands")
    )
    last_reason: str = ""
    deleting: str | None = None  # id of a delete waiting for the module's dependents (dependencies.py)
    gates: dict[str, GateState] = Field(default_factory=dict)  # "<stage>/<gate>" (gates.py)
    gate_ids: list[str] = Field(default_factory=list)  # GateEvaluated handled (GATE_IDS_KEPT)
    window_waits: list[str] = Field(default_factory=list)  # stages waiting for a maintenance window (window_gate.py)
    # why the module's spec breaks its namespace's ModuleRestriction, applied after it
    # (restriction_rules.py): halted, and `resume` does not lift it; None: it complies
    restricted: str | None = None
    # dependency → the id of its intent this module was applied with (ModuleApplied.after),
    # until the dependency's partition says it folded it (DependencyCurrent): till then no
    # readiness of that dependency counts (dependencies.py)
    awaiting: dict[str, str] = Field(default_factory=dict)
    # RolloutContinued asked for (numbered) and the last one acted on (stages.py, "moves per
    # event"): equal when no continuation is outstanding
    continuations: int = added_field(0)
    continued: int = added_field(0)
    # the fleet's clusters are still being joined (membership.py, "Joins per event"): the
    # name of the last cluster considered ("": none yet), in name order; None: every
    # cluster of the fleet was considered. No stage starts, nothing moves, until it is None
    joining: str | None = added_field(None)
    # the members are being re-sorted (membership.py, "Re-sorts per event"): the name of the
    # last cluster of the fleet re-sorted ("": none yet), in name order; None: none is under
    # way. Set by what changes every member's stage, order or category at once — a new
    # spec or revision, a promotion, a rollback, a ModuleRestriction, a dependency's answer;
    # until it is None no stage starts and nothing moves to the target (a rollback moves
    # each member back as the re-sort reaches it)
    resorting: str | None = added_field(None)
    # the current stage's waves (waves.py); None: it has none, or none started yet. Reset
    # to None by a release that does not know it, the waves go on at the wave the stage's
    # members already started: never a member counted twice, never a wave early
    waves: WaveProgress | None = added_field(None)
    # a stage graph's progress, stage → StageProgress (stage_graph.py); empty for a chain of
    # stages (no `after`), which keeps `stage_index` & co. — and its record's bytes
    graph: dict[str, StageProgress] = added_field(factory=dict)
    # auto-promotion (promotions.py); None: never observed, held or promoted
    promotion: PromotionState | None = added_field(None)
    # the freeze calendars its moves wait for (freeze_gate.py); None: not frozen
    frozen: Frozen | None = added_field(None)
    # an operator's break-glass override of its freezes, until it ends (freeze_gate.py)
    break_glass: BreakGlass | None = added_field(None)


class RestrictionRecord(Record):
    """The ModuleRestriction of one namespace (`restriction` None: deleted, unrestricted),
    and the ids of the restriction events handled — a redelivered older one must not
    bring back a looser or deleted restriction."""

    namespace: str
    restriction: AppliedRestriction | None = None  # as stored when this release refuses it
    event_ids: list[str] = Field(default_factory=list)


class FreezeRecord(Record):
    """The freeze calendars of one scope — a namespace (FreezeCalendars), or `*`
    (ClusterFreezeCalendars) — by name, and the ids of the calendar events handled (a
    redelivered older one must not bring back a deleted calendar)."""

    scope: str
    calendars: dict[str, AppliedFreezeCalendar] = Field(default_factory=dict)  # as stored when refused
    event_ids: list[str] = Field(default_factory=list)  # calendar events and break-glasses handled
    # the calendars of the scope an operator's break-glass overrides, by name, until each
    # ends (`BreakGlass.calendar`: the calendar's identity): every module they govern may
    # move (CalendarBreakGlass; freeze_gate.py)
    break_glass: dict[str, BreakGlass] = added_field(factory=dict)


class DeletedModule(Record):
    """Tombstone of a deleted module (or of intents about a module that did not exist):
    the intent ids it had handled, so a redelivered apply does not recreate it, and its
    last generation, so a module created again under the name continues the numbering
    (a late status report for generation 1 of the old module cannot match the new one)."""

    name: str
    kind: Literal["Module", "BootstrapModule"] | None = None
    generation: int = 0
    handled_intents: list[str] = Field(default_factory=list)
    # its members' syncs are still being removed (deletions.py, "Deletes per event"): the
    # name of the last cluster of the fleet considered ("": none yet), in name order; None:
    # every member's sync was removed (the module is gone). Written only while it is set
    unassigning: str | None = added_field(None)
    members_left: int = added_field(0)  # its members whose syncs are not removed yet
    namespace: str = added_field("")  # the module's namespace, while members are left
    # RolloutContinued asked for by its deletion (numbered) and the last one acted on: as
    # ModuleRecord.continuations / .continued
    continuations: int = added_field(0)
    continued: int = added_field(0)


class FleetPosition(Record):
    """Every record of cluster-observations partition `partition` below offset
    `position` has been folded (FleetSeen). Only grows."""

    partition: int
    position: int


class HeldQueue(Record):
    """The intents of one module waiting for cluster observations, in arrival order:
    held_intents["<module>/<seq>"] for seq in [first, next)."""

    module: str
    first: int = 0
    next: int = 0
    ids: list[str] = Field(default_factory=list)  # of the held intents, oldest first


class HeldIntent(Record):
    """One waiting intent, exactly as it came on the journal."""

    module: str
    seq: int
    id: str
    type: str
    fleet: dict[int, int] = Field(default_factory=dict)  # what it waits for (applies only)
    event: str  # the event's JSON


class TickLog(Record):
    """Ids of the latest ticks whose jump was capped at MAX_TICK_STEP: a redelivered one
    must not advance the clock again."""

    ids: list[str] = Field(default_factory=list)


class Target(Record):
    """One cluster's membership in one module's rollout.

    Stored without the fields at their defaults (stored.py `encode`): a pending member is
    ~85 bytes instead of ~275, and a partition holds one per module and cluster — 500,000 of
    them for 100,000 clusters x 5 modules — as bytes while cold (streams/state.py). Every
    field but `module` and `cluster` has had its default since v0.26, which reads such a
    record as the one it wrote in full (tests/upgrade/test_previous_release.py)."""

    stored_without_defaults: ClassVar[bool] = True

    module: str
    cluster: str
    stage: str = UNSTAGED
    stage_index: int | None = None
    sort_key: int | None = None  # its place in its stage's moving order (waves.py `moving_key`)
    ready: bool = False
    pinned: bool = False
    assigned: int | None = None  # the generation currently in the cluster's assemblage
    status: Literal["none", "updating", "succeeded", "failed"] = "none"
    status_message: str = ""
    updating_since: float | None = None
    category: Category = "pending"
    dependents_ready: bool = False  # on the target and succeeded: what dependents were told
    # a Release member failed on its target / is skipped here (pinned, or not ready and
    # not on its target): what its peers were told (dependency_links.py)
    release_failed: bool = added_field(False)
    release_skipped: bool = added_field(False)
    report_ids: list[str] = Field(default_factory=list)  # SyncStatusReported about it (TARGET_REPORT_IDS_KEPT)
    # a Helm release's readOnly paths → the value each was first sent with (releases.py):
    # kept while the cluster is a member, so a later generation cannot change them
    read_only_values: dict[str, Any] = Field(default_factory=dict)
    # its owner holds it (rollout.dev/hold: "true" on its Cluster, runs.py): the hold's
    # reason (rollout.dev/hold-reason, "" when none is given); None: not held. Written only
    # when set: a Target nobody holds is byte for byte what the release before wrote (v0.26
    # refuses fields it does not know, and reads every Target)
    hold: str | None = added_field(None)
    # it joined the module after the current run started and `lateJoiners` kept it out of
    # that run (runs.py): `next-run` (moved by the next run), `excluded` (never by this
    # one); None: a member of the run. Cleared when the next run starts. Written only when set
    late: LateJoin | None = added_field(None)
    # offline before it moved in its started stage, under `offline.wait` (runs.py): the
    # engine time its stage waits for it until (None: not waited for); `offline_failed`:
    # the wait ran out under `then: Fail` — it counts as failed until it is back. Both
    # cleared when it is ready again or a new run starts. Written only when set
    offline_until: float | None = added_field(None)
    offline_failed: bool = added_field(False)


class DependentLink(Record):
    linked: bool
    seq: int  # of the DependentLinked that set it (the dependent's partition's sequence)
    peer: bool = added_field(False)  # a Release peer only: told, not holding a deletion back
    # the module's intent the dependent waits to hear was folded (DependentLinked.after);
    # None once answered (DependencyCurrent) or when it waits for none
    after: str | None = None
    # its first tell (dependencies.py "First tells in slices"): the last cluster of the
    # fleet considered ("" none yet); None once every member was told (or never linked anew)
    telling: str | None = added_field(None)


class Dependents(Record):
    """The modules that ever declared `dependsOn: [module]` (dependencies.py): every one is
    told the module's per-cluster readiness; `linked` ones hold its deletion back."""

    module: str
    links: dict[str, DependentLink] = Field(default_factory=dict)

    def linked(self) -> list[str]:
        return sorted(name for name, link in self.links.items() if link.linked)

    def holding(self) -> list[str]:
        """The linked dependents that hold the module's deletion back (not mere Release peers)."""
        return sorted(name for name, link in self.links.items() if link.linked and not link.peer)


class Upstream(Record):
    """Whether dependency `module` is on its target and succeeded on `cluster`, as last
    reported (DependencyReported `seq`: older reports are stale)."""

    module: str
    cluster: str
    ready: bool
    seq: int
    # a Release peer failed on its target there / is skipped there (DependencyReported)
    failed: bool = added_field(False)
    skipped: bool = added_field(False)


class Sequence(Record):
    """A partition's counter: `dependencies` numbers the events it sends to other
    partitions (dependency_links.py); `first-generation` is where a module created with no
    tombstone starts (tombstones.py)."""

    next: int = 0


def dependencies_ready(
    upstream: Mapping[str, Upstream], depends_on: list[str], cluster: str, awaiting: Mapping[str, str]
) -> bool:
    """Whether every module of `depends_on` was last reported ready on `cluster` — by a
    report that counts: none counts for a dependency still `awaiting` its intent's fold."""
    return not waiting_dependencies(upstream, depends_on, cluster, awaiting)


def release_peers(spec: ModuleSpec, module: str) -> list[str]:
    """The other members of `module`'s Release, in order (none outside a release)."""
    return spec.release.peers(module) if spec.release is not None else []


def linked_modules(spec: ModuleSpec, module: str) -> dict[str, bool]:
    """Every module `module` hears from per cluster → whether only as a Release peer
    (not in `dependsOn`): its dependencies and its release's other members."""
    return {name: name not in spec.depends_on for name in sorted({*spec.depends_on, *release_peers(spec, module)})}


def failed_peers(
    upstream: Mapping[str, Upstream], peers: list[str], cluster: str, awaiting: Mapping[str, str]
) -> list[str]:
    """The Release peers last reported failed on their target on `cluster` — by a report
    that counts: none of a peer still `awaiting` its intent's fold (its failure may be
    the previous release's)."""
    return [
        peer
        for peer in peers
        if peer not in awaiting and (known := upstream.get(target_key(peer, cluster))) is not None and known.failed
    ]


def awaited_dependencies(
    awaiting: Mapping[str, str], depends_on: list[str], after: Mapping[str, str]
) -> dict[str, str]:
    """What a module applied with `after` (ModuleApplied.after) awaits: the intents `after`
    names of its dependencies, besides those it awaited already of dependencies it keeps."""
    kept = {dependency: intent for dependency, intent in awaiting.items() if dependency in depends_on}
    return kept | {dependency: intent for dependency, intent in after.items() if dependency in depends_on}


def waiting_dependencies(
    upstream: Mapping[str, Upstream], depends_on: list[str], cluster: str, awaiting: Mapping[str, str]
) -> list[str]:
    """The modules of `depends_on` not (known to be) ready on `cluster`, in order."""
    waiting = []
    for dependency in depends_on:
        known = upstream.get(target_key(dependency, cluster))
        if dependency in awaiting or known is None or not known.ready:
            waiting.append(dependency)
    return waiting


def target_key(module: str, cluster: str) -> str:
    return f"{module}/{cluster}"


def held_key(module: str, seq: int) -> str:
    return f"{module}/{seq}"


def claim_key(holder: str, chunk: int) -> str:
    return f"{holder}/{chunk}"


# Every mapping the engine is built over (its constructor's keyword arguments) → the type of
# its values: a Record (stored as `model_dump(mode="json")`, rebuilt with `model_validate`)
# or float. Every value is a small record; none grows with the fleet.
ENGINE_MAPPINGS: dict[str, type] = {
    "clusters": ClusterFacts,
    "modules": ModuleRecord,
    "targets": Target,
    "clock": float,
    "removed_clusters": RemovedCluster,
    "deleted_modules": DeletedModule,
    "tombstones_noted": float,
    "fleet_positions": FleetPosition,
    "held_queues": HeldQueue,
    "held_intents": HeldIntent,
    "capped_ticks": TickLog,
    "dependents": Dependents,
    "upstream": Upstream,
    "sequences": Sequence,
    "observed_values": ObservedValues,
    "restrictions": RestrictionRecord,
    "holders": HolderLease,
    "holder_claims": ClaimChunk,
    "claims": ClusterClaims,
    "runs": RunRecord,
    "freezes": FreezeRecord,
}
