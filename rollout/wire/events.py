"""Events: everything that enters the engine, as it travels on Kafka.

Inputs arrive on six topics, each event a JSON object with a `type` discriminator:

* intents (key: module)         — ModuleApplied, ModuleDeleted, RolloutCommanded;
  CalendarBreakGlass (key: `freeze/<namespace or *>/<name>`, broadcast: a calendar's
  break-glass covers the modules of every partition)
* cluster observations (key: cluster) — ClusterObserved, ClusterRemoved; RestrictionApplied,
  RestrictionDeleted (key: `restriction/<namespace>`: the fleet's policy travels with the
  fleet, so a module's `fleet` stamp covers the restrictions published before it, and a
  principal that may only write intents cannot lift one — rollout/api/restrictions.py);
  FreezeCalendarApplied, FreezeCalendarDeleted (key: `freeze/<namespace or *>/<name>`, for
  the same reasons: rollout/api/freezes.py)
* sync status (key: cluster)    — SyncStatusReported, HelmValuesObserved (what appliers saw); GateEvaluated
  (a health gate's result, from `rollout gate-runner`; key: module); PromotionObserved (a newer
  version of an auto-promoted source, from `rollout promoter`; key: module);
  ReleasePromotionObserved (an auto-promoted Release's newer versions; key: its leader)
* ticks                         — Tick (time enters the engine only as these events)
* cluster heartbeats (key: the applier, `<applier>/<chunk>`, or the cluster) — HolderHeartbeat
  (an applier replica is alive: one per beat), HolderClaims (the clusters it reaches, per
  chunk, sent when they change), as appliers send them (leases.py); ClusterHeartbeat (an
  applier reaches the cluster) and ClusterHeartbeats (many clusters in one event, as
  appliers sent them before claims) are still valid input. ClusterCommanded (`rollout
  cluster leave/join`) travels with the observations.
* dependencies (key: the receiving module) — DependentLinked, DependencyReported,
  DependencyCurrent, written by the decider so that one module's per-cluster state reaches
  another's partition; ReleasePromoted, a release's new combination from its leader;
  ReleaseStageApproved, a release's stage approved for every member, from its leader;
  RolloutContinued, to the module's own partition: a stage's moves
  carried on past the per-event limit; LeasesContinued, to the journal partition it names:
  a mass lease expiry's (or a holder's return's) next slice, without waiting for a Tick.

Every event carries an `id` (unique per event, so that duplicates can be recognised) and
`at`, the producer's wall-clock time — informational only: decisions read time from Tick
events and nothing else.

`parse_event` is the single place raw bytes become a typed event; what it rejects goes to
the dead-letter topic with the reason it gives. It is poison-proof: whatever the bytes, it
returns an event or raises `EventRejected` with a reason of at most `MAX_REASON_CHARS`
characters — never RecursionError, MemoryError or anything else that would stop a worker.
Before JSON is decoded it refuses inputs over `MAX_EVENT_BYTES` and nesting deeper than
`MAX_JSON_DEPTH` (a linear scan of the brackets outside strings); the decoder refuses
NaN/Infinity and numbers that overflow to infinity.

One event never arrives on an input topic: `FleetSeen`, which the router writes into every
journal partition to tell the engine how far it has routed the cluster-observations topic
(see `ModuleApplied.fleet` and docs/rollout-semantics.md, "Causal order").
"""

from __future__ import annotations

import json
import math
import re
import typing
import uuid
import zlib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from rollout.api.manifests import (
    CLUSTER_SCOPE,
    AnyFreezeCalendar,
    AnyModule,
    ClusterManifest,
    ModuleRestrictionManifest,
    check_dns1123_label,
)
from rollout.api.promotion import is_version

MAX_EVENT_BYTES = 1024 * 1024  # 1 MiB: larger inputs are rejected unread
MAX_JSON_DEPTH = 64  # arrays/objects nested deeper are rejected before decoding
MAX_REASON_CHARS = 1000  # a rejection reason never grows with the input
MAX_FLEET_PARTITIONS = 4096  # entries in ModuleApplied.fleet
MAX_AFTER_DEPENDENCIES = 256  # entries in ModuleApplied.after
MAX_INTENT_ID = 200  # characters of an intent id named in ModuleApplied.after
MAX_RELEASE_MEMBERS = 32  # members of a Release (as manifests.MAX_DEPENDENCIES)
MAX_COMMAND_REASON = 1000  # characters of a command's reason (reject)
MAX_IDENTITY_GROUPS = 256  # groups of a command's verified identity
MAX_IDENTITY_GROUP = 256  # characters of one group name
# Tick.now must be a plausible wall-clock time: after the epoch, before 2200-01-01.
LATEST_PLAUSIBLE_TIME = 7_258_118_400.0

