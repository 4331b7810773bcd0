"""Module intents: what ModuleApplied, ModuleDeleted and RolloutCommanded do.

    ModuleApplied    -> refused when it breaks its namespace's ModuleRestriction (naming the
                        rule: restriction_rules.py); else a new ModuleRecord, or a new spec; a
                        new sync (or new bindings) is a new generation, the target, rolled out
                        again from the first stage
    ModuleDeleted    -> every assignment removed; a DeletedModule tombstone keeps the
                        generation counter and the ids of the intents handled
    RolloutCommanded -> pause, resume, abort, rollback, approve (a stage), pin/unpin (a cluster)

Every intent is remembered by id on its module (or tombstone): a redelivered one changes
nothing. Every intent applied gets a `Verdict` (outcome.py): refused when it named a module,
stage or cluster the engine does not know (or could not apply), accepted otherwise.
A command's decisions carry who asked and through which door (`Decision.user`, `.via`),
and their reason says it: "aborted by alice@example.com via dashboard: ...".
Whether an intent applies now or waits for the fleet its publisher knew is decided before
it gets here (causal.py).
"""

from __future__ import annotations

from rollout.api.restrictions import RestrictionViolation
from rollout.engine.outcome import Outcome, verdict
from rollout.engine.restriction_rules import RestrictionRules
from rollout.engine.state import (
    INTENT_IDS_KEPT,
    DeletedModule,
    ModuleRecord,
    Revision,
    awaited_dependencies,
    remember,
    target_key,
)
from rollout.engine.strategy import bindings_digest, stages_of
from rollout.wire.events import ModuleApplied, ModuleDeleted, RolloutCommanded

Intent = ModuleApplied | ModuleDeleted | RolloutCommanded


def intent_module(event: Intent) -> str:
    """The module an intent is about (the intents topic's key)."""
    if isinstance(event, ModuleApplied):
        return event.module.metadata.name
    if isinstance(event, ModuleDeleted):
        return event.name
    return event.module


def command_author(event: RolloutCommanded) -> str:
    """The " by USER via DOOR" of a command's reasons; either part absent when the event has none."""
    by = f" by {event.user}" if event.user else ""
    return f"{by} via {event.via}" if event.via else by


