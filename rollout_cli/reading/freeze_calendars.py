"""The freeze calendars as the CLI knows them: the cluster-observations topic folded into the
calendar in force per (scope, name) — the latest FreezeCalendarApplied, unless a
FreezeCalendarDeleted of it came after (the engine keeps the same: rollout/engine/freeze_gate.py).
Read by apply (created / configured / unchanged), delete, and plan (which modules a
calendar holds now).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from rollout.api.manifests import AnyFreezeCalendar

if TYPE_CHECKING:
    from infra import client

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
