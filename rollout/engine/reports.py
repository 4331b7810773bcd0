"""What the fleet reports, and time: SyncStatusReported and Tick.

    SyncStatusReported -> the Target's status (updating, succeeded, failed) -> _advance
    Tick               -> the clock; progressDeadline failures; soaks that end -> _advance

Reports are remembered by id — on their target while it exists (its record is written
anyway when the report counts), else on the cluster's facts — so a redelivered one changes
nothing. They count only when they are about the assignment in force: the generation and
revision the Target was given. A report with `reply` (`rollout report-status`) gets a verdict: refused
with the reason when it would not count, accepted otherwise. The engine reads no clock:
time is whatever the latest Tick said, moved at most MAX_TICK_STEP ahead per Tick, so one
bogus far-future tick (or the first after a long outage) does not fire every deadline at once.
"""

from __future__ import annotations

from rollout.api.manifests import parse_duration
from rollout.engine.outcome import Outcome, verdict
from rollout.engine.stages import StageMachine
from rollout.engine.state import (
    CAPPED_TICK_IDS_KEPT,
    REPORT_IDS_KEPT,
    TARGET_REPORT_IDS_KEPT,
    ModuleRecord,
    Target,
    TickLog,
    remember,
    target_key,
)
from rollout.wire.events import SyncStatusReported, Tick

MAX_TICK_STEP = 3600.0  # seconds: the most one Tick moves the clock (but the first)


