"""Cluster leases and leave/join: whether a cluster still takes part in rollouts.

    HolderClaims      -> the clusters one chunk of an applier replica's (a holder's) claims
                         reaches now: those it gained follow its lease, those it dropped run
                         out one lease after (a claim renews the holder's lease too)
    HolderHeartbeat   -> the holder's lease renewed until now + leaseSeconds: one record
                         rewritten, whatever the number of clusters it claims (a holder back
                         after it expired: its clusters back, a slice an event)
    ClusterHeartbeat  -> the cluster's own Lease renewed until now + leaseSeconds
    ClusterHeartbeats -> the same for each cluster it names (what appliers sent before claims)
    Tick              -> leases whose time ran out expire (`expire_leases`, first of the clock's
                         hooks: clock.py); a holder's expiry makes the clusters only it
                         claims not ready, together; a holder expired HOLDER_HORIZON ago is
                         forgotten (`forget_dead_holders`)
    ClusterObserved   -> (membership.py) a cluster observed anew follows the holders that claim
                         it (`lease_of_new_cluster`: claims are kept for clusters not, or no
                         longer, observed)
    ClusterCommanded  -> leave: the cluster takes no new moves; join: it does again

Appliers tell the engine which clusters they reach (KubeFleet's member heartbeats). They
claim clusters when the set they reach changes and beat once per lease/3 for themselves
(projections/heartbeats.py), so that an idle fleet's beats cost O(appliers) journal and
state records, not O(clusters x partitions): a cluster's readiness follows its holders'
leases, and its ClusterFacts is rewritten only when that readiness (or its holders) change.
The engine reads no clock: a beat renews a lease at the engine's time (the latest Tick)
and a Tick past `expires_at` expires it. A cluster whose lease expired — its own, or every
claiming holder's — or that left, is *not ready* (`ClusterFacts.readiness`): not ready for
new moves, never a failure, never blocking a stage — exactly what an unready observation
does, through the same path (`Membership.cluster_changed`). A beat brings it back. A
cluster no applier ever claimed or heartbeated for has no lease and is not subject to one
(so a fleet without appliers, or before the first heartbeat, works as before). A lease
renewed before the engine saw any tick runs from the first tick.

The engine's own silence. Leases are measured in the engine's live time (`tables.live`:
its time less the gaps between ticks, each tick counting at most LEASE_TICK_STEP of its
step: clock.py), not in its time: when the worker is stopped or held longer than a lease,
the appliers' beats wait to be routed behind the first tick after it, and that tick used to
expire every lease at once. A lease stores when it runs out in live time (`expires_live`,
beside `expires_at` in the engine's time); the heaps are keyed by it. One written by a
release before live time has none: its `expires_at` stands for it (`live_expiry`), so it
runs out then or later (live time is never ahead), never earlier. A dead holder is
forgotten a horizon of the engine's time after `expires_at`, gaps included.

Mass expiries in slices. An applier replica that dies holding 50,000 clusters expired them
all on one tick: every module refreshing every one of them in that one event. Now a tick
takes at most `expiries_per_event` (EXPIRIES_PER_EVENT = MOVES_PER_EVENT) clusters: the
clusters' own leases due, earliest (then by name) first, the rest staying due in the heap
for the next tick; then each holder expired, by name, its clusters in (chunk, name) order,
the holder keeping where it stopped on its record (`HolderLease.settling`: "" none taken,
"<chunk>/<cluster>" the last, None all) so that a restart goes on from there (the holders
settling are found with the holders' heaps, from one scan). A holder's own expiry is one
record, never sliced. A cluster not taken yet is still ready — exactly as before its lease
ran out; the stages move it if it is their turn (an update to a dead applier's cluster then
waits, as any, for its report or its progressDeadline).

Continued without ticks. The rest were taken by the next ticks, a slice a tick: at the
default 10 s tick interval 50,000 clusters took 25 ticks, about four minutes. Now an event
that took a slice and left clusters to take or bring back asks for a `LeasesContinued`
(`_continue_if_left`), which the decider publishes on the dependencies topic and the router
writes into the journal partition it names (leases expire in every partition alike: no
module key reaches the right one); folded, it takes the next slice (`on_continued`) — no
time passes on it — and asks for the next. The requests are numbered in the partition's
`sequences` (SLICES_ASKED, SLICES_ANSWERED): one outstanding at a time, only the latest
unanswered acting, so a redelivered one changes nothing and a replay refolds the same
slices. Ticks meanwhile still take a slice each.

Holders back in slices. A holder back (its beat or a claim after it expired) brought every
cluster it claims back in that one event, each one refreshing every module. Now it brings
back at most `expiries_per_event` of them, in (chunk, name) order, every module concerned
moving once after them (`_back`), keeping where it stopped on its record
(`HolderLease.returning`); its continuations (and ticks) bring the rest (`_bring_back_holders`, after the
expiries' slices, in the same budget). A cluster not brought back yet stays not ready, as it
was while its holder was dead. A holder that expires again meanwhile stops coming back
(`returning` None) and its expiry's slices take its clusters offline; one back before its
expiry's slices were done has `settling` None, and its return walks every cluster it claims
(those not taken offline yet change nothing).

A cluster claimed by several holders (handed from one applier replica to another, in
either order) is reached while any of them is alive; one no holder claims any more keeps a
lease of its own from its last holder's, and runs out with it unless it is claimed again.
A cluster with its own lease from per-cluster heartbeats (an applier of the release before
claims) keeps it while it runs, then follows its holders: either keeps it ready.

Cost: expiries sit in in-memory heaps (earliest first) — the clusters' own leases and the
holders' — rebuilt lazily from the ClusterFacts and HolderLeases after a restart and
dropped by `reset_index` (one of the engine's `reset_indexes` hooks: core.py); a tick pops
only the leases that ran out, and renewing leaves the old entry to be skipped when it
surfaces. A holder's beat is O(1); a claim is O(its chunk's changes); only a holder whose
lease expires or comes back visits its clusters (each of which then changes readiness).
Heartbeat, claim and command ids are remembered on the record they renew: a redelivered
one changes nothing.

Dead holders are forgotten. The holder is the applier pod's host name, so every restart or
rollout of the applier Deployment makes a new holder, and the old one's HolderLease, its 64
ClaimChunks and its name in every cluster's ClusterClaims would stay in every partition for
good. A holder whose lease expired HOLDER_HORIZON (7 days of engine time) ago is forgotten
on the tick that reaches it: its lease, its chunks and its name in ClusterClaims deleted (a
ClusterClaims left with no holder too), and nothing else. No ClusterFacts is rewritten, so
no readiness changes: a cluster it claimed with a live holder is ready by that holder, one
whose holders are all dead keeps its expired claimed lease and stays not ready — as it would
have, its holder gone for good — until a holder claims it (or heartbeats for it) again.
What forgetting changes is what the claims would have said later: such a cluster, removed
and observed again, is a new cluster (no lease), as after its tombstone is pruned; one a
live holder drops runs out one lease after, its dead co-holders no longer holding it not
ready at once. A late beat or claim of a forgotten holder makes it a holder anew: a beat
renews a lease that claims nothing, a claim claims what it names. Why 7 days: a holder's
beats and claims are redelivered minutes apart at most (tombstones.py: the same publishers),
so a forgotten holder never comes back from a redelivery; and a week leaves an operator a
dead replica's records to look at. Cost: the dead holders sit in a third heap, (expires_at,
name), built with the holders' expiry heap from one scan of the HolderLeases (bounded now);
a tick pops only those due; forgetting one costs its 64 chunk keys and a ClusterClaims
write per cluster it claimed — what its claims cost when it started, once more. Measured
over plain dicts (one engine, the shared 2-core machine): forgetting a holder of 10,000
clusters another holder claims too, 38 ms (its claims when it started: 360 to 620 ms); the
tick that rebuilds the heaps of 300 holders 0.8 ms; a tick with nothing due 5.8 µs, the
whole engine's.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping
from typing import Literal

from rollout.api.windows import iso
from rollout.engine.membership import Membership
from rollout.engine.outcome import Outcome, verdict
from rollout.engine.stages import MOVES_PER_EVENT
from rollout.engine.state import (
    CLAIM_IDS_KEPT,
    CLUSTER_COMMAND_IDS_KEPT,
    HEARTBEAT_IDS_KEPT,
    HOLDER_BEAT_IDS_KEPT,
    ClaimChunk,
    ClusterClaims,
    ClusterFacts,
    HolderLease,
    Lease,
    RemovedCluster,
    Sequence,
    claim_key,
    remember,
)
from rollout.engine.tables import StateTables
from rollout.engine.tombstones import TOMBSTONE_HORIZON
from rollout.wire.events import (
    CLAIM_CHUNKS,
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    HolderClaims,
    HolderHeartbeat,
    LeasesContinued,
)

Expiries = list[tuple[float, str]]  # a heap of (expires_at, name); may hold stale entries

EXPIRIES_PER_EVENT = MOVES_PER_EVENT
"""Clusters one Tick takes offline at most (leases.py "Mass expiries in slices"): as many as
an event moves, so a mass expiry's membership refresh is bounded as a join's or a re-sort's."""

