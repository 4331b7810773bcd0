"""A module's deletion: its members' syncs removed, in slices.

    ModuleDeleted (accepted: intents.py) -> the module is gone: its record deleted, a
                                            DeletedModule tombstone written with
                                            `unassigning` = "" (its members left)
                                         -> `unassign_next`: the fleet's clusters in name
                                            order, each one of the event's moves; a member's
                                            sync removed (`unassign`), its Target dropped
    RolloutContinued (its tombstone's)   -> `unassign_next` again, from where it stopped
    the last member's sync removed       -> the `deleted` decision; `unassigning` None; the
                                            module's status document deleted; its intents
                                            held meanwhile released (causal.py)

Deletes per event. A module's deletion unassigned every member in the event that deleted
it: at 100,000 clusters one batch of 101,004 changelog records (+1.1 GiB in the worker:
`benchmarks/stage_slices.py --event delete`, README "Fleet scale"). Now it takes the
fleet's clusters in name order within the event's moves (stages.py "Moves per event": the
budget a join and a re-sort spend too) — a module with no more members left than the event
has moves takes them all, in name order, without walking the fleet — and continues itself
with a `RolloutContinued` numbered on its tombstone until none is left
(docs/rollout-semantics.md, "How a rollout moves", rule 9).

The module is deleted from the first slice on: no handler finds its record, so nothing
moves, joins, re-sorts or halts it; a command or a second delete is refused as for any
module that does not exist; a report about a member still assigned is refused too (it only
notes its id). Only its Targets are left, each dropped as the slices reach it — or at once
when its cluster is removed meanwhile (`cluster_removed`: the fleet's index no longer
names it). An apply of the module meanwhile is held, with every intent behind it, until
the last member's sync is removed (causal.py `held_for_deletion`), and then creates the
module again as after any deletion: never a Target of the old module mistaken for one of
the new. Where nothing else happens in between, the decisions are those of one unbounded
fold — the members' `unassign` decisions in name order, then `deleted`.

What users see: the module-status document says phase `Deleting` and how many members'
syncs are left, up to which cluster (views.py `deleting_status`), until it is deleted.

Cost: O(the event's moves) a slice, plus, for a cluster removed, a look at the tombstones
of the modules still being deleted (those of the partition's modules deleted within the
tombstone horizon: tombstones.py).
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.windows import iso
from rollout.engine.outcome import Assignment, Decision, DecisionAction, Outcome
from rollout.engine.stages import StageMachine
from rollout.engine.state import DeletedModule, ModuleRecord, Target, target_key
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.assemblages import ASSEMBLAGE_FOR
from rollout.wire.decision_reasons import DecisionReason, ModuleWasDeleted, render
from rollout.wire.events import RolloutContinued


def being_deleted(tables: StateTables, name: str) -> DeletedModule | None:
    """The tombstone of module `name` if its members' syncs are still being removed."""
    tombstone = tables.deleted_modules.get(name)
    return tombstone if tombstone is not None and tombstone.unassigning is not None else None


