"""What the fleet reports: SyncStatusReported.

    SyncStatusReported -> the Target's status (updating, succeeded, failed) -> advance

Reports are remembered by id — on their target while it exists (its record is written
anyway when the report counts), else on the cluster's facts — so a redelivered one changes
nothing. They count only when they are about the assignment in force: the generation and
revision the Target was given. A report with `reply` (`rollout report-status`) gets a
verdict: refused with the reason when it would not count, accepted otherwise. What time
does to a report that never comes (progressDeadline) is clock.py's.

Cost: a counted report reads and writes one Target and one ModuleRecord — copied once per
batch in the worker (`StateTables.working_module`) — and moving the next cluster pops from
the stage's pending queue (targets.py): nothing here visits the fleet.
"""

from __future__ import annotations

from rollout.engine.outcome import DecisionAction, Outcome, verdict
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    REPORT_IDS_KEPT,
    TARGET_REPORT_IDS_KEPT,
    ModuleRecord,
    Target,
    remember,
    target_key,
)
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import SyncFailed, SyncSucceeded
from rollout.wire.events import SyncStatusReported


class Reports:
    """Folds sync status reports."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages

    def on_sync_status(self, event: SyncStatusReported, out: Outcome) -> None:
        if event.reply:
            self._answer_sync_status(event, out)
            return
        ids = self._note_report(event)
        if ids is None:
            return  # redelivered, or about a cluster the engine never saw
        self.fold_sync_status(event, ids, out)

    def _answer_sync_status(self, event: SyncStatusReported, out: Outcome) -> None:
        """A report that asks for a verdict: refused (and dead-lettered) unless it is about
        the assignment in force; accepted with the decisions it caused otherwise."""
        known = event.cluster in self.tables.clusters
        ids = self._note_report(event)
        if ids is None and known:
            return  # redelivered: answered already
        rejections, decisions = len(out.rejections), len(out.decisions)
        refusal = f"cluster {event.cluster!r} not found" if not known else self._report_refusal(event)
        if refusal is not None:
            out.rejections.append(refusal)
            if ids is not None:
                self.fold_sync_status(event, ids, out, count=False)
        elif ids is not None:
            self.fold_sync_status(event, ids, out)
        out.verdicts.append(verdict(event.id, event.module, out, rejections=rejections, decisions=decisions))

    def _report_refusal(self, event: SyncStatusReported) -> str | None:
        """Why a report about a known cluster does not count, or None if it does."""
        stored = self.tables.modules.get(event.module)
        if stored is None:
            return f"module {event.module!r} not found"
        target = self.tables.targets.get(target_key(event.module, event.cluster))
        if target is None:
            return f"cluster {event.cluster} is not a target of module {event.module} (its selector does not pick it)"
        if target.assigned is None:
            return f"module {event.module} has assigned nothing to cluster {event.cluster} yet"
        revision = stored.revisions.get(target.assigned)
        assigned = f"cluster {event.cluster} is assigned generation {target.assigned}"
        if revision is not None:
            assigned += f" ({revision.revision})"
        if event.generation is not None and event.generation != target.assigned:
            return f"{assigned} of module {event.module}, not generation {event.generation}"
        if revision is None or revision.revision != event.revision:
            return f"{assigned} of module {event.module}, not revision {event.revision}"
        return None

    def fold_sync_status(self, event: SyncStatusReported, ids: list[str], out: Outcome, *, count: bool = True) -> None:
        """Fold a report noted by `_note_report`: `ids` is its target's new report window
        (stored with the target whether or not the report counts). `count` False: only
        remember it (a refused report that asked for a verdict)."""
        tables, book = self.tables, self.book
        key = target_key(event.module, event.cluster)
        target = tables.targets.get(key)
        if target is None:
            return  # about a module/cluster the engine no longer drives: nothing to decide
        stored = tables.modules.get(event.module)
        status = self._counted_status(event, stored, target) if count and stored is not None else None
        if status is None:
            tables.targets[key] = target.updated({"report_ids": ids})  # only the id is new
            return
        assert stored is not None
        record = tables.working_module(stored)
        book.index(record.name)
        new = target.updated({"status": status, "status_message": event.message or "", "report_ids": ids})
        if status == "failed" and target.status != "failed":
            book.decide(
                record,
                DecisionAction.FAILED,
                SyncFailed(cluster=event.cluster, revision=event.revision, message=event.message or None),
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        elif status == "succeeded" and target.status != "succeeded":
            book.decide(
                record,
                DecisionAction.SUCCEEDED,
                SyncSucceeded(cluster=event.cluster, revision=event.revision),
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        book.store_target(record, target, new, out)
        self.stages.advance(record, out)
        book.save_module(record, out)

    def _counted_status(self, event: SyncStatusReported, stored: ModuleRecord, target: Target) -> str | None:
        """The status `event` gives its target, or None when it changes nothing."""
        if target.assigned is None:
            return None  # nothing assigned to the cluster yet
        if event.generation is not None and event.generation != target.assigned:
            return None  # about another assignment than the current one (say, same tag, other path)
        revision = stored.revisions.get(target.assigned)
        if revision is None or revision.revision != event.revision:
            return None  # a report about an older revision than the one assigned
        status = event.state
        if target.status in ("succeeded", "failed") and status == "updating":
            # Flux flips Ready to Progressing on every reconcile (and retries a failure):
            # only `succeeded` or `failed` change what is known about the revision
            return None
        if target.status == status and target.status_message == (event.message or ""):
            return None
        return status

    def _note_report(self, event: SyncStatusReported) -> list[str] | None:
        """None if the report was seen before (or its cluster never was). Otherwise its id
        is remembered: while the report's target exists, in the target's window — the
        returned list, which the caller stores with the target, since most reports change
        it anyway; without a target, on the cluster's facts (then the list is empty). A
        deleted target hands its ids to the cluster's facts (`TargetBook.store_target`)."""
        tables = self.tables
        facts = tables.clusters.get(event.cluster)
        if facts is None:
            removed = tables.removed_clusters.get(event.cluster)
            if removed is not None and event.id not in removed.report_ids:
                ids = remember(removed.report_ids, event.id, REPORT_IDS_KEPT)
                tables.removed_clusters[event.cluster] = removed.model_copy(update={"report_ids": ids})
            return None
        target = tables.targets.get(target_key(event.module, event.cluster))
        if event.id in facts.report_ids or (target is not None and event.id in target.report_ids):
            return None
        if target is not None:
            return remember(target.report_ids, event.id, TARGET_REPORT_IDS_KEPT)
        ids = remember(facts.report_ids, event.id, REPORT_IDS_KEPT)
        tables.clusters[event.cluster] = facts.model_copy(update={"report_ids": ids})
        return []
