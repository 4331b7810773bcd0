"""The applier applies a consumer batch as one unit (projections/applier.py): the directory
sink writes its state file once for the batch, and the simulated status reports go out
after the batch's snapshots, in their order, with one flush before the offsets are committed."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from infra.observability import Health, Metrics
from infra.topics import TopicNames
from projections.applier import Applier
from projections.render import FluxRenderer
from projections.sinks.directory import STATE_FILE, DirectorySink
from tests.projections.test_directory_sink import snapshot, sync

NAMES = TopicNames("test.")


class RecordingProducer:
    """What `AIOKafkaProducer` is asked: sends (topic, key, value as JSON) and flushes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def send(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.calls.append(("send", (topic, key.decode(), json.loads(value))))

    async def flush(self) -> None:
        self.calls.append(("flush", None))


def simulating_applier(root: Path) -> Applier:
    return Applier(
        bootstrap="unused:9092",
        names=NAMES,
        sink=DirectorySink(root, FluxRenderer()),
        group_id="appliers",
        report=True,
        on_result=None,
        metrics=Metrics(),
        health=Health(),
        heartbeats=None,
    )


def message(cluster: str, version: int, *modules: str, offset: int) -> SimpleNamespace:
    document = snapshot(version, *(sync(module) for module in modules), cluster=cluster)
    return SimpleNamespace(
        key=cluster.encode(), value=document.model_dump_json(by_alias=True).encode(), offset=offset, timestamp=0
    )


def test_status_reports_of_a_batch_follow_its_snapshots_in_order_then_one_flush(tmp_path: Path) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    batch = {
        TopicPartition(NAMES.proxy, 0): [message("eu-1", 1, "podinfo", "ingress", offset=0)],
        TopicPartition(NAMES.proxy, 1): [
            message("eu-2", 1, "podinfo", offset=0),
            message("eu-3", 2, "ingress", offset=1),
        ],
    }
    asyncio.run(applier._apply_batch(batch, producer))
    sent = [(key, value["module"], value["state"], value["type"]) for verb, (_, key, value) in producer.calls[:-1]]
    assert sent == [
        ("eu-1", "podinfo", "succeeded", "SyncStatusReported"),
        ("eu-1", "ingress", "succeeded", "SyncStatusReported"),
        ("eu-2", "podinfo", "succeeded", "SyncStatusReported"),
        ("eu-3", "ingress", "succeeded", "SyncStatusReported"),
    ]
    assert {call[1][0] for call in producer.calls[:-1]} == {NAMES.status}
    assert producer.calls[-1] == ("flush", None)


def test_a_stale_or_failed_snapshot_in_a_batch_reports_nothing_and_the_others_still_do(tmp_path: Path) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    broken = SimpleNamespace(key=b"eu-2", value=b"{not json", offset=1, timestamp=0)
    batch = {
        TopicPartition(NAMES.proxy, 0): [
            message("eu-1", 5, "podinfo", offset=0),
            broken,
            message("eu-1", 4, "podinfo", offset=2),  # older than the one just written: stale
            message("eu-3", 1, "podinfo", offset=3),
        ]
    }
    asyncio.run(applier._apply_batch(batch, producer))
    assert [args[1] for verb, args in producer.calls if verb == "send"] == ["eu-1", "eu-3"]
    assert (applier.stats.errors, applier.stats.stale) == (1, 1)


def test_a_batch_writes_the_directory_state_file_once_after_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    replaced: list[str] = []
    real_replace = os.replace

    def recording_replace(source: str, destination: str) -> None:
        replaced.append(Path(destination).name)
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", recording_replace)
    batch = {TopicPartition(NAMES.proxy, 0): [message(f"eu-{n}", 1, "podinfo", offset=n) for n in range(3)]}
    asyncio.run(applier._apply_batch(batch, producer))
    assert replaced == ["podinfo.yaml", "podinfo.yaml", "podinfo.yaml", STATE_FILE]
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert sorted(state["snapshots"]) == ["ProxyAssemblage/eu-0", "ProxyAssemblage/eu-1", "ProxyAssemblage/eu-2"]
