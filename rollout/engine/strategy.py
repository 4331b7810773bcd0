"""How a module's rollout strategy reads: its stages, their budgets, the order of clusters.

Pure functions of a `ModuleRecord` (or a cluster's labels): the stage a cluster belongs to,
the counts a `maxConcurrency`/`maxFailures` value resolves to, the sorting key that orders
a stage's pending clusters. The engine, `rollout plan` (plan.py) and the tests share them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from rollout.api.manifests import Stage
from rollout.api.selectors import selects
from rollout.engine.state import UNSTAGED, ModuleRecord

IMPLICIT_STAGE = Stage(name="all")


def resolve_count(value: int | str | None, *, total: int, default: int) -> int:
    """An int, or a percentage of `total` rounded down — but at least 1 when the
    percentage is above 0 and the stage is not empty (Fleet's rule)."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    count = total * percent // 100
    if percent > 0 and total > 0:
        count = max(count, 1)
    return count


def sort_key(cluster: str, labels: dict[str, str], sorting_label_key: str | None) -> tuple[int, int, str]:
    """Ascending integer value of the sorting label, then name; unlabelled clusters last."""
    if sorting_label_key is not None:
        try:
            return (0, int(labels[sorting_label_key]), cluster)
        except (KeyError, ValueError):
            pass
    return (1, 0, cluster)


def bindings_digest(record_spec_bindings: Iterable[Any]) -> str:
    payload = json.dumps([b.model_dump(by_alias=True) for b in record_spec_bindings], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def stages_of(record: ModuleRecord) -> list[Stage]:
    if record.spec.rollout is None or not record.spec.rollout.stages:
        return [IMPLICIT_STAGE]
    return record.spec.rollout.stages


def stage_for(record: ModuleRecord, labels: dict[str, str]) -> tuple[int | None, str]:
    for index, stage in enumerate(stages_of(record)):
        if stage.selector is None or selects(stage.selector, labels):
            return index, stage.name
    return None, UNSTAGED
