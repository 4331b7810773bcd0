"""Freeze calendars: deny windows in which no module they govern moves a cluster forward.

Two kinds of `rollout.dev/v1alpha1` share one spec (`FreezeCalendarSpec`, a list of deny
windows; the manifest types are in rollout/api/manifests.py beside the ModuleRestriction):

    FreezeCalendar          namespaced: governs every Module/BootstrapModule of its namespace
    ClusterFreezeCalendar   cluster-scoped: governs every module of the fleet

A window starts at every occurrence of an RFC 5545 `rrule` (python-dateutil's rrule;
`start` is its DTSTART, a local date-time in `timeZone`) or of a 5-field cron `schedule`
(cronsim, as maintenance windows), and lasts `duration`. Why python-dateutil: RRULE is the
calendar format people already have (iCalendar exports of change-freeze calendars), and
its BYDAY/BYSETPOS/COUNT/UNTIL rules are not something to write again.

`frozen_until(windows, now)` is pure: the end of the latest-ending window that holds `now`
(engine time, from Ticks), or None. The engine's rule is rollout/engine/freeze_gate.py.
Evaluating an rrule walks its occurrences from `start`, so results are cached per
(windows, now): the engine's time changes only on ticks, and every event between two ticks
asks the same question.
"""

from __future__ import annotations

import functools
from datetime import datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim
from dateutil.rrule import DAILY, rrule, rrulestr  # type: ignore[import-untyped]  # no stubs installed
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollout.api.formats import check_dns1123_label, check_duration, parse_duration, shown
from rollout.api.windows import check_cron_schedule, check_time_zone

MAX_FREEZE_WINDOWS = 32
# Calendars one scope (a namespace's FreezeCalendars, or the fleet's ClusterFreezeCalendars)
# may hold: every move-wanting fill of a governed module looks at each of them (and each of
# their windows), so their count bounds the gate's work per event. `rollout apply` refuses a
# calendar beyond it, the engine dead-letters one (rollout/engine/freeze_gate.py); a scope's
# break-glass overrides in force are bounded the same.
MAX_CALENDARS_PER_SCOPE = 16


class FreezeWindow(BaseModel):
    """One deny window: `rrule` + `start`, or `schedule`; `duration`; `timeZone`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    name: str
    rrule: str | None = Field(default=None, max_length=500)
    start: str | None = None  # DTSTART of `rrule`: a local date-time such as 2026-12-20T00:00:00
    schedule: str | None = Field(default=None, max_length=200)
    duration: str
    time_zone: str = Field(default="UTC", alias="timeZone")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return check_time_zone(value)

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        check_duration(value, field="duration", positive=False)
        if parse_duration(value) <= 0:
            raise ValueError(f"duration {shown(value)} must be longer than 0s")
        return value

    @model_validator(mode="after")
    def _one_recurrence(self) -> FreezeWindow:
        if (self.rrule is None) == (self.schedule is None):
            raise ValueError("give exactly one of 'rrule' (with 'start') or 'schedule'")
        if self.schedule is not None:
            if self.start is not None:
                raise ValueError("'start' goes with 'rrule', not with a cron 'schedule'")
            check_cron_schedule(self.schedule)
            return self
        if self.start is None:
            raise ValueError("an 'rrule' needs 'start', its first occurrence (a local date-time)")
        try:
            _recurrence(self.rrule or "", self.start, self.time_zone)
        except (ValueError, TypeError) as error:
            raise ValueError(f"rrule {shown(self.rrule)}: {error}") from None
        return self


@functools.lru_cache(maxsize=256)
def _recurrence(rule: str, start: str, zone: str) -> rrule:
    if "DTSTART" in rule.upper():
        raise ValueError("give the first occurrence as 'start', not DTSTART in the rule")
    first = datetime.fromisoformat(start)
    if first.tzinfo is not None:
        raise ValueError("'start' is a local date-time in 'timeZone', without an offset")
    parsed = rrulestr(rule, dtstart=first.replace(tzinfo=ZoneInfo(zone)), cache=True)
    if not isinstance(parsed, rrule):
        raise ValueError("one RRULE, not a set")
    if parsed._freq > DAILY:  # dateutil exposes no getter for FREQ
        raise ValueError(
            "FREQ must be DAILY or coarser (YEARLY, MONTHLY, WEEKLY, DAILY); use a cron 'schedule' for more"
        )
    return parsed


def _last_start(window: FreezeWindow, now: float) -> float | None:
    """When `window` last began at or before `now` (None: never yet)."""
    zone = ZoneInfo(window.time_zone)
    if window.schedule is not None:
        start = datetime.fromtimestamp(int(now) + 1, tz=zone)
        return next(iter(CronSim(window.schedule, start, reverse=True))).timestamp()
    rule = _recurrence(window.rrule or "", window.start or "", window.time_zone)
    before = rule.before(datetime.fromtimestamp(now, tz=zone), inc=True)
    return before.timestamp() if before is not None else None


def window_end(window: FreezeWindow, now: float) -> float | None:
    """The end of the occurrence of `window` holding `now`; None when none does."""
    began = _last_start(window, now)
    if began is None:
        return None
    end = began + parse_duration(window.duration)
    return end if now < end else None


def frozen_until(windows: tuple[FreezeWindow, ...], now: float) -> float | None:
    """The end of the latest-ending window holding `now` (None: not frozen)."""
    ends = [end for window in windows if (end := window_end(window, now)) is not None]
    return max(ends) if ends else None


@functools.lru_cache(maxsize=1024)
def frozen_until_cached(windows: tuple[FreezeWindow, ...], now: float) -> float | None:
    """`frozen_until`, remembered: between two ticks every event asks the same question."""
    return frozen_until(windows, now)


class FreezeCalendarSpec(BaseModel):
    """The deny windows of a FreezeCalendar or ClusterFreezeCalendar."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    # shown beside the freeze in status and decisions ("year-end change freeze")
    description: str = Field(default="", max_length=200)
    windows: tuple[FreezeWindow, ...]

    @field_validator("windows", mode="before")
    @classmethod
    def _as_tuple(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) else value

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: tuple[FreezeWindow, ...]) -> tuple[FreezeWindow, ...]:
        return check_freeze_windows(value)


def check_freeze_windows(windows: tuple[FreezeWindow, ...]) -> tuple[FreezeWindow, ...]:
    if not 0 < len(windows) <= MAX_FREEZE_WINDOWS:
        raise ValueError(f"1 to {MAX_FREEZE_WINDOWS} windows")
    names = [w.name for w in windows]
    if len(set(names)) != len(names):
        raise ValueError("window names must be unique")
    return windows