SyncState = Literal["succeeded", "failed", "updating"]
CommandName = Literal[
    "pause",
    "resume",
    "abort",
    "rollback",
    "approve",
    "reject",
    "pin",
    "unpin",
    "hold-promotion",
    "resume-promotion",
    "break-glass",
]
CommandDoor = Literal["cli", "dashboard", "crd"]
"""Where an operator's command came in: `rollout <verb>` (cli), the dashboard's buttons
(dashboard), or a RolloutCommand / RolloutApproval object the module watcher turned into the
event (crd). Absent on events written before the field existed."""


def new_event_id() -> str:
    return uuid.uuid4().hex


def wall_clock() -> str:
    """Only for the informational `at` field; never read by the decision core."""
    return datetime.now(UTC).isoformat()


class EventBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(default_factory=new_event_id)
    at: str = Field(default_factory=wall_clock)

    def to_bytes(self) -> bytes:
        """The event as written on a topic: fields that are None are left out, so that
        optional fields cost nothing — which is why every field that may be None must
        default to None (checked below): what is left out reads back as None."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name, info in cls.model_fields.items():
            if _admits_none(info.annotation) and info.is_required():
                raise TypeError(
                    f"{cls.__name__}.{name} may be None but has no default: to_bytes() leaves None out, "
                    "so the parser could not read it back — give it the default None"
                )


def _unset(flag: bool) -> bool:
    """A flag added to an event after the previous release: left out of its bytes while
    False, so that an event not using it is what that release wrote and reads."""
    return not flag


def _admits_none(annotation: Any) -> bool:
    return annotation is None or type(None) in typing.get_args(annotation)


class ModuleApplied(EventBase):
    """A Module/BootstrapModule manifest as the user applied it.

    `fleet`: positions on the cluster-observations topic (partition → offset) that the
    publisher had published up to when it published this apply — "stage me only once you
    have seen every cluster observation below these offsets". Empty: no requirement.
    `after`: dependency → the id of that dependency's intent published with this one (one
    `rollout apply`) — "trust no readiness of it until its partition folded that intent"
    (rollout/engine/dependencies.py). Empty: what the dependency's partition last reported counts.
    """

    type: Literal["ModuleApplied"] = "ModuleApplied"
    module: AnyModule
    fleet: dict[int, int] = Field(default_factory=dict)
    after: dict[str, str] = Field(default_factory=dict)

    @field_validator("fleet")
    @classmethod
    def _fleet(cls, value: dict[int, int]) -> dict[int, int]:
        if len(value) > MAX_FLEET_PARTITIONS:
            raise ValueError(f"at most {MAX_FLEET_PARTITIONS} partitions")
        if any(partition < 0 or offset < 0 for partition, offset in value.items()):
            raise ValueError("partitions and offsets are not negative")
        return value

    @field_validator("after")
    @classmethod
    def _after(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_AFTER_DEPENDENCIES:
            raise ValueError(f"at most {MAX_AFTER_DEPENDENCIES} dependencies")
        for dependency, intent in value.items():
            check_dns1123_label(dependency)
            if not 0 < len(intent) <= MAX_INTENT_ID:
                raise ValueError(f"{dependency}: an intent id of 1 to {MAX_INTENT_ID} characters")
        return value


class ModuleDeleted(EventBase):
    type: Literal["ModuleDeleted"] = "ModuleDeleted"
    kind: Literal["Module", "BootstrapModule"]
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)


class RolloutCommanded(EventBase):
    """An operator's command on one module's rollout."""

    type: Literal["RolloutCommanded"] = "RolloutCommanded"
    module: str
    command: CommandName
    stage: str | None = None
    cluster: str | None = None
    user: str | None = None
    """Who asked: the CLI's local user, the dashboard's verified identity (OIDC or Kubernetes
    token), the object's `spec.approver` / `spec.requestedBy` (checked by admission)."""
    via: CommandDoor | None = None
    groups: list[str] | None = None
    """The groups of the verified identity that gave the command — the dashboard's OIDC
    groups claim or TokenReview answer; None from a door that verifies none (the CLI). What
    `approval.groups` of a stage is checked against (rollout/engine/approvals.py)."""
    reason: str | None = None
    """Why, in the operator's words: required by `reject` and `break-glass` (shown in the
    decision and status)."""
    until: float | None = None
    """`break-glass` only: when the override ends (seconds since the epoch, compared with the
    engine's time: rollout/engine/freeze_gate.py). Required by it."""
    calendar: str | None = None
    """`break-glass` only: the freeze calendar overridden (`namespace/name`, or a
    ClusterFreezeCalendar's name); None: every calendar governing the module."""
    release: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """`approve` only: approve `stage` for every member of this Release — sent to one member
    (the CLI and the dashboard: its leader), which decides it once and tells each member
    (ReleaseStageApproved). Left out when unset."""
    namespace: str | None = None
    """From a namespaced door (`via: crd`): the namespace of the RolloutCommand /
    RolloutApproval object the command came in as — where the API server's RBAC let its
    creator create it, stamped by the module watcher from the object's metadata. From the
    dashboard (`via: dashboard`): the namespace its SubjectAccessReview allowed the command
    in — the one the module's status named. The engine refuses the command for a module of
    any other namespace (intents.py `door_refusal`). None from the CLI (whose principal may
    write the intents topic), from the dashboard for a module whose status names no
    namespace, and on events written before the field existed: those are decided as they
    were (docs/security.md, "A namespace's door commands only its namespace's modules")."""

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("release")
    @classmethod
    def _release(cls, value: str | None) -> str | None:
        return None if value is None else check_dns1123_label(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return check_dns1123_label(value) if value is not None else None

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str | None) -> str | None:
        if value is not None and not 0 < len(value.strip()) <= MAX_COMMAND_REASON:
            raise ValueError(f"a reason of 1 to {MAX_COMMAND_REASON} characters")
        return value

    @field_validator("groups")
    @classmethod
    def _groups(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if len(value) > MAX_IDENTITY_GROUPS:
            raise ValueError(f"at most {MAX_IDENTITY_GROUPS} groups")
        if any(not 0 < len(group) <= MAX_IDENTITY_GROUP for group in value):
            raise ValueError(f"group names of 1 to {MAX_IDENTITY_GROUP} characters")
        return sorted(set(value))

    @field_validator("until")
    @classmethod
    def _until(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or not 0 < value <= LATEST_PLAUSIBLE_TIME):
            raise ValueError("must be a finite time in seconds since the epoch, after 1970 and before 2200")
        return value

    @field_validator("calendar")
    @classmethod
    def _calendar(cls, value: str | None) -> str | None:
        if value is not None:
            namespace, _, name = value.rpartition("/")
            check_dns1123_label(name)
            if namespace:
                check_dns1123_label(namespace)
        return value

    @model_validator(mode="after")
    def _reject_says_why(self) -> RolloutCommanded:
        if self.command == "reject" and (self.stage is None or self.reason is None):
            raise ValueError("reject needs the stage rejected and a reason")
        if self.command == "hold-promotion" and self.reason is None:
            raise ValueError("hold-promotion needs a reason")
        if self.command == "break-glass" and (self.reason is None or self.until is None):
            raise ValueError("break-glass needs a reason and when it ends (until)")
        if self.command != "break-glass" and (self.until is not None or self.calendar is not None):
            raise ValueError("until and calendar belong to break-glass")
        return self


class ClusterObserved(EventBase):
    """The current facts of one cluster (labels, readiness) — a full observation."""

    type: Literal["ClusterObserved"] = "ClusterObserved"
    cluster: ClusterManifest


class ClusterRemoved(EventBase):
    """A cluster left the fleet. `reply`: ask for a verdict (`rollout delete cluster`);
    refused when the fleet has no such cluster. Watchers leave it out."""

    type: Literal["ClusterRemoved"] = "ClusterRemoved"
    name: str
    reply: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)


