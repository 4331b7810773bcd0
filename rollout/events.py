"""Events: everything that enters the engine, as it travels on Kafka.

Inputs arrive on four topics, each event a JSON object with a `type` discriminator:

* intents (key: module)         — ModuleApplied, ModuleDeleted, RolloutCommanded
* cluster observations (key: cluster) — ClusterObserved, ClusterRemoved
* sync status (key: cluster)    — SyncStatusReported (what appliers saw)
* ticks                         — Tick (time enters the engine only as these events)

Every event carries an `id` (unique per event, so that duplicates can be recognised) and
`at`, the producer's wall-clock time — informational only: decisions read time from Tick
events and nothing else.

`parse_event` is the single place raw bytes become a typed event; what it rejects goes to
the dead-letter topic with the reason it gives.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from rollout.manifests import (
    AnyModule,
    ClusterManifest,
    check_dns1123_label,
)

SyncState = Literal["succeeded", "failed", "updating"]
CommandName = Literal["pause", "resume", "abort", "rollback", "approve", "pin", "unpin"]


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
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class ModuleApplied(EventBase):
    type: Literal["ModuleApplied"] = "ModuleApplied"
    module: AnyModule


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

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        return check_dns1123_label(value)


class ClusterObserved(EventBase):
    """The current facts of one cluster (labels, readiness) — a full observation."""

    type: Literal["ClusterObserved"] = "ClusterObserved"
    cluster: ClusterManifest


class ClusterRemoved(EventBase):
    type: Literal["ClusterRemoved"] = "ClusterRemoved"
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)


class SyncStatusReported(EventBase):
    type: Literal["SyncStatusReported"] = "SyncStatusReported"
    cluster: str
    module: str
    revision: str
    state: SyncState
    message: str | None = None

    @field_validator("cluster", "module")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns1123_label(value)


class Tick(EventBase):
    """A point in time, written by the worker's timer; decisions read time only here."""

    type: Literal["Tick"] = "Tick"
    now: float  # seconds since the epoch


InputEvent = Annotated[
    ModuleApplied | ModuleDeleted | RolloutCommanded | ClusterObserved | ClusterRemoved | SyncStatusReported | Tick,
    Field(discriminator="type"),
]
INPUT_ADAPTER: TypeAdapter[Any] = TypeAdapter(InputEvent)


class EventRejected(Exception):
    """Raw bytes that are not a valid event; `reason` says why, for the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def parse_event(raw: bytes | str | None) -> Any:
    if raw is None:
        raise EventRejected("empty value (tombstone) on an input topic")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise EventRejected(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise EventRejected("not a JSON object")
    try:
        return INPUT_ADAPTER.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()[:10])
        raise EventRejected(f"invalid {data.get('type', 'event')}: {problems}") from None