class Reports(StageMachine):
    """Folds sync status reports and ticks."""

    def _on_sync_status(self, event: SyncStatusReported, out: Outcome) -> None:
        if event.reply:
            self._answer_sync_status(event, out)
            return
        ids = self._note_report(event)
        if ids is None:
            return  # redelivered, or about a cluster the engine never saw
        self._fold_sync_status(event, ids, out)

    def _answer_sync_status(self, event: SyncStatusReported, out: Outcome) -> None:
        """A report that asks for a verdict: refused (and dead-lettered) unless it is about
        the assignment in force; accepted with the decisions it caused otherwise."""
        known = event.cluster in self.clusters
        ids = self._note_report(event)
        if ids is None and known:
            return  # redelivered: answered already
        rejections, decisions = len(out.rejections), len(out.decisions)
        refusal = f"cluster {event.cluster!r} not found" if not known else self._report_refusal(event)
        if refusal is not None:
            out.rejections.append(refusal)
            if ids is not None:
                self._fold_sync_status(event, ids, out, count=False)
        elif ids is not None:
            self._fold_sync_status(event, ids, out)
        out.verdicts.append(verdict(event.id, event.module, out, rejections=rejections, decisions=decisions))

    def _report_refusal(self, event: SyncStatusReported) -> str | None:
        """Why a report about a known cluster does not count, or None if it does."""
        stored = self.modules.get(event.module)
        if stored is None:
            return f"module {event.module!r} not found"
        target = self.targets.get(target_key(event.module, event.cluster))
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

    def _fold_sync_status(self, event: SyncStatusReported, ids: list[str], out: Outcome, *, count: bool = True) -> None:
        """Fold a report noted by `_note_report`: `ids` is its target's new report window
        (stored with the target whether or not the report counts). `count` False: only
        remember it (a refused report that asked for a verdict)."""
        key = target_key(event.module, event.cluster)
        target = self.targets.get(key)
        if target is None:
            return  # about a module/cluster the engine no longer drives: nothing to decide
        stored = self.modules.get(event.module)
        status = self._counted_status(event, stored, target) if count and stored is not None else None
        if status is None:
            self.targets[key] = target.model_copy(update={"report_ids": ids})  # only the id is new
            return
        assert stored is not None
        record = self._working_module(stored)
        self._index(record.name)
        new = target.model_copy(update={"status": status, "status_message": event.message or "", "report_ids": ids})
        if status == "failed" and target.status != "failed":
            self._decide(
                record,
                "failed",
                f"{event.cluster} failed on {event.revision}" + (f": {event.message}" if event.message else ""),
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        elif status == "succeeded" and target.status != "succeeded":
            self._decide(
                record,
                "succeeded",
                f"{event.cluster} runs {event.revision}",
                out,
                cluster=event.cluster,
                revision=event.revision,
            )
        self._store_target(record, target, new, out)
        self._advance(record, out)
        self._save_module(record, out)

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

    def _clock_moved(self, first: bool, out: Outcome) -> None:
        """Hook: the clock moved (`first`: from no time at all); before modules settle."""

    def _note_report(self, event: SyncStatusReported) -> list[str] | None:
        """None if the report was seen before (or its cluster never was). Otherwise its id
        is remembered: while the report's target exists, in the target's window — the
        returned list, which the caller stores with the target, since most reports change
        it anyway; without a target, on the cluster's facts (then the list is empty). A
        deleted target hands its ids to the cluster's facts (`_keep_report_ids`)."""
        facts = self.clusters.get(event.cluster)
        if facts is None:
            removed = self.removed_clusters.get(event.cluster)
            if removed is not None and event.id not in removed.report_ids:
                ids = remember(removed.report_ids, event.id, REPORT_IDS_KEPT)
                self.removed_clusters[event.cluster] = removed.model_copy(update={"report_ids": ids})
            return None
        target = self.targets.get(target_key(event.module, event.cluster))
        if event.id in facts.report_ids or (target is not None and event.id in target.report_ids):
            return None
        if target is not None:
            return remember(target.report_ids, event.id, TARGET_REPORT_IDS_KEPT)
        ids = remember(facts.report_ids, event.id, REPORT_IDS_KEPT)
        self.clusters[event.cluster] = facts.model_copy(update={"report_ids": ids})
        return []

    def _on_tick(self, event: Tick, out: Outcome) -> None:
        if event.now <= self.now:
            return  # time never goes back; a redelivered tick changes nothing
        log = self.capped_ticks.get("recent") or TickLog()
        if event.id in log.ids:
            return  # a redelivered tick that was capped has moved the clock already
        first = self.now == 0.0
        if first or event.now - self.now <= MAX_TICK_STEP:
            self.clock["now"] = event.now
        else:
            # a jump: catch up by MAX_TICK_STEP per tick, so deadlines fire in turn, not all at once
            self.capped_ticks["recent"] = TickLog(ids=remember(log.ids, event.id, CAPPED_TICK_IDS_KEPT))
            self.clock["now"] = self.now + MAX_TICK_STEP
        self._clock_moved(first, out)  # leases expire (leases.py) before modules move
        for name in sorted(self.modules.keys()):
            stored = self.modules[name]
            settled = stored.phase in ("Complete", "RolledBack", "Aborted") and not stored.window_waits
            if stored.partition != self.partition or settled:
                continue
            record = stored.working_copy()
            self._index(name)
            if first and record.stage_completed_at is not None:
                # a stage done before the engine saw any tick starts its soak at the first one
                record.stage_completed_at = self.now
            if first and record.window_waits:
                # waits entered before the engine knew the time are entered again, now that it
                # can say when each window opens (its decision, and the module's status)
                record.window_waits = []
            deadline = record.spec.rollout.progress_deadline if record.spec.rollout else None
            if deadline is not None:
                limit = parse_duration(deadline)
                for cluster in sorted(self._updating.get(name, set())):
                    target = self.targets[target_key(name, cluster)]
                    if target.updating_since is None:
                        since = target.model_copy(update={"updating_since": self.now})
                        self._store_target(record, target, since, out)
                    elif self.now - target.updating_since >= limit:
                        message = f"updating for longer than progressDeadline {deadline}"
                        self._decide(record, "failed", f"{cluster}: {message}", out, cluster=cluster)
                        self._store_target(
                            record,
                            target,
                            target.model_copy(update={"status": "failed", "status_message": message}),
                            out,
                        )
            self._advance(record, out)
            if record != stored:
                self._save_module(record, out)
