"""A freeze calendar's deny windows (rollout/api/freezes.py), evaluated at engine time —
RRULE (RFC 5545, python-dateutil) or cron (cronsim), in an IANA time zone, for a duration."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from rollout.api.freezes import FreezeWindow, frozen_until


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


YEAR_END = FreezeWindow(
    name="year-end",
    rrule="FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=20",
    start="2026-12-20T00:00:00",
    duration="336h",
    time_zone="Europe/Berlin",
)
WEEKEND = FreezeWindow(name="weekend", schedule="0 16 * * 5", duration="64h", time_zone="Europe/Berlin")


def test_an_rrule_window_freezes_from_its_local_start_for_its_duration_every_year() -> None:
    assert frozen_until((YEAR_END,), at("2026-12-19T22:59:59+00:00")) is None
    until = frozen_until((YEAR_END,), at("2026-12-19T23:00:00+00:00"))  # midnight in Berlin
    assert until == at("2027-01-02T23:00:00+00:00")
    assert frozen_until((YEAR_END,), until) is None  # thawed at its end
    assert frozen_until((YEAR_END,), at("2027-12-25T12:00:00+00:00")) == at("2028-01-02T23:00:00+00:00")


def test_a_cron_window_freezes_friday_afternoon_to_monday_morning_in_its_zone() -> None:
    assert frozen_until((WEEKEND,), at("2026-11-27T15:00:00+00:00")) == at("2026-11-30T07:00:00+00:00")
    assert frozen_until((WEEKEND,), at("2026-11-27T14:59:59+00:00")) is None


def test_the_latest_ending_window_holding_now_says_when_the_freeze_ends() -> None:
    friday_in_the_year_end = at("2026-12-25T15:30:00+00:00")
    assert frozen_until((WEEKEND, YEAR_END), friday_in_the_year_end) == at("2027-01-02T23:00:00+00:00")


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"name": "x", "duration": "1h"}, "exactly one of 'rrule'"),
        ({"name": "x", "rrule": "FREQ=DAILY", "duration": "1h"}, "needs 'start'"),
        ({"name": "x", "rrule": "FREQ=NOPE", "start": "2026-01-01T00:00:00", "duration": "1h"}, "invalid 'FREQ'"),
        (
            {"name": "x", "rrule": "FREQ=DAILY", "start": "2026-01-01T00:00:00+01:00", "duration": "1h"},
            "without an offset",
        ),
        ({"name": "x", "schedule": "0 16 * *", "duration": "1h"}, "5 fields"),
        ({"name": "x", "schedule": "0 16 * * 5", "duration": "0s"}, "longer than 0s"),
        ({"name": "x", "schedule": "0 16 * * 5", "duration": "1h", "timeZone": "Mars/Base"}, "IANA"),
    ],
)
def test_an_invalid_window_is_refused_saying_why(window: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FreezeWindow.model_validate(window)


def test_times_are_engine_seconds_not_a_clock() -> None:
    assert datetime.fromtimestamp(at("2026-12-19T23:00:00+00:00"), UTC).hour == 23


def test_a_malformed_calendar_is_refused_naming_file_document_and_field() -> None:
    from rollout.api.loading import ManifestError, load_manifests

    text = b"""
apiVersion: rollout.dev/v1alpha1
kind: ClusterFreezeCalendar
metadata: {name: year-end, namespace: team-a}
spec:
  windows:
    - {name: holidays, rrule: "FREQ=HOURLY", start: "2026-12-20T00:00:00", duration: 336h}
---
apiVersion: rollout.dev/v1alpha1
kind: FreezeCalendar
metadata: {name: weekends, namespace: team-a}
spec:
  windows: []
"""
    with pytest.raises(ManifestError) as refused:
        load_manifests(text, file="freezes.yaml")
    assert [str(problem) for problem in refused.value.problems] == [
        "freezes.yaml: document 1 (ClusterFreezeCalendar/year-end): metadata.namespace: a cluster-scoped object "
        "has no namespace (a FreezeCalendar is the namespaced kind)",
        "freezes.yaml: document 1 (ClusterFreezeCalendar/year-end): spec.windows[0]: rrule 'FREQ=HOURLY': FREQ "
        "must be DAILY or coarser (YEARLY, MONTHLY, WEEKLY, DAILY); use a cron 'schedule' for more",
        "freezes.yaml: document 2 (FreezeCalendar/weekends): spec.windows: 1 to 32 windows",
    ]
