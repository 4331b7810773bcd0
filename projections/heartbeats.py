"""Heartbeats: the applier tells the engine which clusters it reaches (cluster leases).

    sink writes ──► Heartbeats.written / failed / forget ──► every lease/3 seconds:
                    ClusterHeartbeat(cluster, leaseSeconds) ──► cluster-heartbeats topic

A cluster is *reached* while the latest write of each of its assemblages the applier
handles succeeded; a failed write stops its heartbeats until a write succeeds again, and a
cluster whose partition moves to another replica (or whose snapshots are deleted) is
forgotten — the replica that owns it now heartbeats for it. The engine renews the lease at
its own time (the latest Tick) and expires it `leaseSeconds` later (rollout/leases.py), so
three beats fit in a lease: one lost beat does not make a cluster not ready.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from infra.observability import RATE_LIMITED
from projections.publisher import Publish
from rollout.events import ClusterHeartbeat

log = logging.getLogger("rollout.heartbeats")

BEATS_PER_LEASE = 3
SENDS_IN_FLIGHT = 100  # heartbeats awaited together


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
        """One heartbeat for every reached cluster."""
        clusters = self.reached()
        for start in range(0, len(clusters), SENDS_IN_FLIGHT):
            sends = [
                self.publish(
                    cluster,
                    ClusterHeartbeat(cluster=cluster, lease_seconds=self.lease_seconds, holder=self.holder).to_bytes(),
                )
                for cluster in clusters[start : start + SENDS_IN_FLIGHT]
            ]
            await asyncio.gather(*sends)
            self.sent += len(sends)

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
