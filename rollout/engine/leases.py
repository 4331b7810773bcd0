"""Cluster leases and leave/join: whether a cluster still takes part in rollouts.

    ClusterHeartbeat  -> the cluster's Lease renewed until now + leaseSeconds
    ClusterHeartbeats -> the same for each cluster it names (what appliers send)
    Tick              -> leases whose time ran out expire (`expire_leases`, first of the clock's
                         hooks: clock.py)
    ClusterCommanded  -> leave: the cluster takes no new moves; join: it does again

Appliers publish a heartbeat per cluster they reach (KubeFleet's member heartbeats). The
engine reads no clock: a heartbeat renews the lease at the engine's time (the latest Tick)
and a Tick past `expires_at` expires it. A cluster whose lease expired, or that left, is
*not ready* (`ClusterFacts.readiness`): not ready for new moves, never a failure, never
blocking a stage — exactly what an unready observation does, through the same path
(`Membership.cluster_changed`). A heartbeat brings it back. A cluster no applier ever
heartbeated for has no lease and is not subject to one (so a fleet without appliers, or
before the first heartbeat, works as before). A heartbeat renewed before the engine saw
any tick runs from the first tick.

Cost: expiries sit in an in-memory heap (earliest first), rebuilt lazily from the
ClusterFacts after a restart and dropped by `reset_index` (one of the engine's
`reset_indexes` hooks: core.py); a tick pops only the leases that ran out, and renewing
leaves the old entry to be skipped when it surfaces. Heartbeat and command ids are
remembered on the ClusterFacts: a redelivered one changes nothing.
"""

from __future__ import annotations

import heapq

from rollout.engine.membership import Membership
from rollout.engine.outcome import Outcome, verdict
from rollout.engine.state import (
    CLUSTER_COMMAND_IDS_KEPT,
    HEARTBEAT_IDS_KEPT,
    ClusterFacts,
    Lease,
    RemovedCluster,
    remember,
)
from rollout.engine.tables import StateTables
from rollout.wire.events import ClusterCommanded, ClusterHeartbeat, ClusterHeartbeats


