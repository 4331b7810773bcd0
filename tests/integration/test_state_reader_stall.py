"""A take-over's catch-up whose broker stops answering mid-read: it fails once no record
came for `StateReader.stall_timeout` (streams/restore.py `STALL_TIMEOUT`) — it neither hangs
nor returns short, folding part of the state as if it were all of it — and the repair reads
the partition again, whole, once the broker answers.

The broker stops answering for real: its process is frozen (SIGSTOP) while the reader is
between two fetches, and thawed (SIGCONT) for the repair. Uses its own broker — the session
broker and a developer's `rollout kafka start` broker are never frozen."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra.localkafka import BrokerInfo, LocalKafka
from streams.restore import StateReader
from streams.state import PartitionState

pytestmark = pytest.mark.integration

RECORDS = 120_000  # ~25 MB of state: several of the reader's 4 MiB fetches
STALL = 3.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerInfo]:
    kafka = LocalKafka(tmp_path / "kafka.json")
    info = kafka.start(data_dir=tmp_path / "kafka-data", heap="256m")
    try:
        yield info
    finally:
        os.kill(info.pid, signal.SIGCONT)  # whatever the test left it in
        kafka.stop()


class FreezingState(PartitionState):
    """A partition's state that freezes the broker once it folded its first records."""

    def __init__(self, broker_pid: int | None) -> None:
        super().__init__({"counts": int})
        self.broker_pid = broker_pid

    def restore(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        folded = super().restore(records)
        if folded and self.broker_pid is not None:
            os.kill(self.broker_pid, signal.SIGSTOP)  # the broker stops answering, mid-read
            self.broker_pid = None
        return folded


async def _fill(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}.writer", linger_ms=5)
    await producer.start()
    try:
        padding = b" " * 200  # JSON's whitespace: a record of a state's size, read back as its number
        for first in range(0, RECORDS, 20_000):  # transactions, as a stage commits its state
            async with producer.transaction():
                for n in range(first, first + 20_000):
                    await producer.send(topic, b"%d%s" % (n, padding), key=b"counts:%d" % n, partition=0)
    finally:
        await producer.stop()


async def test_a_catch_up_whose_broker_stops_answering_fails_after_the_stall_timeout_and_the_repair_reads_it_all(
    broker: BrokerInfo,
) -> None:
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    await _fill(broker.bootstrap, topic)
    reader = StateReader(broker.bootstrap, topic, "stall-test", {}, stall_timeout=STALL)
    await reader.start()
    try:
        state = FreezingState(broker.pid)
        with pytest.raises(TimeoutError, match=f"no state records for {STALL:.0f} s at offset"):
            # bounded here only so that a hang fails the test instead of the session
            await asyncio.wait_for(reader.catch_up(state, 0, 0), timeout=120)
        assert state.broker_pid is None, "the broker was frozen mid-read"
        held = len(state.mappings["counts"].committed)
        assert 0 < held < RECORDS, f"failed part of the way, not at the start nor at the end: {held}"

        os.kill(broker.pid, signal.SIGCONT)  # the broker answers again: the repair reads from the start
        repaired = FreezingState(None)
        folded, end = await asyncio.wait_for(reader.catch_up(repaired, 0, 0), timeout=120)
        assert folded == RECORDS
        assert len(repaired.mappings["counts"].committed) == RECORDS
        assert repaired.mappings["counts"][str(RECORDS - 1)] == RECORDS - 1
        assert end > RECORDS, "the end offset, past the records and their transactions' markers"
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        await reader.stop()
