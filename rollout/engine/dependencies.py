"""Dependencies between modules: `dependsOn`, across journal partitions.

    B applied with dependsOn [A]  ──► DependentLinked(A, B)        ──► A's partition
    A's readiness on c changes    ──► DependencyReported(B, A, c)  ──► B's partition
    (dependency_links.py)             upstream[A/c] ──► B's Target on c blocked / pending

Modules live on different journal partitions (keyed by module), and each partition's
engine is a pure fold of its own journal. So what one module needs to know about another
travels as events: the deciding partition puts them in `Outcome.dependency_events`, the
decider publishes them on the `dependencies` input topic keyed by the *receiving* module,
and the router writes them into that module's journal partition like any other input.

The rules (docs/rollout-semantics.md, "Dependencies"):

* B's sync moves to its target on cluster c only once every module B depends on is on its
  target there and succeeded (`upstream[A/c].ready`). Until then B's Target on c is
  `blocked`: it counts like pending — its stage is not done — but is not moved.
  A dependency that does not select c (or does not exist) is never ready there.
* A module with linked dependents is deleted only after them (reverse dependency order):
  its ModuleDeleted is accepted and held (`ModuleRecord.deleting`, decision
  `delete-waits`) until the last dependent unlinks (a dependent is deleted, or drops A
  from `dependsOn`); applying it again cancels the deletion.
* A dependency learns of a new dependent (its first DependentLinked) and reports its
  readiness on every member to it — in slices (below); then each change as it happens. It
  keeps reporting to dependents that unlinked (they may link again; their partition keeps
  the upstream state current).
* Causal order across partitions: B applied together with A (one `rollout apply`) names
  A's intent in `ModuleApplied.after`. B then trusts none of A's readiness (its moves wait,
  `ModuleRecord.awaiting`) until A's partition has folded that intent and says so
  (DependentLinked.after → DependencyCurrent): the reports A sent before it reflect A's new
  target, whichever of the two applies, links and reports reached their journals first —
  never a move on a readiness A had before the apply.
* Cycles are refused when applied with the modules the CLI knows (dependency_graph.py):
  a partition only sees its own modules, so the engine cannot see a cycle across them.

First tells in slices (docs/rollout-semantics.md, "How a rollout moves", rule 10). A first
link told the new dependent the module's readiness on every member in that one event: at
100,000 members, 100,000 DependencyReported in one transaction. Now `tell_next` tells it
the fleet's clusters in name order within the event's moves (stages.py "Moves per event":
the budget a join, a re-sort and a deletion spend too) — a module with no more members than
the event has moves tells them all without walking the fleet — and the link keeps the last
cluster considered (`DependentLink.telling`); at the limit the module asks to be continued
(`may_move`), and its next `advance` (StageMachine.advance calls `tell_next` first) goes
on. A member not told yet is blocked for the dependent, as it was before the link arrived;
one whose readiness changes meanwhile is told at once (dependency_links.py), and again
when the slices reach it. The answer a dependent applied with the module awaits
(DependencyCurrent) goes with the last slice, after its reports: sent between two slices,
it would overtake those still to come. Cost: O(the event's moves) a slice, plus a look at
the module's dependents on each `advance` (a few links).

How it composes (core.py): an apply or a delete of a module goes through
`DependencyIntents.on_module_applied` / `on_module_deleted`, which call `ModuleIntents`
for the module itself and do the linking and holding around it; after every intent
applied, `answer_waiting_dependents` runs (an `after_intent` hook).
"""

from __future__ import annotations

from rollout.engine.dependency_links import DependencyLinks
from rollout.engine.intents import Intent, ModuleIntents, intent_module
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    INTENT_IDS_KEPT,
    DependentLink,
    Dependents,
    ModuleRecord,
    Upstream,
    awaited_dependencies,
    linked_modules,
    remember,
    target_key,
)
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import DeleteCancelled, DeleteWaitsForDependents
from rollout.wire.events import (
    DependencyCurrent,
    DependencyReported,
    DependentLinked,
    ModuleApplied,
    ModuleDeleted,
    ReleasePromoted,
)