class Leases:
    """Folds heartbeats and leave/join commands; expires leases as the clock moves."""

    def __init__(self, tables: StateTables, membership: Membership) -> None:
        self.tables = tables
        self.membership = membership
        self._expiries: list[tuple[float, str]] | None = None  # heap of (expires_at, cluster); may hold stale entries
        self._unclocked: set[str] | None = None  # leases renewed before any tick

    def reset_index(self) -> None:
        """Drop the expiry heap; it is rebuilt lazily from the ClusterFacts."""
        self._expiries = None
        self._unclocked = None

    def _lease_index(self) -> tuple[list[tuple[float, str]], set[str]]:
        if self._expiries is None or self._unclocked is None:
            self._expiries, self._unclocked = [], set()
            clusters = self.tables.clusters
            for name in list(clusters.keys()):
                lease = clusters[name].lease
                if lease is None or lease.expired:
                    continue
                if lease.expires_at is None:
                    self._unclocked.add(name)
                else:
                    self._expiries.append((lease.expires_at, name))
            heapq.heapify(self._expiries)
        return self._expiries, self._unclocked

    def on_heartbeat(self, event: ClusterHeartbeat, out: Outcome) -> None:
        self._renew(event.cluster, event.id, event.lease_seconds, out)

    def on_heartbeats(self, event: ClusterHeartbeats, out: Outcome) -> None:
        for cluster in event.clusters:  # distinct names (validated): each renewed once
            self._renew(cluster, event.id, event.lease_seconds, out)

    def _renew(self, cluster: str, event_id: str, lease_seconds: float, out: Outcome) -> None:
        """A heartbeat (`event_id`) for `cluster`: its lease renewed for `lease_seconds`."""
        tables = self.tables
        facts = tables.clusters.get(cluster)
        if facts is None:  # not (or no longer) in the fleet: no lease; a removed one notes the id
            removed = tables.removed_clusters.get(cluster)
            if removed is not None and event_id not in removed.heartbeat_ids:
                ids = remember(removed.heartbeat_ids, event_id, HEARTBEAT_IDS_KEPT)
                tables.removed_clusters[cluster] = removed.model_copy(update={"heartbeat_ids": ids})
            return
        if event_id in facts.heartbeat_ids:
            return  # redelivered
        now = tables.now
        clocked = now > 0
        lease = Lease(
            seconds=lease_seconds,
            renewed_at=now if clocked else None,
            expires_at=now + lease_seconds if clocked else None,
        )
        expiries, unclocked = self._lease_index()
        if lease.expires_at is None:
            unclocked.add(cluster)
        else:
            heapq.heappush(expiries, (lease.expires_at, cluster))
        ids = remember(facts.heartbeat_ids, event_id, HEARTBEAT_IDS_KEPT)
        self._refresh_facts(facts, facts.model_copy(update={"lease": lease, "heartbeat_ids": ids}), out)

    def on_cluster_command(self, event: ClusterCommanded, out: Outcome) -> None:
        tables = self.tables
        facts = tables.clusters.get(event.cluster)
        known: ClusterFacts | RemovedCluster | None = facts or tables.removed_clusters.get(event.cluster)
        if known is not None and event.id in known.command_ids:
            return  # redelivered
        answer = event.reply and tables.partition == 0  # broadcast: partition 0 answers
        rejections, decisions = len(out.rejections), len(out.decisions)
        ids = remember(known.command_ids if known else [], event.id, CLUSTER_COMMAND_IDS_KEPT)
        left = event.command == "leave"
        if facts is None:
            tombstone = tables.removed_clusters.get(event.cluster) or RemovedCluster(name=event.cluster)
            tables.removed_clusters[event.cluster] = tombstone.model_copy(update={"command_ids": ids})
            if answer:
                out.rejections.append(f"cluster {event.cluster!r} not found")
        else:
            self._refresh_facts(facts, facts.model_copy(update={"left": left, "command_ids": ids}), out)
        if answer:
            done = f"cluster {event.cluster} {'left the fleet' if left else 'joined the fleet'}"
            out.verdicts.append(verdict(event.id, "", out, rejections=rejections, decisions=decisions, quiet=done))

    def expire_leases(self, first: bool, out: Outcome) -> None:
        """Clock hook: leases renewed before any tick run from the first one; leases whose
        time ran out expire (their clusters become not ready)."""
        tables = self.tables
        now = tables.now
        expiries, unclocked = self._lease_index()
        if first:
            for name in sorted(unclocked):  # renewed before any tick: they run from this one
                facts = tables.clusters.get(name)
                if facts is not None and facts.lease is not None and facts.lease.expires_at is None:
                    lease = facts.lease.model_copy(update={"renewed_at": now, "expires_at": now + facts.lease.seconds})
                    tables.clusters[name] = facts.model_copy(update={"lease": lease})
                    heapq.heappush(expiries, (now + facts.lease.seconds, name))
            unclocked.clear()
        while expiries and expiries[0][0] <= now:
            expires_at, name = heapq.heappop(expiries)
            facts = tables.clusters.get(name)
            if facts is None or facts.lease is None or facts.lease.expired or facts.lease.expires_at != expires_at:
                continue  # renewed since, expired already, or the cluster is gone
            lease = facts.lease.model_copy(update={"expired": True})
            self._refresh_facts(facts, facts.model_copy(update={"lease": lease}), out)

    def _refresh_facts(self, previous: ClusterFacts, facts: ClusterFacts, out: Outcome) -> None:
        """Store `facts` with its readiness worked out; a readiness change moves modules."""
        facts.ready = facts.readiness()
        self.tables.clusters[facts.name] = facts
        if facts.ready != previous.ready:
            self.membership.cluster_changed(facts.name, previous, facts, out)
