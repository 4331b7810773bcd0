"""`rollout apply`, `rollout break-glass calendar/NAME` and `rollout plan` on the session's real
broker (no worker: `--no-wait`; these are facts about what reaches the topics and what the
CLI reads back): a scope holds at most MAX_CALENDARS_PER_SCOPE freeze calendars — apply
refuses one more, naming the limit, and publishes nothing; a calendar's break-glass is one
CalendarBreakGlass on the intents topic, refused for a calendar the topic does not hold;
plan shows it in force and no longer counts the calendar as freezing the module.
The engine's side is tests/rollout/test_freeze_calendars.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from infra.topics import TopicNames
from rollout.api.freezes import MAX_CALENDARS_PER_SCOPE
from rollout_cli.main import cli
from tests.cli.test_apply import API, a_cluster, a_module, apply, committed, topics, write

__all__ = ["topics"]  # the fixture, shared with test_apply.py

pytestmark = pytest.mark.integration

ALWAYS = {"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}


def a_calendar(name: str, namespace: str = "fleet") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "FreezeCalendar",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"windows": [ALWAYS]},
    }


def run(bootstrap: str, topics: TopicNames, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--bootstrap-servers", bootstrap, "--topic-prefix", topics.prefix])


def test_apply_refuses_a_calendar_beyond_the_scopes_limit_naming_it_and_publishes_nothing(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    full = [a_calendar(f"c{n}") for n in range(MAX_CALENDARS_PER_SCOPE)]
    result = apply(kafka_bootstrap, topics, write(tmp_path / "full.yaml", *full))
    assert result.exit_code == 0, result.output
    published = len(committed(kafka_bootstrap, topics.clusters))
    path = write(tmp_path / "more.yaml", a_calendar("c0"), a_calendar("one-more"), a_calendar("other", "team-b"))
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {path}: document 2 (FreezeCalendar/one-more): namespace fleet already has "
        f"{MAX_CALENDARS_PER_SCOPE} freeze calendars, at most {MAX_CALENDARS_PER_SCOPE} per scope "
        "(delete one, or merge their windows into one calendar)"
    )
    assert len(committed(kafka_bootstrap, topics.clusters)) == published


def test_a_calendars_break_glass_is_one_event_and_plan_shows_it_in_force(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(tmp_path / "fleet.yaml", a_cluster("c1", "canary"), a_calendar("quiet"), a_module("app", selector={}))
    assert apply(kafka_bootstrap, topics, path).exit_code == 0
    result = run(kafka_bootstrap, topics, "plan", "-f", str(path), "-o", "json")
    assert json.loads(result.output)[0]["frozen_by"] == ["fleet/quiet"], result.output

    missing = run(kafka_bootstrap, topics, "break-glass", "calendar/fleet/nope", "--reason", "x", "--for", "1h")
    assert missing.exit_code == 1 and "calendar/fleet/nope not found" in missing.output
    args = ["break-glass", "calendar/fleet/quiet", "--reason", "sev-1: the fix", "--for", "1h", "--no-wait"]
    assert run(kafka_bootstrap, topics, *args).exit_code == 0
    [glass] = [e for e in committed(kafka_bootstrap, topics.intents) if e["type"] == "CalendarBreakGlass"]
    assert (glass["scope"], glass["name"], glass["reason"], glass["via"]) == ("fleet", "quiet", "sev-1: the fix", "cli")

    result = run(kafka_bootstrap, topics, "plan", "-f", str(path), "-o", "json")
    [shown] = json.loads(result.output)
    assert shown["frozen_by"] == []
    [planned] = shown["break_glass"]
    assert (planned["calendar"], planned["every_module"], planned["reason"]) == ("fleet/quiet", True, "sev-1: the fix")
    text = " ".join(run(kafka_bootstrap, topics, "plan", "-f", str(path)).output.split())
    assert "break-glass of freeze calendar fleet/quiet in force until" in text
    assert "(every module it governs): sev-1: the fix" in text
