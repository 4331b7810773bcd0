"""The applier applies a consumer batch as one unit (projections/applier.py): the directory
sink writes its state file once for the batch, the simulated status reports go out after
the batch's snapshots, in their order, with one flush before the offsets are committed; an
asynchronous sink is given the batch's clusters at once, each cluster's snapshots in order."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from infra.observability import Health, Metrics
from infra.topics import TopicNames
from projections import applier as applier_module
from projections.applier import APPLY_CONCURRENCY, Applier
from projections.render import FluxRenderer
from projections.sinks import SinkResult
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
    asyncio.run(applier._apply_batch({TopicPartition(NAMES.proxy, 0): [message("eu-1", 5, "podinfo", offset=0)]}, None))
    broken = SimpleNamespace(key=b"eu-2", value=b"{not json", offset=2, timestamp=0)
    batch = {
        TopicPartition(NAMES.proxy, 0): [
            broken,
            message("eu-1", 4, "ingress", offset=1),  # older than the one written before: stale
            message("eu-3", 1, "podinfo", offset=3),
        ]
    }
    asyncio.run(applier._apply_batch(batch, producer))
    assert [args[1] for verb, args in producer.calls if verb == "send"] == ["eu-3"]
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


class SlowAsyncSink:
    """An asynchronous sink whose writes take a while: records what it was given and how
    many writes were in flight at once."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []
        self.in_flight = self.most_in_flight = 0

    async def write(self, kind: str, cluster: str, assemblage: Any) -> SinkResult:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        self.written.append((cluster, assemblage.version))
        return SinkResult(kind=kind, cluster=cluster, version=assemblage.version, written=1)  # type: ignore[arg-type]


def test_an_asynchronous_sink_gets_the_clusters_of_a_batch_at_once_each_ones_newest_snapshot(tmp_path: Path) -> None:
    sink = SlowAsyncSink()
    applier = Applier(
        bootstrap="unused:9092",
        names=NAMES,
        sink=sink,
        group_id="appliers",
        report=False,
        on_result=None,
        metrics=Metrics(),
        health=Health(),
        heartbeats=None,
    )
    clusters = [f"eu-{n}" for n in range(APPLY_CONCURRENCY + 8)]
    batch = {
        TopicPartition(NAMES.proxy, 0): [
            message(cluster, version, "podinfo", offset=offset)
            for offset, (version, cluster) in enumerate((v, c) for v in (1, 2, 3) for c in clusters)
        ]
    }
    asyncio.run(applier._apply_batch(batch, None))
    for cluster in clusters:
        assert [version for name, version in sink.written if name == cluster] == [3]
    assert sink.most_in_flight == APPLY_CONCURRENCY
    assert (applier.stats.snapshots, applier.stats.superseded) == (len(clusters), 2 * len(clusters))


def test_a_synchronous_sink_lets_the_event_loop_run_once_it_held_it_long_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's group heartbeats are sent from the event loop: a batch of slow writes
    must not hold it for the whole batch (here every write is slow enough)."""
    monkeypatch.setattr(applier_module, "HOLD_LOOP_AT_MOST", 0.0)
    applier = simulating_applier(tmp_path)
    turns: list[int] = []  # how many times the other task ran before each write
    ran = 0
    assert isinstance(applier.sink, DirectorySink)
    write = applier.sink.write

    def counting_write(kind: Any, cluster: str, assemblage: Any) -> SinkResult:
        turns.append(ran)
        return write(kind, cluster, assemblage)

    applier.sink.write = counting_write  # type: ignore[method-assign]

    async def batch_beside_another_task() -> None:
        nonlocal ran
        stop = asyncio.Event()

        async def other_task() -> None:
            nonlocal ran
            while not stop.is_set():
                ran += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        batch = {TopicPartition(NAMES.proxy, 0): [message(f"eu-{n}", 1, "podinfo", offset=n) for n in range(4)]}
        await applier._apply_batch(batch, RecordingProducer())
        stop.set()
        await other

    asyncio.run(batch_beside_another_task())
    assert len(turns) == 4
    assert all(later > earlier for earlier, later in itertools.pairwise(turns))


def test_fast_writes_do_not_give_the_event_loop_away_after_each_snapshot(tmp_path: Path) -> None:
    applier = simulating_applier(tmp_path)
    ran = 0

    async def batch_beside_another_task() -> None:
        nonlocal ran
        stop = asyncio.Event()

        async def other_task() -> None:
            nonlocal ran
            while not stop.is_set():
                ran += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        before = ran
        batch = {TopicPartition(NAMES.proxy, 0): [message(f"eu-{n}", 1, "podinfo", offset=n) for n in range(3)]}
        with_the_loop = applier._apply_batch(batch, None)
        await with_the_loop
        ran_during = ran - before
        stop.set()
        await other
        assert ran_during <= 1

    asyncio.run(batch_beside_another_task())


def test_a_snapshot_reports_only_the_syncs_it_added_or_changed(tmp_path: Path) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    partition = TopicPartition(NAMES.proxy, 0)
    asyncio.run(applier._apply_batch({partition: [message("eu-1", 1, "podinfo", "ingress", offset=0)]}, producer))
    moved = snapshot(2, sync("podinfo"), sync("ingress", tag="2.0.0"), sync("dns"), cluster="eu-1")
    record = SimpleNamespace(key=b"eu-1", value=moved.model_dump_json(by_alias=True).encode(), offset=1, timestamp=0)
    producer.calls.clear()

    asyncio.run(applier._apply_batch({partition: [record]}, producer))

    reported = [(args[2]["module"], args[2]["revision"]) for verb, args in producer.calls if verb == "send"]
    assert reported == [("ingress", "2.0.0"), ("dns", "1.0.0")]


def test_a_replica_given_a_cluster_again_reports_its_syncs_again(tmp_path: Path) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    partition = TopicPartition(NAMES.proxy, 0)
    asyncio.run(applier._apply_batch({partition: [message("eu-1", 1, "podinfo", offset=0)]}, producer))
    applier.forget([partition])  # revoked, then assigned again: its snapshots replayed
    producer.calls.clear()
    asyncio.run(applier._apply_batch({partition: [message("eu-1", 1, "podinfo", offset=0)]}, producer))
    assert [args[2]["module"] for verb, args in producer.calls if verb == "send"] == ["podinfo"]