class RestrictionApplied(EventBase):
    """The ModuleRestriction of a namespace (rollout/api/restrictions.py), on the
    cluster-observations topic: broadcast to every journal partition, it replaces the
    namespace's restriction in each and is checked against the namespace's modules."""

    type: Literal["RestrictionApplied"] = "RestrictionApplied"
    restriction: ModuleRestrictionManifest


class RestrictionDeleted(EventBase):
    """The ModuleRestriction `name` of `namespace` is gone: the namespace is unrestricted."""

    type: Literal["RestrictionDeleted"] = "RestrictionDeleted"
    namespace: str
    name: str

    @field_validator("namespace", "name")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


def restriction_key(namespace: str) -> str:
    """The cluster-observations key of a namespace's restriction events."""
    return f"restriction/{namespace}"


class FreezeCalendarApplied(EventBase):
    """A FreezeCalendar (its namespace's modules) or ClusterFreezeCalendar (every module),
    on the cluster-observations topic: broadcast to every journal partition, it replaces the
    calendar of that scope and name in each (rollout/engine/freeze_gate.py)."""

    type: Literal["FreezeCalendarApplied"] = "FreezeCalendarApplied"
    calendar: AnyFreezeCalendar


class FreezeCalendarDeleted(EventBase):
    """The calendar `name` of `scope` (a namespace, or `*` for a ClusterFreezeCalendar) is gone."""

    type: Literal["FreezeCalendarDeleted"] = "FreezeCalendarDeleted"
    scope: str
    name: str

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        return value if value == CLUSTER_SCOPE else check_dns1123_label(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)


