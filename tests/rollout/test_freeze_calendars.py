"""Freeze calendars in the engine (docs/rollout-semantics.md, "Freeze calendars"): one
given/when/then test per rule. Times are real: the weekend freeze of Friday 27 November
2026, 16:00 in Berlin (15:00 UTC), to Monday 30 November, 08:00 in Berlin (07:00 UTC)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from rollout.api.freezes import MAX_CALENDARS_PER_SCOPE
from rollout.api.manifests import CLUSTER_SCOPE
from rollout.engine.core import RolloutEngine
from rollout.engine.state import FreezeRecord
from rollout.wire.events import EventRejected, parse_event
from tests.rollout.builders import (
    Fleet,
    calendar_applied,
    calendar_break_glass,
    calendar_deleted,
    cluster,
    command,
    freeze_calendar,
    given,
    module,
    stage,
    tick,
)

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
WEEKEND = {"name": "weekend", "schedule": "0 16 * * 5", "duration": "64h", "timeZone": "Europe/Berlin"}


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


FRIDAY_NOON = at("2026-11-27T12:00:00+00:00")
FRIDAY_FROZEN = at("2026-11-27T15:00:00+00:00")
MONDAY_THAW = at("2026-11-30T07:00:00+00:00")


def tick_until(fleet: Fleet, moment: float) -> None:
    """Ticks an hour apart (the most one tick moves the clock: clock.py) up to `moment`."""
    while fleet.now < moment:
        fleet.tick(min(moment, fleet.now + 3600))


def app(namespace: str = "fleet"):
    return module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE), namespace=namespace)


def test_no_cluster_moves_inside_a_deny_window_of_a_cluster_freeze_calendar() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    assert fleet.revision("app", "c1") is None
    assert fleet.phase("app") == "Progressing"  # waits: neither failed nor halted


def test_a_namespaced_calendar_freezes_only_the_modules_of_its_namespace() -> None:
    other = module("other", {}, "v1", stage("canary", CANARY), namespace="team-b")
    fleet = given(
        freeze_calendar("weekends", WEEKEND, namespace="team-a"),
        cluster("c1", CANARY),
        app("team-a"),
        other,
        at=FRIDAY_FROZEN,
    )
    assert fleet.revision("app", "c1") is None
    assert fleet.revision("other", "c1") == "v1"


def test_the_module_moves_on_the_first_tick_after_the_window() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    tick_until(fleet, MONDAY_THAW - 1)
    assert fleet.revision("app", "c1") is None
    tick_until(fleet, MONDAY_THAW)
    assert fleet.revision("app", "c1") == "v1"
    assert "frozen" not in fleet.status("app")


def test_a_freeze_is_decided_once_naming_its_calendars_and_when_it_ends() -> None:
    fleet = given(
        freeze_calendar("weekends", WEEKEND),
        cluster("c1", CANARY),
        cluster("c2", CANARY),
        app(),
        at=FRIDAY_FROZEN,
    )
    fleet.wait(600)
    fleet.wait(600)
    frozen = [d.reason for d in fleet.decisions if d.action == "awaiting-freeze"]
    assert frozen == ["frozen by calendar weekends: until 2026-11-30T07:00:00Z"]


def test_moves_started_before_a_freeze_finish_and_count_but_the_next_stage_waits() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(), at=FRIDAY_NOON)
    assert fleet.revision("app", "c1") == "v1"  # updating when the freeze comes
    fleet.send(freeze_calendar("weekends", WEEKEND))
    tick_until(fleet, FRIDAY_FROZEN)
    fleet.succeed("app", "c1")
    assert fleet.counts("app", "canary")["succeeded"] == 1
    assert fleet.revision("app", "w1") is None
    tick_until(fleet, MONDAY_THAW)
    assert fleet.revision("app", "w1") == "v1"


def test_a_rollback_returns_clusters_inside_a_freeze() -> None:
    fleet = given(cluster("c1", CANARY), app(), at=FRIDAY_NOON)
    fleet.succeed_all("app", "v1")
    fleet.apply(module("app", {}, "v2", stage("canary", CANARY), stage("wave", WAVE)))
    assert fleet.revision("app", "c1") == "v2"
    fleet.send(freeze_calendar("weekends", WEEKEND))
    tick_until(fleet, FRIDAY_FROZEN)
    fleet.rollback("app")
    assert fleet.revision("app", "c1") == "v1"


def test_deleting_the_calendar_lets_the_module_move_at_once() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    fleet.send(calendar_deleted(CLUSTER_SCOPE, "weekends"))
    assert fleet.revision("app", "c1") == "v1"


def test_a_calendar_applied_now_holds_modules_from_now() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", CANARY), app(), at=FRIDAY_FROZEN)
    fleet.send(freeze_calendar("weekends", WEEKEND, namespace="fleet"))
    fleet.succeed("app", "c1")  # c2 waits (maxConcurrency 100 %: both moved already)
    assert fleet.status("app").get("frozen") is None  # nothing left to move: not held
    late = given(cluster("c1", CANARY), at=FRIDAY_FROZEN)
    late.send(freeze_calendar("weekends", WEEKEND, namespace="fleet"), app())
    assert late.status("app")["frozen"]["calendars"] == ["fleet/weekends"]


def test_before_the_first_tick_a_governed_module_waits_for_one() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=None)
    assert fleet.revision("app", "c1") is None
    assert [d.reason for d in fleet.decisions if d.action == "awaiting-freeze"] == [
        "frozen by calendar weekends: the engine has seen no tick yet"
    ]
    fleet.tick(FRIDAY_NOON)
    assert fleet.revision("app", "c1") == "v1"


def test_a_redelivered_calendar_event_changes_nothing() -> None:
    calendar = calendar_applied(freeze_calendar("weekends", WEEKEND))
    fleet = given(calendar, cluster("c1", CANARY), at=FRIDAY_FROZEN)
    fleet.send(calendar_deleted(CLUSTER_SCOPE, "weekends"))
    fleet.send(calendar)  # delivered again after its delete
    fleet.apply(app())
    assert fleet.revision("app", "c1") == "v1"


def test_status_shows_the_calendars_holding_the_module_and_when_they_end() -> None:
    fleet = given(
        freeze_calendar("weekends", WEEKEND),
        freeze_calendar("fridays", {**WEEKEND, "name": "friday", "duration": "8h"}, namespace="fleet"),
        cluster("c1", CANARY),
        app(),
        at=FRIDAY_FROZEN,
    )
    frozen = fleet.status("app")["frozen"]
    assert frozen == {
        "calendars": ["weekends", "fleet/fridays"],
        "until": MONDAY_THAW,
        "untilAt": "2026-11-30T07:00:00Z",
    }


def test_a_complete_module_moves_a_late_joiner_only_after_the_freeze() -> None:
    fleet = given(cluster("c1", CANARY), app(), freeze_calendar("weekends", WEEKEND), at=FRIDAY_NOON)
    fleet.succeed_all("app", "v1")
    assert fleet.phase("app") == "Complete"
    tick_until(fleet, FRIDAY_FROZEN)
    fleet.send(cluster("c2", CANARY))
    assert fleet.revision("app", "c2") is None
    tick_until(fleet, MONDAY_THAW)
    assert fleet.revision("app", "c2") == "v1"
    fleet.succeed("app", "c2")
    assert fleet.phase("app") == "Complete"


def test_a_stored_calendar_this_release_refuses_freezes_its_modules_until_applied_again() -> None:
    from rollout.engine.state import FreezeRecord
    from rollout.engine.stored import decode

    fleet = given(cluster("c1", CANARY), at=FRIDAY_NOON)
    written = {
        "scope": "fleet",
        "calendars": {"odd": {"windows": [{"name": "w", "schedule": "0 16 * * 5", "duration": "1h", "timeZone": "X"}]}},
        "event_ids": [],
    }
    fleet.state["freezes"]["fleet"] = decode("freezes", "fleet", FreezeRecord, json.dumps(written).encode())
    fleet.apply(app())
    assert fleet.revision("app", "c1") is None
    assert fleet.status("app")["frozen"] == {"calendars": ["fleet/odd"], "until": None, "untilAt": None}
    fleet.send(freeze_calendar("odd", WEEKEND, namespace="fleet"))  # applied again, under this release's rules
    assert fleet.revision("app", "c1") == "v1"


# --- break-glass ---------------------------------------------------------------------------


def break_glass(until: float, *, calendar: str | None = None, user: str = "alice@example.com") -> Any:
    return command("app", "break-glass", reason="sev-1 fix", until=until, calendar=calendar, user=user, via="dashboard")


def test_break_glass_lets_a_frozen_module_move_and_records_who_and_why() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    outcome = fleet.send(break_glass(FRIDAY_FROZEN + 7200))
    [broke] = [d for d in outcome.decisions if d.action == "break-glass"]
    assert (broke.reason, broke.user, broke.via) == (
        "break-glass by alice@example.com via dashboard: every freeze calendar overridden until "
        "2026-11-27T17:00:00Z: sev-1 fix",
        "alice@example.com",
        "dashboard",
    )
    assert fleet.revision("app", "c1") == "v1"
    status = fleet.status("app")
    assert "frozen" not in status
    assert status["breakGlass"] == {
        "calendar": None,
        "until": FRIDAY_FROZEN + 7200,
        "untilAt": "2026-11-27T17:00:00Z",
        "reason": "sev-1 fix",
        "user": "alice@example.com",
        "via": "dashboard",
    }


def test_break_glass_ends_at_its_until_and_the_freeze_holds_again() -> None:
    fleet = given(
        freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), cluster("w1", WAVE), app(), at=FRIDAY_FROZEN
    )
    fleet.send(break_glass(FRIDAY_FROZEN + 600))
    assert fleet.revision("app", "c1") == "v1"
    tick_until(fleet, FRIDAY_FROZEN + 600)
    assert [d.reason for d in fleet.decisions if d.action == "break-glass-ended"] == [
        "break-glass ended at 2026-11-27T15:10:00Z: freezes hold again"
    ]
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w1") is None  # frozen again: the next stage waits
    assert fleet.status("app")["frozen"]["calendars"] == ["weekends"]
    assert "breakGlass" not in fleet.status("app")


def test_break_glass_of_one_calendar_leaves_the_others_holding() -> None:
    fleet = given(
        freeze_calendar("weekends", WEEKEND),
        freeze_calendar("fridays", {**WEEKEND, "name": "friday", "duration": "8h"}, namespace="fleet"),
        cluster("c1", CANARY),
        app(),
        at=FRIDAY_FROZEN,
    )
    fleet.send(break_glass(FRIDAY_FROZEN + 7200, calendar="weekends"))
    assert fleet.revision("app", "c1") is None
    assert fleet.status("app")["frozen"]["calendars"] == ["fleet/fridays"]
    fleet.send(break_glass(FRIDAY_FROZEN + 7200, calendar="fleet/fridays"))  # replaces the one before
    assert fleet.status("app")["frozen"]["calendars"] == ["weekends"]


def test_break_glass_is_refused_past_its_until_or_for_a_calendar_not_governing_the_module() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    fleet.send(break_glass(FRIDAY_FROZEN - 1))
    fleet.send(break_glass(FRIDAY_FROZEN + 600, calendar="team-b/other"))
    assert fleet.rejections[-2:] == [
        "break-glass app: break-glass until 2026-11-27T14:59:59Z ends before the engine's time 2026-11-27T15:00:00Z",
        "break-glass app: no freeze calendar team-b/other governs module app (its calendars: weekends)",
    ]
    assert fleet.revision("app", "c1") is None
    assert not [d for d in fleet.decisions if d.action == "break-glass"]


def test_a_break_glass_without_a_reason_or_an_end_is_a_dead_letter() -> None:
    base = {"type": "RolloutCommanded", "id": "e-1", "module": "app", "command": "break-glass"}
    for missing in ({"until": FRIDAY_FROZEN}, {"reason": "sev-1"}):
        with pytest.raises(EventRejected, match="break-glass needs a reason and when it ends"):
            parse_event(json.dumps({**base, **missing}).encode())
    with pytest.raises(EventRejected, match="until and calendar belong to break-glass"):
        parse_event(json.dumps({**base, "command": "pause", "until": FRIDAY_FROZEN}).encode())


# --- a calendar's break-glass (CalendarBreakGlass: every module it governs) ---------------


def on_partition(fleet: Fleet, partition: int) -> Fleet:
    """`fleet`'s engine replaced by one of journal partition `partition` over the same state."""
    fleet.engine = RolloutEngine(**fleet.state, partition=partition)  # type: ignore[arg-type]
    return fleet


