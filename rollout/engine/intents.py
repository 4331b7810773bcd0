"""Module intents: what ModuleApplied, ModuleDeleted and RolloutCommanded do.

    ModuleApplied    -> refused when it breaks its namespace's ModuleRestriction (naming the
                        rule: restriction_rules.py); else a new ModuleRecord, or a new spec; a
                        new sync (or new bindings) is a new generation, the target, rolled out
                        again from the first stage — once every member was re-sorted, in
                        slices (membership.py "Re-sorts per event")
    ModuleDeleted    -> the record gone; a DeletedModule tombstone keeps the generation
                        counter and the ids of the intents handled; every assignment removed,
                        in slices (deletions.py "Deletes per event")
    RolloutCommanded -> pause, resume, abort, rollback, approve or reject (a stage: approvals.py),
                        pin/unpin (a cluster); approve with `release` at a Release's leader:
                        one decision, then the stage approved for every member
                        (ReleaseStageApproved, each counted by the member's own policy);
                        refused when it came through a namespaced door (`namespace`: a
                        RolloutCommand / RolloutApproval object's) and the module is of
                        another namespace — as if there were no such module (door_refusal)

Every intent is remembered by id on its module (or tombstone): a redelivered one changes
nothing. Every intent applied gets a `Verdict` (outcome.py): refused when it named a module,
stage or cluster the engine does not know (or could not apply), accepted otherwise.
A command's decisions carry who asked and through which door (`Decision.user`, `.via`),
and so does the reason of the decision it asked for (a `CommandReason`, whose sentence
says it: "aborted by alice@example.com via dashboard: ...").
Whether an intent applies now or waits for the fleet its publisher knew is decided before
it gets here (causal.py); what dependsOn adds around an apply or a delete is dependencies.py's,
which calls into `ModuleIntents` (core.py routes each intent: `RolloutEngine.apply_intent`).
"""

from __future__ import annotations

from rollout.api.manifests import Sync
from rollout.api.restrictions import RestrictionViolation
from rollout.api.windows import iso
from rollout.engine.applied_documents import spec_refusal
from rollout.engine.approvals import approve, reject, rejection_text
from rollout.engine.deletions import Deletions
from rollout.engine.freeze_gate import break_glass
from rollout.engine.membership import Membership
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.promotions import Promotions
from rollout.engine.restriction_rules import RestrictionRules
from rollout.engine.stage_graph import follow_strategy
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    INTENT_IDS_KEPT,
    DeletedModule,
    ModuleRecord,
    Revision,
    awaited_dependencies,
    linked_modules,
    remember,
    target_key,
)
from rollout.engine.strategy import bindings_digest, stages_of
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.engine.tombstones import first_generation
from rollout.wire.decision_reasons import (
    Aborted,
    Approved,
    Halted,
    ModuleCreated,
    NewRevision,
    Paused,
    Pinned,
    Rejected,
    ReleaseApproved,
    RestrictionMet,
    Resumed,
    RollbackRequested,
    Unpinned,
)
from rollout.wire.events import ModuleApplied, ModuleDeleted, ReleaseStageApproved, RolloutCommanded

Intent = ModuleApplied | ModuleDeleted | RolloutCommanded


def intent_module(event: Intent) -> str:
    """The module an intent is about (the intents topic's key)."""
    if isinstance(event, ModuleApplied):
        return event.module.metadata.name
    if isinstance(event, ModuleDeleted):
        return event.name
    return event.module


