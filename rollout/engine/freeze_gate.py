"""Freeze calendars in the engine: the calendars each partition keeps, and the gate that
stops moves inside their deny windows.

    FreezeCalendarApplied -> freezes[scope].calendars[name] replaced (scope: the namespace,
                             or `*` for a ClusterFreezeCalendar); the modules it governs on
                             this partition re-examined (a freeze applied now holds them now)
    FreezeCalendarDeleted -> the calendar removed; its modules re-examined (they may move)
    CalendarBreakGlass    -> freezes[scope].break_glass[name] (every partition keeps it;
                             partition 0 decides `break-glass` about `calendar/<identity>` and
                             answers); the modules it governs on this partition re-examined
    StageMachine.fill     -> FreezeGate.may_move(record, moving): no move to the target while
                             a window of a calendar governing the module holds the engine's time
                             (and no break-glass of the module or of the calendar is in force)
    Tick (clock hook)     -> FreezeCalendars.end_break_glass: a calendar's break-glass whose
                             `until` has come is dropped, `break-glass-ended` decided once

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

A calendar's break-glass. `rollout break-glass calendar/NAME` (or a RolloutBreakGlass object
naming a calendar) sends one `CalendarBreakGlass` on the intents topic — not a command per
module — which the router broadcasts to every journal partition. Each keeps it on the
calendar's scope (`FreezeRecord.break_glass`, by calendar name), so every module the
calendar governs — those applied or moved into its namespace later too — may move as if
the calendar were not there while the engine's time is before `until`. It is recorded once:
partition 0 decides `break-glass` (BrokeGlass with `every_module`) about `calendar/<identity>`
(the decisions topic's key: `rollout history calendar/NAME`) with who, through which door,
why and until when, and answers it; the other partitions keep it silently. A new one
replaces the one before. Its end is a clock hook (`end_break_glass`, after the modules
moved — they compare with the time, so they saw it ended already): the override dropped,
`break-glass-ended` decided once, the modules' status shown again. Refused (a dead letter
and a refused verdict, from partition 0): an `until` already past, or a scope with
MAX_CALENDARS_PER_SCOPE other overrides in force. A calendar this partition has not seen is
*not* refused: calendars travel on the cluster-observations topic, whose interleaving with
the intents differs per partition (the CLI checks the name before sending). Each module's
status lists the calendars' overrides in force over it (`calendarBreakGlass`). Redelivery:
its id is kept with the calendar events' (FREEZE_IDS_KEPT). A module-level break-glass
(`RolloutCommanded`, above) keeps working as before.

Calendars per scope: at most MAX_CALENDARS_PER_SCOPE (rollout/api/freezes.py) — a
FreezeCalendarApplied adding one more to a full scope is a dead letter (from partition 0)
naming the limit, and the scope stays as it was; `rollout apply` refuses it first.

Cost: two lookups per move-wanting fill (the fleet's calendars and the namespace's), and
`frozen_until_cached` — the evaluation is remembered per (windows, time), and the time
changes only on ticks. Redelivery: the ids of calendar events are kept per scope
(FREEZE_IDS_KEPT), so an older event delivered again does not bring back a deleted or older
calendar.
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.freezes import MAX_CALENDARS_PER_SCOPE, frozen_until_cached
from rollout.api.manifests import CLUSTER_SCOPE, AnyFreezeCalendar, calendar_identity
from rollout.api.windows import iso
from rollout.engine.applied_documents import refusal_of
from rollout.engine.outcome import Decision, DecisionAction, Outcome, verdict
from rollout.engine.state import FREEZE_IDS_KEPT, BreakGlass, FreezeRecord, Frozen, ModuleRecord, remember
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import AwaitingFreeze, BreakGlassEnded, BrokeGlass, render
from rollout.wire.events import (
    CalendarBreakGlass,
    CommandDoor,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    RolloutCommanded,
)


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
                if in_force(kept.break_glass.get(name), tables.now):
                    continue  # overridden for every module it governs (the calendar's break-glass)
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


def in_force(glass: BreakGlass | None, now: float) -> bool:
    """Whether a break-glass override holds at the engine's time `now` (before its `until`)."""
    return glass is not None and now < glass.until


