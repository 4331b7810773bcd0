"""`rollout up`'s live summary (rollout_cli/status_summary.py) over every module-status
document shape the engine writes: held (not staged yet, and held behind a status), each
phase, paused, deleting, deleted — one line per module each time what it shows changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from infra.client import Record
from rollout_cli import processes
from rollout_cli.status_summary import StatusSummary
from tests.rollout.builders import applied, cluster, command, deleted, given, module, stage


def every_shape() -> list[tuple[str, dict[str, Any] | None]]:
    """(module, document) as the engine publishes them, in order, one of each shape."""
    fleet = given(cluster("c1", {"ring": "canary"}), cluster("w1"))
    documents: list[tuple[str, dict[str, Any] | None]] = []

    def publish(name: str) -> None:
        documents.append((name, fleet.module_status.get(name)))

    fleet.send(applied(module("podinfo", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=True))))
    publish("podinfo")  # Progressing
    fleet.succeed("podinfo", "c1")
    publish("podinfo")  # AwaitingApproval
    fleet.send(command("podinfo", "approve", stage="wave"))
    fleet.succeed("podinfo", "w1")
    publish("podinfo")  # Complete
    fleet.send(applied(module("app", {}, "v1"), fleet={0: 5}))
    publish("app")  # held, not staged yet: no stages, no target
    fleet.send(applied(module("podinfo", {}, "v2", stage("canary", {"ring": "canary"}), stage("wave"))))
    fleet.send(command("podinfo", "pause"))
    publish("podinfo")  # Paused
    fleet.send(applied(module("podinfo", {}, "v3"), fleet={0: 5}))
    publish("podinfo")  # its status, with an intent held behind it
    fleet.send(applied(module("base", {}, "v1")), applied(module("web", {}, "v1", depends_on=["base"])))
    fleet.send(deleted("base"))
    publish("base")  # deleting: waits for web
    fleet.send(deleted("web"))
    publish("web")  # deleted: a tombstone
    return documents


def test_summary_prints_every_document_shape_once_per_change() -> None:
    shapes = every_shape()
    assert shapes[3][1] is not None and "stages" not in shapes[3][1]  # the held shape is among them
    summary = StatusSummary()
    lines = [summary.line(name, document) for name, document in shapes]
    assert all(line is not None for line in lines), lines
    assert "podinfo        Progressing" in lines[0] and "0/2 succeeded" in lines[0]
    assert "AwaitingApproval" in lines[1] and "Complete" in lines[2] and "2/2 succeeded" in lines[2]
    assert lines[3].startswith("app            Pending") and "1 intent(s) held: waiting for cluster" in lines[3]
    assert "Paused" in lines[4] and "target v2" in lines[4]
    assert "target v2" in lines[5] and "intent(s) held" in lines[5]
    assert "deleting once the modules depending on it are" in lines[6]
    assert lines[7] == "web: deleted"
    assert [summary.line(name, document) for name, document in shapes[-2:]] == [None, None]  # nothing new


async def test_up_summary_shows_a_held_module_and_what_follows_it_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shapes = every_shape()
    records = [
        Record("t.module-status", 0, i, name, None if doc is None else json.dumps(doc).encode())
        for i, (name, doc) in enumerate(shapes)
    ]

    async def follow(bootstrap: str, topic: str, *, from_beginning: bool = True) -> AsyncIterator[Record]:
        for record in records:  # the whole topic, as a restarted follow would read it again
            yield record
        await asyncio.Event().wait()

    monkeypatch.setattr(processes.client, "follow", follow)
    monkeypatch.setattr(processes, "_stop_on_signals", lambda stop: None)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(processes._summarize("unused:9092", "t.", [], None), timeout=2.5)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(shapes)  # each change once; before, the held document restarted the topic
    assert any(" app " in line and "Pending" in line for line in printed)
    assert any("target v3" in line or "target v2" in line for line in printed)


def test_get_modules_lists_every_document_shape() -> None:
    from rollout_cli.listing import _module_row

    rows = [_module_row(name, document, wide=True) for name, document in every_shape() if document is not None]
    assert rows[3][:7] == ["app", "-", "Pending", "-", "-", "-", "0/0"]  # held, not staged yet
    assert rows[2][:7] == ["podinfo", "Module", "Complete", "v1", "v1", "wave", "2/2"]