class ModuleIntents:
    """Applies module intents to the records and Targets."""

    def __init__(
        self,
        tables: StateTables,
        book: TargetBook,
        stages: StageMachine,
        membership: Membership,
        rules: RestrictionRules,
        deletions: Deletions,
    ) -> None:
        self.tables = tables
        self.deletions = deletions
        self.book = book
        self.stages = stages
        self.membership = membership
        self.rules = rules
        self.promotions = Promotions(tables, book, self.retarget, self.restage, stages.advance)

    def remember_intent(self, name: str, event_id: str) -> None:
        """Note an intent that changed nothing else: on the module, or its tombstone."""
        tables = self.tables
        record = tables.modules.get(name)
        if record is not None:
            ids = remember(record.handled_intents, event_id, INTENT_IDS_KEPT)
            tables.modules[name] = record.model_copy(update={"handled_intents": ids})
            return
        tombstone = tables.deleted_modules.get(name) or DeletedModule(name=name)
        ids = remember(tombstone.handled_intents, event_id, INTENT_IDS_KEPT)
        tables.deleted_modules[name] = tombstone.model_copy(update={"handled_intents": ids})

    def on_module_applied(self, event: ModuleApplied, out: Outcome) -> None:
        name = event.module.metadata.name
        try:  # its namespace's ModuleRestriction (restriction_rules.py): refused, naming the rule
            manifest = self.rules.admitted(event.module)
        except RestrictionViolation as violation:
            out.rejections.append(f"{event.module.kind} {name}: {violation}")
            self.remember_intent(name, event.id)
            return
        existing = self.tables.modules.get(name)
        # an older version applied again while its promoted one is the target keeps that one (promotions.py)
        manifest = self.promotions.floor(existing, manifest)
        if manifest is not event.module:  # defaultServiceAccount filled in, or the promoted version kept
            event = event.model_copy(update={"module": manifest})
        if existing is not None and existing.kind != manifest.kind:
            out.rejections.append(
                f"{manifest.kind} {name}: the name is already used by {existing.kind} {name}; "
                "delete it first or choose another name"
            )
            self.remember_intent(name, event.id)
            return
        digest = bindings_digest(manifest.spec.bindings)
        if existing is None:
            self._create_module(event, digest, out)
        else:
            self._update_module(existing, event, digest, out)

    def _create_module(self, event: ModuleApplied, digest: str, out: Outcome) -> None:
        tables = self.tables
        manifest = event.module
        name = manifest.metadata.name
        tombstone = tables.deleted_modules.pop(name, None)
        # a module created again continues the generations of the one deleted before (once
        # its tombstone is pruned, those of every module pruned: tombstones.py)
        generation = tombstone.generation + 1 if tombstone is not None else first_generation(tables.sequences)
        record = ModuleRecord(
            name=name,
            kind=manifest.kind,
            namespace=manifest.metadata.namespace,
            spec=manifest.spec,
            partition=tables.partition,
            generation=generation,
            target=generation,
            revisions={
                generation: Revision(
                    generation=generation,
                    revision=manifest.spec.sync.revision,
                    sync=manifest.spec.sync.as_applied(),
                    bindings_digest=digest,
                )
            },
            handled_intents=remember(
                tombstone.handled_intents if tombstone is not None else [], event.id, INTENT_IDS_KEPT
            ),
            awaiting=awaited_dependencies({}, list(linked_modules(manifest.spec, name)), event.after),
        )
        created = ModuleCreated(kind=manifest.kind, module=name, revision=manifest.spec.sync.revision)
        self.book.decide(record, DecisionAction.CREATED, created, out)
        record.joining = ""  # the fleet's clusters join in name order, within the moves of each event
        self.book.index_new_module(name)  # no Target yet: no look at the fleet
        self.stages.advance(record, out)
        self.book.save_module(record, out)

    def _update_module(self, existing: ModuleRecord, event: ModuleApplied, digest: str, out: Outcome) -> None:
        book = self.book
        manifest = event.module
        name = manifest.metadata.name
        record = existing.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        record.awaiting = awaited_dependencies(record.awaiting, list(linked_modules(manifest.spec, name)), event.after)
        current = record.revisions[record.target]
        new_sync = manifest.spec.sync.as_applied() != current.sync or digest != current.bindings_digest
        unchanged = manifest.spec == record.spec and manifest.metadata.namespace == record.namespace
        if not new_sync and unchanged and record.awaiting == existing.awaiting:
            self.tables.modules[name] = record  # the same manifest again: only its id is new
            return
        record.spec = manifest.spec
        record.namespace = manifest.metadata.namespace
        if record.restricted is not None:  # admitted: the new spec complies
            record.restricted = None
            book.decide(record, DecisionAction.RESTRICTION_MET, RestrictionMet(), out)
        if record.stage_index >= len(stages_of(record)) or (not new_sync and self.stages.completed(record)):
            # the strategy lost stages the rollout had reached, or the rollout is complete:
            # every stage but the last is passed, and the last runs (for late joiners)
            record.stage_index = len(stages_of(record)) - 1
            record.stage_started = True
            record.stage_completed_at = None
        follow_strategy(record, self.tables.now)  # a chain became a graph, or back (stage_graph.py)
        if new_sync:
            self.retarget(record, manifest.spec.sync, digest, out)
        self.promotions.settle(record, out)  # a version held before: promoted once nothing holds it
        book.resort(record)  # every member re-sorted, in slices (membership.py "Re-sorts per event")
        self.stages.advance(record, out)
        book.save_module(record, out)

    def restage(self, record: ModuleRecord, out: Outcome) -> None:
        """After a new target (a promotion): the members re-sorted and recategorised, as after
        an apply — in slices, from the next `advance` (membership.py "Re-sorts per event")."""
        self.book.resort(record)

    def retarget(self, record: ModuleRecord, sync: Sync, digest: str, out: Outcome) -> None:
        """A new sync (or new bindings; or a promoted version: promotions.py): a new
        generation, rolled out from the first stage."""
        sync = sync.as_applied()
        previous = record.revisions[record.target].revision
        record.generation += 1
        record.revisions[record.generation] = Revision(
            generation=record.generation,
            revision=sync.revision,
            sync=sync,
            bindings_digest=digest,
        )
        superseded = record.target if record.phase not in ("Complete", "RolledBack") else None
        record.target = record.generation
        record.mode = "rollout"
        record.halted = record.aborted = False
        record.stage_index = 0
        record.stage_started = False
        record.stage_completed_at = None
        record.graph = {}  # a stage graph's progress (stage_graph.py)
        record.approvals = []
        record.approvers = {}
        record.rejection = None
        record.phase = "Progressing"  # not Complete/RolledBack any more: advance settles it
        self.book.decide(
            record,
            DecisionAction.NEW_REVISION,
            NewRevision(
                revision=sync.revision,
                generation=record.generation,
                supersedes=previous if superseded is not None else None,
            ),
            out,
            generation=record.generation,
            revision=sync.revision,
        )

    def _rejected(self, record: ModuleRecord, cause: Rejected, out: Outcome) -> None:
        """The target rejected: roll back or halt, as the module's onFailure says."""
        on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
        if on_failure == "Rollback":
            self.stages.start_rollback(record, cause, out)
        elif not record.halted:
            record.halted = True
            self.book.decide(record, DecisionAction.HALTED, Halted(cause=cause), out, stage=cause.stage)

    def on_module_deleted(self, event: ModuleDeleted, out: Outcome) -> None:
        tables = self.tables
        record = tables.modules.get(event.name)
        if record is None or record.kind != event.kind:
            # already gone, never existed, or another kind: nothing to delete
            kind = event.kind.lower()
            found = f"; {event.name} is a {record.kind}" if record is not None else ""
            out.rejections.append(f"{kind} {event.name!r} not found{found}")
            self.remember_intent(event.name, event.id)
            return
        tombstone = DeletedModule(
            name=record.name,
            kind=record.kind,
            generation=record.generation,
            handled_intents=remember(record.handled_intents, event.id, INTENT_IDS_KEPT),
        )
        tables.modules.pop(record.name, None)
        tables.runs.pop(record.name, None)  # its run goes with it (runs.py)
        # its members' syncs removed in slices, then the `deleted` decision (deletions.py)
        self.deletions.start(record, tombstone, out)

    def on_command(self, event: RolloutCommanded, out: Outcome) -> None:
        tables, book = self.tables, self.book
        stored = tables.modules.get(event.module)
        if stored is None:
            out.rejections.append(door_refusal(None, event) or f"module {event.module!r} not found")
            self.remember_intent(event.module, event.id)
            return
        record = stored.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        refused = door_refusal(record, event)
        if refused is not None:  # a namespace's door naming another namespace's module
            out.rejections.append(refused)
            tables.modules[record.name] = record  # remembers the command's id, nothing else
            return
        command = event.command
        first = len(out.decisions)
        if command == "pause":
            if not record.paused:
                record.paused = True
                book.decide(record, DecisionAction.PAUSED, Paused(user=event.user, via=event.via), out)
        elif command == "resume":
            standing = standing_halt(record)
            if standing is not None:  # resuming would only halt it again: say why instead
                out.rejections.append(f"module {record.name} stays halted: {standing}")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if record.paused or record.halted:
                record.paused = record.halted = False
                book.decide(record, DecisionAction.RESUMED, Resumed(user=event.user, via=event.via), out)
        elif command == "abort":
            if not record.aborted:
                record.aborted = True
                book.decide(record, DecisionAction.ABORTED, Aborted(user=event.user, via=event.via), out)
        elif command == "rollback":
            self.stages.start_rollback(record, RollbackRequested(user=event.user, via=event.via), out)
        elif command in ("approve", "reject"):
            stage = next((s for s in stages_of(record) if s.name == event.stage), None)
            if stage is None:
                names = ", ".join(s.name for s in stages_of(record))
                out.rejections.append(f"module {record.name} has no stage {event.stage!r} (stages: {names})")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            decided: Approved | Rejected | str | None = None
            if command == "approve" and event.release is not None:  # for every member of the release
                refused = self._approve_release(record, event, out)
                if refused is not None:
                    decided = refused
            else:
                decided = approve(record, stage, event) if command == "approve" else reject(record, stage, event)
            if isinstance(decided, str):  # refused, saying why (approvals.py)
                out.rejections.append(f"{command} {record.name}: {decided}")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if isinstance(decided, Approved):
                book.decide(record, DecisionAction.APPROVED, decided, out)
            elif decided is not None:
                self._rejected(record, decided, out)
        elif command in ("hold-promotion", "resume-promotion"):
            refused = self.promotions.on_command(record, event, out)
            if refused is not None:
                out.rejections.append(f"{command} {record.name}: {refused}")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
        elif command == "break-glass":  # freeze calendars overridden (freeze_gate.py)
            broke = break_glass(tables, record, event)
            if isinstance(broke, str):
                out.rejections.append(f"break-glass {record.name}: {broke}")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            book.decide(record, DecisionAction.BREAK_GLASS, broke, out)
        elif command in ("pin", "unpin"):
            if event.cluster is None:
                out.rejections.append(f"{command} {record.name}: a cluster is required")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            pinned = command == "pin"
            if event.cluster not in tables.clusters and event.cluster not in record.pinned:
                out.rejections.append(f"cluster {event.cluster!r} not found")
                tables.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if (event.cluster in record.pinned) != pinned:
                record.pinned = sorted(set(record.pinned) ^ {event.cluster})
                book.decide(
                    record,
                    DecisionAction.PINNED if pinned else DecisionAction.UNPINNED,
                    (Pinned if pinned else Unpinned)(cluster=event.cluster, user=event.user, via=event.via),
                    out,
                    cluster=event.cluster,
                )
                target = tables.targets.get(target_key(record.name, event.cluster))
                if target is not None:
                    book.index(record.name)
                    new = self.membership.join_at_stage_revision(
                        record, target.model_copy(update={"pinned": pinned}), out
                    )
                    book.store_target(record, target, new, out)
        out.decisions[first:] = [
            d.model_copy(update={"user": event.user, "via": event.via}) for d in out.decisions[first:]
        ]
        self.stages.advance(record, out)
        book.save_module(record, out)

    # -- release approvals: one decision at the leader, the stage approved for every member

    def _approve_release(self, record: ModuleRecord, event: RolloutCommanded, out: Outcome) -> str | None:
        """`rollout approve release/NAME --stage S` at a member of the release (`record`; the
        CLI and the dashboard send it to the leader, a RolloutApproval to the member it names):
        decided once, naming who, and a ReleaseStageApproved to every member — this one too —
        each of which counts it by its own approval policy of the stage. Approvals commute (a
        person counts once per stage), so any member may decide one. A refusal's text, or None."""
        release = record.spec.release
        if release is None or release.name != event.release:
            return f"{record.name} is not a member of release {event.release}"
        stage = event.stage or ""
        members = sorted(release.members)
        approved = ReleaseApproved(release=release.name, stage=stage, members=members, user=event.user, via=event.via)
        self.book.decide(record, DecisionAction.RELEASE_APPROVED, approved, out, stage=stage)
        at = iso(self.tables.now) or ""
        for member, event_id in zip(members, self.book.links.reserve(len(members)), strict=True):
            out.dependency_events.append(
                ReleaseStageApproved(
                    id=event_id,
                    at=at,
                    module=member,
                    release=release.name,
                    stage=stage,
                    user=event.user,
                    via=event.via,
                    groups=event.groups,
                    namespace=event.namespace,  # a member of another namespace refuses it (door_refusal)
                )
            )
        return None

    def on_release_stage_approved(self, event: ReleaseStageApproved, out: Outcome) -> None:
        """A member told by its release's leader that the stage is approved: the approval
        counts as the person's own approval of the stage here (approvals.py), once."""
        stored = self.tables.modules.get(event.module)
        if stored is None or stored.partition != self.tables.partition or event.id in stored.handled_intents:
            return  # deleted (nothing to approve), or redelivered
        release = stored.spec.release
        if release is None or release.name != event.release:
            return  # left the release since
        command = RolloutCommanded(
            id=event.id,
            at=event.at,
            module=event.module,
            command="approve",
            stage=event.stage,
            user=event.user,
            via=event.via,
            groups=event.groups,
            namespace=event.namespace,
        )
        self.on_command(command, out)


