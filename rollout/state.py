"""The engine's persistent state: what is remembered between events.

Everything here is a small pydantic model stored under a string key in a mutable mapping.
In tests those mappings are dicts; in the worker they are Faust tables (changelogged to
Kafka), so the engine's state survives restarts. Keys are chosen so that one input event
rewrites only a handful of small values — never a value whose size grows with the fleet:

* ``clusters[cluster]``          ClusterFacts — labels and readiness, one per cluster
* ``modules[module]``            ModuleRecord — spec, rollout phase, per-stage counters
* ``targets[module/cluster]``    Target — one cluster's place in one module's rollout
* ``clock["now"]``               the time of the latest Tick

Per-stage counters live in the ModuleRecord and are maintained incrementally, so a sync
status report costs O(1) state writes whatever the fleet size.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rollout.manifests import ModuleSpec, Sync

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
Category = Literal["pending", "updating", "succeeded", "failed", "not_ready", "pinned"]
CATEGORIES: tuple[Category, ...] = ("pending", "updating", "succeeded", "failed", "not_ready", "pinned")
UNSTAGED = "-"  # the counters' key for members that match no stage


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterFacts(Record):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    ready: bool = False


class Revision(Record):
    """One generation of a module's sync: what clusters get when assigned it."""

    generation: int
    revision: str
    sync: Sync
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


class ModuleRecord(Record):
    name: str
    kind: Literal["Module", "BootstrapModule"]
    namespace: str
    spec: ModuleSpec
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
    stage_completed_at: float | None = None
    approvals: list[str] = Field(default_factory=list)
    pinned: list[str] = Field(default_factory=list)
    counts: dict[str, StageCounts] = Field(default_factory=dict)
    handled_commands: list[str] = Field(default_factory=list)
    last_reason: str = ""


class Target(Record):
    """One cluster's membership in one module's rollout."""

    module: str
    cluster: str
    stage: str = UNSTAGED
    stage_index: int | None = None
    sort_key: int | None = None
    ready: bool = False
    pinned: bool = False
    assigned: int | None = None  # the generation currently in the cluster's assemblage
    status: Literal["none", "updating", "succeeded", "failed"] = "none"
    status_message: str = ""
    updating_since: float | None = None
    category: Category = "pending"


def target_key(module: str, cluster: str) -> str:
    return f"{module}/{cluster}"
