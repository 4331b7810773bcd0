"""The freeze calendars as the CLI knows them: the cluster-observations topic folded into the
calendar in force per (scope, name) — the latest FreezeCalendarApplied, unless a
FreezeCalendarDeleted of it came after (the engine keeps the same: rollout/engine/freeze_gate.py).
Read by apply (created / configured / unchanged), delete, and plan (which modules a
calendar holds now). The calendars' break-glass overrides as the intents topic holds them
(`break_glass_from_records`: the latest CalendarBreakGlass per calendar, as the engine keeps
it), for plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from rollout.api.manifests import AnyFreezeCalendar

if TYPE_CHECKING:
    from infra import client
    from rollout.wire.events import CalendarBreakGlass

CALENDAR_ADAPTER: TypeAdapter[AnyFreezeCalendar] = TypeAdapter(AnyFreezeCalendar)


def calendars_from_records(records: Sequence[client.Record]) -> dict[tuple[str, str], AnyFreezeCalendar]:
    """(scope, name) → the calendar in force; scope is a namespace, or `*` for the fleet's."""
    calendars: dict[tuple[str, str], AnyFreezeCalendar] = {}
    for record in records:
        try:
            event = record.json()
            if not isinstance(event, dict):
                continue
            if event.get("type") == "FreezeCalendarApplied":
                calendar = CALENDAR_ADAPTER.validate_python(event["calendar"])
                calendars[calendar.scope, calendar.name] = calendar
            elif event.get("type") == "FreezeCalendarDeleted":
                calendars.pop((str(event.get("scope")), str(event.get("name"))), None)
        except (ValueError, KeyError, TypeError, ValidationError):
            continue  # malformed events are the dead-letter topic's business
    return calendars


def governing(calendars: dict[tuple[str, str], AnyFreezeCalendar], namespace: str) -> list[AnyFreezeCalendar]:
    """The calendars a module of `namespace` obeys: the fleet's, then its namespace's, by name."""
    return [calendars[key] for key in sorted(calendars) if key[0] in ("*", namespace)]


def calendar_named(target: str) -> tuple[str, str] | str:
    """The (scope, name) of `calendar/NAME` (a ClusterFreezeCalendar: scope `*`) or
    `calendar/NAMESPACE/NAME` (a FreezeCalendar) — or why `target` names none."""
    from rollout.api.formats import check_dns1123_label
    from rollout.api.manifests import CLUSTER_SCOPE

    parts = target.removeprefix("calendar/").split("/")
    if not target.startswith("calendar/") or len(parts) not in (1, 2):
        return f"name a calendar as calendar/NAME or calendar/NAMESPACE/NAME, not {target!r}"
    for part in parts:
        try:
            check_dns1123_label(part)
        except ValueError as error:
            return f"{target}: {error}"
    return (CLUSTER_SCOPE, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def break_glass_from_records(records: Sequence[client.Record]) -> dict[tuple[str, str], CalendarBreakGlass]:
    """(scope, name) → the latest break-glass of that calendar on the intents topic (a new
    one replaces the one before, as in the engine: rollout/engine/freeze_gate.py)."""
    from rollout.wire.events import CalendarBreakGlass, EventRejected, parse_event

    found: dict[tuple[str, str], CalendarBreakGlass] = {}
    for record in records:
        if record.value is None or record.key is None or not record.key.startswith("freeze/"):
            continue  # module intents are keyed by module
        try:
            event = parse_event(record.value)
        except EventRejected:
            continue  # the dead-letter topic's business
        if isinstance(event, CalendarBreakGlass):
            found[event.scope, event.name] = event
    return found
