"""Freeze calendars in the engine: the calendars each partition keeps, and the gate that
stops moves inside their deny windows.

    FreezeCalendarApplied -> freezes[scope].calendars[name] replaced (scope: the namespace,
                             or `*` for a ClusterFreezeCalendar); the modules it governs on
                             this partition re-examined (a freeze applied now holds them now)
    FreezeCalendarDeleted -> the calendar removed; its modules re-examined (they may move)
    StageMachine.fill     -> FreezeGate.may_move(record, moving): no move to the target while
                             a window of a calendar governing the module holds the engine's time

The rule. A module is governed by the ClusterFreezeCalendars and by the FreezeCalendars of
its namespace. While the engine's time (Ticks only: clock.py) is inside a deny window of
any of them, no cluster of the module starts moving to the target: the stage *waits* — it
neither fails nor halts, its progressDeadline does not run for clusters that never
started. Moves already started finish (a cluster updating keeps updating, its report
counts), a rollback returns clusters at once (a freeze stops change going forward, not the
way back to what ran before), and a cluster joining a stage the rollout has not reached
gets the stable revision (no change of what the fleet runs) — the same lines as
maintenance windows (window_gate.py). Before the engine has seen a tick it cannot tell
whether a window holds, so a governed module waits for the first one.

Entering a freeze is recorded once, as the decision `awaiting-freeze` naming the calendars
and when the freeze ends (`ModuleRecord.frozen` remembers it, so the decision is not
repeated on every event); a freeze that ends, or that other calendars now hold, is
recorded again only when the calendars holding it change. Ticks re-examine a frozen module
even when it is Complete (clock.py), so it moves on the first tick after the window.

Break-glass. `rollout break-glass` (or the dashboard's button) sends a `RolloutCommanded`
with `command: break-glass`, a `reason`, `until` and optionally the `calendar` it overrides
(`break_glass`): refused when `until` has passed or the calendar named does not govern the
module; else recorded in `ModuleRecord.break_glass` and decided as `break-glass` with who,
through which door, why and until when. While the engine's time is before `until`, that
calendar (or, without one named, every calendar) does not hold the module — it moves as if
the calendar were not there. The tick that reaches `until` ends it (clock.py: decision
`break-glass-ended`), and the freezes hold the module again from that tick on. A new
break-glass replaces the one before. Who may send one is the doors' business: the dashboard
asks a SubjectAccessReview for `create rolloutbreakglasses.rollout.dev`, a permission apart
from approving (docs/security.md).

Cost: two lookups per move-wanting fill (the fleet's calendars and the namespace's), and
`frozen_until_cached` — the evaluation is remembered per (windows, time), and the time
changes only on ticks. Redelivery: the ids of calendar events are kept per scope
(FREEZE_IDS_KEPT), so an older event delivered again does not bring back a deleted or older
calendar.
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.freezes import frozen_until_cached
from rollout.api.manifests import CLUSTER_SCOPE, AnyFreezeCalendar, calendar_identity
from rollout.api.windows import iso
from rollout.engine.applied_documents import refusal_of
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.state import FREEZE_IDS_KEPT, BreakGlass, FreezeRecord, Frozen, ModuleRecord, remember
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import AwaitingFreeze, BreakGlassEnded, BrokeGlass
from rollout.wire.events import FreezeCalendarApplied, FreezeCalendarDeleted, RolloutCommanded


class FreezeGate:
    """Tells `StageMachine.fill` whether the module's freeze calendars let it move now."""

    def __init__(self, tables: StateTables, book: TargetBook) -> None:
        self.tables = tables
        self.book = book

    def freeze_of(self, record: ModuleRecord) -> Frozen | None:
        """The calendars holding `record` now, and until when (None: none holds it); a
        calendar its break-glass overrides now holds nothing."""
        tables = self.tables
        holding: list[str] = []
        ends: list[float] = []
        known_end = True
        glass = record.break_glass if record.break_glass is not None and tables.now < record.break_glass.until else None
        for scope in (CLUSTER_SCOPE, record.namespace):
            kept = tables.freezes.get(scope)
            if kept is None:
                continue
            for name in sorted(kept.calendars):
                if glass is not None and glass.calendar in (None, calendar_identity(scope, name)):
                    continue  # overridden (break-glass)
                spec = kept.calendars[name]
                if tables.now <= 0 or refusal_of(spec) is not None:
                    holding.append(calendar_identity(scope, name))  # no time yet, or unreadable: held
                    known_end = False
                    continue
                until = frozen_until_cached(spec.windows, tables.now)
                if until is not None:
                    holding.append(calendar_identity(scope, name))
                    ends.append(until)
        if not holding:
            return None
        return Frozen(calendars=holding, until=max(ends) if ends and known_end else None, ticked=tables.now > 0)

    def may_move(self, record: ModuleRecord, out: Outcome, *, moving: bool) -> bool:
        """Whether the module may move a cluster to the target now (`moving`: it has one to
        move); a freeze entered or changed is recorded (see the module doc)."""
        if not moving and record.frozen is None:
            return True
        frozen = self.freeze_of(record)
        if frozen is None:
            record.frozen = None  # thawed (or never frozen)
            return True
        if not moving:
            return True  # nothing to move: shown as frozen as it was until it thaws
        if record.frozen is None or record.frozen.calendars != frozen.calendars:
            because = AwaitingFreeze(calendars=frozen.calendars, until=frozen.until, ticked=frozen.ticked)
            self.book.decide(record, DecisionAction.AWAITING_FREEZE, because, out)
        record.frozen = frozen
        return False