class CalendarBreakGlass(EventBase):
    """An operator's break-glass of one freeze calendar — `rollout break-glass
    calendar/NAME`, a RolloutBreakGlass object naming a calendar: on the intents topic (the
    doors that may send commands send it; a principal that may only write intents can break
    the glass of a calendar, recorded, never delete one), broadcast to every journal
    partition, where it is kept on the calendar's scope: every module the calendar `name` of
    `scope` (a namespace, or `*` for a ClusterFreezeCalendar) governs — those applied later
    too — may move until `until` (rollout/engine/freeze_gate.py)."""

    type: Literal["CalendarBreakGlass"] = "CalendarBreakGlass"
    scope: str
    name: str
    reason: str
    """Why, in the operator's words (shown in the decision and the modules' status)."""
    until: float
    """When the override ends (seconds since the epoch, compared with the engine's time)."""
    user: str | None = None
    """Who asked (as RolloutCommanded.user: the CLI's local user, the verified identity of
    the dashboard, the object's `spec.requestedBy`, checked by admission)."""
    via: CommandDoor | None = None

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        return value if value == CLUSTER_SCOPE else check_dns1123_label(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not 0 < len(value.strip()) <= MAX_COMMAND_REASON:
            raise ValueError(f"a reason of 1 to {MAX_COMMAND_REASON} characters")
        return value

    @field_validator("until")
    @classmethod
    def _until(cls, value: float) -> float:
        if not math.isfinite(value) or not 0 < value <= LATEST_PLAUSIBLE_TIME:
            raise ValueError("must be a finite time in seconds since the epoch, after 1970 and before 2200")
        return value


def freeze_key(scope: str, name: str) -> str:
    """The cluster-observations key of one calendar's events (apply and delete in order)."""
    return f"freeze/{scope}/{name}"


class SyncStatusReported(EventBase):
    """What an applier saw for one (cluster, module).

    `generation`: the generation of the assignment the report answers (appliers read it
    from the rendered object's annotation). When present it must equal the generation the
    cluster is assigned, or the report is ignored; when absent (a hand-written
    `rollout report-status`), the revision label must equal the assigned one.

    `reply`: ask the engine for a verdict (accepted, or refused with the reason: unknown
    cluster or module, not the assignment in force) on the verdicts topic. Appliers leave
    it out: their reports are many, and nobody waits for them.
    """

    type: Literal["SyncStatusReported"] = "SyncStatusReported"
    cluster: str
    module: str
    revision: str
    state: SyncState
    message: str | None = None
    generation: int | None = None
    reply: bool | None = None

    @field_validator("cluster", "module")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


MAX_LEASE_SECONDS = 86_400.0


class ClusterHeartbeat(EventBase):
    """An applier reached `cluster`: its lease is renewed for `lease_seconds` of engine
    time (from the latest Tick). A cluster whose lease expires is not ready for new moves
    until heartbeats return (rollout/engine/leases.py). `holder`: which applier, informational."""

    type: Literal["ClusterHeartbeat"] = "ClusterHeartbeat"
    cluster: str
    lease_seconds: float = Field(default=60.0, alias="leaseSeconds")
    holder: str | None = None

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("lease_seconds")
    @classmethod
    def _lease(cls, value: float) -> float:
        if not math.isfinite(value) or not 1.0 <= value <= MAX_LEASE_SECONDS:
            raise ValueError(f"must be between 1 and {MAX_LEASE_SECONDS:.0f} seconds")
        return value


MAX_HEARTBEAT_CLUSTERS = 1000
"""Clusters per `ClusterHeartbeats` event (a DNS label is at most 63 bytes: under 70 KiB)."""


class ClusterHeartbeats(EventBase):
    """An applier reached every cluster in `clusters`: each one's lease is renewed, as by
    a `ClusterHeartbeat` of each. Appliers send these — one event per beat for up to
    `MAX_HEARTBEAT_CLUSTERS` clusters — so that a fleet's heartbeats cost the journal a
    few records per beat, not one per cluster and journal partition."""

    type: Literal["ClusterHeartbeats"] = "ClusterHeartbeats"
    clusters: list[str] = Field(min_length=1, max_length=MAX_HEARTBEAT_CLUSTERS)
    lease_seconds: float = Field(default=60.0, alias="leaseSeconds")
    holder: str | None = None

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, value: list[str]) -> list[str]:
        for name in value:
            check_dns1123_label(name)
        if len(set(value)) != len(value):
            raise ValueError("names a cluster more than once")
        return value

    _lease = field_validator("lease_seconds")(ClusterHeartbeat._lease.__func__)  # type: ignore[attr-defined]


CLAIM_CHUNKS = 64
"""Chunks of one holder's claims: a cluster's chunk is `claim_chunk(cluster)`, so a cluster
reached or lost rewrites one chunk, and a holder names each chunk (empty ones too) at start."""
MAX_CLAIMED_CLUSTERS = 10_000
"""Clusters per `HolderClaims` event (a DNS label is at most 63 bytes: under 700 KiB); 64
chunks of it: 640,000 clusters per holder."""
_HOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def claim_chunk(cluster: str) -> int:
    """The chunk of a holder's claims that names `cluster` (stable: crc32 of the name)."""
    return zlib.crc32(cluster.encode()) % CLAIM_CHUNKS


