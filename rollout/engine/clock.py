"""Time: a Tick moves the engine's clock, then what time moves runs, in a fixed order.

    Tick -> clock["now"] (at most MAX_TICK_STEP ahead) -> Clock.hooks, in order:
              1. Leases.expire_leases        leases that ran out (in live time, below) expire: their clusters are
                                             not ready — all of them refreshed in every module
                                             before it moves (leases.py, membership.py
                                             `clusters_changed`)
              2. ModuleTimers.on_clock_moved every module not settled, one at a time:
                   a. soak restarted       a stage done before the first tick soaks from it
                   b. window waits redone  waits (and freezes: freeze_gate.py) entered before
                                           the first tick are entered again, now that the
                                           engine can say when a window opens (or a freeze ends)
                   c. progressDeadline     clusters updating for longer fail
                   d. holds lapsed         members held until a `hold-until` now past are
                                           released (runs.py)
                   e. break-glass ended    an override of freeze calendars whose `until`
                                           has come ends (freeze_gate.py)
                   f. offline waits over   members a stage waited for that stayed offline
                                           are skipped or failed (offline_waits.py)
                   then StageMachine.advance (soaks that ended, windows that opened, failures)
              3. FreezeCalendars.end_break_glass  the calendars' break-glass overrides whose
                                             `until` has come end (freeze_gate.py): dropped,
                                             decided once, their modules' status shown again
              4. Tombstones.prune            tombstones a horizon old are deleted

The order is the contract: leases expire first so that a module moving on this tick sees
which clusters are ready now (a cluster whose lease ran out is not given the next stage's
revision on the tick that expired it). core.py builds the list; a test removes each entry
in turn and sees the engine decide differently (tests/rollout/test_engine_composition.py).

The engine reads no clock: time is whatever the latest Tick said, moved at most
MAX_TICK_STEP ahead per Tick, so one bogus far-future tick (or the first after a long
outage) does not fire every deadline at once; a capped tick is remembered by id, so a
redelivered one does not move the clock again. A tick that does not move the clock
forward runs no hook.

Leases are measured in the engine's live time (`tables.live`), not in its time: a Tick
counts at most LEASE_TICK_STEP of its step toward them, the rest adding to
`clock["paused"]` — one number, O(1) a tick, whatever the fleet. So the engine's own
silence (the worker stopped or held longer than a lease, the appliers' beats waiting to
be routed behind the first tick after it) expires no lease by itself; an applier that
really died runs out one lease of live time after the ticks resume (leases.py).
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.manifests import parse_duration
from rollout.engine.freeze_gate import end_break_glass
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.runs import hold_reason
from rollout.engine.stage_graph import first_tick
from rollout.engine.stages import StageMachine
from rollout.engine.state import CAPPED_TICK_IDS_KEPT, ModuleRecord, Target, TickLog, remember, target_key
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import ProgressDeadlineExceeded
from rollout.wire.events import Tick

MAX_TICK_STEP = 3600.0  # seconds: the most one Tick moves the clock (but the first)

LEASE_TICK_STEP = 30.0
"""Seconds: the most one Tick counts toward leases (the engine's live time, tables.live).
A tick further from the one before is a gap in the engine's own clock — the worker was
stopped, paused or held — and the rest of it is `clock["paused"]`, which no lease counts
(leases.py "The engine's own silence"). Why 30 s: three of the ticker's default intervals
(10 s, `--tick-interval`), so ordinary ticks late under load count in full; and half the
appliers' default lease (60 s), renewed every lease/3 (20 s): a lease renewed just before
the gap has 40 s left of it, more than one capped tick takes. A tick interval configured
above 30 s makes leases last longer in wall time (each tick counts 30 s), never shorter."""

ClockHook = Callable[[bool, Outcome], None]
"""What runs when the clock moved: `(first, out)` — `first`: it moved from no time at all."""

ModuleStep = Callable[[ModuleRecord, bool, Outcome], None]
"""One thing time does to a module's (working copy of its) record: `(record, first, out)`."""

SETTLED = ("Complete", "RolledBack", "Aborted")  # phases time moves nothing in (but window waits, freezes)


class Clock:
    """Folds ticks: moves the clock, then runs `hooks` in order."""

    def __init__(self, tables: StateTables, hooks: list[ClockHook]) -> None:
        self.tables = tables
        self.hooks = hooks
        # an engine may be given another: tests that simulate days in hourly ticks use an hour
        self.lease_tick_step = LEASE_TICK_STEP

    def on_tick(self, event: Tick, out: Outcome) -> None:
        tables = self.tables
        now = tables.now
        if event.now <= now:
            return  # time never goes back; a redelivered tick changes nothing
        log = tables.capped_ticks.get("recent") or TickLog()
        if event.id in log.ids:
            return  # a redelivered tick that was capped has moved the clock already
        first = now == 0.0
        if first or event.now - now <= MAX_TICK_STEP:
            tables.clock["now"] = event.now
        else:
            # a jump: catch up by MAX_TICK_STEP per tick, so deadlines fire in turn, not all at once
            tables.capped_ticks["recent"] = TickLog(ids=remember(log.ids, event.id, CAPPED_TICK_IDS_KEPT))
            tables.clock["now"] = now + MAX_TICK_STEP
        step = tables.clock["now"] - now
        if not first and step > self.lease_tick_step:
            # a gap in the engine's own clock: leases count lease_tick_step of it, no more
            tables.clock["paused"] = tables.clock.get("paused", 0.0) + step - self.lease_tick_step
        for hook in self.hooks:
            hook(first, out)


class ModuleTimers:
    """What time does to each module: `steps` in order, then the module advances."""

    def __init__(
        self,
        tables: StateTables,
        book: TargetBook,
        stages: StageMachine,
        rejoin: Callable[[ModuleRecord, Target, Outcome], Target] | None = None,
    ) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages
        # a member released from its hold joins as any member would (membership.py
        # `join_at_stage_revision`: the stable revision if its stage has not started)
        self.rejoin = rejoin if rejoin is not None else (lambda record, target, out: target)
        self.steps: list[ModuleStep] = [
            self.soak_from_first_tick,
            self.windows_from_first_tick,
            self.fail_past_deadline,
            self.release_lapsed_holds,
            self.end_break_glass,
            stages.offline.expire,
        ]

    def on_clock_moved(self, first: bool, out: Outcome) -> None:
        """Every module of the partition that time may move, in name order."""
        tables, book = self.tables, self.book
        for name in sorted(tables.modules.keys()):
            stored = tables.modules[name]
            waiting = stored.window_waits or stored.frozen is not None or stored.break_glass is not None
            settled = stored.phase in SETTLED and not waiting
            if stored.partition != tables.partition or settled:
                continue
            record = stored.working_copy()
            book.index(name)
            for step in self.steps:
                step(record, first, out)
            self.stages.advance(record, out)
            if record != stored:
                book.save_module(record, out)

    def soak_from_first_tick(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """A stage done before the engine saw any tick starts its soak at the first one."""
        if first and record.stage_completed_at is not None:
            record.stage_completed_at = self.tables.now
        if first and record.graph:
            first_tick(record, self.tables.now)  # a stage graph's stages and edges (stage_graph.py)

    def windows_from_first_tick(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """Waits entered before the engine knew the time are entered again, now that it can
        say when each window opens (its decision, and the module's status)."""
        if first and record.window_waits:
            record.window_waits = []
        if first and record.frozen is not None:
            record.frozen = None

    def fail_past_deadline(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """Clusters updating for longer than the module's progressDeadline fail; one
        assigned before the first tick starts its deadline clock now."""
        deadline = record.spec.rollout.progress_deadline if record.spec.rollout else None
        if deadline is None:
            return
        tables, book = self.tables, self.book
        limit = parse_duration(deadline)
        for cluster in sorted(book.updating_clusters(record.name)):
            target = tables.targets[target_key(record.name, cluster)]
            if target.assigned != book.goal(record):
                continue  # not re-sorted yet (membership.py "Re-sorts per event"): not updating to the goal
            if target.updating_since is None:
                since = target.model_copy(update={"updating_since": tables.now})
                book.store_target(record, target, since, out)
            elif tables.now - target.updating_since >= limit:
                because = ProgressDeadlineExceeded(cluster=cluster, deadline=deadline)
                message = f"updating for longer than progressDeadline {deadline}"
                book.decide(record, DecisionAction.FAILED, because, out, cluster=cluster)
                book.store_target(
                    record,
                    target,
                    target.model_copy(update={"status": "failed", "status_message": message}),
                    out,
                )

    def end_break_glass(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """A break-glass override whose `until` the engine's time reached ends (freeze_gate.py)."""
        end_break_glass(self.tables, self.book, record, out)

    def release_lapsed_holds(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """Members held by a `rollout.dev/hold-until` the engine's time has reached are
        released (runs.py): they move as members back from a hold. Costs the module's held
        members, which only the hold annotation puts there."""
        tables, book = self.tables, self.book
        for cluster in sorted(book.held_clusters(record.name)):
            facts = tables.clusters.get(cluster)
            target = tables.targets[target_key(record.name, cluster)]
            if facts is None or hold_reason(facts, tables.now) is not None:
                continue
            released = self.rejoin(record, target.model_copy(update={"hold": None}), out)
            book.store_target(record, target, released, out)
