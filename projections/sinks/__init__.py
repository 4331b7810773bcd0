"""Sinks: where the Flux objects of an assemblage snapshot end up.

What flows through here: one `(kind, cluster, assemblage)` triple per record of the
compacted assemblage topic — a full RemoteAssemblage or ProxyAssemblage snapshot, or `None`
for a tombstone — goes into `Sink.write`; a `SinkResult` saying what changed comes out.

A sink makes the world match the snapshot: every sync of the snapshot rendered and present,
every object of a sync no longer in it removed, nothing at all left after a tombstone. The
topic is consumed at least once, so `write` must be idempotent and must ignore a snapshot
older than one it already applied (versions only grow per cluster and kind).

Implementations: `projections.sinks.directory.DirectorySink` (YAML files, for GitOps repos,
dry runs and tests); the Kubernetes applier implements the same protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rollout.wire.assemblages import Assemblage, AssemblageKind

__all__ = ["Sink", "SinkResult"]


@dataclass(frozen=True)
class SinkResult:
    """What one `Sink.write` did for one (kind, cluster).

    `written`/`unchanged`/`pruned` count sync files (or objects) created or updated, left as
    they were, and removed. `stale` is true when the snapshot was older than one already
    applied and was ignored; `version` is the snapshot's version (None for a tombstone).
    """

    kind: AssemblageKind
    cluster: str
    version: int | None
    written: int = 0
    unchanged: int = 0
    pruned: int = 0
    stale: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.written or self.pruned)


@runtime_checkable
class Sink(Protocol):
    """Makes one cluster's Flux objects match an assemblage snapshot (None: a tombstone)."""

    def write(
        self, kind: AssemblageKind, cluster: str, assemblage: Assemblage | None
    ) -> SinkResult | Awaitable[SinkResult]:
        """Synchronous (directory) or `async def` (Kubernetes); the applier awaits either."""
        ...