def _check_holder(value: str) -> str:
    if not _HOLDER.fullmatch(value):
        raise ValueError("must be 1-253 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return value


class HolderHeartbeat(EventBase):
    """Applier replica `holder` is alive: its lease is renewed for `lease_seconds` of engine
    time, and with it the lease of every cluster it claims (HolderClaims). One event per
    beat whatever the number of clusters (rollout/engine/leases.py)."""

    type: Literal["HolderHeartbeat"] = "HolderHeartbeat"
    holder: str
    lease_seconds: float = Field(default=60.0, alias="leaseSeconds")

    @field_validator("holder")
    @classmethod
    def _holder(cls, value: str) -> str:
        return _check_holder(value)

    _lease = field_validator("lease_seconds")(ClusterHeartbeat._lease.__func__)  # type: ignore[attr-defined]


class HolderClaims(EventBase):
    """Applier replica `holder` reaches exactly `clusters` among those of chunk `chunk` of its
    claims (`claim_chunk`); it sends one when that chunk's set changes (and every chunk when
    it starts), keyed `<holder>/<chunk>`. A claim renews the holder's lease as a beat does."""

    type: Literal["HolderClaims"] = "HolderClaims"
    holder: str
    chunk: int = Field(ge=0, lt=CLAIM_CHUNKS)
    clusters: list[str] = Field(default_factory=list, max_length=MAX_CLAIMED_CLUSTERS)
    lease_seconds: float = Field(default=60.0, alias="leaseSeconds")

    @field_validator("holder")
    @classmethod
    def _holder(cls, value: str) -> str:
        return _check_holder(value)

    _lease = field_validator("lease_seconds")(ClusterHeartbeat._lease.__func__)  # type: ignore[attr-defined]

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, value: list[str]) -> list[str]:
        for name in value:
            check_dns1123_label(name)
        if len(set(value)) != len(value):
            raise ValueError("names a cluster more than once")
        return value

    @model_validator(mode="after")
    def _in_chunk(self) -> HolderClaims:
        strays = [name for name in self.clusters if claim_chunk(name) != self.chunk]
        if strays:
            raise ValueError(f"clusters {strays[:3]} are not of chunk {self.chunk} (claim_chunk)")
        return self


class ClusterCommanded(EventBase):
    """An operator takes `cluster` out of every rollout (`leave`: not ready for new moves
    whatever its heartbeats say; what it runs stays) or back in (`join`). `reply`: ask for
    a verdict (journal partition 0 answers)."""

    type: Literal["ClusterCommanded"] = "ClusterCommanded"
    cluster: str
    command: Literal["leave", "join"]
    user: str | None = None
    via: CommandDoor | None = None
    reply: bool | None = None

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        return check_dns1123_label(value)


class HelmValuesObserved(EventBase):
    """What an applier saw of one (cluster, module) Helm release, on the sync-status topic.

    `values`: the release's live values (None: not observed this time, the last ones stay).
    `chartDefaults`: the chart's own default values, for chart version `chartVersion`
    (required with them). The engine merges them as the chart and live layers of the
    module's values (rollout/values/layers.py) and re-sends the cluster's sync if that changes it.
    `reply`: ask for a verdict (`rollout report-values`): refused with the reason for an
    unknown cluster or module, or one that syncs no Helm chart; accepted otherwise, with the
    decision it caused (`values`, `values-refused`) as its reason.
    """

    type: Literal["HelmValuesObserved"] = "HelmValuesObserved"
    cluster: str
    module: str
    values: dict[str, Any] | None = None
    chart_defaults: dict[str, Any] | None = Field(default=None, alias="chartDefaults")
    chart_version: str | None = Field(default=None, alias="chartVersion")
    reply: bool | None = None

    @field_validator("cluster", "module")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)

    @model_validator(mode="after")
    def _defaults_name_their_chart(self) -> HelmValuesObserved:
        if self.chart_defaults is not None and self.chart_version is None:
            raise ValueError("chartDefaults need the chartVersion they belong to")
        return self