def other(name: str = "other", namespace: str = "fleet"):
    return module(name, {}, "v1", stage("canary", CANARY), namespace=namespace)


def test_a_calendars_break_glass_lets_every_module_it_governs_move_decided_once_about_the_calendar() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), other(), at=FRIDAY_FROZEN)
    outcome = fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 7200))
    [broke] = [d for d in outcome.decisions if d.action == "break-glass"]
    assert (broke.module, broke.reason, broke.user, broke.via) == (
        "calendar/weekends",
        "break-glass by alice@example.com via cli: freeze calendar weekends overridden for every module it "
        "governs until 2026-11-27T17:00:00Z: sev-1 fix",
        "alice@example.com",
        "cli",
    )
    assert broke.because.every_module  # type: ignore[union-attr]
    assert (fleet.revision("app", "c1"), fleet.revision("other", "c1")) == ("v1", "v1")
    [answer] = outcome.verdicts
    assert (answer.module, answer.accepted) == ("calendar/weekends", True)


def test_a_module_applied_after_a_calendars_break_glass_moves_while_it_is_in_force() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), at=FRIDAY_FROZEN)
    fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 7200))
    fleet.send(app())
    assert fleet.revision("app", "c1") == "v1"
    assert "frozen" not in fleet.status("app")


def test_a_calendars_break_glass_ends_at_its_until_once_and_its_modules_wait_for_the_freeze_again() -> None:
    fleet = given(
        freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), cluster("w1", WAVE), app(), at=FRIDAY_FROZEN
    )
    fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 600))
    assert fleet.status("app")["calendarBreakGlass"][0]["calendar"] == "weekends"
    tick_until(fleet, FRIDAY_FROZEN + 1200)
    assert [(d.module, d.reason) for d in fleet.decisions if d.action == "break-glass-ended"] == [
        (
            "calendar/weekends",
            "break-glass of freeze calendar weekends ended at 2026-11-27T15:10:00Z: freezes hold again",
        )
    ]
    assert "calendarBreakGlass" not in fleet.status("app")
    assert fleet.state["freezes"][CLUSTER_SCOPE].break_glass == {}  # nothing kept past its end
    fleet.succeed("app", "c1")
    assert fleet.revision("app", "w1") is None
    assert fleet.status("app")["frozen"]["calendars"] == ["weekends"]
    fleet.send(app())  # applied again: no break-glass left to let it move
    assert fleet.revision("app", "w1") is None


