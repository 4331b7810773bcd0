"""Maintenance windows (docs/rollout-semantics.md, "Maintenance windows"): one
given/when/then test per rule. Times are real: Monday 2 March 2026 (CET, UTC+1) and the
week after the spring-forward of Sunday 29 March 2026 (CEST, UTC+2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.manifests import Stage
from rollout.api.windows import MaintenanceWindow, window_state
from tests.rollout.builders import cluster, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
EVENINGS = {"schedule": "0 22 * * 1-5", "duration": "4h", "timeZone": "Europe/Berlin"}


def utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


MONDAY_20H_UTC = utc(2026, 3, 2, 20, 0)  # 21:00 in Berlin: the evening window opens in an hour
WINDOW_OPENS = utc(2026, 3, 2, 21, 0)  # 22:00 in Berlin


def app(*, windows: list[dict[str, Any]] | None = None, wave: dict[str, Any] | None = None):
    return module("app", {}, "v1", stage("canary", CANARY), {**stage("wave", WAVE), **(wave or {})}, windows=windows)


def test_clusters_move_only_inside_an_allowed_window() -> None:
    fleet = given(cluster("c1", CANARY), app(windows=[EVENINGS]), at=MONDAY_20H_UTC)
    assert fleet.revision("app", "c1") is None
    fleet.tick(WINDOW_OPENS)
    assert fleet.revision("app", "c1") == "v1"


def test_waiting_for_a_window_is_decided_once_with_the_next_opening() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), app(windows=[EVENINGS]), at=MONDAY_20H_UTC)
    fleet.wait(60)
    fleet.wait(60)
    waits = [d.reason for d in fleet.decisions if d.action == "awaiting-window"]
    assert waits == ["stage canary waits for a maintenance window: next opens at 2026-03-02T21:00:00Z"]


def test_status_says_when_the_next_window_opens() -> None:
    fleet = given(cluster("c1", CANARY), app(windows=[EVENINGS]), at=MONDAY_20H_UTC)
    window = fleet.status("app")["stages"][0]["window"]
    assert (window["open"], window["nextOpenAt"]) == (False, "2026-03-02T21:00:00Z")
    fleet.tick(WINDOW_OPENS)
    window = fleet.status("app")["stages"][0]["window"]
    assert (window["open"], window["closesAt"]) == (True, "2026-03-03T01:00:00Z")


def test_updating_clusters_finish_after_the_window_closes() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), at=WINDOW_OPENS)
    fleet.apply(app(windows=[{**EVENINGS, "duration": "30m"}]))
    assert fleet.category("app", "c1") == "updating"
    fleet.tick(WINDOW_OPENS + 1800)  # the window closed while c1 was updating
    fleet.succeed("app", "c1")
    assert fleet.category("app", "c1") == "succeeded"
    assert fleet.revision("app", "w1") is None  # the wave started, but waits for the next window
    assert fleet.record("app").stage_index == 1
    for hour in range(1, 24):
        fleet.tick(WINDOW_OPENS + 3600 * hour)
    assert fleet.revision("app", "w1") is None
    fleet.tick(utc(2026, 3, 3, 21, 0))  # Tuesday, 22:00 in Berlin
    assert fleet.revision("app", "w1") == "v1"


def test_deny_window_stops_moves_inside_it() -> None:
    deny = {"kind": "deny", "schedule": "0 20 * * *", "duration": "2h"}  # 20:00-22:00 UTC
    fleet = given(cluster("c1", CANARY), app(windows=[deny]), at=MONDAY_20H_UTC)
    assert fleet.revision("app", "c1") is None
    assert fleet.status("app")["stages"][0]["window"]["nextOpenAt"] == "2026-03-02T22:00:00Z"
    fleet.tick(utc(2026, 3, 2, 21, 0))
    fleet.tick(utc(2026, 3, 2, 22, 0))
    assert fleet.revision("app", "c1") == "v1"


def test_deny_window_wins_over_an_allow_window() -> None:
    always = {"schedule": "0 0 * * *", "duration": "24h"}
    deny = {"kind": "deny", "schedule": "0 20 * * *", "duration": "2h"}
    fleet = given(cluster("c1", CANARY), app(windows=[always, deny]), at=MONDAY_20H_UTC)
    assert fleet.revision("app", "c1") is None


def test_stage_windows_replace_the_module_windows() -> None:
    now_open = {"schedule": "0 0 * * *", "duration": "24h"}
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        app(windows=[now_open], wave={"windows": [EVENINGS]}),
        at=MONDAY_20H_UTC,
    )
    fleet.succeed("app", "c1")  # the canary moved under the module's window
    assert fleet.revision("app", "w1") is None  # the wave waits for its own
    fleet.tick(WINDOW_OPENS)
    assert fleet.revision("app", "w1") == "v1"


def test_a_window_is_closed_until_the_second_it_opens() -> None:
    windows = (MaintenanceWindow.model_validate(EVENINGS),)
    assert not window_state(windows, WINDOW_OPENS - 0.5).open
    assert window_state(windows, WINDOW_OPENS).open
    assert not window_state(windows, WINDOW_OPENS + 4 * 3600).open


def test_windows_follow_daylight_saving_time() -> None:
    windows = (MaintenanceWindow.model_validate(EVENINGS),)
    after_spring_forward = utc(2026, 3, 30, 12, 0)  # Monday, CEST
    assert window_state(windows, after_spring_forward).next_open == utc(2026, 3, 30, 20, 0)
    assert window_state(windows, utc(2026, 3, 30, 20, 0)).open


def test_before_any_tick_a_stage_with_windows_waits() -> None:
    fleet = given(cluster("c1", CANARY), app(windows=[EVENINGS]), at=None)
    assert fleet.revision("app", "c1") is None
    assert "the engine has seen no tick yet" in fleet.decisions[-1].reason


def test_a_wait_entered_before_any_tick_says_when_the_window_opens_at_the_first_tick() -> None:
    fleet = given(cluster("c1", CANARY), app(windows=[EVENINGS]), at=None)
    fleet.tick(MONDAY_20H_UTC)
    waits = [d.reason for d in fleet.decisions if d.action == "awaiting-window"]
    assert waits == [
        "stage canary waits for a maintenance window: the engine has seen no tick yet",
        "stage canary waits for a maintenance window: next opens at 2026-03-02T21:00:00Z",
    ]
    window = fleet.status("app")["stages"][0]["window"]
    assert (window["open"], window["nextOpenAt"]) == (False, "2026-03-02T21:00:00Z")
    fleet.tick(MONDAY_20H_UTC + 60)  # entered once: later ticks decide nothing new
    assert len([d for d in fleet.decisions if d.action == "awaiting-window"]) == 2
    fleet.tick(WINDOW_OPENS)
    assert fleet.revision("app", "c1") == "v1"


def test_rollback_is_not_held_by_windows() -> None:
    one_hour = [{**EVENINGS, "duration": "1h"}]
    fleet = given(cluster("c1", CANARY), module("app", {}, "v1", stage("canary"), windows=one_hour), at=WINDOW_OPENS)
    fleet.succeed("app", "c1")
    fleet.apply(module("app", {}, "v2", stage("canary"), windows=one_hour))
    assert fleet.revision("app", "c1") == "v2"
    fleet.tick(WINDOW_OPENS + 3600)  # closed
    fleet.rollback("app")
    assert fleet.revision("app", "c1") == "v1"  # back to stable at once


def test_late_joiner_of_a_complete_module_moves_when_the_window_opens() -> None:
    fleet = given(cluster("c1", CANARY), app(windows=[{**EVENINGS, "duration": "1h"}]), at=WINDOW_OPENS)
    fleet.succeed("app", "c1")
    assert fleet.phase("app") == "Complete"
    fleet.tick(WINDOW_OPENS + 3600)
    fleet.apply(cluster("c2", CANARY))
    assert fleet.revision("app", "c2") is None
    for hour in range(2, 26):
        fleet.tick(WINDOW_OPENS + 3600 * hour)
    assert fleet.revision("app", "c2") == "v1"


@pytest.mark.parametrize(
    ("window", "field", "message"),
    [
        ({"schedule": "0 22 * *", "duration": "4h"}, "schedule", "must have 5 fields"),
        ({"schedule": "0 25 * * *", "duration": "4h"}, "schedule", "is not a cron expression: Bad hour"),
        ({"schedule": "0 22 * * *", "duration": "0s"}, "duration", "must be longer than 0s"),
        ({"schedule": "0 22 * * *", "duration": "4h", "timeZone": "Mars/Base"}, "timeZone", "not an IANA time zone"),
        ({"schedule": "0 22 * * *", "duration": "4h", "kind": "maybe"}, "kind", "'allow' or 'deny'"),
    ],
)
def test_invalid_window_is_refused_naming_the_field(window: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as error:
        Stage.model_validate({"name": "s", "windows": [window]})
    assert f"windows.0.{field}" in str(error.value) and message in str(error.value)


def test_module_whose_members_wait_for_a_window_is_not_complete() -> None:
    fleet = given(cluster("c1", CANARY, ready=False), app(windows=[EVENINGS]), at=MONDAY_20H_UTC)
    fleet.apply(cluster("c1", CANARY))  # ready now, outside the window
    assert fleet.revision("app", "c1") is None
    assert fleet.phase("app") == "Progressing"
    waiting = "1 cluster not on the target yet; stage canary waits for a maintenance window"
    assert fleet.status("app")["waiting"] == f"{waiting}, next opens at 2026-03-02T21:00:00Z"
    fleet.tick(WINDOW_OPENS)
    fleet.succeed("app", "c1")
    assert fleet.phase("app") == "Complete"