class Deletions:
    """Removes a deleted module's syncs from its members, a slice an event."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages
        # releases the module's intents held while it was being deleted (core.py sets it to
        # CausalOrder.release)
        self.release_held: Callable[[str, Outcome], None] = lambda name, out: None

    def start(self, record: ModuleRecord, tombstone: DeletedModule, out: Outcome) -> None:
        """`record`'s module is deleted (its record gone, `tombstone` its tombstone): its
        members' syncs are removed from now on, as many as this event's moves allow."""
        members = len(self.book.index(record.name))
        tombstone = tombstone.model_copy(
            update={
                "unassigning": "",
                "members_left": members,
                "namespace": record.namespace,
                # numbered after the module's own: a late one of either changes nothing
                "continuations": record.continuations,
                "continued": record.continuations,
            }
        )
        self.unassign_next(tombstone, out)

    def on_continued(self, event: RolloutContinued, out: Outcome) -> None:
        """The deletion's latest request to be continued: the next slice."""
        tombstone = being_deleted(self.tables, event.module)
        if tombstone is None:
            return  # deleted to the end since, or not a deletion's
        if event.slice != tombstone.continuations or tombstone.continued >= event.slice:
            return  # superseded, or redelivered: changes nothing
        self.unassign_next(tombstone.model_copy(update={"continued": event.slice}), out)

    def unassign_next(self, tombstone: DeletedModule, out: Outcome) -> None:
        """Remove the syncs of the next members, in name order, one move of this event's
        each; at the limit, ask to be continued; once none is left, the module is gone."""
        assert tombstone.unassigning is not None
        name, stages = tombstone.name, self.stages
        members = self.book.index(name)
        if len(members) <= stages.moves_left:  # every member left fits: no walk of the fleet
            clusters, more = sorted(members), False
            stages.moves_left -= len(clusters)
        else:
            clusters = self.book.fleet_after(tombstone.unassigning, stages.moves_left + 1)
            more = len(clusters) > stages.moves_left
            clusters = clusters[: stages.moves_left]
            stages.moves_left -= len(clusters)
        for cluster in clusters:
            target = self.tables.targets.get(target_key(name, cluster))
            if target is not None:
                self.unassign(tombstone, target, out)
        left = len(members)
        if more and clusters:
            tombstone = tombstone.model_copy(update={"unassigning": clusters[-1], "members_left": left})
        else:
            tombstone = tombstone.model_copy(update={"members_left": left})
        if not more:
            self._finish(tombstone, out)
            return
        if tombstone.continued == tombstone.continuations:
            tombstone = tombstone.model_copy(update={"continuations": tombstone.continuations + 1})
            out.dependency_events.append(
                RolloutContinued(
                    id=f"delete-{name}-{tombstone.generation}-{tombstone.continuations}",
                    at=iso(self.tables.now) or "",
                    module=name,
                    slice=tombstone.continuations,
                )
            )
        self.tables.deleted_modules[name] = tombstone
        self.book.show_status(name, out)

    def _finish(self, tombstone: DeletedModule, out: Outcome) -> None:
        """The last member's sync is removed: the module is deleted; intents held behind
        its deletion go on."""
        name = tombstone.name
        kind = tombstone.kind or "Module"
        self._decide(name, DecisionAction.DELETED, ModuleWasDeleted(kind=kind, module=name), out)
        self.tables.deleted_modules[name] = tombstone.model_copy(
            update={"unassigning": None, "members_left": 0, "namespace": "", "continuations": 0, "continued": 0}
        )
        self.book.forget_module_indexes(name)
        out.module_status[name] = None
        self.release_held(name, out)
        if name in self.tables.held_queues:
            self.book.show_status(name, out)

    def cluster_removed(self, cluster: str, namespace: str, out: Outcome) -> None:
        """`cluster` left the fleet: every module still being deleted that it is a member
        of removes its sync there now (the slices walk the fleet, which no longer has it)."""
        deleted = self.tables.deleted_modules
        for name in sorted(deleted.keys()):
            tombstone = deleted[name]
            if tombstone.unassigning is None:
                continue
            target = self.tables.targets.get(target_key(name, cluster))
            if target is None:
                continue
            self.unassign(tombstone, target, out, namespace=namespace)
            deleted[name] = tombstone.model_copy(update={"members_left": len(self.book.index(name))})
            self.book.show_status(name, out)

    def unassign(self, tombstone: DeletedModule, target: Target, out: Outcome, *, namespace: str = "") -> None:
        """The deleted module's sync leaves `target`'s cluster, and the Target is dropped —
        what TargetBook.assign(None) and store_target(None) do for a module that exists."""
        name, cluster = tombstone.name, target.cluster
        kind = tombstone.kind or "Module"
        because = ModuleWasDeleted(kind=kind, module=name)
        if target.assigned is not None:
            facts = self.tables.clusters.get(cluster)
            out.assignments.append(
                Assignment(
                    cluster_namespace=facts.namespace if facts else namespace or tombstone.namespace,
                    cluster=cluster,
                    module=name,
                    assemblage=ASSEMBLAGE_FOR[kind],
                    sync=None,
                    reason=render(because),
                )
            )
            self._decide(name, DecisionAction.UNASSIGN, because, out, cluster=cluster)
        self.book.drop_target(name, target, out)

    def _decide(
        self, name: str, action: DecisionAction, because: DecisionReason, out: Outcome, *, cluster: str | None = None
    ) -> None:
        out.decisions.append(
            Decision(
                module=name, action=action, reason=render(because), because=because, cluster=cluster, at=self.tables.now
            )
        )