def calendar_subject(identity: str) -> str:
    """What a calendar's break-glass decisions are about (their `module`, the decisions
    topic's key): `calendar/<identity>`, as `rollout break-glass calendar/NAME` names it —
    so `rollout history calendar/NAME` lists them."""
    return f"calendar/{identity}"


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
        ids = remember(known.event_ids, event_id, FREEZE_IDS_KEPT)
        if spec is not None and name not in calendars and len(calendars) >= MAX_CALENDARS_PER_SCOPE:
            tables.freezes[scope] = known.model_copy(update={"event_ids": ids})
            if tables.partition == 0:  # broadcast: one dead letter, from partition 0
                which = "the fleet" if scope == CLUSTER_SCOPE else f"namespace {scope}"
                out.rejections.append(
                    f"freeze calendar {calendar_identity(scope, name)} refused: {which} has "
                    f"{len(calendars)} calendars, at most {MAX_CALENDARS_PER_SCOPE} per scope"
                )
            return
        if spec is None:
            calendars.pop(name, None)
        else:
            calendars[name] = spec
        tables.freezes[scope] = known.model_copy(update={"calendars": calendars, "event_ids": ids})
        if before == spec:
            return
        self._recheck_scope(scope, out)

    def on_break_glass(self, event: CalendarBreakGlass, out: Outcome) -> None:
        """A calendar's break-glass: kept on its scope, recorded once (partition 0 decides it
        and answers; every partition keeps it), and the modules it governs moved now."""
        tables = self.tables
        scope, name = event.scope, event.name
        known = tables.freezes.get(scope) or FreezeRecord(scope=scope)
        if event.id in known.event_ids:
            return  # redelivered
        answer = tables.partition == 0  # broadcast: partition 0 records and answers
        rejections, decisions = len(out.rejections), len(out.decisions)
        identity = calendar_identity(scope, name)
        ids = remember(known.event_ids, event.id, FREEZE_IDS_KEPT)
        refusal = self._break_glass_refusal(known, event)
        if refusal is not None:
            tables.freezes[scope] = known.model_copy(update={"event_ids": ids})
            if answer:
                out.rejections.append(f"break-glass {calendar_subject(identity)}: {refusal}")
        else:
            glass = BreakGlass(
                calendar=identity, until=event.until, reason=event.reason, user=event.user, via=event.via, at=tables.now
            )
            overrides = {**known.break_glass, name: glass}  # a new one replaces the one before
            tables.freezes[scope] = known.model_copy(update={"break_glass": overrides, "event_ids": ids})
            if answer:
                because = BrokeGlass(
                    calendar=identity,
                    until=event.until,
                    reason=event.reason,
                    user=event.user,
                    via=event.via,
                    every_module=True,
                )
                self._decide(identity, DecisionAction.BREAK_GLASS, because, out, user=event.user, via=event.via)
            self._recheck_scope(scope, out)
        if answer:
            subject = calendar_subject(identity)
            out.verdicts.append(verdict(event.id, subject, out, rejections=rejections, decisions=decisions))

    def _break_glass_refusal(self, known: FreezeRecord, event: CalendarBreakGlass) -> str | None:
        """Why a calendar's break-glass is refused: its `until` has passed, or its scope has
        MAX_CALENDARS_PER_SCOPE other overrides in force. A calendar not known here is not
        refused: calendars travel on the cluster-observations topic, whose order against
        the intents differs per partition (the doors check the name before sending)."""
        now = self.tables.now
        if now > 0 and event.until <= now:
            return f"break-glass until {iso(event.until)} ends before the engine's time {iso(now)}"
        others = [name for name, glass in known.break_glass.items() if name != event.name and in_force(glass, now)]
        if len(others) >= MAX_CALENDARS_PER_SCOPE:
            return f"{len(others)} break-glass overrides in force in its scope, at most {MAX_CALENDARS_PER_SCOPE}"
        return None

    def end_break_glass(self, first: bool, out: Outcome) -> None:
        """Clock hook, after the modules moved: the calendars' break-glass overrides whose
        `until` the engine's time reached end — dropped, `break-glass-ended` decided once
        (partition 0), and the status of the modules they governed shown again. (The modules
        moved on this tick already saw them ended: `in_force` compares with the time.)"""
        tables = self.tables
        for scope in sorted(tables.freezes.keys()):
            known = tables.freezes[scope]
            ended = sorted(name for name, glass in known.break_glass.items() if not in_force(glass, tables.now))
            if not ended:
                continue
            left = {name: glass for name, glass in known.break_glass.items() if name not in ended}
            tables.freezes[scope] = known.model_copy(update={"break_glass": left})
            for name in ended if tables.partition == 0 else []:
                glass = known.break_glass[name]
                identity = calendar_identity(scope, name)
                because = BreakGlassEnded(calendar=identity, until=glass.until, every_module=True)
                self._decide(identity, DecisionAction.BREAK_GLASS_ENDED, because, out)
            for module in self._governed(scope):
                self.book.show_status(module, out)

    def _decide(
        self,
        identity: str,
        action: DecisionAction,
        because: BrokeGlass | BreakGlassEnded,
        out: Outcome,
        *,
        user: str | None = None,
        via: CommandDoor | None = None,
    ) -> None:
        """A decision about the calendar `identity` itself (`calendar/<identity>`), not a module."""
        out.decisions.append(
            Decision(
                module=calendar_subject(identity),
                action=action,
                reason=render(because),
                because=because,
                at=self.tables.now,
                user=user,
                via=via,
            )
        )

    def _governed(self, scope: str) -> list[str]:
        """The modules of this partition the calendars of `scope` govern, by name."""
        tables = self.tables
        return [
            module
            for module in sorted(tables.modules.keys())
            if tables.modules[module].partition == tables.partition
            and (scope == CLUSTER_SCOPE or tables.modules[module].namespace == scope)
        ]

    def _recheck_scope(self, scope: str, out: Outcome) -> None:
        """The modules under changed calendars (or break-glass) of `scope`: each advanced,
        so a freeze holds it (or lets it go) now, and its status shown."""
        for module in self._governed(scope):
            stored = self.tables.modules[module]
            record = stored.working_copy()
            self.book.index(record.name)
            self.advance(record, out)
            if record != stored:
                self.book.save_module(record, out)
            else:
                self.book.show_status(record.name, out)