def test_a_namespaces_calendar_break_glass_leaves_the_other_calendars_and_namespaces_frozen() -> None:
    fridays = freeze_calendar("fridays", {**WEEKEND, "name": "friday", "duration": "8h"}, namespace="fleet")
    fleet = given(
        freeze_calendar("weekends", WEEKEND),
        fridays,
        freeze_calendar("fridays", {**WEEKEND, "name": "friday", "duration": "8h"}, namespace="team-b"),
        cluster("c1", CANARY),
        app(),
        other("elsewhere", namespace="team-b"),
        at=FRIDAY_FROZEN,
    )
    fleet.send(calendar_break_glass("fridays", FRIDAY_FROZEN + 7200, scope="fleet"))
    assert fleet.revision("app", "c1") is None
    assert fleet.status("app")["frozen"]["calendars"] == ["weekends"]
    assert fleet.status("elsewhere")["frozen"]["calendars"] == ["weekends", "team-b/fridays"]
    assert "calendarBreakGlass" not in fleet.status("elsewhere")
    fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 7200))
    assert fleet.revision("app", "c1") == "v1"
    assert fleet.revision("elsewhere", "c1") is None  # team-b/fridays still holds it


def test_a_redelivered_calendar_break_glass_changes_nothing() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    glass = calendar_break_glass("weekends", FRIDAY_FROZEN + 600)
    fleet.send(glass)
    tick_until(fleet, FRIDAY_FROZEN + 1200)  # ended
    again = fleet.send(glass)
    assert (again.decisions, again.rejections, again.verdicts) == ([], [], [])
    assert fleet.state["freezes"][CLUSTER_SCOPE].break_glass == {}