def governing(tables: StateTables, namespace: str) -> list[str]:
    """The identities of the calendars governing a module of `namespace`, in order."""
    found = []
    for scope in (CLUSTER_SCOPE, namespace):
        kept = tables.freezes.get(scope)
        found += [calendar_identity(scope, name) for name in sorted(kept.calendars)] if kept is not None else []
    return found


def break_glass(tables: StateTables, record: ModuleRecord, event: RolloutCommanded) -> BrokeGlass | str:
    """What a break-glass command does to `record`: the override recorded, and its reason —
    or why it is refused (its `until` has passed; the calendar it names does not govern the
    module)."""
    assert event.until is not None and event.reason is not None  # the event's own rule
    if tables.now > 0 and event.until <= tables.now:
        return f"break-glass until {iso(event.until)} ends before the engine's time {iso(tables.now)}"
    if event.calendar is not None and event.calendar not in governing(tables, record.namespace):
        known = ", ".join(governing(tables, record.namespace)) or "none"
        return f"no freeze calendar {event.calendar} governs module {record.name} (its calendars: {known})"
    record.break_glass = BreakGlass(
        calendar=event.calendar,
        until=event.until,
        reason=event.reason,
        user=event.user,
        via=event.via,
        at=tables.now,
    )
    return BrokeGlass(calendar=event.calendar, until=event.until, reason=event.reason, user=event.user, via=event.via)


def end_break_glass(tables: StateTables, book: TargetBook, record: ModuleRecord, out: Outcome) -> None:
    """A break-glass whose `until` the engine's time reached ends: decided once, and the
    freezes hold the module again (a ModuleTimers step: clock.py)."""
    glass = record.break_glass
    if glass is not None and tables.now >= glass.until:
        record.break_glass = None
        book.decide(
            record, DecisionAction.BREAK_GLASS_ENDED, BreakGlassEnded(calendar=glass.calendar, until=glass.until), out
        )


class FreezeCalendars:
    """Keeps the freeze calendars of every scope; re-examines the modules they govern."""

    def __init__(self, tables: StateTables, book: TargetBook, advance: Callable[[ModuleRecord, Outcome], None]) -> None:
        self.tables = tables
        self.book = book
        self.advance = advance  # StageMachine.advance (stages.py, which asks this module's gate)

    def on_calendar_applied(self, event: FreezeCalendarApplied, out: Outcome) -> None:
        calendar = event.calendar
        self._replace(calendar.scope, calendar.name, calendar, event.id, out)

    def on_calendar_deleted(self, event: FreezeCalendarDeleted, out: Outcome) -> None:
        self._replace(event.scope, event.name, None, event.id, out)

    def _replace(self, scope: str, name: str, calendar: AnyFreezeCalendar | None, event_id: str, out: Outcome) -> None:
        tables = self.tables
        known = tables.freezes.get(scope) or FreezeRecord(scope=scope)
        if event_id in known.event_ids:
            return  # redelivered
        calendars = dict(known.calendars)
        spec = calendar.spec if calendar is not None else None
        before = calendars.get(name)
        if spec is None:
            calendars.pop(name, None)
        else:
            calendars[name] = spec
        ids = remember(known.event_ids, event_id, FREEZE_IDS_KEPT)
        tables.freezes[scope] = FreezeRecord(scope=scope, calendars=calendars, event_ids=ids)
        if before == spec:
            return
        for module in sorted(tables.modules.keys()):
            stored = tables.modules[module]
            if stored.partition == tables.partition and (scope == CLUSTER_SCOPE or stored.namespace == scope):
                self._recheck(stored, out)

    def _recheck(self, stored: ModuleRecord, out: Outcome) -> None:
        """A module under changed calendars: advanced, so a freeze holds it (or lets it go) now."""
        record = stored.working_copy()
        self.book.index(record.name)
        self.advance(record, out)
        if record != stored:
            self.book.save_module(record, out)