def door_refusal(record: ModuleRecord | None, event: RolloutCommanded) -> str | None:
    """Why `event` may not command `record`'s module (None: it may): it came through a
    namespaced door — a RolloutCommand / RolloutApproval object, whose creator RBAC allowed
    in `event.namespace` only, or the dashboard, which authorized it there (a
    SubjectAccessReview in the namespace the module's status named) — and the module lives
    in another namespace (deleted and applied again there since), or nowhere
    (`record` None). The refusal lands on the door's object, in the door's namespace, so it
    reads the same either way: it tells nobody that, or where, another namespace's module
    exists. A command without a door namespace (the CLI, the dashboard, events written
    before the field) is not this rule's to refuse (docs/security.md)."""
    if event.namespace is None or (record is not None and event.namespace == record.namespace):
        return None
    return f"{event.command} {event.module}: no module {event.module} in namespace {event.namespace}; {_door(event)}"


def _door(event: RolloutCommanded) -> str:
    if event.via == "dashboard":
        return f"the dashboard authorized the command in namespace {event.namespace} only"
    kind = "RolloutApproval" if event.command == "approve" else "RolloutCommand"
    return f"a {kind} commands only the modules of its own namespace"


def standing_halt(record: ModuleRecord) -> str | None:
    """Why `record`'s module is halted by a cause `rollout resume` cannot lift (None: none):
    its stored spec refused by this release's rules, its namespace's ModuleRestriction
    broken, or its target rejected (approvals.py). Only applying the module again (or
    changing the restriction) lifts those."""
    if record.rejection is not None:
        return f"{rejection_text(record.rejection)}; apply a new revision to roll out again"
    refusal = spec_refusal(record.spec)
    if refusal is not None:
        return (
            f"the spec an earlier release stored breaks this release's rules ({'; '.join(refusal.problems)}); "
            "apply the module again with a spec this release accepts"
        )
    if record.restricted is not None:
        return f"{record.restricted}; apply a spec that complies, or change the namespace's ModuleRestriction"
    return None
