"""Which clusters a module covers: cluster events and the Targets they add, move or drop.

    ClusterObserved / ClusterRemoved -> ClusterFacts (or a RemovedCluster tombstone)
    (and leases.py: a lease expired or renewed, a leave or join)
                                     -> `cluster_changed`: every module concerned
                                     -> `refresh_membership`: Targets joined, restaged,
                                        marked (not) ready, dropped; then `advance`

A cluster is a member of a module when the module's selector picks its labels (and its
namespace's ModuleRestriction allows it: rollout/api/restrictions.py); its stage
is the first whose selector matches (none: unstaged). A cluster joining a stage the
rollout has not reached is given the stable generation at once (`join_at_stage_revision`);
changed labels or namespace re-send its assigned sync (bindings are expanded per cluster;
a Helm release's values depend on the cluster's stage too: a relabel into a stage with other
`stageValues` re-sends it, bindings or not).
Observations are remembered by id on the ClusterFacts, so a redelivered one changes nothing.

Joins per event. A module applied for the first time would take the whole fleet in at once:
at 100,000 clusters that is 100,000 Targets, `joined` decisions and status documents in one
event, and 20 modules applied from one file were one batch of 500,000 of them per journal
partition — the worker's memory peak (`benchmarks/fleet_memory.py`). So a new module is
`joining` (ModuleRecord): `join_next` takes in the next clusters by name, each one of the
event's moves (stages.py, "Moves per event"), from an ordered index of the fleet's names
(TargetBook `fleet_after`: O(log fleet) a slice, not a scan), and the module continues
itself until every cluster was considered; StageMachine.advance starts no stage before
(docs/rollout-semantics.md, "How a rollout moves", rule 7). Cluster events meanwhile are
handled as for any module: a new cluster joins at once (the slice that reaches its name
finds it a member), a removed one is gone from the index.

Re-sorts per event. A module applied again with a new spec or revision, promoted, rolled
back, under a changed ModuleRestriction or answered by a dependency used to re-sort every
member in that one event — `refresh_membership` over the whole fleet, then every Target
stored again (`recategorize_all`): at 100,000 clusters, 100,000 target documents and their
decisions in one batch and one transaction. Now such an event starts a re-sort
(`TargetBook.resort`: `ModuleRecord.resorting`, a cursor like `joining`) and `resort_next`
re-sorts the next clusters of the fleet in name order, one move of the event's each, the
module continuing itself until every cluster was re-sorted; StageMachine.advance moves
nothing to the target before (docs/rollout-semantics.md, "How a rollout moves", rule 8).
In a rollback every member's category changes with the mode, and the re-sort moves each
one back to stable as it reaches it (stages.py `roll_back_member`), so the fleet is
protected from the first slice on and back in as many events as its moves alone take.
Anything that starts a re-sort during one starts it again from the first cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rollout.api.restrictions import admits
from rollout.api.selectors import selects
from rollout.engine.outcome import Assignment, DecisionAction, Outcome, verdict
from rollout.engine.runs import DepartureReason, hold_reason
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    OBSERVATION_IDS_KEPT,
    ClusterFacts,
    Lease,
    ModuleRecord,
    RemovedCluster,
    Target,
    remember,
    target_key,
)
from rollout.engine.strategy import moving_key, stage_for, stages_of
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.assemblages import ASSEMBLAGE_FOR
from rollout.wire.decision_reasons import (
    ClusterJoined,
    ClusterNotAllowed,
    ClusterUnselected,
    ClusterWasRemoved,
    ReadinessChanged,
    StableUntilStage,
)
from rollout.wire.events import ClusterObserved, ClusterRemoved

_DROPPED: dict[DepartureReason, type[ClusterWasRemoved | ClusterUnselected | ClusterNotAllowed]] = {
    "removed": ClusterWasRemoved,
    "unselected": ClusterUnselected,
    "not-allowed": ClusterNotAllowed,
}
"""How a member left (runs.py `Departure.reason`) → the reason of its unassignment."""

Change = tuple[str, ClusterFacts | None, ClusterFacts | None]
"""A cluster whose facts changed: (name, its facts before, its facts now — None: removed)."""


class Membership:
    """Folds cluster observations; keeps each module's Targets matching the fleet."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages
        # the lease of a cluster observed anew (first, or again after its removal): that of
        # the holders claiming it (core.py sets it to Leases.lease_of_new_cluster)
        self.new_lease: Callable[[str], Lease | None] = lambda cluster: None
        # a cluster removed: the modules still being deleted remove their sync there now
        # (core.py sets it to Deletions.cluster_removed)
        self.removed_from_deletions: Callable[[str, str, Outcome], None] = lambda cluster, namespace, out: None

    def reaches(self, record: ModuleRecord, facts: ClusterFacts) -> bool:
        """Whether the cluster is a member: the module's selector picks it and its
        namespace's ModuleRestriction (if any) allows it (`allowedClusters`), so a cluster
        relabelled out of the allowed set leaves like one the selector no longer picks."""
        if not selects(record.spec.selector, facts.labels):
            return False
        restriction = self.tables.restrictions.get(record.namespace)
        return admits(restriction.restriction if restriction is not None else None, facts.labels)

    def on_cluster_observed(self, event: ClusterObserved, out: Outcome) -> None:
        tables = self.tables
        manifest = event.cluster
        name = manifest.metadata.name
        previous = tables.clusters.get(name)
        known: ClusterFacts | RemovedCluster | None = previous or tables.removed_clusters.get(name)
        if known is not None and event.id in known.observation_ids:
            return  # redelivered — perhaps after the cluster was removed: it stays removed
        facts = ClusterFacts(
            name=name,
            namespace=manifest.metadata.namespace,
            labels=dict(manifest.metadata.labels),
            annotations=dict(manifest.metadata.annotations),
            observed_ready=manifest.status.ready,
            lease=previous.lease if previous else self.new_lease(name),  # leases.py: heartbeats, claims
            left=previous.left if previous else False,
            observation_ids=remember(known.observation_ids if known else [], event.id, OBSERVATION_IDS_KEPT),
            report_ids=list(known.report_ids) if known else [],
            command_ids=list(known.command_ids) if known else [],
            heartbeat_ids=list(known.heartbeat_ids) if known else [],
        )
        facts.ready = facts.readiness()
        if previous is None:
            tables.removed_clusters.pop(name, None)
            self.book.cluster_added(name)
        tables.clusters[name] = facts
        if previous is not None and previous.same_facts(facts):
            return  # nothing new but the id (a heartbeat-only observation)
        self.cluster_changed(name, previous, facts, out)

    def on_cluster_removed(self, event: ClusterRemoved, out: Outcome) -> None:
        tables = self.tables
        previous = tables.clusters.get(event.name)
        known: ClusterFacts | RemovedCluster | None = previous or tables.removed_clusters.get(event.name)
        if known is not None and event.id in known.observation_ids:
            return  # redelivered
        # every journal partition sees a removal (broadcast); partition 0 answers `reply`
        answer = event.reply and tables.partition == 0
        rejections, decisions = len(out.rejections), len(out.decisions)
        tables.removed_clusters[event.name] = RemovedCluster(
            name=event.name,
            observation_ids=remember(known.observation_ids if known else [], event.id, OBSERVATION_IDS_KEPT),
            report_ids=list(known.report_ids) if known else [],
            command_ids=list(known.command_ids) if known else [],
            heartbeat_ids=list(known.heartbeat_ids) if known else [],
        )
        if previous is None:  # not a member of the fleet: only its id is remembered
            if answer:
                out.rejections.append(f"cluster {event.name!r} not found")
        else:
            del tables.clusters[event.name]
            self.book.cluster_dropped(event.name)
            self.cluster_changed(event.name, previous, None, out)
            self.removed_from_deletions(event.name, previous.namespace, out)
        if answer:
            done = f"cluster {event.name} removed"
            out.verdicts.append(verdict(event.id, "", out, rejections=rejections, decisions=decisions, quiet=done))

    def cluster_changed(
        self, cluster: str, previous: ClusterFacts | None, facts: ClusterFacts | None, out: Outcome
    ) -> None:
        """A cluster's facts changed (None: it was removed): every module of the partition
        that covers it, covered it or now covers it refreshes its Target there and moves."""
        self.clusters_changed([(cluster, previous, facts)], out)

    def clusters_changed(self, changes: list[Change], out: Outcome) -> None:
        """Several clusters' facts changed at once (leases expiring on one tick: leases.py):
        every module concerned refreshes all of their Targets, then moves once — so no
        cluster among them is moved on the strength of facts it no longer has. It is also
        one advance per module instead of one per cluster: a tick expiring 1,000 leases of
        a 5,001-member module, 4.6 s → 90 ms (in-memory engine, loaded 2-core machine)."""
        tables = self.tables
        for name in sorted(tables.modules.keys()):
            stored = tables.modules[name]
            if stored.partition != tables.partition:
                continue
            concerned = [
                change
                for change in changes
                if (change[2] is not None and self.reaches(stored, change[2]))
                or target_key(name, change[0]) in tables.targets
            ]
            if not concerned:
                continue  # a member of none of them, before or now: nothing changes for this module
            record = stored.working_copy()
            self.refresh_membership(record, {change[0] for change in concerned}, out)
            for cluster, previous, facts in concerned:
                self._resend_if_changed(record, cluster, previous, facts, out)
            self.stages.advance(record, out)
            if record != stored:
                self.book.save_module(record, out)

    def _resend_if_changed(
        self,
        record: ModuleRecord,
        cluster: str,
        previous: ClusterFacts | None,
        facts: ClusterFacts | None,
        out: Outcome,
    ) -> None:
        """Re-send the cluster's assigned sync when what it is expanded from changed."""
        book, name = self.book, record.name
        moved_namespace = previous is not None and facts is not None and previous.namespace != facts.namespace
        bindings_changed = (
            previous is not None
            and facts is not None
            and (previous.labels != facts.labels or previous.annotations != facts.annotations)
        )
        target = self.tables.targets.get(target_key(name, cluster))
        assigned = target.assigned if target is not None else None
        resend = moved_namespace or (bindings_changed and bool(record.spec.bindings))
        if not resend and bindings_changed and assigned is not None and assigned in record.revisions:
            resend = self._release_moved(record, assigned, previous, facts)
        if resend and target is not None and target.assigned is not None:
            # the cluster's labels feed its bindings, its stage's Helm values, its
            # namespace CLUSTER_NAMESPACE and its assemblage's place: re-send its sync
            out.assignments.append(
                Assignment(
                    cluster=cluster,
                    cluster_namespace=facts.namespace,  # type: ignore[union-attr]
                    module=name,
                    assemblage=ASSEMBLAGE_FOR[record.kind],
                    sync=book.resent_sync(record, target, facts, out),
                    reason="cluster namespace changed: sync re-sent"
                    if moved_namespace
                    else "cluster labels changed: bindings re-expanded, values merged again"
                    if record.spec.sync.package.helm is not None
                    else "cluster labels changed: bindings re-expanded",
                )
            )

    def _release_moved(
        self, record: ModuleRecord, generation: int, previous: ClusterFacts | None, facts: ClusterFacts | None
    ) -> bool:
        """Do new labels change a Helm release's values (another stage's `stageValues`)?"""
        if record.spec.sync.package.helm is None:
            return False
        release_for = self.book.release_for
        return release_for(record, generation, previous)[0] != release_for(record, generation, facts)[0]

    def join_next(self, record: ModuleRecord, out: Outcome) -> None:
        """A module joining the fleet (`record.joining`) takes in the next clusters, in name
        order, one move of this event's each (stages.py `may_move`): at the limit it asks to
        be continued and `joining` keeps the last one considered; None once none is left."""
        assert record.joining is not None
        clusters, more = self._next_slice(record, record.joining, out)
        if clusters:
            self.refresh_membership(record, clusters, out)
        if not more:
            record.joining = None  # every cluster after the last considered was taken
        elif clusters:
            record.joining = clusters[-1]

    def resort_next(self, record: ModuleRecord, out: Outcome) -> None:
        """A module re-sorting its members (`record.resorting`) re-sorts the next clusters of
        the fleet, in name order, one move of this event's each: `refresh_membership` takes
        each one's stage, moving order, readiness and category anew (joins a cluster it now
        covers, drops one it no longer covers) — and in a rollback, moves it back to the
        stable generation at once if it is not on it (stages.py `roll_back_member`), so a
        rollback protects the fleet from its first slice on. At the limit it asks to be
        continued and `resorting` keeps the last one re-sorted; None once none is left."""
        assert record.resorting is not None
        rollback = record.mode == "rollback"
        clusters, more = self._next_slice(record, record.resorting, out)
        for cluster in clusters:  # one by one: the decisions are those of one unbounded fold
            self.refresh_membership(record, (cluster,), out)
            if rollback:
                self.stages.roll_back_member(record, cluster, out)
        if not more:
            record.resorting = None  # every cluster after the last re-sorted was taken
        elif clusters:
            record.resorting = clusters[-1]

    def _next_slice(self, record: ModuleRecord, after: str, out: Outcome) -> tuple[list[str], bool]:
        """The fleet's next clusters after `after` ("": from the first), in name order, as
        many as this event's moves allow (each one a move: stages.py `may_move`, which asks
        for a continuation at the limit); and whether clusters are left after them."""
        clusters: list[str] = []
        for name in self.book.fleet_after(after, self.stages.moves_left + 1):
            if not self.stages.may_move(record, out):
                return clusters, True
            clusters.append(name)
        return clusters, False

    def refresh_membership(self, record: ModuleRecord, clusters: Iterable[str], out: Outcome) -> None:
        """Add, move or drop the Targets of `clusters` to match selector, stages, readiness."""
        tables, book = self.tables, self.book
        book.index(record.name)
        sorting = record.spec.rollout.sorting_label_key if record.spec.rollout else None
        for cluster in sorted(clusters):
            facts = tables.clusters.get(cluster)
            key = target_key(record.name, cluster)
            old = tables.targets.get(key)
            if facts is None or not self.reaches(record, facts):
                if old is not None:
                    how = self._departure(record, facts)
                    if old.assigned is not None:
                        book.assign(record, old, None, _DROPPED[how](cluster=cluster), out)
                    if old.late is None:  # a late joiner kept out of the run never was in it
                        self.stages.runs.departed(record, old, how)
                    book.store_target(record, old, None, out)
                continue
            stage_index, stage_name = stage_for(record, facts.labels)
            stage = stages_of(record)[stage_index] if stage_index is not None else None
            late = self.stages.runs.late(record, cluster) if old is None and stage_index is not None else None
            joined = old or Target(module=record.name, cluster=cluster, late=late)  # runs.py: lateJoiners
            new = joined.model_copy(
                update={
                    "stage": stage_name,
                    "stage_index": stage_index,
                    "sort_key": moving_key(record, stage, cluster, facts.labels, sorting),  # waves.py
                    "ready": facts.ready,
                    "pinned": cluster in record.pinned,
                    "hold": hold_reason(facts, tables.now),
                }
            )
            if old is None:
                run = self.stages.runs.current(record)
                if late is None:
                    self.stages.runs.joined(record, stage_name, cluster)
                because = ClusterJoined(cluster=cluster, stage=stage_name, ready=facts.ready)
                if late is not None and run is not None:
                    because = ClusterJoined(
                        cluster=cluster, stage=stage_name, ready=facts.ready, late=late, run=run.number
                    )
                book.decide(record, DecisionAction.JOINED, because, out, cluster=cluster)
            elif old.stage != new.stage and old.late is None:
                ran = old.category in ("succeeded", "failed", "awaiting_release")
                self.stages.runs.moved(record, old.stage, new.stage, ran=ran)
            if old is not None and old.ready != new.ready:
                book.decide(
                    record,
                    DecisionAction.READINESS,
                    ReadinessChanged(
                        cluster=cluster,
                        ready=facts.ready,
                        left=facts.left,
                        lease_seconds=facts.lease.seconds if facts.lease is not None and facts.lease.expired else None,
                    ),
                    out,
                    cluster=cluster,
                )
            if new.ready:
                new = self.stages.offline.clear(new)  # back: no wait, no failure by one (offline_waits.py)
            elif old is None or old.ready:
                new = self.stages.offline.begin(record, new, out)  # offline: its stage may wait for it
            new = self.join_at_stage_revision(record, new, out)
            book.store_target(record, old, new, out)

    @staticmethod
    def _departure(record: ModuleRecord, facts: ClusterFacts | None) -> DepartureReason:
        """Why a member the module no longer reaches leaves it (and loses its assignment)."""
        if facts is None:
            return "removed"
        if not selects(record.spec.selector, facts.labels):
            return "unselected"
        return "not-allowed"

    def join_at_stage_revision(self, record: ModuleRecord, target: Target, out: Outcome) -> Target:
        """A ready cluster with nothing assigned, in a stage the rollout has not reached,
        gets the stable revision at once: that is the revision its stage runs. So does a
        joiner deferred to the next run (`lateJoiners: NextRun`), in any stage: the fleet's
        stable revision now, the target with the next run; one the run excludes gets nothing."""
        if target.late == "excluded":
            return target
        if (
            target.assigned is None
            and target.ready
            and not target.pinned
            and target.hold is None
            and record.mode == "rollout"
            and record.stable is not None
            and record.stable != record.target
            and target.stage_index is not None
            and (target.late == "next-run" or not self.stages.stage_open(record, target.stage_index))
        ):
            stable = record.revisions[record.stable].revision
            because = StableUntilStage(
                cluster=target.cluster, revision=stable, stage=target.stage, deferred=target.late == "next-run"
            )
            return self.book.assign(record, target, record.stable, because, out)
        return target
