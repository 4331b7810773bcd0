"""The rollout state machine: how a module's target moves through its stages.

    StageMachine.advance(record, out)   after every event that may allow a move

The module's *target* generation is driven stage by stage. Within the started stages,
ready, unpinned clusters not yet on the target are moved (`fill`) in sorting order while
fewer than `maxConcurrency` of the stage are updating — and while its maintenance windows
are open (window_gate.py), no freeze calendar holds the module (freeze_gate.py) and, in
a stage with waves, while its open wave has room (waves.py). A stage is done when none of its clusters
is pending or updating
and its failures are within `maxFailures`; the next stage starts after the soak
(`minSuccessTime`), its health gates (gate_results.py) and, if it asks for them, its
approvals (approvals.py: one by anyone, or N distinct verified people). Over the failure
budget (`over_budget`) the rollout halts or rolls back to the
*stable* generation (`start_rollback`: every member re-sorted, and moved back as the
re-sort reaches it; then `move_rollback` returns any member pending again).
The phase settled here (Progressing, Soaking, AwaitingApproval, Complete, ...) is what
module-status shows.

Stage graphs (stage_graph.py). With `after` on a stage the stages are a graph, not a chain:
`_progress_graph` keeps each stage's progress in `ModuleRecord.graph` (the chain keeps
`stage_index`), starts every stage whose upstream quorum counts, and settles each started
stage with the same `_settle` a chain's current stage goes through — so several stages
fill, soak and pass at once. A graph's fold that runs out of moves stops before settling
anything (`spent`): its continuation fills the rest first, then settles, in the order one
unbounded fold would.

Moves per event. One event may open a fleet-sized stage (90,000 clusters at 100 %
concurrency) or roll a whole fleet back; made in one fold, those moves are one batch and
one transaction of assignments, decisions and state — the worker's memory peak and the
longest fold. So a fold makes at most `MOVES_PER_EVENT` moves (across all modules it
advances). A module stopped at the limit asks to be continued: it numbers the request
(`ModuleRecord.continuations`) and sends itself a `RolloutContinued` through the
dependencies topic, which the router puts back into its journal partition; folding it
advances the module again, from where it stopped. The continuation is an input in the
journal like any other, so replay refolds the same slices; only the latest unanswered
request acts (`continued`), so a redelivered or superseded one changes nothing, and at most
one is outstanding per module. What is moved, and in which order, is what one unbounded
fold would have moved — only spread over events (tests/rollout/test_moves_per_event.py).
A module joining the fleet spends the same budget on the clusters it considers
(membership.py, "Joins per event"), and `advance` moves nothing of it before it has joined;
so does a module re-sorting its members (membership.py, "Re-sorts per event": a new spec or
revision, a promotion, a rollback, a restriction, a dependency's answer), whose rollback
moves each member back as the re-sort reaches it (`roll_back_member`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from rollout.api.gates import gate_key
from rollout.api.manifests import Stage, parse_duration
from rollout.api.windows import iso
from rollout.engine.applied_documents import spec_refusal
from rollout.engine.approvals import approval_met
from rollout.engine.freeze_gate import FreezeGate
from rollout.engine.offline_waits import OfflineWaits
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.runs import Runs, run_members_now
from rollout.engine.stage_graph import announced, is_graph, progress, wait_key
from rollout.engine.stage_graph import passed as graph_passed
from rollout.engine.stage_graph import waiting as graph_waiting
from rollout.engine.state import LateJoin, ModuleRecord, Phase, StageCounts, StageProgress, Target, target_key
from rollout.engine.strategy import resolve_count, stages_of, started
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.engine.views import outstanding, outstanding_members
from rollout.engine.waves import WaveGate
from rollout.engine.window_gate import WindowGate
from rollout.wire.decision_reasons import (
    AwaitingApproval,
    FailureBudgetExceeded,
    Halted,
    MovedToTarget,
    RollbackCause,
    RollbackStarted,
    RolledBack,
    RolloutComplete,
    StageSkipped,
    StagesPassed,
    StageStarted,
    StageSucceeded,
)
from rollout.wire.events import RolloutContinued

APPROVAL_WAIT = "approval"  # StageProgress.waiting of a graph's stage that waits for its approvals
MOVES_PER_EVENT = 2_000
"""The most clusters one fold moves (module doc, "Moves per event"). Part of the engine's
rules: a journal folded with another limit slices its moves differently."""


@functools.lru_cache(maxsize=4096)
def stage_budget(max_concurrency: int | str | None, max_failures: int | str | None, members: int) -> tuple[int, int]:
    """(maxConcurrency, maxFailures) of a stage of `members` clusters, resolved — asked
    several times per status report, with few distinct answers: cached."""
    concurrency = resolve_count(max_concurrency, total=members, default=max(members, 1))
    failures = resolve_count(max_failures, total=members, default=0)
    return max(concurrency, 1), failures


class StageMachine:
    """Moves clusters to the target stage by stage, within each stage's budget."""

    def __init__(
        self,
        tables: StateTables,
        book: TargetBook,
        windows: WindowGate,
        runs: Runs | None = None,
        freezes: FreezeGate | None = None,
    ) -> None:
        self.tables = tables
        self.book = book
        self.windows = windows
        self.freezes = freezes if freezes is not None else FreezeGate(tables, book)
        self.runs = runs if runs is not None else Runs(tables)
        self.moves_per_event = MOVES_PER_EVENT  # lowered by tests
        self.moves_left = MOVES_PER_EVENT
        self.waves = WaveGate(tables, book)
        # joins the next clusters of a module still joining the fleet (core.py sets it to
        # Membership.join_next: "Joins per event" there)
        self.join_members: Callable[[ModuleRecord, Outcome], None] = lambda record, out: None
        # re-sorts the next members of a module re-sorting them (core.py sets it to
        # Membership.resort_next: "Re-sorts per event" there)
        self.resort_members: Callable[[ModuleRecord, Outcome], None] = lambda record, out: None
        # tells the next members' readiness to dependents linked anew (core.py sets it to
        # DependencyIntents.tell_next: "First tells in slices" there)
        self.tell_dependents: Callable[[ModuleRecord, Outcome], None] = lambda record, out: None
        # how long a stage waits for its offline members (offline_waits.py)
        self.offline = OfflineWaits(tables, book, self.stage_running)
        # a late joiner released into a run joins as any member would (membership.py
        # `join_at_stage_revision`: the stable revision if its stage has not started)
        self.rejoin: Callable[[ModuleRecord, Target, Outcome], Target] = lambda record, target, out: target

    def begin_event(self) -> None:
        """A new event's fold: its moves are counted from zero."""
        self.moves_left = self.moves_per_event

    def may_move(self, record: ModuleRecord, out: Outcome) -> bool:
        """Whether this fold may move one more cluster; at the limit, `record` asks to be
        continued (once: while a request is outstanding, that one carries on)."""
        if self.moves_left > 0:
            self.moves_left -= 1
            return True
        if record.continued == record.continuations:
            record.continuations += 1
            tables = self.tables
            out.dependency_events.append(
                RolloutContinued(
                    id=f"continue-{record.name}-{record.generation}-{record.continuations}",
                    at=iso(tables.now) or "",
                    module=record.name,
                    slice=record.continuations,
                )
            )
        return False

    def spent(self, record: ModuleRecord) -> bool:
        """Whether `record` stopped at this fold's limit and asked to be continued."""
        return self.moves_left <= 0 and record.continued != record.continuations

    def on_continued(self, event: RolloutContinued, out: Outcome) -> None:
        """The module's latest request to be continued: advance it from where it stopped."""
        tables = self.tables
        stored = tables.modules.get(event.module)
        if stored is None or stored.partition != tables.partition:
            return  # deleted since, or not this partition's
        if event.slice != stored.continuations or stored.continued >= event.slice:
            return  # superseded, or redelivered: changes nothing
        record = stored.working_copy()
        record.continued = event.slice
        self.advance(record, out)
        self.book.save_module(record, out)

    def stage_open(self, record: ModuleRecord, index: int) -> bool:
        """Whether clusters of stage `index` may be moved to the target."""
        if is_graph(record):  # stage_graph.py: started (or passed), whatever the others do
            name = stages_of(record)[index].name
            return progress(record, name).started or graph_passed(record, name)
        return index < record.stage_index or (index == record.stage_index and record.stage_started)

    def stage_running(self, record: ModuleRecord, index: int) -> bool:
        """Whether stage `index` has started for the target and not passed (its members move,
        it settles): the current stage of a chain, any such stage of a graph."""
        if record.mode != "rollout" or self.completed(record):
            return False
        if is_graph(record):
            state = progress(record, stages_of(record)[index].name)
            return state.started and not state.passed
        return index == record.stage_index and record.stage_started

    def started_stages(self, record: ModuleRecord) -> list[int]:
        """The indexes of the stages started for the target, in the list's order."""
        stages = stages_of(record)
        if is_graph(record):
            return [index for index in range(len(stages)) if self.stage_open(record, index)]
        return list(range(min(record.stage_index, len(stages) - 1) + 1))

    def gated_stage(self, record: ModuleRecord, name: str) -> Stage | None:
        """The stage `name` if its health gates are measured now: started, not passed
        (gate_results.py takes results only for such a stage)."""
        if record.mode != "rollout" or self.completed(record):
            return None
        stages = stages_of(record)
        if is_graph(record):
            found = next((stage for stage in stages if stage.name == name), None)
            if found is None or not progress(record, name).started or progress(record, name).passed:
                return None
            return found
        stage = stages[min(record.stage_index, len(stages) - 1)]
        return stage if record.stage_started and stage.name == name else None

    def budget(self, record: ModuleRecord, index: int) -> tuple[int, int]:
        """(maxConcurrency, maxFailures) of stage `index`, resolved against the run's fixed
        members there (runs.py): churn during the run does not move them."""
        stage = stages_of(record)[index]
        return self._stage_budget(record, stage, self.book.counts(record, stage.name))

    def _stage_budget(self, record: ModuleRecord, stage: Stage, counts: StageCounts) -> tuple[int, int]:
        """`budget` of `stage`, whose counters are `counts`."""
        members = self.runs.members(record, stage.name, run_members_now(counts))
        return stage_budget(stage.max_concurrency, stage.max_failures, members)

    def completed(self, record: ModuleRecord) -> bool:
        """The target's rollout finished: it is the stable generation."""
        return record.mode == "rollout" and record.stable == record.target

    def advance(self, record: ModuleRecord, out: Outcome) -> None:
        """Make every move the strategy allows now, then settle the phase."""
        book = self.book
        book.index(record.name)  # the pending queues may be cold after a restart
        self.tell_dependents(record, out)  # a first tell under way: its next slice first
        if record.joining is not None:
            self.join_members(record, out)  # within this event's moves; it continues itself
            if record.joining is not None:
                record.phase = "Progressing"  # no stage starts on part of the fleet
                return
        if record.resorting is not None:
            self.resort_members(record, out)  # within this event's moves; it continues itself
            if record.resorting is not None:
                record.phase = resorting_phase(record)  # nothing moves on half-sorted members
                return
        before = self.runs.current(record)
        run = self.runs.ensure(record)  # a new generation (or a rollback) starts a run (runs.py)
        if before is not None and run.number != before.number:
            # the next run takes in the late joiners the run before kept out (lateJoiners)
            self.runs.took_in(record, self.release_late_joiners(record, ("next-run", "excluded"), out))
            self.offline.reset_run(record, out)  # and waits for no offline member yet (offline_waits.py)
        refusal = spec_refusal(record.spec)  # its spec as stored, refused by this release (applied_documents.py)
        if refusal is not None:  # nothing moves until the module is applied again
            if record.phase != "Halted":
                book.decide(record, DecisionAction.HALTED, refusal.halt_reason(), out)
            record.phase = "Halted"
            return
        if record.mode == "rollback":
            self.move_rollback(record, out)
            rolling = any(book.counts(record, s).updating or book.counts(record, s).pending for s in [*record.counts])
            record.phase = "RollingBack" if rolling else "RolledBack"
            return
        if record.aborted:
            record.phase = "Aborted"
            return
        if not self.completed(record) and self.over_budget(record, out):
            if record.mode == "rollback":  # type: ignore[comparison-overlap]  # over_budget may start one
                self.advance(record, out)
                return
        if record.halted or record.restricted is not None:  # restricted: restriction_rules.py
            record.phase = "Halted"
            return
        if record.paused:
            record.phase = "Paused"
            return
        self._progress(record, out)

    def _progress(self, record: ModuleRecord, out: Outcome) -> None:
        """Fill the open stages; start, pass or wait on the current one, as far as it goes."""
        stages = stages_of(record)
        if is_graph(record):
            self._progress_graph(record, stages, out)
            return
        while True:
            for index in range(min(record.stage_index, len(stages) - 1) + 1):
                if index < record.stage_index or record.stage_started:  # `stage_open` of a chain
                    self.fill(record, index, out)
            if self.completed(record):
                # late joiners and clusters back from not-ready still get moved above; the
                # module is Complete only once none of them is left to move
                record.phase = "Progressing" if outstanding_members(record) else "Complete"
                return
            stage = stages[record.stage_index]
            if not record.stage_started:
                if not self._start_stage(record, stage, out):
                    return
                continue
            if not self._pass_stage(record, stage, out):
                return

    def _start_stage(self, record: ModuleRecord, stage: Stage, out: Outcome) -> bool:
        """Start the current stage; False while it waits for an approval."""
        if not approval_met(record, stage):  # approvals.py
            if record.phase != "AwaitingApproval":
                self._awaiting_approval(record, stage, out)
            record.phase = "AwaitingApproval"
            return False
        now = self.tables.now
        record.stage_started = True
        record.stage_started_at = now
        if self._announce_start(record, stage, out):
            record.stage_completed_at = now
        else:
            self.offline.start_stage(record, record.stage_index, out)  # its offline members waited for
        return True

    def _awaiting_approval(self, record: ModuleRecord, stage: Stage, out: Outcome) -> None:
        policy = stage.approval
        waits = (
            AwaitingApproval(stage=stage.name)
            if policy is None
            else AwaitingApproval(stage=stage.name, required=policy.required, groups=policy.groups)
        )
        self.book.decide(record, DecisionAction.AWAITING_APPROVAL, waits, out, stage=stage.name)

    def _announce_start(self, record: ModuleRecord, stage: Stage, out: Outcome) -> bool:
        """The decision that `stage` started — or, with no members, was skipped (True)."""
        book = self.book
        counts = book.counts(record, stage.name)
        if run_members_now(counts) == 0:
            # nothing to move — of the fleet the module's publisher knew (causal order):
            # the stage is passed with no soak; members joining later get the target
            book.decide(record, DecisionAction.STAGE_SKIPPED, StageSkipped(stage=stage.name), out, stage=stage.name)
            return True
        book.decide(
            record,
            DecisionAction.STAGE_STARTED,
            StageStarted(stage=stage.name, pending=counts.pending, not_ready=counts.not_ready, pinned=counts.pinned),
            out,
            stage=stage.name,
        )
        return False

    def _pass_stage(self, record: ModuleRecord, stage: Stage, out: Outcome) -> bool:
        """Settle the started current stage; True when the next stage is up."""
        done_at, through = self._settle(record, record.stage_index, stage, record.stage_completed_at, out)
        if done_at is None:
            if record.stage_completed_at is not None or record.phase != "Progressing":  # most reports: as they were
                record.stage_completed_at = None
                record.phase = "Progressing"
            return False
        record.stage_completed_at = done_at
        if not through:
            record.phase = "Soaking"  # its soak, or its health gates (gate_results.py)
            return False
        if record.stage_index == len(stages_of(record)) - 1:
            # a follow-up run for NextRun joiners: on to move them (the loop fills every stage)
            return self._complete(record, out)
        record.stage_index += 1
        record.stage_started = False
        record.stage_completed_at = None
        return True

    def _settle(
        self, record: ModuleRecord, index: int, stage: Stage, done_at: float | None, out: Outcome
    ) -> tuple[float | None, bool]:
        """A started stage after this event: when it was done (None: it is not — members
        pending, updating or blocked, or failures over its budget) and whether it passed:
        soaked its minSuccessTime and its health gates passed for it."""
        counts = self.book.counts(record, stage.name)
        # offline members it waits for count as waiting too (offline_waits.py)
        waiting = counts.pending + counts.updating + counts.blocked + counts.awaiting_release + counts.awaited
        if waiting:
            return None, False  # most reports: its budget is not asked
        _, max_failures = self._stage_budget(record, stage, counts)
        if counts.failed > max_failures:
            return None, False
        now = self.tables.now
        if done_at is None:
            done_at = now
            started_at = record.stage_started_at if not is_graph(record) else progress(record, stage.name).started_at
            self.book.decide(
                record,
                DecisionAction.STAGE_SUCCEEDED,
                StageSucceeded(
                    stage=stage.name,
                    succeeded=counts.succeeded,
                    failed=counts.failed,
                    not_ready=counts.not_ready,
                    pinned=counts.pinned,
                ),
                out,
                stage=stage.name,
                stage_seconds=None if started_at is None else now - started_at,
            )
        # no soak for a stage where nothing ran (every member not ready); a member that
        # succeeded and then failed within maxFailures still ran: the stage soaks
        # (or one that did left the run since: runs.py — churn does not cut a soak short)
        ran = counts.succeeded or counts.failed or self.runs.ran(record, stage.name)
        soak = parse_duration(stage.min_success_time) if stage.min_success_time and ran else 0.0
        if now < done_at + soak:
            return done_at, False
        gate_soak = parse_duration(stage.min_success_time) if stage.min_success_time else 0.0
        if stage.gates and not gates_passed(record, stage, now, gate_soak):
            return done_at, False  # its health gates have not passed for the soak yet (gate_results.py)
        return done_at, True

    # -- stage graphs (stage_graph.py) ----------------------------------------------------

    def _progress_graph(self, record: ModuleRecord, stages: list[Stage], out: Outcome) -> None:
        """Fill every started stage; start each stage whose upstream quorum counts, settle
        each started one — repeated while a stage starts or passes (at most twice a stage)."""
        moved_on = True
        while moved_on:
            for index in range(len(stages)):
                if self.stage_open(record, index):
                    self.fill(record, index, out)
                if self.spent(record):
                    # this fold's moves are spent: the continuation fills the rest, then
                    # settles — in the order one unbounded fold would (module doc)
                    record.phase = "Progressing"
                    return
            if self.completed(record):
                record.phase = "Progressing" if outstanding_members(record) else "Complete"
                return
            moved_on = False
            for index, stage in enumerate(stages):
                state = record.graph.get(stage.name)
                if state is not None and state.passed:
                    continue
                if state is None or not state.started:
                    moved_on = self._start_graph_stage(record, stage, out) or moved_on
                else:
                    moved_on = self._pass_graph_stage(record, index, stage, state, out) or moved_on
            if all(progress(record, stage.name).passed for stage in stages):
                if not self._complete(record, out):
                    return
                moved_on = True  # a follow-up run for NextRun joiners: on to move them
                continue
        record.phase = self._graph_phase(record, stages)

    def _start_graph_stage(self, record: ModuleRecord, stage: Stage, out: Outcome) -> bool:
        """Start `stage` once its upstream quorum counts and its approvals are in (True)."""
        now = self.tables.now
        state = record.graph.get(stage.name) or StageProgress()
        wait = graph_waiting(record, stage, now)
        if wait is not None:
            key = wait_key(wait) if announced(wait) else ""
            if state.waiting != key:  # a new wait: said once (a stage with nothing passed upstream says nothing)
                record.graph[stage.name] = state.model_copy(update={"waiting": key})
                if key:
                    self.book.decide(record, DecisionAction.STAGE_WAITING, wait, out, stage=stage.name)
            return False
        if not approval_met(record, stage):  # approvals.py
            if state.waiting != APPROVAL_WAIT:
                record.graph[stage.name] = state.model_copy(update={"waiting": APPROVAL_WAIT})
                self._awaiting_approval(record, stage, out)
            return False
        skipped = self._announce_start(record, stage, out)
        record.graph[stage.name] = StageProgress(started=True, started_at=now, done_at=now if skipped else None)
        if not skipped:
            index = next(i for i, s in enumerate(stages_of(record)) if s.name == stage.name)
            self.offline.start_stage(record, index, out)  # its offline members waited for
        return True

    def _pass_graph_stage(
        self, record: ModuleRecord, index: int, stage: Stage, state: StageProgress, out: Outcome
    ) -> bool:
        """Settle a started stage of the graph; True when it passed now."""
        done_at, through = self._settle(record, index, stage, state.done_at, out)
        if done_at != state.done_at or through:
            update: dict[str, object] = {"done_at": done_at}
            if through:
                update |= {"passed": True, "passed_at": self.tables.now}
            record.graph[stage.name] = state.model_copy(update=update)
        return through

    def _graph_phase(self, record: ModuleRecord, stages: list[Stage]) -> Phase:
        """The module's phase while its graph runs: Progressing while a started stage is
        not done, else AwaitingApproval while a stage waits only for approvals, else
        Soaking while a stage or an edge soaks."""
        found: set[Phase] = set()
        now = self.tables.now
        for stage in stages:
            state = progress(record, stage.name)
            if state.passed:
                continue
            if state.started:
                found.add("Progressing" if state.done_at is None else "Soaking")
                continue
            wait = graph_waiting(record, stage, now)
            if wait is None:
                found.add("AwaitingApproval")
            elif wait.soaking:
                found.add("Soaking")
        return next(
            (phase for phase in ("Progressing", "AwaitingApproval", "Soaking") if phase in found), "Progressing"
        )

    def _complete(self, record: ModuleRecord, out: Outcome) -> bool:
        """The last stage passed: the target becomes the stable generation. The phase is
        Complete only when every staged member runs it too: members skipped while not
        ready, or waiting for a window, keep it Progressing (`outstanding`)."""
        record.stable = record.target
        revision = record.revisions[record.target].revision
        released = 0
        if sum(counts.deferred for counts in record.counts.values()):
            # NextRun joiners wait: the next run starts now, for them (runs.py)
            released = self.release_late_joiners(record, ("next-run",), out)
            self.runs.follow_up(record, released)
        waiting = outstanding(record, self.tables.now)
        record.phase = "Progressing" if waiting else "Complete"
        self.book.decide(
            record,
            DecisionAction.COMPLETE,
            StagesPassed(revision=revision, outstanding=waiting) if waiting else RolloutComplete(revision=revision),
            out,
            generation=record.target,
            revision=record.revisions[record.target].revision,
        )
        self.book.prune_revisions(record)
        return released > 0

    def release_late_joiners(self, record: ModuleRecord, which: tuple[LateJoin, ...], out: Outcome) -> int:
        """The late joiners of `record` kept out of the run before (`which`: deferred to the
        next run, excluded) become members of the one starting; how many. Costs the
        module's late joiners, once per run."""
        book, targets = self.book, self.tables.targets
        released = 0
        for cluster in sorted(book.late_clusters(record.name)):
            target = targets[target_key(record.name, cluster)]
            if target.late not in which:
                continue
            joined = self.rejoin(record, target.model_copy(update={"late": None}), out)
            book.store_target(record, target, joined, out)
            released += 1
        return released

    def over_budget(self, record: ModuleRecord, out: Outcome) -> bool:
        stages = stages_of(record)
        for index in self.started_stages(record):
            counts = self.book.counts(record, stages[index].name)
            if not counts.failed:
                continue  # within any budget (maxFailures is never negative): no budget resolved
            _, max_failures = self._stage_budget(record, stages[index], counts)
            if counts.failed > max_failures:
                cause = FailureBudgetExceeded(stage=stages[index].name, failed=counts.failed, max_failures=max_failures)
                on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
                if on_failure == "Rollback":
                    self.start_rollback(record, cause, out)
                elif not record.halted:
                    record.halted = True
                    self.book.decide(record, DecisionAction.HALTED, Halted(cause=cause), out)
                return True
        return False

    def fill(self, record: ModuleRecord, index: int, out: Outcome) -> None:
        """Move stage `index`'s pending clusters to the target, in order, within its budget."""
        book = self.book
        stage = stages_of(record)[index]
        queue = book.pending_queue(record.name, index)
        counts = book.counts(record, stage.name)
        if not queue and stage.waves is None:
            # nothing to move — a stage filled already, at most status reports: what the gates
            # below do when nothing moves (a window or freeze left, none entered), no budget
            self.windows.window_open(record, stage, out, moving=False)
            self.freezes.may_move(record, out, moving=False)
            return
        concurrency, _ = self._stage_budget(record, stage, counts)
        revision = record.revisions[record.target].revision
        moving = bool(queue) and counts.updating < concurrency
        if not self.windows.window_open(record, stage, out, moving=moving):
            return  # outside its maintenance windows (window_gate.py)
        if not self.freezes.may_move(record, out, moving=moving):
            return  # inside a deny window of a freeze calendar (freeze_gate.py)
        room = None  # its waves (waves.py), resolved against the run's fixed set (runs.py)
        if stage.waves is not None:
            members = self.runs.members(record, stage.name, run_members_now(counts))
            room = self.waves.room(record, index, stage, queue, counts, members, out)
        limit = None if room is None else started(counts) + room
        targets = self.tables.targets
        while queue and counts.updating < concurrency:
            if limit is not None and started(counts) >= limit:
                break  # the open wave has started its share
            if not self.may_move(record, out):
                break  # this event's moves are spent: the module continues in the next (see above)
            cluster = queue[0][2]
            target = targets[target_key(record.name, cluster)]
            slot = started(counts) + 1
            movable = run_members_now(counts) - counts.not_ready - counts.pinned - counts.held
            because = MovedToTarget(cluster=cluster, revision=revision, stage=stage.name, slot=slot, movable=movable)
            moved = book.assign(record, target, record.target, because, out)
            book.store_target(record, target, moved, out)

    def move_rollback(self, record: ModuleRecord, out: Outcome) -> None:
        """Every unpinned cluster not on the stable generation returns to it at once —
        ready or not, staged or not: the target is what is being taken away."""
        book, targets = self.book, self.tables.targets
        stable = record.revisions[record.stable].revision if record.stable is not None else None
        book.index(record.name)
        for index in range(-1, len(stages_of(record))):
            queue = book.pending_queue(record.name, index)
            while queue and self.may_move(record, out):
                cluster = queue[0][2]
                target = targets[target_key(record.name, cluster)]
                moved = book.assign(record, target, record.stable, RolledBack(cluster=cluster, revision=stable), out)
                book.store_target(record, target, moved, out)

    def roll_back_member(self, record: ModuleRecord, cluster: str, out: Outcome) -> None:
        """A member the re-sort of a rollback just reached (membership.py `resort_next`):
        back to the stable generation now if it is not on it (category pending). Part of the
        move its re-sort counted: a rollback's re-sort moves as fast as its moves would."""
        target = self.tables.targets.get(target_key(record.name, cluster))
        if target is None or target.category != "pending":
            return
        stable = record.revisions[record.stable].revision if record.stable is not None else None
        moved = self.book.assign(record, target, record.stable, RolledBack(cluster=cluster, revision=stable), out)
        self.book.store_target(record, target, moved, out)

    def start_rollback(self, record: ModuleRecord, cause: RollbackCause, out: Outcome) -> None:
        """Every cluster on the target returns to the stable generation, because of `cause`."""
        if record.mode == "rollback":
            return
        record.mode = "rollback"
        stable = record.revisions[record.stable].revision if record.stable is not None else None
        self.book.decide(record, DecisionAction.ROLLBACK, RollbackStarted(cause=cause, stable=stable), out)
        # every member's category changes with the mode: re-sorted in slices, each moved back
        # as the re-sort reaches it (membership.py "Re-sorts per event")
        self.book.resort(record)


