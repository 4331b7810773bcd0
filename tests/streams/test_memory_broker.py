"""The in-memory broker (streams/memory_broker.py) keeps what exactly-once rests on: markers,
read_committed visibility, fencing, refused batches, groups, and faults where asked."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
)

from streams.memory_broker import FaultPoint, MemoryBroker, MemoryConsumer, MemoryProducer

TP = TopicPartition("t", 0)


def _broker() -> MemoryBroker:
    broker = MemoryBroker(max_message_bytes=100)
    broker.create_topic("t", 2)
    return broker


async def _send(producer: MemoryProducer, *values: bytes, partition: int = 0) -> None:
    batch = producer.create_batch()
    for value in values:
        assert batch.append(key=None, value=value, timestamp=None) is not None
    await (await producer.send_batch(batch, "t", partition=partition))


def _values(broker: MemoryBroker, start: int = 0) -> tuple[list[bytes], int]:
    records, position = broker.read_committed(TP, start, None)
    return [r.value for r in records], position


async def test_read_committed_stops_at_an_open_transaction_and_never_shows_an_aborted_one() -> None:
    broker = _broker()
    broker.produce("t", 0, [b"plain"])
    broker.produce_transaction("t", 0, [b"aborted"], commit=False)
    producer = MemoryProducer(broker, "tx")
    await producer.start()
    await producer.begin_transaction()
    await _send(producer, b"open")
    broker.produce("t", 0, [b"after"])

    assert _values(broker) == ([b"plain"], 3), "past the aborted record and its marker, up to the open one"
    await producer.commit_transaction()
    assert _values(broker) == ([b"plain", b"open", b"after"], 6)
    assert broker.end_offset(TP) == 6, "records, and a marker per transaction"


async def test_initialising_an_id_fences_its_previous_producer_and_aborts_its_transaction() -> None:
    broker = _broker()
    zombie, successor = MemoryProducer(broker, "tx"), MemoryProducer(broker, "tx")
    await zombie.start()
    await zombie.begin_transaction()
    await _send(zombie, b"begun")

    await successor.start()

    assert broker.open_transactions() == []
    with pytest.raises(ProducerFenced):
        await zombie.commit_transaction()
    await zombie.stop()
    zombie = MemoryProducer(broker, "tx")  # what a zombie could still try: a send with the old epoch
    zombie.epoch, zombie._in_transaction = 0, True
    with pytest.raises(ProducerFenced):
        await _send(zombie, b"late")
    assert _values(broker)[0] == []
    assert broker.fenced == 2


async def test_a_batch_over_the_message_size_is_refused_and_later_ones_to_its_partition_fail() -> None:
    broker = _broker()
    producer = MemoryProducer(broker, "tx")
    await producer.start()
    await producer.begin_transaction()
    big = producer.create_batch()
    big.append(key=None, value=b"x" * 200, timestamp=None)  # the first record always fits a batch

    with pytest.raises(MessageSizeTooLargeError):
        await (await producer.send_batch(big, "t", partition=0))
    with pytest.raises(OutOfOrderSequenceNumber):
        await _send(producer, b"small")
    await _send(producer, b"elsewhere", partition=1)


async def test_a_fault_strikes_the_next_matching_request_as_often_as_asked() -> None:
    broker = _broker()
    broker.inject(FaultPoint.INIT, match="a.1", times=2)
    for expected in (True, True, False):
        producer = MemoryProducer(broker, "a.1")
        if expected:
            with pytest.raises(KafkaConnectionError, match="injected fault: init"):
                await producer.start()
        else:
            await producer.start()
    await MemoryProducer(broker, "b.1").start()


async def test_a_commit_unanswered_is_committed_all_the_same() -> None:
    broker = _broker()
    producer = MemoryProducer(broker, "tx")
    await producer.start()
    await producer.begin_transaction()
    await _send(producer, b"v")
    broker.inject(FaultPoint.COMMIT_UNANSWERED)

    with pytest.raises(KafkaConnectionError):
        await producer.commit_transaction()
    assert _values(broker)[0] == [b"v"]


class _Listener:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.log.append(f"{self.name} revoked {[tp.partition for tp in revoked]}")

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.log.append(f"{self.name} assigned {[tp.partition for tp in assigned]}")


async def test_a_rebalance_revokes_every_member_first_then_assigns_round_robin() -> None:
    broker, log = _broker(), []
    first, second = MemoryConsumer(broker, "g"), MemoryConsumer(broker, "g")
    first.subscribe(["t"], listener=_Listener("first", log))
    await first.getmany()
    second.subscribe(["t"], listener=_Listener("second", log))

    await second.getmany()

    assert log == [
        "first revoked []",
        "first assigned [0, 1]",
        "first revoked [0, 1]",
        "second revoked []",
        "first assigned [0]",
        "second assigned [1]",
    ]


async def test_an_expelled_member_fetches_as_a_zombie_then_finds_out_and_rejoins() -> None:
    broker, log = _broker(), []
    member = MemoryConsumer(broker, "g")
    member.subscribe(["t"], listener=_Listener("member", log))
    await member.getmany()
    broker.group("g").expel(member, unaware_polls=1)
    broker.produce("t", 0, [b"v"])

    assert [r.value for r in (await member.getmany())[TP]] == [b"v"], "still fetching"
    with pytest.raises(CommitFailedError):
        await member.commit({TP: 1})
    await member.getmany()

    assert log[-3:] == ["member revoked [0, 1]", "member revoked []", "member assigned [0, 1]"]
    assert member in broker.group("g").members
