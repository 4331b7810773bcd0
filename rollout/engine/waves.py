"""Randomized waves: a stage that moves its members a wave at a time, in a seeded order.

    stages[].waves {size, order, seed, delay}
    membership.py  Target.sort_key = moving_key(...)   the member's place in its stage's
                                                       moving order: its seeded rank
                                                       (strategy.py: the seed, the rank)
    StageMachine.fill(stage) -> WaveGate.room(...)     how many more may start now: the
                                                       open wave's room, 0 while it runs or
                                                       its delay has not passed

The order. With `order: Random` every member of the stage gets a rank, `wave_rank(seed,
cluster)` — the first 60 bits of SHA-256 over the seed and the cluster's name — and the
stage's pending queue (targets.py) is sorted by it, so the members move in the order of
their ranks: a seeded shuffle. A rank depends on the seed and the name only, never on when a
cluster arrived or on the other members, so the order is the same on every replay, after a
restart, and whatever order the observations came in; a member that joins takes its place
in it without moving anyone else. `order: Sorted` keeps the stage's sorting order
(`sortingLabelKey`, then the name) and only cuts it into waves.

The seed. `waves.seed` if given — the same order for every revision. Else it is derived
from the module's name, the revision it rolls out (its tag, digest or chart version) and its
bindings (`derived_seed`): a new revision reshuffles, the same one rolled out again keeps its
order, and `rollout plan` computes the same waves from the manifest before it is applied.
Never the clock, never the operating system's randomness.

The waves. A wave is a number of moves: wave w (0-based) may have started (updating,
succeeded or failed on the target, or on it and waiting for its Release's other members:
`strategy.started`) `(w + 1) * size` members of the stage, `size` being
`waves.size` resolved against the stage's members as `maxConcurrency` is (percentages round
down, at least 1). Within the wave `maxConcurrency` still limits how many update at once.
Wave w is done when it has started its share (or nothing is left to move) and none of the
stage's members is updating (a member waiting for its Release's other members updates
nothing: the delay runs from its own update's end, or two members whose waves shuffle
differently could wait for each other for ever) — over `maxFailures` the rollout halts
before (stages.py). Wave
w + 1 starts `delay` after that, at the first event (a Tick) that finds the delay passed;
a wave done before the engine saw any tick starts its delay at the first one. Each start is
the decision `wave-started` naming the stage, the wave, the seed and the members it takes
(the first `size` of the order then; 100 named at most, with the SHA-256 of all of them).

Churn. A member that is not ready is skipped, as in any stage: the wave takes the next in
the order, and the member, once ready again, moves in the first wave with room. A member
that leaves frees its place: the open wave takes the next. A member that joins moves in the
first wave with room at its place in the order. None of them ever starts a wave early.

State: `ModuleRecord.waves` (a `WaveProgress`: the stage and generation it is about, the
open wave, when it was done) — one small record; a new stage or generation starts over at
the wave its members already started. Per event the gate costs O(1); a wave's start reads
the first `size` entries of the pending queue, as many as the wave moves.
"""

from __future__ import annotations

from rollout.api.manifests import Stage, Waves, parse_duration
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stage_graph import is_graph, keep_wave_progress, wave_progress
from rollout.engine.stage_graph import progress as stage_progress
from rollout.engine.state import ModuleRecord, StageCounts, WaveProgress
from rollout.engine.strategy import ordered_digest, started, wave_count, wave_seed, wave_size
from rollout.engine.tables import StateTables
from rollout.engine.targets import PendingQueue, TargetBook
from rollout.wire.decision_reasons import WaveStarted

WAVE_MEMBERS_NAMED = 100  # a wave-started decision names at most this many members (all in its digest)


class WaveGate:
    """Tells `StageMachine.fill` how many members of a stage with waves may start now."""

    def __init__(self, tables: StateTables, book: TargetBook) -> None:
        self.tables = tables
        self.book = book

    def room(
        self,
        record: ModuleRecord,
        index: int,
        stage: Stage,
        queue: PendingQueue,
        counts: StageCounts,
        members: int,
        out: Outcome,
    ) -> int | None:
        """How many more members of stage `index` may start now (None: the stage has no
        waves, or they are over — a passed stage's joiners move as in any stage). `members`:
        what the stage's budgets are resolved against (its run's fixed set: runs.py)."""
        waves = stage.waves
        if waves is None or record.mode != "rollout" or not self._current_stage(record, index, stage):
            return None
        if record.stable == record.target:
            return None  # the rollout completed: its last stage's joiners move as in any stage
        size = wave_size(waves, members)
        moved = started(counts)
        progress = wave_progress(record, stage)
        if progress is None or progress.stage != stage.name or progress.generation != record.target:
            # the stage starts (or a new generation, or waves were added to it): at the wave
            # its members already started, so that none is counted twice
            progress = WaveProgress(stage=stage.name, generation=record.target, wave=max(moved - 1, 0) // size)
            keep_wave_progress(record, stage, progress)
            self._started(record, stage, waves, progress, size, queue, counts, out)
        quota = (progress.wave + 1) * size
        if moved < quota:
            return quota - moved
        if counts.updating:
            return 0  # the wave runs
        now = self.tables.now
        if progress.done_at is None:
            if now == 0:
                return 0  # no time yet: the delay starts at the first tick
            progress.done_at = now
        if not queue:
            return 0  # nothing left for a next wave (yet: a joiner would start one)
        if now < progress.done_at + (parse_duration(waves.delay) if waves.delay else 0.0):
            return 0
        progress.wave += 1
        progress.done_at = None
        self._started(record, stage, waves, progress, size, queue, counts, out)
        return (progress.wave + 1) * size - moved

    @staticmethod
    def _current_stage(record: ModuleRecord, index: int, stage: Stage) -> bool:
        """Whether stage `index` is one the rollout runs now: the current stage of a chain;
        in a stage graph (stage_graph.py), any started and not passed."""
        if is_graph(record):
            state = stage_progress(record, stage.name)
            return state.started and not state.passed
        return index == record.stage_index

    def _started(
        self,
        record: ModuleRecord,
        stage: Stage,
        waves: Waves,
        progress: WaveProgress,
        size: int,
        queue: PendingQueue,
        counts: StageCounts,
        out: Outcome,
    ) -> None:
        """The decision `wave-started`: the wave, the seed and the members it takes."""
        room = max((progress.wave + 1) * size - started(counts), 0)
        members = [entry[2] for entry in queue[:room]]
        because = WaveStarted(
            stage=stage.name,
            wave=progress.wave + 1,
            waves=max(wave_count(size, counts), progress.wave + 1),
            size=size,
            order=waves.order,
            seed=wave_seed(record, waves) if waves.order == "Random" else None,
            clusters=members[:WAVE_MEMBERS_NAMED],
            members=len(members),
            digest=ordered_digest(members),
        )
        self.book.decide(record, DecisionAction.WAVE_STARTED, because, out, stage=stage.name)
