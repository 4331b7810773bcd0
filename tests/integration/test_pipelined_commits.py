"""Pipelined commits (streams/slots.py) against the real broker: a partition's next batch is
folded while the previous batch's transaction is in flight, and whatever happens to that
transaction, every input takes effect exactly once — here one transaction is refused by the
broker (an output over its message size) in the middle of a stream that keeps coming.

Also: a stateful stage sends no consumer offsets in its transactions (its position is the
tracked one), and still reports its group offset for monitoring."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

from streams.delivery import StageRunner, StageSpec
from streams.outputs import Outputs
from streams.state import PartitionState
from tests.integration.stack import stage_runner

pytestmark = pytest.mark.integration

INPUTS = 3000
POISON = 1234  # the input whose output the broker refuses
SECOND = 1500  # the first input fed after the poison's dead letter was written
OVERSIZED = b"x" * (2 * 1024 * 1024)  # over the broker's message.max.bytes (1 MB)


class Counting:
    """Counts inputs in its state and echoes each one's number (or, for POISON, an output
    the broker will refuse). Notes whether it ever folded on a sealed batch."""

    def __init__(self, out_topic: str) -> None:
        self.out_topic = out_topic
        self.state = PartitionState({"counts": int})
        self.folded_on_sealed = 0

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        if records and self.state.sealed:
            self.folded_on_sealed += 1
        counts = self.state.mappings["counts"]
        for record in records:
            number = int(record.value)
            counts["n"] = counts.get("n", 0) + 1
            out.send(self.out_topic, record.key, OVERSIZED if number == POISON else record.value, partition=0)
            self.state.keep_event()

    def reset(self) -> None:
        pass


async def _create(bootstrap: str, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1) for name in names])
    finally:
        await admin.close()


async def _feed(bootstrap: str, topic: str, numbers: range) -> None:
    """Inputs as a steady trickle (acknowledged bursts of 20), so that records keep arriving
    while the stage's transactions commit."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=0)
    await producer.start()
    try:
        for first in range(numbers.start, numbers.stop, 20):
            burst = range(first, min(first + 20, numbers.stop))
            sent = [await producer.send(topic, str(n).encode(), key=b"k", partition=0) for n in burst]
            await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str, until: int, timeout: float = 90) -> list[bytes]:
    """The committed records of `topic` (read_committed), once there are `until` of them."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while len(values) < until and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            values.extend(r.value for r in batch.get(tp, []))
        return values
    finally:
        await consumer.stop()


async def _group_offset(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    found = offsets.get(tp)
    return found.offset if found is not None else None


async def test_a_batch_folded_on_a_refused_transaction_is_redone_and_every_input_counts_once(
    kafka_bootstrap: str,
) -> None:
    topic = f"pipelined-{uuid.uuid4().hex[:8]}"
    out_topic, state_topic, dead = f"{topic}.out", f"{topic}.state", f"{topic}.dead"
    await _create(kafka_bootstrap, topic, out_topic, state_topic, dead)
    processors: list[Counting] = []

    def new_processor(tp: TopicPartition) -> Counting:
        processors.append(Counting(out_topic))
        return processors[-1]

    spec = StageSpec(
        name="counting",
        topics=(topic,),
        group_id=f"{topic}.group",
        dead_letter_topic=dead,
        new_processor=new_processor,
        state_topic=state_topic,
    )
    runner: StageRunner = stage_runner(kafka_bootstrap, spec)
    await runner.start()
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.joined.wait(), timeout=60)
        # the poison and what follows it up to SECOND, then — once the poison is a dead letter
        # — the rest: a trickle that is still coming when the stage is back to pipelining
        # (had the whole feed arrived before the refused transaction was retried one record
        # at a time, every later batch would have been folded with nothing in flight)
        await _feed(kafka_bootstrap, topic, range(0, SECOND))
        letters = await _read(kafka_bootstrap, dead, 1)
        await _feed(kafka_bootstrap, topic, range(SECOND, INPUTS))
        echoed = await _read(kafka_bootstrap, out_topic, INPUTS - 1)
        tp = TopicPartition(topic, 0)

        assert echoed == [str(n).encode() for n in range(INPUTS) if n != POISON], "each once, in order"
        assert [json.loads(letter)["offset"] for letter in letters] == [POISON]
        [processor] = processors
        assert processor.folded_on_sealed > 0, "no batch was ever folded while a transaction was in flight"
        slot = runner.slots[tp]
        assert dict(processor.state.mappings["counts"].committed) == {"n": INPUTS - 1}
        assert processor.state.tracking.offset == slot.committed_position == INPUTS
        for _ in range(40):  # reported every 5 s, outside the transactions
            if await _group_offset(kafka_bootstrap, spec.group_id, tp) == INPUTS:
                break
            await asyncio.sleep(0.5)
        assert await _group_offset(kafka_bootstrap, spec.group_id, tp) == INPUTS
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await runner.stop()