class DependentLinked(EventBase):
    """Engine-written, through the dependencies topic (rollout/engine/dependencies.py): module
    `dependent` now depends on `module` (`linked`) or no longer does (changed `dependsOn`,
    deleted). Keyed by `module`: it reaches the partition that folds `module`. `seq`: the
    sender partition's sequence — an older one than the last folded is stale."""

    type: Literal["DependentLinked"] = "DependentLinked"
    module: str
    dependent: str
    linked: bool
    seq: int = Field(ge=0)
    # linked as a peer of the same Release only (not in `dependsOn`): told like a
    # dependent, but it does not hold `module`'s deletion back
    peer: bool = Field(default=False, exclude_if=_unset)
    # the id of `module`'s intent the dependent was applied with (ModuleApplied.after):
    # `module`'s partition answers with DependencyCurrent once it has folded that intent
    after: str | None = Field(default=None, min_length=1, max_length=MAX_INTENT_ID)

    @field_validator("module", "dependent")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class DependencyReported(EventBase):
    """Engine-written, through the dependencies topic (rollout/engine/dependencies.py): dependency
    `module` is (`ready`) or is not on its target and succeeded on `cluster`. Keyed by
    `dependent`: it reaches the partition that folds the dependent. `seq`: as above."""

    type: Literal["DependencyReported"] = "DependencyReported"
    dependent: str
    module: str
    cluster: str
    ready: bool
    seq: int = Field(ge=0)
    # `module` is a Release member and failed on its target there (the release failed on
    # that cluster: rollout/engine/dependencies.py, "Releases")
    failed: bool = Field(default=False, exclude_if=_unset)
    # `module` is a Release member skipped on that cluster — pinned there (held where it
    # is), or not ready there and not on its target (its run skips it, offline): its peers
    # do not wait for it there
    skipped: bool = Field(default=False, exclude_if=_unset)

    @field_validator("module", "dependent", "cluster")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class DependencyCurrent(EventBase):
    """Engine-written, through the dependencies topic (rollout/engine/dependencies.py): dependency
    `module`'s partition has folded `module`'s intent `after`, so every DependencyReported
    it sent `dependent` before this one reflects it — the dependent may trust them again.
    Keyed by `dependent`. `seq`: as above."""

    type: Literal["DependencyCurrent"] = "DependencyCurrent"
    dependent: str
    module: str
    after: str = Field(min_length=1, max_length=MAX_INTENT_ID)
    seq: int = Field(ge=0)

    @field_validator("module", "dependent")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class RolloutContinued(EventBase):
    """Engine-written, through the dependencies topic, to the module's own partition
    (rollout/engine/stages.py, "moves per event"): the fold that asked for it stopped
    moving `module`'s clusters at the per-event limit, and this event carries on where it
    stopped. `slice` numbers the module's requests: only the latest unanswered one acts, so
    a redelivered or superseded continuation changes nothing."""

    type: Literal["RolloutContinued"] = "RolloutContinued"
    module: str
    slice: int = Field(ge=1)

    @field_validator("module")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class LeasesContinued(EventBase):
    """Engine-written, through the dependencies topic, to journal partition `partition`
    (rollout/engine/leases.py, "Mass expiries in slices"): the fold that asked for it took a
    slice of a mass lease expiry — or of a holder's clusters coming back — and clusters are
    left, so this event takes the next slice as soon as it is folded, not at the next Tick.
    Leases expire in every journal partition alike, so it names its partition (the router
    routes it there, not by key). `slice` numbers the partition's requests: only the latest
    unanswered one acts, so a redelivered or superseded continuation changes nothing."""

    type: Literal["LeasesContinued"] = "LeasesContinued"
    partition: int = Field(ge=0)
    slice: int = Field(ge=1)


