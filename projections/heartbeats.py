"""Heartbeats: the applier tells the engine which clusters it reaches (cluster leases).

    sink writes ──► Heartbeats.written / failed / forget ──► every lease/3 seconds:
                    ClusterHeartbeats(clusters, leaseSeconds) ──► cluster-heartbeats topic

A cluster is *reached* while the latest write of each of its assemblages the applier
handles succeeded — a snapshot or a tombstone (its last module deleted: the sink removed
its objects, and the applier still serves it); a failed write stops its heartbeats until a
write succeeds again, and a cluster whose partition moves to another replica is forgotten —
the replica that owns it now heartbeats for it. Were an emptied cluster forgotten, its lease
would expire and the engine would never assign it the next module (a not-ready cluster gets
no new moves), so nothing would be written to bring its heartbeats back: not ready for good.
The engine renews the lease at its own time (the latest Tick) and expires it `leaseSeconds`
later (rollout/engine/leases.py), so three beats fit in a lease: one lost beat does not make a
cluster not ready.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from infra.observability import RATE_LIMITED
from projections.publisher import Publish
from rollout.wire.events import MAX_HEARTBEAT_CLUSTERS, ClusterHeartbeats

log = logging.getLogger("rollout.heartbeats")

BEATS_PER_LEASE = 3


class Heartbeats:
    """Which clusters this applier reaches, and the loop that says so."""

    def __init__(self, publish: Publish, *, lease_seconds: float, holder: str | None = None) -> None:
        self.publish = publish
        self.lease_seconds = lease_seconds
        self.holder = holder or socket.gethostname()
        self._written: set[tuple[str, str]] = set()  # (assemblage kind, cluster) last written fine
        self._failing: set[tuple[str, str]] = set()
        self.sent = 0

    def written(self, kind: str, cluster: str) -> None:
        self._failing.discard((kind, cluster))
        self._written.add((kind, cluster))

    def failed(self, kind: str, cluster: str) -> None:
        self._written.discard((kind, cluster))
        self._failing.add((kind, cluster))

    def forget(self, kind: str, cluster: str) -> None:
        self._written.discard((kind, cluster))
        self._failing.discard((kind, cluster))

    def reached(self) -> list[str]:
        """Clusters with a good write and no failing one, sorted."""
        failing = {cluster for _, cluster in self._failing}
        return sorted({cluster for _, cluster in self._written} - failing)

    async def beat(self) -> None:
        """One heartbeat for every reached cluster: a `ClusterHeartbeats` event per
        `MAX_HEARTBEAT_CLUSTERS` of them (keyed `<applier>/<chunk>`), not an event per cluster."""
        clusters = self.reached()
        events = [
            ClusterHeartbeats(
                clusters=clusters[start : start + MAX_HEARTBEAT_CLUSTERS],
                lease_seconds=self.lease_seconds,
                holder=self.holder,
            )
            for start in range(0, len(clusters), MAX_HEARTBEAT_CLUSTERS)
        ]
        # keyed per chunk: the compacted topic keeps each chunk's latest beat (rollout/wire/beats.py)
        await asyncio.gather(
            *(self.publish(f"{self.holder}/{index}", event.to_bytes()) for index, event in enumerate(events))
        )
        self.sent += len(clusters)

    async def run(self, stop: asyncio.Event) -> None:
        """Beat every lease/BEATS_PER_LEASE seconds until `stop`; a failed beat is logged."""
        while not stop.is_set():
            try:
                await self.beat()
            except Exception as error:  # the broker may be away: the next beat tries again
                log.warning("cannot publish heartbeats: %s", error, extra=RATE_LIMITED)
            try:
                await asyncio.wait_for(stop.wait(), self.lease_seconds / BEATS_PER_LEASE)
            except TimeoutError:
                pass
