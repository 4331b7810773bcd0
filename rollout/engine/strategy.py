"""How a module's rollout strategy reads: its stages, their budgets, the order of clusters.

Pure functions of a `ModuleRecord` (or a cluster's labels): the stage a cluster belongs to,
the counts a `maxConcurrency`/`maxFailures` value resolves to, the sorting key that orders
a stage's pending clusters — or, in a stage with random waves, the seeded rank
(waves.py says why and how the waves use it). The engine, `rollout plan` (plan.py) and the
tests share them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from rollout.api.manifests import Stage, Waves
from rollout.api.selectors import selects
from rollout.engine.state import UNSTAGED, ModuleRecord, StageCounts

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


# -- waves (waves.py) ------------------------------------------------------------------


def derived_seed(module: str, revision: str, bindings: str) -> int:
    """The seed of a module's waves when the manifest gives none: from its name, the revision
    it rolls out and its bindings' digest (strategy.bindings_digest)."""
    text = f"{module}\n{revision}\n{bindings}"
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def wave_seed(record: ModuleRecord, waves: Waves) -> int:
    """The seed the module's current target is shuffled with."""
    if waves.seed is not None:
        return waves.seed
    revision = record.revisions[record.target]
    return derived_seed(record.name, revision.revision, revision.bindings_digest)


def wave_rank(seed: int, cluster: str) -> int:
    """A member's place in a seeded order: 60 bits of SHA-256 over the seed and its name."""
    return int(hashlib.sha256(f"{seed}/{cluster}".encode()).hexdigest()[:15], 16)


def moving_key(
    record: ModuleRecord, stage: Stage | None, cluster: str, labels: dict[str, str], sorting: str | None
) -> int | None:
    """`Target.sort_key`: the member's place in its stage's moving order — its seeded rank in
    a stage of random waves, else its sorting label's value (None: it has none, last)."""
    if stage is not None and stage.waves is not None and stage.waves.order == "Random":
        return wave_rank(wave_seed(record, stage.waves), cluster)
    labelled, order, _ = sort_key(cluster, labels, sorting)
    return order if labelled == 0 else None


def wave_size(waves: Waves, members: int) -> int:
    """Members per wave: `size` resolved against the stage's members, at least 1."""
    return max(resolve_count(waves.size, total=members, default=max(members, 1)), 1)


def wave_count(size: int, counts: StageCounts) -> int:
    """How many waves the stage's movable members make: unpinned, and members of the run (a
    late joiner it kept out, `lateJoiners`, is not: runs.py)."""
    movable = max(counts.members - counts.deferred - counts.excluded - counts.pinned, 0)
    return max(-(-movable // size), 1)


def started(counts: StageCounts) -> int:
    """Members of the stage moved to the target: updating, succeeded or failed on it — or
    on it and waiting for their Release's other members there (`awaiting_release`), whose
    own move is made: a wave or a slot number counts it as any other started member."""
    return counts.updating + counts.succeeded + counts.failed + counts.awaiting_release


def ordered_digest(clusters: list[str]) -> str:
    return hashlib.sha256("\n".join(clusters).encode()).hexdigest()[:16]
