"""Maintenance windows end to end on the real broker: a real worker whose ticks are the
wall clock. A module whose window opens at the next full minute moves nothing before it
and says when it opens (`rollout status`); at that minute its clusters move; `rollout
plan` describes the window."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("windows"), partitions=2) as stack:
        yield stack


def windowed_module(opens: datetime) -> dict:
    window = {"schedule": f"{opens.minute} {opens.hour} * * *", "duration": "10m", "timeZone": "UTC"}
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": "nightly", "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": "nightly"}},
            "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": "1.0.0"}}}},
            "rollout": {"windows": [window], "stages": [{"name": "all"}]},
        },
    }


def _knowing_the_time(status: dict | None) -> dict | None:
    """`status` once its first stage's window says when it opens (the engine has a clock)."""
    window = status["stages"][0].get("window") if status is not None else None
    return status if window is not None and window.get("nextOpenAt") is not None else None


def test_clusters_move_when_the_window_opens_and_status_says_when(stack: Stack, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    if now.second > 45:  # leave the test time to see the window closed first
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    opens = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)
    document = windowed_module(opens)
    for name in ("n1", "n2"):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "nightly"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    (tmp_path / "nightly.yaml").write_text(yaml.safe_dump(document))
    code, output = stack.rollout("plan", "-f", str(tmp_path / "nightly.yaml"))
    assert code == 0 and f"moves only in windows: allow {opens.minute} {opens.hour} * * * for 10m (UTC)" in output
    stack.send("intents", "nightly", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document)))

    expected = opens.isoformat().replace("+00:00", "Z")
    # the module may reach the engine before its first Tick: when its window opens is known
    # from the first tick on, and the status says it then (rollout/engine/clock.py)
    status = wait_for(
        "a status with the clock", lambda: _knowing_the_time(stack.latest("module_status").get("nightly"))
    )
    window = status["stages"][0]["window"]
    assert (window["open"], window["nextOpenAt"]) == (False, expected)
    assert not any(t for k, t in stack.latest("targets").items() if k.startswith("nightly/") and t["revision"])
    code, output = stack.rollout("status", "nightly")
    assert code == 0 and f"window closed, opens {expected}" in output, output
    decisions = json.loads(stack.rollout("history", "nightly", "-o", "json")[1])
    *before, last = [d["reason"] for d in decisions if d["action"] == "awaiting-window"]
    assert last == f"stage all waits for a maintenance window: next opens at {expected}"
    # (if the module reached the engine before its first tick, it said so first)
    assert before in ([], ["stage all waits for a maintenance window: the engine has seen no tick yet"])

    def moved() -> bool:
        targets = [t for k, t in stack.latest("targets").items() if k.startswith("nightly/")]
        return len(targets) == 2 and all(t["revision"] == "1.0.0" for t in targets)

    wait_for("the clusters to move in the window", moved, timeout=90)
    assert time.time() >= opens.timestamp()