class ModuleIntents(RestrictionRules):
    """Applies module intents to the records and Targets."""

    def _apply_intent(self, event: Intent, out: Outcome) -> None:
        """Do what the intent says (its turn has come: see causal.py), and answer it."""
        rejections, decisions = len(out.rejections), len(out.decisions)
        if isinstance(event, ModuleApplied):
            self._on_module_applied(event, out)
        elif isinstance(event, ModuleDeleted):
            self._on_module_deleted(event, out)
        else:
            self._on_command(event, out)
        out.verdicts.append(verdict(event.id, intent_module(event), out, rejections=rejections, decisions=decisions))

    def _remember_intent(self, name: str, event_id: str) -> None:
        """Note an intent that changed nothing else: on the module, or its tombstone."""
        record = self.modules.get(name)
        if record is not None:
            ids = remember(record.handled_intents, event_id, INTENT_IDS_KEPT)
            self.modules[name] = record.model_copy(update={"handled_intents": ids})
            return
        tombstone = self.deleted_modules.get(name) or DeletedModule(name=name)
        ids = remember(tombstone.handled_intents, event_id, INTENT_IDS_KEPT)
        self.deleted_modules[name] = tombstone.model_copy(update={"handled_intents": ids})

    def _on_module_applied(self, event: ModuleApplied, out: Outcome) -> None:
        name = event.module.metadata.name
        try:  # its namespace's ModuleRestriction (restriction_rules.py): refused, naming the rule
            manifest = self._admitted(event.module)
        except RestrictionViolation as violation:
            out.rejections.append(f"{event.module.kind} {name}: {violation}")
            self._remember_intent(name, event.id)
            return
        if manifest is not event.module:  # defaultServiceAccount filled in
            event = event.model_copy(update={"module": manifest})
        existing = self.modules.get(name)
        if existing is not None and existing.kind != manifest.kind:
            out.rejections.append(
                f"{manifest.kind} {name}: the name is already used by {existing.kind} {name}; "
                "delete it first or choose another name"
            )
            self._remember_intent(name, event.id)
            return
        digest = bindings_digest(manifest.spec.bindings)
        if existing is None:
            self._create_module(event, digest, out)
        else:
            self._update_module(existing, event, digest, out)

    def _create_module(self, event: ModuleApplied, digest: str, out: Outcome) -> None:
        manifest = event.module
        name = manifest.metadata.name
        tombstone = self.deleted_modules.pop(name, None)
        # a module created again continues the generations of the one deleted before
        generation = tombstone.generation + 1 if tombstone is not None else 1
        record = ModuleRecord(
            name=name,
            kind=manifest.kind,
            namespace=manifest.metadata.namespace,
            spec=manifest.spec,
            partition=self.partition,
            generation=generation,
            target=generation,
            revisions={
                generation: Revision(
                    generation=generation,
                    revision=manifest.spec.sync.revision,
                    sync=manifest.spec.sync,
                    bindings_digest=digest,
                )
            },
            handled_intents=remember(
                tombstone.handled_intents if tombstone is not None else [], event.id, INTENT_IDS_KEPT
            ),
            awaiting=awaited_dependencies({}, manifest.spec.depends_on, event.after),
        )
        self._decide(record, "created", f"{manifest.kind} {name} created at {manifest.spec.sync.revision}", out)
        self._refresh_membership(record, self._all_clusters(), out)
        self._advance(record, out)
        self._save_module(record, out)

    def _update_module(self, existing: ModuleRecord, event: ModuleApplied, digest: str, out: Outcome) -> None:
        manifest = event.module
        name = manifest.metadata.name
        record = existing.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        record.awaiting = awaited_dependencies(record.awaiting, manifest.spec.depends_on, event.after)
        current = record.revisions[record.target]
        new_sync = manifest.spec.sync != current.sync or digest != current.bindings_digest
        unchanged = manifest.spec == record.spec and manifest.metadata.namespace == record.namespace
        if not new_sync and unchanged and record.awaiting == existing.awaiting:
            self.modules[name] = record  # the same manifest again: only its id is new
            return
        record.spec = manifest.spec
        record.namespace = manifest.metadata.namespace
        if record.restricted is not None:  # admitted: the new spec complies
            record.restricted = None
            self._decide(record, "restriction-met", "the module complies with its namespace's restriction", out)
        if record.stage_index >= len(stages_of(record)) or (not new_sync and self._completed(record)):
            # the strategy lost stages the rollout had reached, or the rollout is complete:
            # every stage but the last is passed, and the last runs (for late joiners)
            record.stage_index = len(stages_of(record)) - 1
            record.stage_started = True
            record.stage_completed_at = None
        if new_sync:
            self._retarget(record, event, digest, out)
        self._refresh_membership(record, self._index(name) | self._all_clusters(), out)
        self._recategorize_all(record, out)
        self._advance(record, out)
        self._save_module(record, out)

    def _retarget(self, record: ModuleRecord, event: ModuleApplied, digest: str, out: Outcome) -> None:
        """A new sync (or new bindings): a new generation, rolled out from the first stage."""
        sync = event.module.spec.sync
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
        record.approvals = []
        record.phase = "Progressing"  # not Complete/RolledBack any more: _advance settles it
        note = f" (supersedes the rollout of {previous})" if superseded is not None else ""
        self._decide(
            record,
            "new-revision",
            f"target {sync.revision} (generation {record.generation}){note}; starting again from the first stage",
            out,
            generation=record.generation,
            revision=sync.revision,
        )

    def _on_module_deleted(self, event: ModuleDeleted, out: Outcome) -> None:
        record = self.modules.get(event.name)
        if record is None or record.kind != event.kind:
            # already gone, never existed, or another kind: nothing to delete
            kind = event.kind.lower()
            found = f"; {event.name} is a {record.kind}" if record is not None else ""
            out.rejections.append(f"{kind} {event.name!r} not found{found}")
            self._remember_intent(event.name, event.id)
            return
        record = record.working_copy()
        for cluster in sorted(self._index(record.name)):
            target = self.targets[target_key(record.name, cluster)]
            if target.assigned is not None:
                self._assign(record, target, None, f"{record.kind} {record.name} deleted", out)
            self._store_target(record, target, None, out)
        self._decide(record, "deleted", f"{record.kind} {record.name} deleted", out)
        self.deleted_modules[record.name] = DeletedModule(
            name=record.name,
            kind=record.kind,
            generation=record.generation,
            handled_intents=remember(record.handled_intents, event.id, INTENT_IDS_KEPT),
        )
        self.modules.pop(record.name, None)
        self._forget_module_indexes(record.name)
        out.module_status[record.name] = None

    def _on_command(self, event: RolloutCommanded, out: Outcome) -> None:
        stored = self.modules.get(event.module)
        if stored is None:
            out.rejections.append(f"module {event.module!r} not found")
            self._remember_intent(event.module, event.id)
            return
        record = stored.working_copy()
        record.handled_intents = remember(record.handled_intents, event.id, INTENT_IDS_KEPT)
        by = command_author(event)
        command = event.command
        first = len(out.decisions)
        if command == "pause":
            if not record.paused:
                record.paused = True
                self._decide(record, "paused", f"paused{by}: no new moves until resume", out)
        elif command == "resume":
            if record.paused or record.halted:
                record.paused = record.halted = False
                self._decide(record, "resumed", f"resumed{by}", out)
        elif command == "abort":
            if not record.aborted:
                record.aborted = True
                self._decide(record, "aborted", f"aborted{by}: the rollout stops where it stands", out)
        elif command == "rollback":
            self._start_rollback(record, f"rollback requested{by}", out)
        elif command == "approve":
            names = [s.name for s in stages_of(record)]
            if event.stage not in names:
                out.rejections.append(f"module {record.name} has no stage {event.stage!r} (stages: {', '.join(names)})")
                self.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if event.stage not in record.approvals:
                record.approvals.append(event.stage)  # type: ignore[arg-type]
                self._decide(record, "approved", f"stage {event.stage} approved{by}", out)
        elif command in ("pin", "unpin"):
            if event.cluster is None:
                out.rejections.append(f"{command} {record.name}: a cluster is required")
                self.modules[record.name] = record  # remembers the command's id, nothing else
                return
            pinned = command == "pin"
            if event.cluster not in self.clusters and event.cluster not in record.pinned:
                out.rejections.append(f"cluster {event.cluster!r} not found")
                self.modules[record.name] = record  # remembers the command's id, nothing else
                return
            if (event.cluster in record.pinned) != pinned:
                record.pinned = sorted(set(record.pinned) ^ {event.cluster})
                self._decide(
                    record,
                    "pinned" if pinned else "unpinned",
                    f"{event.cluster} {'pinned at its current revision' if pinned else 'unpinned'}{by}",
                    out,
                    cluster=event.cluster,
                )
                target = self.targets.get(target_key(record.name, event.cluster))
                if target is not None:
                    self._index(record.name)
                    new = self._join_at_stage_revision(record, target.model_copy(update={"pinned": pinned}), out)
                    self._store_target(record, target, new, out)
        out.decisions[first:] = [
            d.model_copy(update={"user": event.user, "via": event.via}) for d in out.decisions[first:]
        ]
        self._advance(record, out)
        self._save_module(record, out)