def test_a_calendars_break_glass_past_its_until_is_refused_by_one_dead_letter() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    outcome = fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN - 1))
    assert outcome.rejections == [
        "break-glass calendar/weekends: break-glass until 2026-11-27T14:59:59Z ends before the engine's time "
        "2026-11-27T15:00:00Z"
    ]
    assert [(v.module, v.accepted) for v in outcome.verdicts] == [("calendar/weekends", False)]
    assert fleet.revision("app", "c1") is None


def test_every_partition_keeps_a_calendars_break_glass_but_only_partition_0_decides_and_answers() -> None:
    fleet = on_partition(Fleet(), 1)
    fleet.send(tick(FRIDAY_FROZEN), freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app())
    outcome = fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 600))
    assert (outcome.decisions[0].action, outcome.decisions[0].module) == ("assign", "app")
    assert not [d for d in outcome.decisions if d.action == "break-glass"] and outcome.verdicts == []
    assert fleet.revision("app", "c1") == "v1"
    late = fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN - 1))
    assert (late.rejections, late.verdicts) == ([], [])  # partition 0 says it, once
    tick_until(fleet, FRIDAY_FROZEN + 1200)
    assert not [d for d in fleet.decisions if d.action == "break-glass-ended"]
    assert fleet.state["freezes"][CLUSTER_SCOPE].break_glass == {}