def resorting_phase(record: ModuleRecord) -> Phase:
    """The phase of a module while it re-sorts its members (nothing moves to the target):
    RollingBack in a rollback (whose re-sort moves members back), what a halt, an abort or a
    pause says if one holds it; else the phase it had (awaiting an approval, soaking,
    progressing, complete: what the event that finishes the re-sort settles, as one unbounded
    fold would have from that phase — an approval asked for once, not again), Progressing
    after a halt, pause or rollback that no longer holds."""
    if record.mode == "rollback":
        return "RollingBack"
    if record.aborted:
        return "Aborted"
    if record.halted or record.restricted is not None or spec_refusal(record.spec) is not None:
        return "Halted"
    if record.paused:
        return "Paused"
    held = record.phase in ("Paused", "Halted", "Aborted", "RollingBack", "RolledBack")
    return "Progressing" if held else record.phase


def gates_passed(record: ModuleRecord, stage: Stage, now: float, soak: float) -> bool:
    """Every gate of `stage` passed, for the current target: a gate with an analysis
    (`count`) once its analysis run is Successful, any other passing for at least `soak`
    seconds. A `dryRun` gate never holds the stage."""
    for gate in stage.gates:
        if gate.dry_run:
            continue
        state = record.gates.get(gate_key(stage.name, gate.name))
        if state is None or state.generation != record.target:
            return False
        if gate.analysis:
            if state.analysis is None or state.analysis.phase != "Successful":
                return False
            continue
        if state.passed is not True:
            return False
        if state.since is None or now - state.since < soak:
            return False
    return True
