"""The maintenance-window gate of the stage machine: may a stage's clusters move now?

    StageMachine.fill(stage) -> WindowGate.window_open(record, stage) -> stage_window_state(spec, stage, now)

A stage's windows are its own `windows` when it has any, else the module's
(`spec.rollout.windows`); no windows: always open. Only moves *to the target* wait
(`fill`): clusters already updating finish, a rollback returns clusters at once, and a
cluster joining a stage the rollout has not reached still gets the stable revision at
once (that is no change of what the fleet runs). Before the engine saw any tick it knows
no time, and a stage with windows waits for the first tick; a wait entered then is entered
again at the first tick (clock.py), which can say when the window opens.

Entering a wait is recorded once, as the decision `awaiting-window` with the time the
next window opens (`ModuleRecord.window_waits` remembers which stages wait, so the
decision is not repeated on every event); the module's status shows each stage's window
state (views.py). Ticks re-examine a waiting module even when it is Complete, so late
joiners move as soon as a window opens.
"""

from __future__ import annotations

from rollout.api.manifests import Stage
from rollout.api.windows import stage_window_state
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.state import ModuleRecord
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import AwaitingWindow


class WindowGate:
    """Tells `StageMachine.fill` whether a stage's maintenance windows let its clusters move now."""

    def __init__(self, tables: StateTables, book: TargetBook) -> None:
        self.tables = tables
        self.book = book

    def window_open(self, record: ModuleRecord, stage: Stage, out: Outcome, *, moving: bool) -> bool:
        """Whether `stage` may move clusters now (`moving`: it has some to move)."""
        state = stage_window_state(record.spec, stage, self.tables.now) if moving else None
        if state is None or state.open:
            if stage.name in record.window_waits:
                record.window_waits.remove(stage.name)
            return True
        if stage.name not in record.window_waits:
            record.window_waits = sorted([*record.window_waits, stage.name])
            ticked = self.tables.now > 0  # before the first tick no one can say when a window opens
            because = AwaitingWindow(stage=stage.name, next_open=state.next_open if ticked else None, ticked=ticked)
            self.book.decide(record, DecisionAction.AWAITING_WINDOW, because, out, stage=stage.name)
        return False