class GateEvaluated(EventBase):
    """A health gate's result (rollout/api/gates.py), from `rollout gate-runner`, on the
    sync-status topic keyed by module: gate `gate` of stage `stage` of `module`, for the
    target generation `generation`, passed (True), failed (False) or could not be
    evaluated (None: inconclusive). `message` says what was seen. A gate with an analysis
    (`count`) names the measurement: measurement `measurement` (1, 2, …) of the gate's
    analysis run `run` (1, then one more after each resume of a failed or inconclusive
    one) — its identity: the engine counts each (run, measurement) once, whoever sent it."""

    type: Literal["GateEvaluated"] = "GateEvaluated"
    module: str
    stage: str
    gate: str
    generation: int = Field(ge=1)
    passed: bool | None = None  # left out of the bytes when None (inconclusive)
    message: str = Field(default="", max_length=1000)
    run: int | None = Field(default=None, ge=1)  # None: a gate without an analysis
    measurement: int | None = Field(default=None, ge=1)

    @field_validator("module", "stage", "gate")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class PromotedSource(BaseModel):
    """Which source a promotion was observed in: its kind, URL and (helm) chart — no
    credentials, ever (the promoter reads them by the source's Secret name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kind: Literal["git", "oci", "helm"]
    url: str = Field(min_length=1, max_length=2048)
    chart: str | None = Field(default=None, max_length=250)


class PromotionObserved(EventBase):
    """A newer version of a module's source, in its `autoPromote` range, seen by `rollout
    promoter` (rollout/api/promotion.py) — on the sync-status topic keyed by module, like a
    gate result: an observation of the outside world, never a manifest. `promoter` is who
    saw it (the promoter's `--name`, vouched for by the Kafka principal that may write the
    topic): the provenance the promotion's decision carries. The engine
    (rollout/engine/promotions.py) makes it the target, or records it as available when
    promotion is held."""

    type: Literal["PromotionObserved"] = "PromotionObserved"
    module: str
    version: str
    source: PromotedSource
    promoter: str = Field(min_length=1, max_length=253)

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if len(value) > 128 or not is_version(value):
            raise ValueError("a semantic version such as 1.4.2 (optionally prefixed v)")
        return value


class ObservedMember(BaseModel):
    """One member's newest version in its range, as a ReleasePromotionObserved carries it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    module: str
    version: str
    source: PromotedSource

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if len(value) > 128 or not is_version(value):
            raise ValueError("a semantic version such as 1.4.2 (optionally prefixed v)")
        return value


class ReleasePromotionObserved(EventBase):
    """The newest version in range of each followed member of an auto-promoted Release,
    seen in one round by `rollout promoter` — on the sync-status topic keyed by `module`, the
    release's leader (its first member by name: `ReleaseMembership.leader`), whose partition
    decides each new combination (rollout/engine/promotions.py, "Releases"). One event for
    the whole release, so the versions seen together become one release generation."""

    type: Literal["ReleasePromotionObserved"] = "ReleasePromotionObserved"
    module: str
    release: str
    members: list[ObservedMember] = Field(min_length=1, max_length=MAX_RELEASE_MEMBERS)
    promoter: str = Field(min_length=1, max_length=253)

    @field_validator("module", "release")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("members")
    @classmethod
    def _once(cls, value: list[ObservedMember]) -> list[ObservedMember]:
        names = [member.module for member in value]
        if len(names) != len(set(names)):
            raise ValueError("each member once")
        return sorted(value, key=lambda member: member.module)


class ReleasePromoted(EventBase):
    """Engine-written, through the dependencies topic, by a release's leader to each member
    (rollout/engine/promotions.py, "Releases"): the release's new combination gives `module`
    `version` (None: it keeps its revision). `after`: the ids of the same promotion's events
    to the other members — as a release apply's `ModuleApplied.after`, none of their state
    counts for `module` until their partitions have folded them. `user`/`via`: who resumed
    a held release (absent when the promoter's observation promoted it at once)."""

    type: Literal["ReleasePromoted"] = "ReleasePromoted"
    module: str
    release: str
    version: str | None = None
    after: dict[str, str] = Field(default_factory=dict, max_length=MAX_RELEASE_MEMBERS)
    promoter: str | None = Field(default=None, max_length=253)
    user: str | None = None
    via: CommandDoor | None = None

    @field_validator("module", "release")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("after")
    @classmethod
    def _after(cls, value: dict[str, str]) -> dict[str, str]:
        for module, intent in value.items():
            check_dns1123_label(module)
            if not 0 < len(intent) <= MAX_INTENT_ID:
                raise ValueError(f"intent ids of 1 to {MAX_INTENT_ID} characters")
        return value


class ReleaseStageApproved(EventBase):
    """Engine-written, through the dependencies topic, by the release member that received a
    release approval (`rollout approve release/NAME`, a RolloutApproval with `spec.release`)
    to each member (rollout/engine/intents.py, "release approvals"): the stage approved for
    every member by `user` through `via` (with `groups`, the verified identity's), counted by
    each member's own approval policy of the stage."""

    type: Literal["ReleaseStageApproved"] = "ReleaseStageApproved"
    module: str
    release: str
    stage: str = Field(min_length=1, max_length=253)
    user: str | None = None
    via: CommandDoor | None = None
    groups: list[str] | None = Field(default=None, max_length=MAX_IDENTITY_GROUPS)
    namespace: str | None = None
    """The door namespace of the approval (`RolloutCommanded.namespace`: a RolloutApproval's):
    a member of another namespace refuses it, as it would the RolloutApproval itself."""

    @field_validator("module", "release")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return check_dns1123_label(value) if value is not None else None


class Tick(EventBase):
    """A point in time, written by the worker's timer; decisions read time only here."""

    type: Literal["Tick"] = "Tick"
    now: float  # seconds since the epoch

    @field_validator("now")
    @classmethod
    def _plausible(cls, value: float) -> float:
        if not math.isfinite(value) or not 0 < value <= LATEST_PLAUSIBLE_TIME:
            raise ValueError("must be a finite time in seconds since the epoch, after 1970 and before 2200")
        return value


class FleetSeen(EventBase):
    """Journal only (written by the router, refused on input topics): every record of
    cluster-observations partition `partition` below offset `position` has been routed
    into this journal partition before this event."""

    type: Literal["FleetSeen"] = "FleetSeen"
    partition: int = Field(ge=0)
    position: int = Field(ge=0)


InputEvent = Annotated[
    ModuleApplied
    | ModuleDeleted
    | RolloutCommanded
    | ClusterObserved
    | ClusterRemoved
    | RestrictionApplied
    | RestrictionDeleted
    | FreezeCalendarApplied
    | FreezeCalendarDeleted
    | CalendarBreakGlass
    | SyncStatusReported
    | HelmValuesObserved
    | Tick
    | FleetSeen
    | ClusterHeartbeat
    | ClusterHeartbeats
    | HolderHeartbeat
    | HolderClaims
    | ClusterCommanded
    | DependentLinked
    | DependencyReported
    | DependencyCurrent
    | RolloutContinued
    | LeasesContinued
    | GateEvaluated
    | PromotionObserved
    | ReleasePromotionObserved
    | ReleasePromoted
    | ReleaseStageApproved,
    Field(discriminator="type"),
]
INPUT_ADAPTER: TypeAdapter[Any] = TypeAdapter(InputEvent)


class EventRejected(Exception):
    """Raw bytes that are not a valid event; `reason` says why, for the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def bounded(reason: str) -> str:
    """A reason cut to `MAX_REASON_CHARS`."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[: MAX_REASON_CHARS - 1] + "…"


# A JSON string (possessive: linear, no backtracking), and the bytes that open/close nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\[\s\S])*+"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether arrays/objects in `raw` nest deeper than `limit` (strings are skipped).

    Linear in the input: strings are cut out by a regular expression, everything but the
    brackets is deleted by `bytes.translate`, and only the brackets are walked. Malformed
    input may be judged loosely here; the decoder rejects it next anyway.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # too few opening brackets to nest that deep, strings or not (most events)
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return False
    depth = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _holds_lone_surrogate(data: Any) -> bool:
    """Whether a decoded JSON value holds a string that is not Unicode text.

    `json.loads` lets `"\\ud800"` escapes through, and — reading bytes, with
    "surrogatepass" — UTF-8-encoded surrogates too. Such a string can never be written as
    UTF-8 again: every output and state record holding it would fail downstream.
    """
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


# An integer literal beyond 64 bits: orjson would read it as a float (and round it). Found
# as 19 digits in a row once every digit is mapped to "0": bytes.translate and a substring
# search are C loops, ~0.5 µs for a status report where the regex \d{19} took ~3 µs.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_INTEGER = b"0" * 19


def _holds_long_integer(data_bytes: bytes) -> bool:
    return _LONG_INTEGER in data_bytes.translate(_DIGITS_AS_ZERO)


def _decode_json(data_bytes: bytes) -> Any:
    """JSON → Python, strictly: no NaN/Infinity, no number out of a double's range, no lone
    surrogate, UTF-8 only. orjson enforces all of that (and is ~5x faster than `json`);
    the rare event with a 19-digit number goes through `json`, which keeps integers exact."""
    if not _holds_long_integer(data_bytes):
        try:
            return orjson.loads(data_bytes)
        except orjson.JSONDecodeError as error:
            raise EventRejected(f"not JSON: {error}") from None
    try:
        data = json.loads(data_bytes, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError) as error:
        raise EventRejected(f"not JSON: {error}") from None
    if (b"\\u" in data_bytes or b"\xed" in data_bytes) and _holds_lone_surrogate(data):  # cheap test first
        raise EventRejected("not JSON: a string holds a lone UTF-16 surrogate, which is not Unicode text")
    return data


def parse_event(raw: bytes | str | None) -> Any:
    """Raw bytes → a typed input event, or `EventRejected` (and nothing else) with a reason."""
    try:
        return _parse(raw)
    except EventRejected as rejected:
        raise EventRejected(bounded(rejected.reason)) from None
    except RecursionError:
        raise EventRejected(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except MemoryError:
        raise EventRejected("too large to decode") from None
    except Exception as error:  # poison-proof: whatever else a decoder raises is a rejection
        raise EventRejected(bounded(f"not a valid event: {type(error).__name__}: {error}")) from None


def parse_journal_event(raw: bytes | None) -> Any:
    """A journal record → its event. The router wrote it after `parse_event` accepted it,
    so this takes pydantic's JSON fast path; anything else still only raises
    `EventRejected` (someone may write to the journal by hand)."""
    if raw is None:
        raise EventRejected("empty value (tombstone) in the journal")
    try:
        return INPUT_ADAPTER.validate_json(raw)
    except Exception:
        return parse_event(raw)  # the slow path names the problem


def _parse(raw: bytes | str | None) -> Any:
    if raw is None:
        raise EventRejected("empty value (tombstone) on an input topic")
    data_bytes = raw.encode("utf-8", errors="surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data_bytes) > MAX_EVENT_BYTES:
        raise EventRejected(
            f"event of {len(data_bytes)} bytes is larger than the limit of {MAX_EVENT_BYTES} bytes (1 MiB)"
        )
    if json_depth_exceeds(data_bytes, MAX_JSON_DEPTH):
        raise EventRejected(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    data = _decode_json(data_bytes)
    if not isinstance(data, dict):
        raise EventRejected("not a JSON object")
    try:
        return INPUT_ADAPTER.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p)[:80] for p in item['loc'])}: {item['msg'][:200]}" for item in error.errors()[:10]
        )
        kind = data.get("type")
        kind = kind[:60] if isinstance(kind, str) else "event"
        raise EventRejected(f"invalid {kind}: {problems}") from None