SLICES_ASKED = "lease-slices"
"""The `sequences` entry numbering the partition's LeasesContinued requests."""

SLICES_ANSWERED = "lease-slices-answered"
"""The `sequences` entry holding the latest LeasesContinued that acted."""

HOLDER_HORIZON = TOMBSTONE_HORIZON
"""Seconds of engine time a holder whose lease expired is kept before it is forgotten: as
long as a tombstone, far past any redelivery of its beats and claims (the module doc)."""


class Leases:
    """Folds heartbeats, holders' claims and leave/join commands; expires leases as the
    clock moves."""

    def __init__(self, tables: StateTables, membership: Membership) -> None:
        self.tables = tables
        self.membership = membership
        self._expiries: Expiries | None = None  # the clusters' own leases
        self._unclocked: set[str] | None = None  # own leases renewed before any tick
        self._holder_expiries: Expiries | None = None
        self._holders_unclocked: set[str] | None = None
        self._dead_holders: Expiries | None = None  # holders expired: when their lease ran out
        # while a tick expires leases: each cluster whose facts they changed → its facts before
        self._expiring: dict[str, ClusterFacts] | None = None
        self.holder_horizon = HOLDER_HORIZON  # an engine may be given another: tests use hours
        self.expiries_per_event = EXPIRIES_PER_EVENT  # lowered by tests
        self._settling: set[str] | None = None  # holders expired whose clusters are being taken offline
        self._returning: set[str] | None = None  # holders back whose clusters are being brought back
        self._taken = 0  # clusters the tick being folded took (`expire_leases`)

    def reset_index(self) -> None:
        """Drop the expiry heaps; they are rebuilt lazily from the ClusterFacts and HolderLeases."""
        self._expiries = self._unclocked = None
        self._holder_expiries = self._holders_unclocked = self._dead_holders = None
        self._settling = self._returning = None

    def _lease_index(self) -> tuple[Expiries, set[str]]:
        if self._expiries is None or self._unclocked is None:
            self._expiries, self._unclocked = [], set()
            clusters = self.tables.clusters
            for name in list(clusters.keys()):
                lease = clusters[name].lease
                if lease is None or lease.expired or lease.claimed:
                    continue
                expiry = lease.live_expiry()
                if expiry is None:
                    self._unclocked.add(name)
                else:
                    self._expiries.append((expiry, name))
            heapq.heapify(self._expiries)
        return self._expiries, self._unclocked

    def _holder_index(self) -> tuple[Expiries, set[str]]:
        if (
            self._holder_expiries is None
            or self._holders_unclocked is None
            or self._dead_holders is None
            or self._settling is None
            or self._returning is None
        ):
            self._holder_expiries, self._holders_unclocked, self._dead_holders = [], set(), []
            self._settling, self._returning = set(), set()
            holders = self.tables.holders
            for name in list(holders.keys()):
                holder = holders[name]
                if holder.expired and holder.settling is not None:
                    self._settling.add(name)
                if not holder.expired and holder.returning is not None:
                    self._returning.add(name)
                if holder.expired:
                    if holder.expires_at is not None:  # always, once expired: only a tick expires
                        self._dead_holders.append((holder.expires_at, name))
                elif (expiry := holder.live_expiry()) is None:
                    self._holders_unclocked.add(name)
                else:
                    self._holder_expiries.append((expiry, name))
            heapq.heapify(self._holder_expiries)
            heapq.heapify(self._dead_holders)
        return self._holder_expiries, self._holders_unclocked

    def _dead_index(self) -> Expiries:
        """The heap of holders expired, (expires_at, name); built with the holders' expiries."""
        self._holder_index()
        assert self._dead_holders is not None
        return self._dead_holders

    # -- holders: an applier replica's lease and the clusters it claims --------------------

    def on_holder_heartbeat(self, event: HolderHeartbeat, out: Outcome) -> None:
        """The holder's lease renewed: one record, whatever it claims — unless it had
        expired, when its clusters are reached again."""
        previous = self.tables.holders.get(event.holder)
        if previous is not None and event.id in previous.beat_ids:
            return  # redelivered
        self._renew_holder(event.holder, event.lease_seconds, event.id)
        if previous is not None and previous.expired:
            self._back(event.holder, out)

    def on_holder_claims(self, event: HolderClaims, out: Outcome) -> None:
        """Chunk `event.chunk` of the holder's claims is now `event.clusters`: the clusters
        it gained follow the holder, those it dropped are released; the holder is renewed."""
        tables, holder = self.tables, event.holder
        key = claim_key(holder, event.chunk)
        chunk = tables.holder_claims.get(key)
        if chunk is not None and event.id in chunk.claim_ids:
            return  # redelivered
        before, after = set(chunk.clusters if chunk else ()), set(event.clusters)
        tables.holder_claims[key] = ClaimChunk(
            holder=holder,
            chunk=event.chunk,
            clusters=sorted(after),
            claim_ids=remember(chunk.claim_ids if chunk else [], event.id, CLAIM_IDS_KEPT),
        )
        for cluster in sorted(after - before):
            self._set_claim(cluster, holder, claimed=True)
        for cluster in sorted(before - after):
            self._set_claim(cluster, holder, claimed=False)
        previous = tables.holders.get(holder)
        released = self._renew_holder(holder, event.lease_seconds, None)  # a claim is a beat
        self._settle_all(sorted(after ^ before), released, out, released_ones=before - after)
        if previous is not None and previous.expired:  # back: every cluster it claims, in slices
            self._back(holder, out)

    def _back(self, holder: str, out: Outcome) -> None:
        """A holder back after it expired: its clusters brought back in slices, this event's
        first (`HolderLease.returning`), every module concerned moving once after them."""
        tables = self.tables
        tables.holders[holder] = tables.holders[holder].model_copy(update={"returning": ""})
        self._returning_index().add(holder)
        self._taken = 0
        self._expiring = {}
        try:
            self._bring_back_holders(out)
        finally:
            expiring, self._expiring = self._expiring, None
        self._clusters_changed(expiring, out)
        self._continue_if_left(out)

    def _own_lease_due(self) -> bool:
        """Whether a cluster's own lease ran out and was not taken yet. The stale entries on
        top of the heap (leases renewed, claimed or expired since) are dropped first: the
        answer is the state's, not the index's — a restarted engine's heap has none of them,
        and a continuation asked for by one engine and not by the other would slice the
        rest differently."""
        expiries, _ = self._lease_index()
        live, clusters = self.tables.live, self.tables.clusters
        while expiries and expiries[0][0] <= live:
            expires_live, name = expiries[0]
            facts = clusters.get(name)
            lease = facts.lease if facts is not None else None
            if facts is None or lease is None or lease.expired or lease.claimed or lease.live_expiry() != expires_live:
                heapq.heappop(expiries)  # stale: `_expire_own_leases` would skip it
                continue
            return True
        return False

    def _walk_left(self, walking: set[str], cursor: Literal["settling", "returning"], *, expired: bool) -> bool:
        """Whether a holder in `walking` still has clusters to walk (`_walk_holders`): from the
        holders' records, not the set — which may still name one done, back or expired again
        (a restarted engine's would not)."""
        holders = self.tables.holders
        for name in walking:
            holder = holders.get(name)
            if holder is not None and holder.expired == expired and getattr(holder, cursor) is not None:
                return True
        return False

    def on_continued(self, event: LeasesContinued, out: Outcome) -> None:
        """The partition's latest request to be continued: the next slice of the expiries
        due and of the holders settling or coming back — as a tick would take it, with no
        time passing (the clock moves only on Ticks)."""
        sequences = self.tables.sequences
        if event.partition != self.tables.partition:
            return  # another partition's (misrouted): its own journal has it
        if event.slice != _count(sequences, SLICES_ASKED) or _count(sequences, SLICES_ANSWERED) >= event.slice:
            return  # superseded, or redelivered: changes nothing
        sequences[SLICES_ANSWERED] = Sequence(next=event.slice)
        self._expiring = {}
        self._taken = 0
        try:
            self._expire_own_leases(False, out)
            self._settle_expired_holders(out)
            self._bring_back_holders(out)
        finally:
            expiring, self._expiring = self._expiring, None
        self._clusters_changed(expiring, out)
        self._continue_if_left(out)

    def _continue_if_left(self, out: Outcome) -> None:
        """After a slice: if clusters are left to take offline or bring back, ask for a
        LeasesContinued to this partition — once: while one is outstanding, it carries on."""
        left = self._own_lease_due()
        left = left or self._walk_left(self._settling_index(), "settling", expired=True)
        if not (left or self._walk_left(self._returning_index(), "returning", expired=False)):
            return
        tables = self.tables
        asked = _count(tables.sequences, SLICES_ASKED)
        if _count(tables.sequences, SLICES_ANSWERED) != asked:
            return  # one is outstanding
        tables.sequences[SLICES_ASKED] = Sequence(next=asked + 1)
        out.dependency_events.append(
            LeasesContinued(
                id=f"leases-{tables.partition}-{asked + 1}",
                at=iso(tables.now) or "",
                partition=tables.partition,
                slice=asked + 1,
            )
        )

    def _returning_index(self) -> set[str]:
        """The holders back whose clusters are not all brought back yet; built with the holders'."""
        self._holder_index()
        assert self._returning is not None
        return self._returning

    def _bring_back_holders(self, out: Outcome) -> None:
        """Holders back bring their clusters back, in holder then (chunk, name) order, until
        this event took `expiries_per_event` clusters; each keeps where it stopped
        (`HolderLease.returning`) and goes on at the next tick."""
        self._walk_holders(self._returning_index(), "returning", expired=False, out=out)

    def _walk_claims(self, holder: str, cursor: str, out: Outcome) -> str | None:
        """Settle `holder`'s clusters after `cursor` ("<chunk>/<cluster>", "" from the first)
        in (chunk, name) order until this event took `expiries_per_event`; where it stopped,
        or None when it went through them all."""
        chunks = self.tables.holder_claims
        start, after = (0, "") if not cursor else cursor.split("/", 1)
        last = cursor
        for index in range(int(start), CLAIM_CHUNKS):
            chunk = chunks.get(claim_key(holder, index))
            clusters = chunk.clusters if chunk is not None else []
            first = bisect.bisect_right(clusters, after) if index == int(start) and after else 0
            for cluster in clusters[first:]:
                if self._taken >= self.expiries_per_event:
                    return last
                self._taken += 1
                self._settle(cluster, None, out)
                last = f"{index}/{cluster}"
        return None

    def claimed_by(self, holder: str) -> list[str]:
        """Every cluster the holder's claims name, sorted (its chunks: at most CLAIM_CHUNKS)."""
        chunks = self.tables.holder_claims
        names: list[str] = []
        for index in range(CLAIM_CHUNKS):
            chunk = chunks.get(claim_key(holder, index))
            if chunk is not None:
                names += chunk.clusters
        return sorted(names)

    def _set_claim(self, cluster: str, holder: str, *, claimed: bool) -> None:
        claims = self.tables.claims
        known = claims.get(cluster)
        holders = set(known.holders if known else ())
        holders = holders | {holder} if claimed else holders - {holder}
        if holders:
            claims[cluster] = ClusterClaims(cluster=cluster, holders=sorted(holders))
        elif known is not None:
            del claims[cluster]

    def _renew_holder(self, holder: str, seconds: float, beat_id: str | None) -> HolderLease:
        """The holder's lease renewed at the engine's time (beat ids remembered); the new lease."""
        tables = self.tables
        previous = tables.holders.get(holder)
        ids = previous.beat_ids if previous is not None else []
        now, live = tables.now, tables.live
        clocked = now > 0
        lease = HolderLease(
            holder=holder,
            seconds=seconds,
            renewed_at=now if clocked else None,
            expires_at=now + seconds if clocked else None,
            beat_ids=remember(ids, beat_id, HOLDER_BEAT_IDS_KEPT) if beat_id is not None else list(ids),
            expires_live=live + seconds if clocked else None,
            # still bringing its clusters back (`_back`): a beat meanwhile keeps it going
            returning=previous.returning if previous is not None and not previous.expired else None,
        )
        expiries, unclocked = self._holder_index()
        expiry = lease.live_expiry()
        if expiry is None:
            unclocked.add(holder)
        else:
            heapq.heappush(expiries, (expiry, holder))
        tables.holders[holder] = lease
        return lease

    def _settle_all(
        self,
        clusters: list[str],
        released: HolderLease | None,
        out: Outcome,
        released_ones: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        for cluster in clusters:
            self._settle(cluster, released if cluster in released_ones else None, out)

    def _settle(self, cluster: str, released: HolderLease | None, out: Outcome) -> None:
        """The cluster's lease as its claims say now (`released`: the lease of the holder
        that just dropped it); its facts rewritten only if that changes it."""
        facts = self.tables.clusters.get(cluster)
        if facts is None:
            return  # not (or no longer) observed: its claims wait for it
        lease = self._lease_of(cluster, facts.lease, released)
        if lease != facts.lease:
            self._refresh_facts(facts, facts.model_copy(update={"lease": lease}), out)

    def _lease_of(self, cluster: str, current: Lease | None, released: HolderLease | None) -> Lease | None:
        """What the cluster's lease is, given its claims, from `current`."""
        claim = self.tables.claims.get(cluster)
        if claim is None:
            if current is not None and current.claimed and released is not None:
                # no holder claims it any more: it runs out one lease after its last holder's
                own = Lease(
                    seconds=released.seconds,
                    renewed_at=released.renewed_at,
                    expires_at=released.expires_at,
                    expired=released.expired,
                    expires_live=released.expires_live,
                )
                self._index_own(cluster, own)
                return own
            return current
        if self._own_lease_runs(current):
            return current  # its own lease runs (per-cluster heartbeats): its holders once it expires
        holders = [self.tables.holders.get(name) for name in claim.holders]
        alive = [holder for holder in holders if holder is not None and not holder.expired]
        known = alive or [holder for holder in holders if holder is not None]
        seconds = max((holder.seconds for holder in known), default=current.seconds if current else 60.0)
        return Lease(seconds=seconds, claimed=True, expired=not alive)

    def _own_lease_runs(self, lease: Lease | None) -> bool:
        """Whether `lease` is a cluster's own, not expired. One without times once the clock
        runs is not: it is a claimed lease an older release wrote back without `claimed`
        (it drops fields it does not know), which must follow its holders again."""
        if lease is None or lease.claimed or lease.expired:
            return False
        return lease.expires_at is not None or self.tables.now == 0

    def _index_own(self, cluster: str, lease: Lease) -> None:
        if lease.expired:
            return
        expiries, unclocked = self._lease_index()
        expiry = lease.live_expiry()
        if expiry is None:
            unclocked.add(cluster)
        else:
            heapq.heappush(expiries, (expiry, cluster))

    def lease_of_new_cluster(self, cluster: str) -> Lease | None:
        """The lease of a cluster observed anew (first, or again after its removal): its
        holders', if any claims it — so it is never moved on an observation if none is alive
        (Membership asks this before it decides)."""
        return self._lease_of(cluster, None, None)

    # -- per-cluster heartbeats (appliers before claims), leave/join -----------------------

    def on_heartbeat(self, event: ClusterHeartbeat, out: Outcome) -> None:
        self._renew(event.cluster, event.id, event.lease_seconds, out)

    def on_heartbeats(self, event: ClusterHeartbeats, out: Outcome) -> None:
        for cluster in event.clusters:  # distinct names (validated): each renewed once
            self._renew(cluster, event.id, event.lease_seconds, out)

    def _renew(self, cluster: str, event_id: str, lease_seconds: float, out: Outcome) -> None:
        """A heartbeat (`event_id`) for `cluster`: its own lease renewed for `lease_seconds`."""
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
            expires_live=tables.live + lease_seconds if clocked else None,
        )
        self._index_own(cluster, lease)
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
        time ran out expire — the clusters' own (each becomes not ready, unless a live holder
        claims it), then the holders' (the clusters only they claim become not ready); then
        every module concerned refreshes all the clusters whose readiness that changed and
        moves once (`Membership.clusters_changed`): a cluster whose lease runs out on this
        tick is never moved by another's expiry on it; then holders expired a horizon ago
        are forgotten (no readiness changes)."""
        self._expiring = {}  # every lease that runs out on this tick first, then the moves
        self._taken = 0  # clusters this tick took (offline or not): at most expiries_per_event
        try:
            self._expire_own_leases(first, out)
            self._expire_holders(first, out)
            self._settle_expired_holders(out)
            self._bring_back_holders(out)  # holders back: the slices their beat did not take
        finally:
            expiring, self._expiring = self._expiring, None
        self._clusters_changed(expiring, out)
        self._continue_if_left(out)
        self.forget_dead_holders()

    def _clusters_changed(self, expiring: dict[str, ClusterFacts], out: Outcome) -> None:
        """Every module concerned refreshes the clusters whose readiness changed, then moves once."""
        changes = [(name, before, self.tables.clusters[name]) for name, before in expiring.items()]
        self.membership.clusters_changed(
            [(name, before, now) for name, before, now in changes if now.ready != before.ready], out
        )

    def _expire_own_leases(self, first: bool, out: Outcome) -> None:
        tables = self.tables
        now, live = tables.now, tables.live
        expiries, unclocked = self._lease_index()
        if first:
            for name in sorted(unclocked):  # renewed before any tick: they run from this one
                facts = tables.clusters.get(name)
                lease = facts.lease if facts is not None else None
                if facts is not None and lease is not None and lease.expires_at is None and not lease.claimed:
                    update = {
                        "renewed_at": now,
                        "expires_at": now + lease.seconds,
                        "expires_live": live + lease.seconds,
                    }
                    lease = lease.model_copy(update=update)
                    tables.clusters[name] = facts.model_copy(update={"lease": lease})
                    heapq.heappush(expiries, (live + lease.seconds, name))
            unclocked.clear()
        while expiries and expiries[0][0] <= live and self._taken < self.expiries_per_event:
            expires_live, name = heapq.heappop(expiries)  # the rest, if any, on the next tick
            facts = tables.clusters.get(name)
            lease = facts.lease if facts is not None else None
            if facts is None or lease is None or lease.expired or lease.claimed or lease.live_expiry() != expires_live:
                continue  # renewed since, expired already, claimed since, or the cluster is gone
            followed = self._lease_of(name, lease.model_copy(update={"expired": True}), None)
            self._taken += 1
            self._refresh_facts(facts, facts.model_copy(update={"lease": followed}), out)

    def _expire_holders(self, first: bool, out: Outcome) -> None:
        tables = self.tables
        now, live = tables.now, tables.live
        expiries, unclocked = self._holder_index()
        if first:
            for name in sorted(unclocked):
                holder = tables.holders.get(name)
                if holder is not None and holder.expires_at is None and not holder.expired:
                    update = {
                        "renewed_at": now,
                        "expires_at": now + holder.seconds,
                        "expires_live": live + holder.seconds,
                    }
                    tables.holders[name] = holder.model_copy(update=update)
                    heapq.heappush(expiries, (live + holder.seconds, name))
            unclocked.clear()
        while expiries and expiries[0][0] <= live:
            expires_live, name = heapq.heappop(expiries)
            holder = tables.holders.get(name)
            if holder is None or holder.expired or holder.live_expiry() != expires_live or holder.expires_at is None:
                continue  # renewed since, or expired already
            # expired: its clusters are taken offline in slices (`_settle_expired_holders`)
            tables.holders[name] = holder.model_copy(update={"expired": True, "settling": "", "returning": None})
            heapq.heappush(self._dead_index(), (holder.expires_at, name))
            self._settling_index().add(name)

    def _settling_index(self) -> set[str]:
        """The holders expired whose clusters are not all taken yet; built with the holders'."""
        self._holder_index()
        assert self._settling is not None
        return self._settling

    def _settle_expired_holders(self, out: Outcome) -> None:
        """Holders expired take their clusters offline, in holder then (chunk, name) order,
        until this tick took `expiries_per_event` clusters; each keeps where it stopped
        (`HolderLease.settling`) and goes on at the next tick. A cluster not taken yet is
        still ready (leases.py "Mass expiries in slices")."""
        self._walk_holders(self._settling_index(), "settling", expired=True, out=out)

    def _walk_holders(
        self, walking: set[str], cursor: Literal["settling", "returning"], *, expired: bool, out: Outcome
    ) -> None:
        """Go on with the holders in `walking` (in name order) whose `cursor` is set, while
        they are still `expired` (settling) or still not (returning), until this event took
        `expiries_per_event` clusters; a holder that stopped keeps where it stopped, one
        done, expired again or back, or forgotten, leaves `walking`."""
        tables = self.tables
        for name in sorted(walking):
            holder = tables.holders.get(name)
            where = getattr(holder, cursor) if holder is not None else None
            if holder is None or holder.expired != expired or where is None:
                walking.discard(name)
                continue
            last = self._walk_claims(name, where, out)
            tables.holders[name] = holder.model_copy(update={cursor: last})
            if last is not None:
                return  # the rest at the next tick
            walking.discard(name)

    def forget_dead_holders(self) -> None:
        """Every holder whose lease expired `holder_horizon` ago or longer is forgotten, in
        the order they expired (see the module doc)."""
        tables = self.tables
        cutoff = tables.now - self.holder_horizon
        dead = self._dead_index()
        while dead and dead[0][0] <= cutoff:
            expires_at, name = heapq.heappop(dead)
            holder = tables.holders.get(name)
            if holder is None or not holder.expired or holder.expires_at != expires_at:
                continue  # back since (and maybe expired again: its own entry), or forgotten
            self._forget(name)

    def _forget(self, holder: str) -> None:
        """Delete the holder's lease, its claim chunks and its name from the ClusterClaims of
        every cluster they name (one left with no holder goes). No ClusterFacts is rewritten:
        a cluster's readiness stays what it is (the module doc)."""
        chunks = self.tables.holder_claims
        for index in range(CLAIM_CHUNKS):
            key = claim_key(holder, index)
            chunk = chunks.get(key)
            if chunk is None:
                continue
            for cluster in chunk.clusters:
                self._set_claim(cluster, holder, claimed=False)
            del chunks[key]
        del self.tables.holders[holder]

    def _refresh_facts(self, previous: ClusterFacts, facts: ClusterFacts, out: Outcome) -> None:
        """Store `facts` with its readiness worked out; a readiness change moves modules —
        on a tick, once every lease that runs out on it has expired (`expire_leases`)."""
        facts.ready = facts.readiness()
        self.tables.clusters[facts.name] = facts
        if self._expiring is not None:
            self._expiring.setdefault(facts.name, previous)
            return
        if facts.ready != previous.ready:
            self.membership.cluster_changed(facts.name, previous, facts, out)


def _count(sequences: Mapping[str, Sequence], name: str) -> int:
    """The number kept in `sequences[name]` (0 if none)."""
    found = sequences.get(name)
    return found.next if found is not None else 0