class DependencyIntents:
    """Links modules to their dependencies; holds deletions back; folds upstream state."""

    def __init__(
        self,
        tables: StateTables,
        book: TargetBook,
        stages: StageMachine,
        intents: ModuleIntents,
        links: DependencyLinks,
    ) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages
        self.intents = intents
        self.links = links

    def on_module_applied(self, event: ModuleApplied, out: Outcome) -> None:
        """The module applied (intents.py), then: a waiting deletion cancelled, its
        dependencies told of a link made or dropped, and asked for the answer this apply
        awaits."""
        tables = self.tables
        name = event.module.metadata.name
        before = tables.modules.get(name)
        old = linked_modules(before.spec, name) if before is not None else {}
        self.intents.on_module_applied(event, out)
        after = tables.modules.get(name)
        if after is None:
            return
        if after.deleting is not None and after.kind == event.module.kind:
            record = after.working_copy()
            record.deleting = None
            self.book.decide(
                record, DecisionAction.DELETE_CANCELLED, DeleteCancelled(kind=record.kind, module=name), out
            )
            self.book.save_module(record, out)
        linked = linked_modules(after.spec, name)
        self._link(name, old, linked, out)
        for dependency, intent in sorted(after.awaiting.items()):
            if event.after.get(dependency) == intent:  # this apply awaits it: ask for the answer
                peer = linked.get(dependency, False)
                self.links.send(
                    DependentLinked, out, module=dependency, dependent=name, linked=True, after=intent, peer=peer
                )

    def on_module_deleted(self, event: ModuleDeleted, out: Outcome) -> None:
        """Deleted now (intents.py) — or, while modules depend on it, held until they are gone."""
        record = self.tables.modules.get(event.name)
        if record is None or record.kind != event.kind:
            self.intents.on_module_deleted(event, out)  # refused there
            return
        links = self.tables.dependents.get(event.name)
        waiting = links.holding() if links is not None else []  # Release peers do not hold it
        if waiting:
            held = record.working_copy()
            held.handled_intents = remember(held.handled_intents, event.id, INTENT_IDS_KEPT)
            held.deleting = event.id
            self.book.decide(
                held,
                DecisionAction.DELETE_WAITS,
                DeleteWaitsForDependents(kind=held.kind, module=held.name, dependents=list(waiting)),
                out,
            )
            self.book.save_module(held, out)
            return
        self._delete_now(record, event, out)

    def _delete_now(self, record: ModuleRecord, event: ModuleDeleted, out: Outcome) -> None:
        self.intents.on_module_deleted(event, out)
        self._link(record.name, linked_modules(record.spec, record.name), {}, out)

    def answer_waiting_dependents(self, event: Intent, out: Outcome) -> None:
        """After-intent hook: a dependent applied with this intent (`after`) waits to hear
        it was folded — it is told now."""
        self._answer_waiting(intent_module(event), event.id, out)

    def _answer_waiting(self, name: str, event_id: str, out: Outcome) -> None:
        links = self.tables.dependents.get(name)
        for dependent, link in sorted(links.links.items()) if links is not None else []:
            if link.after == event_id and link.telling is None:  # waits for it (a first tell: at its end)
                self._answer(name, dependent, event_id, out)

    def on_release_promoted(self, event: ReleasePromoted, out: Outcome) -> None:
        """A release member told its version of the release's new combination by the leader
        (promotions.py): as a member of a release apply, it awaits its peers' part of the same
        promotion (`after`) before their state counts again, and takes its version; then its
        peers waiting to hear it folded this are told."""
        tables, book = self.tables, self.book
        name = event.module
        stored = tables.modules.get(name)
        if stored is None or stored.partition != tables.partition:
            if stored is None:  # deleted: its tombstone remembers it, and the peers hear it folded
                self.intents.remember_intent(name, event.id)
                self._answer_waiting(name, event.id, out)
            return
        if event.id in stored.handled_intents:
            return  # redelivered
        record = stored.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        release = record.spec.release
        if release is None or release.name != event.release:
            tables.modules[name] = record  # left the release since: remembers the id, nothing else
        else:
            linked = linked_modules(record.spec, name)
            record.awaiting = awaited_dependencies(record.awaiting, list(linked), event.after)
            for peer, intent in sorted(record.awaiting.items()):
                if event.after.get(peer) == intent:  # ask each peer to say when it folded its part
                    self.links.send(
                        DependentLinked, out, module=peer, dependent=name, linked=True, after=intent, peer=linked[peer]
                    )
            if not self.intents.promotions.promote_member(record, event, out):
                book.resort(record)  # its peers' state does not count until they answer: in slices
            self.stages.advance(record, out)
            book.save_module(record, out)
        self._answer_waiting(name, event.id, out)

    def _answer(self, module: str, dependent: str, intent: str, out: Outcome) -> None:
        """Tell `dependent` that `module`'s intent is folded: the reports before count."""
        dependents = self.tables.dependents
        links = dependents[module]
        link = links.links[dependent].model_copy(update={"after": None})
        dependents[module] = links.model_copy(update={"links": {**links.links, dependent: link}})
        self.links.send(DependencyCurrent, out, dependent=dependent, module=module, after=intent)

    def _intent_folded(self, module: str, intent: str) -> bool:
        """Whether `module`'s intent `intent` was handled here (within the intent window)."""
        record = self.tables.modules.get(module)
        if record is not None and intent in record.handled_intents:
            return True
        tombstone = self.tables.deleted_modules.get(module)
        return tombstone is not None and intent in tombstone.handled_intents

    def _link(self, name: str, old: dict[str, bool], new: dict[str, bool], out: Outcome) -> None:
        """Tell each dependency (and Release peer) `name` starts or stops hearing from it —
        or now hears from it as a peer only, or as a dependency (`linked_modules`)."""
        for dependency, peer in sorted(new.items()):
            if old.get(dependency) != peer:
                self.links.send(DependentLinked, out, module=dependency, dependent=name, linked=True, peer=peer)
        for dependency in sorted(set(old) - set(new)):
            self.links.send(DependentLinked, out, module=dependency, dependent=name, linked=False)

    def on_dependent_linked(self, event: DependentLinked, out: Outcome) -> None:
        tables = self.tables
        links = tables.dependents.get(event.module) or Dependents(module=event.module)
        known = links.links.get(event.dependent)
        if known is not None and event.seq <= known.seq:
            return  # stale, or redelivered
        stored = tables.modules.get(event.module)
        here = stored is not None and stored.partition == tables.partition
        first = stored is not None and here and known is None  # a new dependent learns where it is ready now
        telling = "" if first else known.telling if known is not None else None  # a first tell goes on
        link = DependentLink(linked=event.linked, seq=event.seq, after=event.after, peer=event.peer, telling=telling)
        links = links.model_copy(update={"links": {**links.links, event.dependent: link}})
        tables.dependents[event.module] = links
        if first and stored is not None:
            record = stored.working_copy()
            self.tell_next(record, out)  # in slices: the module continues itself at the limit
            if record.continuations != stored.continuations:
                self.book.save_module(record, out)
        link = tables.dependents[event.module].links[event.dependent]
        if link.telling is None and link.after is not None and self._intent_folded(event.module, link.after):
            self._answer(event.module, event.dependent, link.after, out)  # after the reports above
        current = tables.modules.get(event.module)
        if current is None or not here:
            return  # not (yet) here: it reports as its clusters become ready
        links = tables.dependents[event.module]
        if current.deleting is not None and not links.holding():
            deletion = ModuleDeleted(id=current.deleting, at=event.at, kind=current.kind, name=current.name)
            self._delete_now(current, deletion, out)

    def tell_next(self, record: ModuleRecord, out: Outcome) -> None:
        """First tells in slices (StageMachine.advance calls it first): each dependent linked
        anew (`DependentLink.telling` set) is told `record`'s readiness on its next members,
        in name order, one move of this event's each; at the limit the module asks to be
        continued (stages.py `may_move`) and the link keeps the last cluster considered.
        Once every member was told, the answer the dependent waits for, if its intent was
        folded here, goes after the reports (DependencyCurrent)."""
        tables = self.tables
        links = tables.dependents.get(record.name)
        if links is None or all(link.telling is None for link in links.links.values()):
            return
        if record.partition != tables.partition:
            return
        for dependent in sorted(links.links):
            link = tables.dependents[record.name].links[dependent]
            if link.telling is None:
                continue
            cursor = self._tell_slice(record, dependent, link.telling, out)
            links = tables.dependents[record.name]
            link = links.links[dependent].model_copy(update={"telling": cursor})
            tables.dependents[record.name] = links.model_copy(update={"links": {**links.links, dependent: link}})
            if cursor is not None:
                return  # this event's moves are spent: the rest in the module's continuation
            if link.after is not None and self._intent_folded(record.name, link.after):
                self._answer(record.name, dependent, link.after, out)

    def _tell_slice(self, record: ModuleRecord, dependent: str, cursor: str, out: Outcome) -> str | None:
        """Tell `dependent` where `record`'s module is ready (or, a Release member, failed or
        skipped) on its members after `cursor`, as many clusters of the fleet as this
        event's moves allow; the last cluster considered, or None once none is left. A
        module with no more members than the event has moves tells them all without
        walking the fleet (as a deletion does: deletions.py)."""
        stages, book = self.stages, self.book
        members = book.index(record.name)
        if len(members) <= stages.moves_left:
            clusters = sorted(cluster for cluster in members if cluster > cursor)
            stages.moves_left -= len(clusters)
            for cluster in clusters:
                self._tell(record.name, cluster, dependent, out)
            return None
        last, more = cursor, False
        for cluster in book.fleet_after(cursor, stages.moves_left + 1):
            if not stages.may_move(record, out):  # after the reports so far: they come first
                more = True
                break
            self._tell(record.name, cluster, dependent, out)
            last = cluster
        return last if more else None

    def _tell(self, module: str, cluster: str, dependent: str, out: Outcome) -> None:
        """Tell `dependent` where `module` is on `cluster`, if it is ready (or, a Release
        member, failed or skipped) there: else it is what the dependent assumes."""
        target = self.tables.targets.get(target_key(module, cluster))
        if target is None:
            return  # a cluster of the fleet the module does not cover
        state = (target.dependents_ready, target.release_failed, target.release_skipped)
        if any(state):
            self.links.tell_dependents(module, cluster, *state, out, only=dependent)

    def on_dependency_current(self, event: DependencyCurrent, out: Outcome) -> None:
        """`event.module` folded the intent the dependent awaits: its readiness counts again."""
        stored = self.tables.modules.get(event.dependent)
        if stored is None or stored.awaiting.get(event.module) != event.after:
            return  # answered already (redelivered), or the dependent awaits another intent now
        record = stored.working_copy()
        del record.awaiting[event.module]
        self.book.resort(record)  # blocked members pending again: in slices (membership.py)
        self.stages.advance(record, out)
        self.book.save_module(record, out)

    def on_dependency_reported(self, event: DependencyReported, out: Outcome) -> None:
        tables, book = self.tables, self.book
        key = target_key(event.module, event.cluster)
        known = tables.upstream.get(key)
        if known is not None and event.seq <= known.seq:
            return  # stale, or redelivered
        tables.upstream[key] = Upstream(
            module=event.module,
            cluster=event.cluster,
            ready=event.ready,
            seq=event.seq,
            failed=event.failed,
            skipped=event.skipped,
        )
        was = (known.ready, known.failed, known.skipped) if known is not None else (False, False, False)
        if was == (event.ready, event.failed, event.skipped):
            return
        for name in sorted(tables.modules.keys()):
            stored = tables.modules[name]
            if stored.partition != tables.partition or event.module not in linked_modules(stored.spec, name):
                continue
            target = tables.targets.get(target_key(name, event.cluster))
            if target is None:
                continue
            record = stored.working_copy()
            book.index(name)
            book.store_target(record, target, target.model_copy(), out)
            self.stages.advance(record, out)
            if record != stored:
                book.save_module(record, out)
