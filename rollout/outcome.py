"""What one event decides: the `Outcome` `RolloutEngine.handle` returns.

* `Assignment` — to the assemblage builder (assembly.py): the sync record of one module in
  one cluster's assemblage, or None to remove it;
* `Decision`   — to the decisions topic: why an assignment changed or a phase moved;
* `Outcome`    — everything one event decided: assignments, decisions, the module/target
  status views (views.py) and rejections (dead letters). The caller ships all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.assemblages import AssignedSync


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
    model_config = ConfigDict(frozen=True)

    module: str
    action: str
    reason: str
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    at: float = 0.0
    stage: str | None = None  # the stage a stage-* / awaiting-approval decision is about
    stage_seconds: float | None = None  # stage-succeeded: engine seconds since the stage started


@dataclass
class Outcome:
    assignments: list[Assignment] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    module_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    target_status: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    rejections: list[str] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.assignments += other.assignments
        self.decisions += other.decisions
        self.module_status.update(other.module_status)
        self.target_status.update(other.target_status)
        self.rejections += other.rejections
