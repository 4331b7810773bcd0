"""Heartbeats: the applier tells the engine which clusters it reaches (cluster leases).

    sink writes ──► Heartbeats.written / failed / forget ──► every lease/3 seconds:
        HolderClaims(holder, chunk, clusters)  for each chunk of the reached set that changed
                                               (every chunk, empty ones too, on the first beat)
        HolderHeartbeat(holder, leaseSeconds)  one, whatever the number of clusters
                                               ──► cluster-heartbeats topic

A cluster is *reached* while the latest write of each of its assemblages the applier
handles succeeded — a snapshot or a tombstone (its last module deleted: the sink removed
its objects, and the applier still serves it); a failed write stops claiming it until a
write succeeds again, and a cluster whose partition moves to another replica is forgotten —
the replica that owns it now claims it. Were an emptied cluster forgotten, its lease
would expire and the engine would never assign it the next module (a not-ready cluster gets
no new moves), so nothing would be written to bring it back: not ready for good.

The replica (the *holder*, its host name) holds one lease for all the clusters it claims
(rollout/engine/leases.py): its beat is one small event, so an idle fleet's heartbeats cost
the journal O(appliers) records per interval, not O(clusters x partitions). Its claims are
split into `CLAIM_CHUNKS` chunks by `claim_chunk` (a hash of the name: a cluster gained or
lost rewrites one chunk), keyed `<holder>/<chunk>` on the compacted topic so that it keeps
each chunk's latest; a chunk is re-sent only when its clusters change, and until it was
published. On its first beat the replica sends every chunk, empty ones too: it does not know
what it (under its name) claimed before a restart. It sends them all again after going a
whole lease without a successful beat — cut off from the broker, or its process or machine
suspended — because the engine may then have forgotten it (a holder expired for 7 days is
forgotten with its claims: rollout/engine/leases.py), and clusters whose claims it
forgot would stay not ready until they changed. The engine renews a lease at its own
time (the latest Tick) and expires it `leaseSeconds` later, so three beats fit in a lease:
one lost beat does not make a cluster not ready.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable

from infra.observability import RATE_LIMITED
from projections.publisher import Publish
from rollout.wire.events import CLAIM_CHUNKS, HolderClaims, HolderHeartbeat, claim_chunk

log = logging.getLogger("rollout.heartbeats")

BEATS_PER_LEASE = 3


def claim_chunks(clusters: list[str]) -> dict[int, list[str]]:
    """Every chunk of a holder's claims → its clusters (sorted; empty chunks included)."""
    chunks: dict[int, list[str]] = {index: [] for index in range(CLAIM_CHUNKS)}
    for name in sorted(clusters):
        chunks[claim_chunk(name)].append(name)
    return chunks


def default_holder() -> str:
    """This replica's name as a lease holder: the host's name and the process id. The host
    alone (a pod's name) named every replica on one machine — `rollout up`, a benchmark's
    appliers, replicas in one container — the same holder, and each one's claims then
    replaced the other's chunk by chunk in the engine (rollout/engine/leases.py). In a pod
    the process is 1, so the name stays the pod's, stable across container restarts."""
    return f"{socket.gethostname()[:240]}-{os.getpid()}"


class Heartbeats:
    """Which clusters this applier reaches, and the loop that says so."""

    def __init__(
        self,
        publish: Publish,
        *,
        lease_seconds: float,
        holder: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.publish = publish
        self.lease_seconds = lease_seconds
        self.holder = holder or default_holder()
        # wall-clock time (a suspended machine's monotonic clock stands still) of the last
        # beat the broker took: a whole lease without one, and every chunk goes out again
        self.clock = clock
        self._last_beat: float | None = None
        self._written: set[tuple[str, str]] = set()  # (assemblage kind, cluster) last written fine
        self._failing: set[tuple[str, str]] = set()
        self._published: dict[int, list[str]] = {}  # chunk → its clusters as last published
        self.sent = 0  # events published

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
        """The chunks of claims that changed since they were last published (at first: all,
        empty ones too), each keyed `<holder>/<chunk>`, then one `HolderHeartbeat` keyed
        `<holder>`. Chunks go one after another: the first that fails ends them (the broker is
        away, most likely), the beat goes out all the same, and what was not published is sent
        at the next beat."""
        now = self.clock()
        if self._last_beat is not None and now - self._last_beat > self.lease_seconds:
            self._published = {}  # the engine may have forgotten this holder's claims: all again
        chunks = claim_chunks(self.reached())
        changed = [
            HolderClaims(holder=self.holder, chunk=index, clusters=names, lease_seconds=self.lease_seconds)
            for index, names in chunks.items()
            if self._published.get(index) != names
        ]
        failed: BaseException | None = None
        for claim in changed:  # one after another: with the broker away, the first failure ends them
            try:
                await self.publish(f"{self.holder}/{claim.chunk}", claim.to_bytes())
            except Exception as error:
                failed = error
                break
            self._published[claim.chunk] = claim.clusters
            self.sent += 1
        beat = HolderHeartbeat(holder=self.holder, lease_seconds=self.lease_seconds)
        await self.publish(self.holder, beat.to_bytes())  # the holder's lease, whatever its claims did
        self._last_beat = now
        self.sent += 1
        if failed is not None:
            raise failed

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
