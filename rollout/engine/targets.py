"""The target book: the Targets of the partition's modules, kept in step with everything
derived from them, and the assignments and decisions made about them.

A `Target` is one (module, cluster) membership: its stage, readiness, pin, the generation
assigned and the status reported for it. Every change of a Target goes through
`store_target`, which keeps four things consistent with it:

* the per-stage counters of its `ModuleRecord` (`StageCounts`: members and one count per
  category — pending, updating, succeeded, failed, not_ready, pinned, blocked, held,
  awaiting_release);
* the derived in-memory indexes — members per module, the ordered queue of pending clusters
  per (module, stage), the updating clusters per module — rebuilt lazily after a restart
  (`reset_indexes` drops them);
* `Target.dependents_ready`, and the modules depending on this one told when it changes
  (dependency_links.py);
* `Outcome.target_status`, the view `rollout status` shows.

`assign` puts a generation into a cluster's assemblage (an `Assignment` in the outcome) and
records why (`decide`, a `Decision`). `save_module` stores a module record and puts its
status document in the outcome. Every concern of the engine that moves clusters or settles
a module works through one `TargetBook` (core.py builds it over the `StateTables`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import Any

from sortedcontainers import SortedList

from rollout.api.manifests import Sync
from rollout.engine.dependency_links import DependencyLinks, dependents_ready, release_failed, release_skipped
from rollout.engine.outcome import DEFERRED, DecisionAction, Outcome, assignment, decision
from rollout.engine.runs import offline_reason
from rollout.engine.state import (
    REPORT_IDS_KEPT,
    Category,
    ClusterFacts,
    HeldQueue,
    ModuleRecord,
    StageCounts,
    Target,
    dependencies_ready,
    failed_peers,
    held_key,
    release_peers,
    target_key,
)
from rollout.engine.strategy import stage_for
from rollout.engine.tables import StateTables, peek
from rollout.engine.views import calendar_break_glass, deleting_view, held_view, module_view, target_view
from rollout.values.bindings import binding_values, expand_sync
from rollout.values.layers import MergedValues
from rollout.values.releases import ObservedValues, read_only_values, release_sync
from rollout.wire.assemblages import ASSEMBLAGE_FOR, AssignedSync
from rollout.wire.decision_reasons import DecisionReason, ValuesRefused, render

ASSIGNED_SYNCS_KEPT = 4_096
"""Modules whose last AssignedSync the book keeps to give again (`assigned_sync`)."""

PendingQueue = list[tuple[int, int, str]]  # (unsorted?, sort key, cluster), ascending: the cluster is entry[2]
"""One tuple per pending target (a fleet-sized index: 64 bytes an entry, not 120 with the
cluster beside its sort tuple)."""


def _queue_index(target: Target) -> int:
    return target.stage_index if target.stage_index is not None else -1


class TargetBook:
    """The Targets, their indexes and counters; assignments, decisions, status documents.

    `defer_views`: leave module-status documents as `DEFERRED` in outcomes, for a caller that
    folds a batch and renders each touched module's view once at its end (`status_of`) —
    the document of a module is the view of its final state either way.
    """

    def __init__(self, tables: StateTables, links: DependencyLinks) -> None:
        self.tables = tables
        self.links = links
        self.defer_views = False
        # Derived, in-memory indexes; rebuilt lazily from the mappings after a restart.
        self._members: dict[str, set[str]] = {}
        self._pending: dict[tuple[str, int], PendingQueue] = {}
        self._updating: dict[str, set[str]] = {}
        self._held: dict[str, set[str]] = {}
        self._fleet: SortedList | None = None  # the fleet's cluster names, in order
        self._late: dict[str, set[str]] = {}  # late joiners kept out of the run (runs.py)
        self._not_ready: dict[str, set[str]] = {}  # category not_ready (offline, not waited for)
        self._waited: dict[str, set[str]] = {}  # offline_until or offline_failed set (runs.py)
        self._assigned: dict[str, AssignedSync] = {}  # each module's last (`assigned_sync`)

    def reset_indexes(self) -> None:
        """Drop every derived in-memory index; they are rebuilt lazily from the mappings."""
        self._members = {}
        self._pending = {}
        self._updating = {}
        self._held = {}
        self._late = {}
        self._not_ready = {}
        self._waited = {}
        self._fleet = None

    def fleet_after(self, name: str, count: int) -> list[str]:
        """The next `count` cluster names of the fleet after `name` ("": from the first), in
        order — O(log fleet + count) once the index is built (on first use)."""
        if self._fleet is None:
            self._fleet = SortedList(self.tables.clusters.keys())
        return list(itertools.islice(self._fleet.irange(minimum=name, inclusive=(False, False)), count))

    def cluster_added(self, name: str) -> None:
        """A cluster joined the fleet (ClusterObserved of a cluster not in it)."""
        if self._fleet is not None:
            self._fleet.add(name)

    def cluster_dropped(self, name: str) -> None:
        """A cluster left the fleet (ClusterRemoved)."""
        if self._fleet is not None:
            self._fleet.discard(name)
        # its Targets are dropped in the same fold (Membership.cluster_changed), through
        # `store_target`: that takes them out of every per-module index

    # -- indexes --------------------------------------------------------------------------

    def index(self, module: str) -> set[str]:
        """Members of `module`; builds the pending/updating indexes on first use."""
        members = self._members.get(module)
        if members is not None:
            return members
        for _ in self.index_steps(module, clusters_per_step=None):
            pass
        return self._members[module]

    def index_new_module(self, module: str) -> None:
        """`module` was just created: it has no Target yet (a deleted module's are all dropped
        before an apply of it is let through: deletions.py), so its indexes start empty —
        not built by looking every cluster of the fleet up (`index`), an apply's one
        fleet-sized step (100,000 lookups at 100,000 clusters)."""
        if module in self._members:
            return
        self.forget_module_indexes(module)
        self._members[module] = set()
        for index in (self._updating, self._held, self._late, self._not_ready, self._waited):
            index[module] = set()

    def index_steps(self, module: str, clusters_per_step: int | None) -> Iterator[int]:
        """Build `module`'s indexes as its first use would, `clusters_per_step` of the fleet's
        clusters at a time (None: all in one), yielding the clusters looked up so far after
        each slice — for a caller that lets other work run in between (the decider's warm-up
        before its first fold after a take-over: one module of a 100,000-cluster partition
        held the worker's event loop 3-14 s, its /readyz and heartbeats unanswered meanwhile).
        The module counts as indexed only once every slice is in: a build cut short is built
        again whole by `index` (what a slice added is found again, not added twice)."""
        if module in self._members:
            return
        self.forget_module_indexes(module)
        members: set[str] = set()
        self._updating[module] = set()
        self._held[module] = set()
        self._late[module] = set()
        self._not_ready[module] = set()
        self._waited[module] = set()
        targets = self.tables.targets
        clusters = list(self.tables.clusters.keys())
        step = clusters_per_step or max(len(clusters), 1)
        for start in range(0, len(clusters), step):
            for cluster in clusters[start : start + step]:
                target = peek(targets, target_key(module, cluster))
                if target is not None:
                    members.add(cluster)
                    self._index_target(target)
            if start + step < len(clusters):
                yield start + step
        self._members[module] = members
        yield len(clusters)

    def pending_queue(self, module: str, stage_index: int) -> PendingQueue:
        """The pending clusters of one stage (-1: unstaged) in moving order; the book's own
        list, changed as targets are stored (read `[0]` again after each move)."""
        return self._pending.get((module, stage_index), [])

    def updating_clusters(self, module: str) -> set[str]:
        """The clusters of `module` updating now (the book's own set: copy it to iterate
        while storing targets)."""
        return self._updating.get(module, set())

    def held_clusters(self, module: str) -> set[str]:
        """The clusters of `module` held by their owners now (the book's own set: copy it to
        iterate while storing targets)."""
        return self._held.get(module, set())

    def late_clusters(self, module: str) -> set[str]:
        """The late joiners of `module` its run kept out (`Target.late`, runs.py) — the
        book's own set: copy it to iterate while storing targets."""
        return self._late.get(module, set())

    def not_ready_clusters(self, module: str) -> set[str]:
        """The clusters of `module` offline and not waited for (category not_ready) — the
        book's own set: copy it to iterate while storing targets."""
        return self._not_ready.get(module, set())

    def waited_clusters(self, module: str) -> set[str]:
        """The clusters of `module` an offline wait covers or failed (`offline_until`,
        `offline_failed`) — the book's own set: copy it to iterate while storing targets."""
        return self._waited.get(module, set())

    def _index_target(self, target: Target) -> None:
        if target.category == "pending":
            entry = self._sort_tuple(target)
            queue = self._pending.setdefault((target.module, _queue_index(target)), [])
            position = bisect.bisect_left(queue, entry)
            if position >= len(queue) or queue[position] != entry:
                queue.insert(position, entry)
        if target.category == "updating":
            self._updating.setdefault(target.module, set()).add(target.cluster)
        if target.category == "held":
            self._held.setdefault(target.module, set()).add(target.cluster)
        if target.late is not None:
            self._late.setdefault(target.module, set()).add(target.cluster)
        if target.category == "not_ready":
            self._not_ready.setdefault(target.module, set()).add(target.cluster)
        if target.offline_until is not None or target.offline_failed:
            self._waited.setdefault(target.module, set()).add(target.cluster)

    def _unindex_target(self, target: Target) -> None:
        if target.category == "pending":
            queue = self._pending.get((target.module, _queue_index(target)), [])
            entry = self._sort_tuple(target)
            position = bisect.bisect_left(queue, entry)
            if position < len(queue) and queue[position] == entry:
                del queue[position]
        if target.category == "updating":
            self._updating.get(target.module, set()).discard(target.cluster)
        if target.category == "held":
            self._held.get(target.module, set()).discard(target.cluster)
        if target.late is not None:
            self._late.get(target.module, set()).discard(target.cluster)
        if target.category == "not_ready":
            self._not_ready.get(target.module, set()).discard(target.cluster)
        if target.offline_until is not None or target.offline_failed:
            self._waited.get(target.module, set()).discard(target.cluster)

    @staticmethod
    def _sort_tuple(target: Target) -> tuple[int, int, str]:
        if target.sort_key is None:
            return (1, 0, target.cluster)
        return (0, target.sort_key, target.cluster)

    def forget_module_indexes(self, module: str) -> None:
        self._members.pop(module, None)
        self._updating.pop(module, None)
        self._held.pop(module, None)
        self._late.pop(module, None)
        self._not_ready.pop(module, None)
        self._waited.pop(module, None)
        for key in [k for k in self._pending if k[0] == module]:
            del self._pending[key]

    # -- targets and counters -------------------------------------------------------------

    def goal(self, record: ModuleRecord) -> int | None:
        return record.target if record.mode == "rollout" else record.stable

    def categorize(self, record: ModuleRecord, target: Target) -> Category:
        if target.pinned:
            return "pinned"
        goal = self.goal(record)
        release = record.spec.release is not None and record.mode == "rollout" and goal is not None
        peers = release_peers(record.spec, record.name) if release else []
        updating = target.assigned == goal and target.status == "updating"
        if peers and not updating and failed_peers(self.tables.upstream, peers, target.cluster, record.awaiting):
            # a member of its Release failed here: the release failed here (dependencies.py) —
            # once its own sync no longer updates here, which keeps its concurrency slot till then
            return "failed"
        if target.assigned == goal:
            if goal is None or target.status == "succeeded":
                if release and target.hold is None and not self.peers_ready(record, target.cluster):
                    # on its target, waiting for the other members of its Release here (not
                    # on a cluster its owner holds: the others are held there too): started
                    # (waves count it), not done (its stage waits for it), no slot taken
                    return "awaiting_release"
                return "succeeded"
            return "failed" if target.status == "failed" else "updating"
        if record.mode == "rollback" and target.stage_index is None and target.assigned is None:
            return "succeeded"  # unstaged and never given anything: a rollback has nothing to undo
        if target.hold is not None and record.mode == "rollout":
            return "held"  # its owner holds it (runs.py): not moved, not a failure; a rollback is not held
        if target.late is not None and record.mode == "rollout":
            # joined after the run started, kept out of it by `lateJoiners` (runs.py)
            return "deferred" if target.late == "next-run" else "excluded"
        if not target.ready and record.mode == "rollout":
            if target.offline_failed:
                return "failed"  # its offline wait ran out under `then: Fail` (runs.py)
            return "awaited" if target.offline_until is not None else "not_ready"
        if record.spec.depends_on and record.mode == "rollout":
            if not dependencies_ready(self.tables.upstream, record.spec.depends_on, target.cluster, record.awaiting):
                return "blocked"  # its dependencies are not on their target there (dependencies.py)
        return "pending"

    def peers_ready(self, record: ModuleRecord, cluster: str) -> bool:
        """Whether every other member of `record`'s Release is on its target and succeeded
        on `cluster` — or skipped there (pinned, or not ready and not on its target: not
        waited for, dependency_links.py `release_skipped`)."""
        upstream = self.tables.upstream
        for peer in release_peers(record.spec, record.name):
            known = upstream.get(target_key(peer, cluster))
            if peer in record.awaiting or known is None or not (known.ready or known.skipped):
                return False
        return True

    def counts(self, record: ModuleRecord, stage: str) -> StageCounts:
        counts = record.counts.get(stage)
        if counts is None:
            counts = StageCounts()
            record.counts[stage] = counts
        return counts

    def store_target(self, record: ModuleRecord, old: Target | None, new: Target | None, out: Outcome) -> None:
        """Persist a Target (None: drop it), keeping counters, indexes, what dependents
        know and the status view in step. `new` is the caller's own copy: it is completed
        (category, dependents_ready) in place."""
        if new is not None:
            ready = dependents_ready(record, new)
            if new.dependents_ready != ready:
                new.dependents_ready = ready
            failed = release_failed(record, new)
            if new.release_failed != failed:
                new.release_failed = failed
        category = self.categorize(record, new) if new is not None else None
        if new is not None and category is not None:
            skipped = release_skipped(record, category)
            if new.release_skipped != skipped:
                new.release_skipped = skipped
        if old is not None and new is not None and old.stage == new.stage:
            if old.category != category:  # the stage's members stay: one counter moves
                counts = self.counts(record, old.stage)
                setattr(counts, old.category, getattr(counts, old.category) - 1)
                setattr(counts, category, getattr(counts, category) + 1)  # type: ignore[arg-type]
        else:
            if old is not None:
                counts = self.counts(record, old.stage)
                counts.members -= 1
                setattr(counts, old.category, getattr(counts, old.category) - 1)
            if new is not None:
                counts = self.counts(record, new.stage)
                counts.members += 1
                setattr(counts, category, getattr(counts, category) + 1)  # type: ignore[arg-type]
        # a pending target that stays pending in the same queue at the same place (a label
        # change that moves neither its stage nor its sorting key) keeps its index entry:
        # finding the entry is a binary search over tuples in a queue of up to the whole
        # fleet (~5 µs at 37,000), and removing and inserting it moves the queue's tail
        in_place = (
            old is not None
            and new is not None
            and old.category == category == "pending"
            and _queue_index(old) == _queue_index(new)
            and old.sort_key == new.sort_key
            and old.late == new.late
            and old.offline_until == new.offline_until
            and old.offline_failed == new.offline_failed
        )
        if old is not None and not in_place:
            self._unindex_target(old)
        if new is not None:
            if new.category != category:
                new.category = category  # type: ignore[assignment]
            if not in_place:
                self._index_target(new)
            key = target_key(new.module, new.cluster)
            if old is None or old.__dict__ != new.__dict__:  # field values; faster than `!=`
                self.tables.targets[key] = new
                out.target_status[key] = target_view(record, new, self.offline(new))
            self.index(record.name).add(new.cluster)
        elif old is not None:
            key = target_key(old.module, old.cluster)
            self.tables.targets.pop(key, None)
            self._keep_report_ids(old)
            out.target_status[key] = None
            self.index(record.name).discard(old.cluster)
        self.links.readiness_stored(record.name, old, new, out)

    def drop_target(self, module: str, old: Target, out: Outcome) -> None:
        """Drop a Target of a module deleted already (deletions.py): what `store_target`
        does with None, without the module's record (its counters went with it)."""
        key = target_key(module, old.cluster)
        self._unindex_target(old)
        self.tables.targets.pop(key, None)
        self._keep_report_ids(old)
        out.target_status[key] = None
        self.index(module).discard(old.cluster)
        self.links.readiness_stored(module, old, None, out)

    def offline(self, target: Target) -> str | None:
        """Why a member that is not ready is not (runs.py `offline_reason`), for its document."""
        if target.ready:
            return None
        facts = self.tables.clusters.get(target.cluster)
        return offline_reason(facts) if facts is not None else None

    def _keep_report_ids(self, deleted: Target) -> None:
        """A deleted target's report ids go to its cluster's facts (or tombstone), so that a
        redelivered report still changes nothing if the target comes back (reports.py)."""
        if not deleted.report_ids:
            return
        tables = self.tables
        holder = tables.clusters.get(deleted.cluster) or tables.removed_clusters.get(deleted.cluster)
        if holder is None:
            return
        kept = set(holder.report_ids)
        ids = [*holder.report_ids, *(i for i in deleted.report_ids if i not in kept)][-REPORT_IDS_KEPT:]
        if isinstance(holder, ClusterFacts):
            tables.clusters[deleted.cluster] = holder.model_copy(update={"report_ids": ids})
        else:
            tables.removed_clusters[deleted.cluster] = holder.model_copy(update={"report_ids": ids})

    @staticmethod
    def resort(record: ModuleRecord) -> None:
        """Every member of `record` is re-sorted — its stage, place in the moving order,
        readiness and category taken anew, the fleet's clusters it now covers joined, those
        it no longer covers dropped — from the next `advance`, in slices of the fleet in
        name order (membership.py `resort_next`, "Re-sorts per event"); a re-sort under way
        starts again from the first cluster, and one joining the fleet is subsumed by it."""
        record.joining = None
        record.resorting = ""

    # -- assignments and decisions --------------------------------------------------------

    def assign(
        self, record: ModuleRecord, target: Target, generation: int | None, because: DecisionReason, out: Outcome
    ) -> Target:
        """Put `generation` (None: nothing) into the cluster's assemblage, `because` (the
        assignment's and its decision's reason); the target as it is now (for the caller to store)."""
        reason = render(because)
        now = self.tables.now
        old_generation = target.assigned
        if old_generation is not None and old_generation in record.revisions:
            record.revisions[old_generation].assigned -= 1
        if generation is not None:
            record.revisions[generation].assigned += 1
        new = target.updated(
            {
                "assigned": generation,
                "status": "updating" if generation is not None else "none",
                "status_message": "",
                # before the first Tick the engine knows no time: the deadline clock starts at it
                "updating_since": now if generation is not None and now > 0 else None,
            }
        )
        facts = self.tables.clusters.get(target.cluster)
        revision = record.revisions[generation].revision if generation is not None else None
        out.assignments.append(
            assignment(  # not validated again: the engine's own typed values (outcome.py)
                cluster_namespace=facts.namespace if facts else record.namespace,
                cluster=target.cluster,
                module=record.name,
                assemblage=ASSEMBLAGE_FOR[record.kind],
                sync=self.assigned_sync(record, generation, facts) if generation is not None else None,
                reason=reason,
            )
        )
        helm = record.revisions[generation].sync.package.helm if generation is not None else None
        if generation is not None and helm is not None:
            merged = self.release_for(record, generation, facts)[1]
            self.note_refusals(record, target.cluster, merged, out)
            new = self.read_only_sent(record, new, generation, merged)
        self.decide(
            record,
            DecisionAction.ASSIGN if generation is not None else DecisionAction.UNASSIGN,
            because,
            out,
            cluster=target.cluster,
            generation=generation,
            revision=revision,
        )
        self.prune_revisions(record)
        return new

    def assigned_sync(self, record: ModuleRecord, generation: int, facts: ClusterFacts | None) -> AssignedSync:
        """What `generation` assigns to the cluster of `facts`. Without bindings to expand or
        Helm values to merge, that is the revision's own sync for every cluster: the module's
        last AssignedSync is given again when it is equal (a frozen model, validated once),
        so that every assignment of a module's wave shares one — and the decider encodes it
        once (streams/decider.py)."""
        sync, _ = self.release_for(record, generation, facts)
        revision = record.revisions[generation].revision
        last = self._assigned.get(record.name)
        if (
            last is not None
            and last.sync is sync
            and last.generation == generation
            and last.revision == revision
            and last.module_namespace == record.namespace
        ):
            return last
        assigned = AssignedSync(
            module=record.name, module_namespace=record.namespace, revision=revision, generation=generation, sync=sync
        )
        if len(self._assigned) >= ASSIGNED_SYNCS_KEPT:
            self._assigned.clear()  # modules gone: bounded, whatever the installation's age
        self._assigned[record.name] = assigned
        return assigned

    def resent_sync(
        self, record: ModuleRecord, target: Target, facts: ClusterFacts | None, out: Outcome
    ) -> AssignedSync:
        """The target's assigned sync, to send again (labels or live values changed it)."""
        assert target.assigned is not None
        generation = target.assigned
        kept = self.read_only_sent(record, target, generation, self.release_for(record, generation, facts)[1])
        if kept is not target:
            self.store_target(record, target, kept, out)
        return self.assigned_sync(record, generation, facts)

    def read_only_sent(
        self, record: ModuleRecord, target: Target, generation: int, merged: MergedValues | None
    ) -> Target:
        """`target` with the values its readOnly paths are sent for the first time in
        `merged` (generation `generation`'s values): they stay theirs (releases.py)."""
        helm = record.revisions[generation].sync.package.helm
        if helm is None or merged is None:
            return target
        first = read_only_values(helm.policies, merged, target.read_only_values)
        return target if first == target.read_only_values else target.model_copy(update={"read_only_values": first})

    def release_for(
        self,
        record: ModuleRecord,
        generation: int,
        facts: ClusterFacts | None,
        observed: ObservedValues | bool | None = True,
    ) -> tuple[Sync, MergedValues | None]:
        """The sync `generation` gives this cluster: bindings expanded and, for a Helm
        release, values merged (with `observed`; True: what was last observed). Without a
        Helm release `release_sync` returns the expanded sync as it is, whatever the stage,
        observed and first-sent values: those are not looked up then (the cluster's stage
        evaluates every stage's selector — per move, in the fold of every status report)."""
        cluster = facts or ClusterFacts(name="", namespace=record.namespace)
        values = binding_values(
            record.spec.bindings,
            cluster_name=cluster.name,
            cluster_namespace=cluster.namespace,
            labels=cluster.labels,
            annotations=cluster.annotations,
        )
        expanded = expand_sync(record.revisions[generation].sync, values)
        if expanded.package.helm is None:
            return expanded, None  # what release_sync answers for it
        if observed is True:
            observed = self.tables.observed_values.get(target_key(record.name, cluster.name))
        target = self.tables.targets.get(target_key(record.name, cluster.name))
        return release_sync(
            expanded,
            stage=stage_for(record, cluster.labels)[1],
            bindings=values,
            observed=observed or None,
            first_sent=target.read_only_values if target is not None else None,
        )

    def note_refusals(self, record: ModuleRecord, cluster: str, merged: MergedValues | None, out: Outcome) -> None:
        """A `values-refused` decision for each change a readOnly path refused."""
        for refusal in merged.refusals if merged is not None else []:
            because = ValuesRefused(
                cluster=cluster, path=refusal.path, current=refusal.current, wanted=refusal.wanted, layer=refusal.layer
            )
            self.decide(record, DecisionAction.VALUES_REFUSED, because, out, cluster=cluster)

    def prune_revisions(self, record: ModuleRecord) -> None:
        keep = {record.target, record.stable}
        for generation in [g for g, r in record.revisions.items() if r.assigned <= 0 and g not in keep]:
            del record.revisions[generation]

    def decide(
        self,
        record: ModuleRecord,
        action: DecisionAction,
        because: DecisionReason,
        out: Outcome,
        *,
        cluster: str | None = None,
        generation: int | None = None,
        revision: str | None = None,
        stage: str | None = None,
        stage_seconds: float | None = None,
    ) -> None:
        """Record a decision about `record`'s module (at the engine's time), `because` (a
        reason model: rollout/wire/decision_reasons.py); its sentence, rendered from it, is
        the decision's `reason` and the module's `last_reason`. Every field but the action
        and the reason is a keyword: a decision's structured fields grow here, a reason's
        facts in its model."""
        reason = render(because)
        out.decisions.append(
            decision(  # not validated again: the engine's own typed values (outcome.py)
                module=record.name,
                action=action,
                reason=reason,
                because=because,
                cluster=cluster,
                generation=generation,
                revision=revision,
                at=self.tables.now,
                stage=stage,
                stage_seconds=stage_seconds,
            )
        )
        record.last_reason = reason

    # -- module records and their status documents -----------------------------------------

    def save_module(self, record: ModuleRecord, out: Outcome) -> None:
        self.tables.modules[record.name] = record
        self.show_status(record.name, out)

    def show_status(self, name: str, out: Outcome) -> None:
        """The module's status document is part of `out` (deferred: see `defer_views`)."""
        out.module_status[name] = DEFERRED if self.defer_views else self.status_of(name)

    def status_of(self, name: str) -> dict[str, Any] | None:
        """The module-status document of `name` now, with what it holds (None: no such module)."""
        tables = self.tables
        record = tables.modules.get(name)
        tombstone = tables.deleted_modules.get(name) if record is None else None
        if tombstone is not None and tombstone.unassigning is None:
            tombstone = None  # deleted to the end
        view: dict[str, Any] | None = None
        if record is not None:
            glass = calendar_break_glass(tables.freezes, record.namespace, tables.now)
            view = module_view(record, tables.now, tables.runs.get(name), glass)
        elif tombstone is not None:  # its members' syncs still being removed (deletions.py)
            view = deleting_view(tombstone, tables.now)
        queue = tables.held_queues.get(name)
        if queue is None:
            return view
        why = None
        if tombstone is not None:
            why = f"waiting for the module's deletion to finish ({tombstone.members_left} members' syncs left)"
        return held_view(name, view, len(queue.ids), self.waiting_for(queue), tables.now, why)

    def waiting_for(self, queue: HeldQueue) -> dict[int, int]:
        """The fleet positions the first held intent of `queue` waits for."""
        head = self.tables.held_intents.get(held_key(queue.module, queue.first))
        return dict(head.fleet) if head is not None else {}
