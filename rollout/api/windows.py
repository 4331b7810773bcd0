"""Maintenance windows: when a module's clusters may be moved.

    MaintenanceWindow   one `{kind, schedule, duration, timeZone}` of a manifest
    window_state(windows, now) -> WindowState(open, since/until, next_open)

A window *opens* at every time its cron `schedule` fires, in its `timeZone`, and stays open
for `duration`. `kind: allow` windows say when moves may happen, `kind: deny` windows when
they may not: at a time `now`, a set of windows is **open** when no deny window is and —
if there is any allow window — some allow window is. No windows at all: always open.

Time is the engine's time (a Tick's seconds since the epoch), never a clock read here:
`window_state` is a pure function of the windows and `now`, so the engine stays a fold.
Daylight-saving gaps and repeats follow cronsim's rules (a schedule inside a skipped hour
fires at the end of the gap, once in a repeated hour); the zone data comes from the IANA
database (`tzdata` where the system has none), so two workers with the same tzdata agree.
cronsim is used rather than croniter: croniter 5 gave a wrong next fire across the
Europe/Berlin spring-forward (21:00 instead of 22:00 on the next Monday).

`window_state` is cached per (windows, now): every event between two ticks asks about the
same `now`. The engine uses it in `rollout/engine/window_gate.py`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.api.formats import check_duration, parse_duration, shown

MAX_WINDOWS = 32  # per module or stage
CHANGE_POINTS_SEARCHED = 64  # how far `next_open` looks (window starts and ends)


def check_cron_schedule(value: str) -> str:
    """A 5-field cron expression (maintenance windows, freeze calendars), else ValueError saying why."""
    if len(value.split()) != 5:
        raise ValueError(f"schedule {shown(value)} must have 5 fields: minute hour day-of-month month day-of-week")
    try:
        CronSim(value, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as error:
        raise ValueError(f"schedule {shown(value)} is not a cron expression: {error}") from None
    return value


def check_time_zone(value: str) -> str:
    """An IANA time zone name, else ValueError saying so."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timeZone {shown(value)} is not an IANA time zone (such as Europe/Berlin)") from None
    return value


class MaintenanceWindow(BaseModel):
    """`schedule`: a 5-field cron expression (minute hour day-of-month month day-of-week)
    when the window opens; `duration`: how long it stays open (`4h`, `90m`); `timeZone`:
    an IANA zone (`Europe/Berlin`; default UTC); `kind`: `allow` (moves only inside) or
    `deny` (no moves inside)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    kind: Literal["allow", "deny"] = "allow"
    schedule: str
    duration: str
    time_zone: str = Field(default="UTC", alias="timeZone")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return check_cron_schedule(value)

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        check_duration(value, field="duration", positive=False)
        if parse_duration(value) <= 0:
            raise ValueError(f"duration {shown(value)} must be longer than 0s: the window would never be open")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return check_time_zone(value)


def check_windows(windows: list[MaintenanceWindow]) -> list[MaintenanceWindow]:
    if len(windows) > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS} windows")
    return windows


@dataclass(frozen=True)
class WindowState:
    """Whether moves may happen at `now`; `next_open`: when they may next (None: open
    now, or no opening found within CHANGE_POINTS_SEARCHED window starts and ends);
    `closes_at`: when an open state may end (None: no window bounds it)."""

    open: bool
    next_open: float | None = None
    closes_at: float | None = None


ALWAYS_OPEN = WindowState(open=True)


def _last_start(window: MaintenanceWindow, now: float) -> float:
    """When `window` last opened at or before `now` (seconds since the epoch)."""
    zone = ZoneInfo(window.time_zone)
    # reverse iteration yields fires strictly before its start; fires fall on whole seconds
    start = datetime.fromtimestamp(math.floor(now) + 1, tz=zone)
    return next(iter(CronSim(window.schedule, start, reverse=True))).timestamp()


def _next_start(window: MaintenanceWindow, after: float) -> float:
    zone = ZoneInfo(window.time_zone)
    return next(iter(CronSim(window.schedule, datetime.fromtimestamp(after, tz=zone)))).timestamp()


def _active_until(window: MaintenanceWindow, now: float) -> float | None:
    """The end of the occurrence of `window` that holds `now`, or None if none does."""
    end = _last_start(window, now) + parse_duration(window.duration)
    return end if now < end else None


def _is_open(windows: tuple[MaintenanceWindow, ...], now: float) -> bool:
    if any(_active_until(w, now) is not None for w in windows if w.kind == "deny"):
        return False
    allows = [w for w in windows if w.kind == "allow"]
    return not allows or any(_active_until(w, now) is not None for w in allows)


def _next_change(windows: tuple[MaintenanceWindow, ...], now: float) -> float:
    """The earliest time after `now` when a window opens or closes."""
    points = []
    for window in windows:
        points.append(_next_start(window, now))
        end = _active_until(window, now)
        if end is not None:
            points.append(end)
    return min(points)


@functools.lru_cache(maxsize=4096)
def window_state(windows: tuple[MaintenanceWindow, ...], now: float) -> WindowState:
    """Whether `windows` let clusters move at `now`, and when that changes."""
    if not windows:
        return ALWAYS_OPEN
    if _is_open(windows, now):
        closes = [end for w in windows if w.kind == "allow" and (end := _active_until(w, now)) is not None]
        denies = [_next_start(w, now) for w in windows if w.kind == "deny"]
        ends = [max(closes)] if closes else []
        return WindowState(open=True, closes_at=min([*ends, *denies]) if ends or denies else None)
    moment = now
    for _ in range(CHANGE_POINTS_SEARCHED):
        moment = _next_change(windows, moment)
        if _is_open(windows, moment):
            return WindowState(open=False, next_open=moment)
    return WindowState(open=False)


class Windowed(Protocol):
    """What carries windows: a manifest's `Stage`, a module's `RolloutStrategy`. (Structural,
    so that this module need not import rollout/api/manifests.py, which imports it.)"""

    @property
    def windows(self) -> Sequence[MaintenanceWindow]: ...


class WindowedSpec(Protocol):
    """A `ModuleSpec`, as far as windows go: its rollout strategy, if any."""

    @property
    def rollout(self) -> Windowed | None: ...


def stage_windows(spec: WindowedSpec, stage: Windowed) -> tuple[MaintenanceWindow, ...]:
    """The windows that govern `stage`: its own, else the module's."""
    if stage.windows:
        return tuple(stage.windows)
    return tuple(spec.rollout.windows) if spec.rollout else ()


def stage_window_state(spec: WindowedSpec, stage: Windowed, now: float) -> WindowState | None:
    """The window state of `stage` at `now`; None: the stage has no windows."""
    windows = stage_windows(spec, stage)
    if not windows:
        return None
    if now <= 0:
        return WindowState(open=False)  # no time yet: wait for the first tick
    return window_state(windows, now)


def iso(seconds: float | None) -> str | None:
    """A time for people: ISO 8601 in UTC (None stays None)."""
    if seconds is None:
        return None
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
