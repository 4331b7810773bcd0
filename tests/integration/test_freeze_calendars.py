"""Freeze calendars end to end on the real broker: a real worker whose ticks are the wall
clock. `rollout apply` publishes a FreezeCalendar of namespace `fleet` whose deny window
holds now and ends at most two minutes on; a module of `fleet` moves nothing until then
(`rollout status` says by which calendar and until when, the decision log records it once),
a module of another namespace moves at once, and when the window ends the frozen module's
clusters move. `rollout plan` names the calendar freezing it now. A calendar's break-glass
(`rollout break-glass calendar/NS/NAME`) lets its module move, and one applied after it,
recorded once about the calendar; `rollout plan` shows it in force."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("freezes"), partitions=2) as stack:
        yield stack


def a_module(name: str, namespace: str) -> dict:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "frozen"}},
            "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": "1.0.0"}}}},
            "rollout": {"stages": [{"name": "all"}]},
        },
    }


def calendar(began: datetime) -> dict:
    window = {"name": "now", "schedule": f"{began.minute} {began.hour} * * *", "duration": "2m", "timeZone": "UTC"}
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "FreezeCalendar",
        "metadata": {"name": "quiet", "namespace": "fleet"},
        "spec": {"description": "a freeze for this test", "windows": [window]},
    }


def on_revision(stack: Stack, module: str) -> int:
    return sum(1 for k, t in stack.latest("targets").items() if k.startswith(f"{module}/") and t["revision"])


def test_a_frozen_module_moves_only_after_the_calendars_window(stack: Stack, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    if now.second > 40:  # leave the test time to see the module frozen first
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    began = now.replace(second=0, microsecond=0)
    ends = began + timedelta(minutes=2)
    for name in ("f1", "f2"):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "frozen"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    files = tmp_path / "manifests.yaml"
    documents = [calendar(began), a_module("held", "fleet"), a_module("free", "elsewhere")]
    files.write_text(yaml.safe_dump_all(documents))
    code, output = stack.rollout("plan", "-f", str(files))
    assert code == 0 and "frozen now by calendar fleet/quiet until" in " ".join(output.split()), output
    code, output = stack.rollout("apply", "-f", str(files))
    assert code == 0 and "freezecalendar/fleet/quiet created" in output, output

    wait_for("the other namespace's module to move", lambda: on_revision(stack, "free") == 2, timeout=60)
    expected = ends.isoformat().replace("+00:00", "Z")
    status = wait_for(
        "a frozen status with its end",
        lambda: (s := stack.latest("module_status").get("held")) and (s.get("frozen") or {}).get("untilAt") and s,
    )
    assert status["frozen"] == {"calendars": ["fleet/quiet"], "until": ends.timestamp(), "untilAt": expected}
    assert on_revision(stack, "held") == 0
    code, output = stack.rollout("status", "held")
    assert code == 0 and f"Frozen by calendar fleet/quiet until {expected}" in " ".join(output.split()), output

    wait_for(
        "the frozen module's clusters to move after the window", lambda: on_revision(stack, "held") == 2, timeout=180
    )
    assert time.time() >= ends.timestamp()
    decisions = json.loads(stack.rollout("history", "held", "-o", "json")[1])
    *before, last = [d["reason"] for d in decisions if d["action"] == "awaiting-freeze"]
    assert last == f"frozen by calendar fleet/quiet: until {expected}"
    assert before in ([], ["frozen by calendar fleet/quiet: the engine has seen no tick yet"])
    assert "frozen" not in stack.latest("module_status")["held"]


def test_break_glass_lets_a_frozen_module_move_and_is_recorded(stack: Stack, tmp_path: Path) -> None:
    always = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "FreezeCalendar",
        "metadata": {"name": "always", "namespace": "ice"},
        "spec": {"windows": [{"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}]},
    }
    module = a_module("iced", "ice")
    module["spec"]["selector"] = {"matchLabels": {"app": "iced"}}
    for name in ("i1", "i2"):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "iced"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    files = tmp_path / "iced.yaml"
    files.write_text(yaml.safe_dump_all([always, module]))
    code, output = stack.rollout("apply", "-f", str(files))
    assert code == 0, output
    wait_for(
        "the module frozen",
        lambda: (s := stack.latest("module_status").get("iced")) and (s.get("frozen") or {}).get("untilAt"),
    )
    code, output = stack.rollout("break-glass", "calendar/ice/always", "--for", "1h")
    assert code == 2 and "--reason" in output  # a reason is required
    code, output = stack.rollout("break-glass", "calendar/ice/always", "--reason", "sev-1: the fix", "--for", "1h")
    assert code == 0 and "calendar/ice/always: break-glass for every module it governs" in output, output

    wait_for("the module to move despite the freeze", lambda: on_revision(stack, "iced") == 2, timeout=60)
    status = stack.latest("module_status")["iced"]
    [glass] = status["calendarBreakGlass"]
    assert (glass["calendar"], glass["reason"], glass["via"]) == ("ice/always", "sev-1: the fix", "cli")
    assert "frozen" not in status
    code, output = stack.rollout("status", "iced")
    said = " ".join(output.split())
    assert code == 0 and "Break-glass freeze calendar ice/always overridden for every module it governs until" in said
    # recorded once, about the calendar, whatever the number of partitions and modules
    [broke] = [
        d
        for d in json.loads(stack.rollout("history", "calendar/ice/always", "-o", "json")[1])
        if d["action"] == "break-glass"
    ]
    assert broke["via"] == "cli" and broke["user"] and broke["reason"].endswith(": sev-1: the fix")
    assert not [
        d for d in json.loads(stack.rollout("history", "iced", "-o", "json")[1]) if d["action"] == "break-glass"
    ]

    # a module applied after the break-glass, into the calendar's namespace, moves too
    later = a_module("iced-later", "ice")
    later["spec"]["selector"] = {"matchLabels": {"app": "iced"}}
    files.write_text(yaml.safe_dump_all([later]))
    code, output = stack.rollout("apply", "-f", str(files))
    assert code == 0, output
    wait_for("the module applied later to move", lambda: on_revision(stack, "iced-later") == 2, timeout=60)
    code, output = stack.rollout("plan", "-f", str(files))
    said = " ".join(output.split())
    assert code == 0 and "break-glass of freeze calendar ice/always in force until" in said, output

    code, output = stack.rollout("break-glass", "calendar/ice/nope", "--reason", "typo", "--for", "1h")
    assert code == 1 and "calendar/ice/nope not found" in output, output
