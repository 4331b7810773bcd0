"""Which records of an applier's consumer batch to apply: each cluster's newest, not all.

What flows through here: one partition's records of a batch (RemoteAssemblage or
ProxyAssemblage snapshots and tombstones, key: cluster) go in; per cluster, what to apply
and what each supersedes come out (`coalesce`).

Why: the topics are compacted — only a cluster's latest snapshot matters, each one a full
document — and a sink makes its target match the snapshot it is given, ignoring one older
than it already applied. Applying a cluster's records one after the other therefore ends
where applying only the one that counts ends. An applier behind the rollout (many modules
moving the same clusters) gets several snapshots of a cluster in one batch, and rendered,
wrote and reported each in turn: in `benchmarks/appliers.py --modules 50` (100 clusters, 50
modules each, two replicas) 3,386 of 5,000 snapshots are now superseded.

The rules keep what applying every record in order would leave:

- a tombstone clears the cluster and makes the sink forget its version (a cluster that comes
  back may start its versions anew): the last tombstone of the batch is applied, and the
  records before it are superseded;
- of the snapshots after it, the one with the highest version (the last of equal ones) is
  applied — in a partition the versions grow with the offsets, so it is the last one, unless
  an older snapshot was redelivered behind a newer one, which in order would have been
  ignored as stale;
- if one of them has no version that can be read (it will not decode), nothing after the
  tombstone is judged: those are applied in order, each failure logged as it would be;
- should a record applied fail (a snapshot that cannot be rendered, a sink error), the
  records it superseded are applied in order after all, so the sink ends where applying
  every record would have left it.

The superseded records' offsets are committed with the batch, as the applied ones' are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Apply", "coalesce"]


@dataclass(frozen=True)
class Apply:
    """A record to apply, and the records of its cluster it supersedes (in order): counted
    superseded if it applies, applied in order if it fails."""

    record: Any
    supersedes: list[Any] = field(default_factory=list)


def coalesce(messages: list[Any]) -> list[list[Apply]]:
    """A partition's records of a batch, per cluster (in the order of each cluster's last
    record), what to apply in order; a record without a key names no cluster and stands
    alone."""
    by_key: dict[Any, list[Any]] = {}
    for index, message in enumerate(messages):
        key = message.key if message.key is not None else ("no key", index)
        records = by_key.pop(key, [])
        records.append(message)
        by_key[key] = records
    return [_plan(records) for records in by_key.values()]


def _plan(records: list[Any]) -> list[Apply]:
    if len(records) == 1:
        return [Apply(records[0])]
    plan: list[Apply] = []
    after = records
    tombstones = [index for index, record in enumerate(records) if record.value is None]
    if tombstones:
        last = tombstones[-1]
        plan.append(Apply(records[last], records[:last]))
        after = records[last + 1 :]
    if not after:
        return plan
    versions = [_version(record.value) for record in after]
    if any(version is None for version in versions):
        return plan + [Apply(record) for record in after]  # what will not decode is not judged: all in order
    newest = max(range(len(after)), key=lambda index: (versions[index], index))
    plan.append(Apply(after[newest], [record for index, record in enumerate(after) if index != newest]))
    return plan


def _version(value: bytes) -> int | None:
    """The snapshot's `version` when the record is a JSON object with an integer one."""
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    version = document.get("version") if isinstance(document, dict) else None
    return version if type(version) is int else None
