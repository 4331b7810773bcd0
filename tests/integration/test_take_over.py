"""Taking partitions over: each owned partition's state is folded from the stage's state
topic (streams/restore.py) — fenced all at once, read one partition after another — and
the state reader pauses each partition once read: idle, it polls nothing. (Its short long poll is what keeps the next
take-over from waiting behind the last fetch: ~0.5 s per partition with aiokafka's default;
the throughput benchmark's worker logs show the time each take-over took.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import CollectorRegistry, Counter

from infra.observability import Metrics
from streams.delivery import StageRunner, StageSpec
from streams.lifecycle import PartitionPhase
from streams.restore import StateReader
from streams.state import PartitionState, Tracking
from tests.integration.stack import stage_runner

pytestmark = pytest.mark.integration

PARTITIONS = 4


class Counting:
    """A stateful processor whose state is one mapping of integers."""

    def __init__(self) -> None:
        self.state = PartitionState({"counts": int})

    def process(self, records: object, position: int, out: object) -> None:
        pass

    def reset(self) -> None:
        pass


async def _topics(bootstrap: str, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    finally:
        await admin.close()


async def _write_state(bootstrap: str, topic: str) -> None:
    """Partition p: counts p-0 … p-(p+1) and a tracked position of 10·p (as a stage commits)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}.writer")
    await producer.start()
    try:
        async with producer.transaction():
            for p in range(PARTITIONS):
                for n in range(p + 2):
                    await producer.send(topic, str(n).encode(), key=f"counts:{p}-{n}".encode(), partition=p)
                position = Tracking(offset=10 * p, events=10 * p).model_dump_json().encode()
                await producer.send(topic, position, key=b"tracking:position", partition=p)
    finally:
        await producer.stop()
    await _until_markers_written(bootstrap, topic)


async def _until_markers_written(bootstrap: str, topic: str) -> None:
    """A commit returns once the coordinator logged it; its markers follow. Until then a
    read_committed reader sees nothing (a stage fences the writer's own transactional ids
    first, which waits for them; this writer's id is nobody's)."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        for _ in range(200):
            ends = await reader.end_offsets(tps)
            if all(ends[tp] == tp.partition + 4 for tp in tps):  # p+3 records and the marker
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the commit markers of {topic} were not written: {ends}")
    finally:
        await reader.stop()


def _counting_stage(topic: str, state_topic: str) -> StageSpec:
    """The counting stage over `topic`, its state on `state_topic`."""
    return StageSpec(
        name="counting",
        topics=(topic,),
        group_id=f"{topic}.group",
        dead_letter_topic=f"{topic}.dead",
        new_processor=lambda tp: Counting(),
        state_topic=state_topic,
    )


def _expected(p: int) -> dict[str, int]:
    return {f"{p}-{n}": n for n in range(p + 2)}


async def test_the_state_reader_folds_a_partition_and_lets_go_of_it(kafka_bootstrap: str) -> None:
    topic = f"take-over-state-{uuid.uuid4().hex[:8]}"
    await _topics(kafka_bootstrap, topic)
    await _write_state(kafka_bootstrap, topic)
    reader = StateReader(kafka_bootstrap, topic, "take-over-test", {})
    await reader.start()
    try:
        for p in (2, 0):  # one partition after another, as take-overs go
            state = PartitionState({"counts": int})
            folded, end = await reader.catch_up(state, p, 0)
            assert folded == p + 3  # the counts and the tracked position
            assert dict(state.mappings["counts"].committed) == _expected(p)
            assert state.tracking.offset == 10 * p
            assert reader.consumer.paused() == {TopicPartition(topic, p)}, "not polled while idle"
            assert await reader.catch_up(state, p, end) == (0, end), "nothing new since the end"
    finally:
        await reader.stop()


async def test_a_stage_takes_every_partition_over_from_its_state_topic(kafka_bootstrap: str) -> None:
    topic = f"take-over-{uuid.uuid4().hex[:8]}"
    state_topic = f"{topic}.state"
    await _topics(kafka_bootstrap, topic, state_topic)
    await _write_state(kafka_bootstrap, state_topic)
    spec = _counting_stage(topic, state_topic)
    runner = stage_runner(kafka_bootstrap, spec)
    await runner.start()
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.joined.wait(), timeout=60)
        assert sorted(tp.partition for tp in runner.slots) == list(range(PARTITIONS))
        for tp, slot in runner.slots.items():
            state = slot.processor.state
            assert state is not None and slot.broken is None
            assert dict(state.mappings["counts"].committed) == _expected(tp.partition)
            assert slot.position == 10 * tp.partition, "resumes at the tracked position"
        assert runner.reader is not None
        paused = runner.reader.consumer.paused()  # the partitions are taken over at once, read one at a time
        assert len(paused) == 1 and next(iter(paused)).topic == state_topic, "the last one read, paused"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await runner.stop()


async def test_a_take_over_longer_than_the_session_keeps_the_worker_in_its_group(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiokafka sends no heartbeat while its assignment callback runs: a take-over run in it
    that outlasted the session (the decider's at 100,000 x 20 under load: ~70 s, 45 s
    sessions) got the worker expelled right after it was ready, and it took its partitions
    over again (issue 22). The take-over runs beside the group's heartbeats instead."""
    topic = f"take-over-long-{uuid.uuid4().hex[:8]}"
    state_topic = f"{topic}.state"
    await _topics(kafka_bootstrap, topic, state_topic)
    await _write_state(kafka_bootstrap, state_topic)
    session = 6.0  # the broker's least (group.min.session.timeout.ms)
    catch_up = StateReader.catch_up

    async def slow_catch_up(self: StateReader, state: PartitionState, partition: int, start: int) -> tuple[int, int]:
        await asyncio.sleep(1.5 * session / PARTITIONS)  # a large state under load: 1.5 sessions in all
        return await catch_up(self, state, partition, start)

    monkeypatch.setattr(StateReader, "catch_up", slow_catch_up)  # fault injection: a slow broker/CPU
    spec = _counting_stage(topic, state_topic)
    duplicates = Counter("duplicates", "", ["stage"], registry=CollectorRegistry())
    runner = StageRunner(
        spec, bootstrap=kafka_bootstrap, metrics=Metrics(), duplicates=duplicates, session_timeout=session
    )
    revoked: list[list[TopicPartition]] = []
    revoke = runner.revoke

    async def noting_revoke(partitions: list[TopicPartition]) -> None:
        if partitions:
            revoked.append(partitions)
        await revoke(partitions)

    runner.revoke = noting_revoke  # type: ignore[method-assign,assignment]
    await runner.start()
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.joined.wait(), timeout=120)
        for _ in range(100):  # the next step makes the caught-up partitions READY
            if runner.healthy:
                break
            await asyncio.sleep(0.1)
        assert runner.healthy, runner.broken()
        await asyncio.sleep(2 * session)  # expelled, the next heartbeat finds out and the group rebalances
        assert revoked == [], f"expelled after its take-over: revoked {revoked}"
        assert sorted(tp.partition for tp in runner.slots) == list(range(PARTITIONS))
        for tp, slot in runner.slots.items():
            state = slot.processor.state
            assert state is not None and slot.phase is PartitionPhase.READY
            assert dict(state.mappings["counts"].committed) == _expected(tp.partition)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await runner.stop()