def test_a_freeze_record_stored_before_calendar_break_glass_reads_back_and_is_stored_as_before() -> None:
    stored = {"scope": "*", "calendars": {}, "event_ids": ["e-1"]}
    record = FreezeRecord.model_validate(stored)
    assert record.break_glass == {}
    assert json.loads(record.model_dump_json()) == stored


def test_a_module_level_break_glass_and_a_calendars_are_both_shown_in_status() -> None:
    fleet = given(freeze_calendar("weekends", WEEKEND), cluster("c1", CANARY), app(), at=FRIDAY_FROZEN)
    fleet.send(break_glass(FRIDAY_FROZEN + 600))
    fleet.send(calendar_break_glass("weekends", FRIDAY_FROZEN + 7200, user="bob@example.com", via="crd"))
    status = fleet.status("app")
    assert status["breakGlass"]["user"] == "alice@example.com"
    assert status["calendarBreakGlass"] == [
        {
            "calendar": "weekends",
            "until": FRIDAY_FROZEN + 7200,
            "untilAt": "2026-11-27T17:00:00Z",
            "reason": "sev-1 fix",
            "user": "bob@example.com",
            "via": "crd",
        }
    ]


# --- calendars per scope ---------------------------------------------------------------------


def test_a_calendar_beyond_the_scopes_limit_is_a_dead_letter_naming_the_limit() -> None:
    always = {"name": "always", "schedule": "* * * * *", "duration": "1h"}
    calendars = [freeze_calendar(f"c{n}", always, namespace="fleet") for n in range(MAX_CALENDARS_PER_SCOPE)]
    fleet = given(*calendars, cluster("c1", CANARY), at=FRIDAY_NOON)
    outcome = fleet.send(freeze_calendar("one-too-many", always, namespace="fleet"))
    assert outcome.rejections == [
        f"freeze calendar fleet/one-too-many refused: namespace fleet has {MAX_CALENDARS_PER_SCOPE} calendars, "
        f"at most {MAX_CALENDARS_PER_SCOPE} per scope"
    ]
    assert "one-too-many" not in fleet.state["freezes"]["fleet"].calendars
    fleet.send(freeze_calendar("c0", {**always, "duration": "2h"}, namespace="fleet"))  # a known one changes
    assert fleet.state["freezes"]["fleet"].calendars["c0"].windows[0].duration == "2h"
    assert fleet.rejections == outcome.rejections
