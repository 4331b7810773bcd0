"""`BatchCommitter` (streams/slots.py) on the in-memory broker: how one partition's batches
are folded, pipelined and committed — and what a failure leaves behind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry, Counter

from infra.observability import Metrics
from streams.lifecycle import PartitionPhase
from streams.memory_broker import FaultPoint, MemoryBroker, MemoryProducer
from streams.outputs import Outputs
from streams.slots import BatchCommitter, Slot
from tests.streams.memory_stage import DEAD, INPUT, MAX_MESSAGE_BYTES, OUTPUT, STATE, Echo

TP = TopicPartition(INPUT, 0)


class Partition:
    """One input partition of a stage, its slot READY with two producers, and a committer;
    `read()` is what a fetch from the slot's position brings."""

    def __init__(self, *, stateful: bool = True, commit_hops: int = 1) -> None:
        self.broker = MemoryBroker(max_message_bytes=MAX_MESSAGE_BYTES, commit_hops=commit_hops)
        for topic in (INPUT, OUTPUT, STATE, DEAD):
            self.broker.create_topic(topic, 1)
        self.fetched = 0  # the consumer's position
        self.processor = Echo(TP, stateful=stateful)
        self.producers = [MemoryProducer(self.broker, "echo.in.0"), MemoryProducer(self.broker, "echo.in.0.1")]
        self.slot = Slot(TP, self.processor, producers=list(self.producers))
        self.now = 0.0
        self.registry = CollectorRegistry()
        self.committer = BatchCommitter(
            stage="echo",
            group_id="echo",
            dead_letter_topic=DEAD,
            state_topic=STATE if stateful else None,
            metrics=Metrics(),
            duplicates=Counter("duplicates", "", ["stage"], registry=self.registry),
            position=self._position,
            clock=lambda: self.now,
        )

    async def ready(self) -> Partition:
        for producer in self.producers:
            await producer.start()
        self.slot.enter(PartitionPhase.TAKING_OVER)
        self.slot.enter(PartitionPhase.READY)
        return self

    async def _position(self, tp: TopicPartition) -> int:
        return self.fetched

    async def taken_over_again(self) -> list[ConsumerRecord]:
        """What a repair does (streams/delivery.py): new producers fence the old ones (their
        open transaction aborted), READY at the committed position; what a fetch from there
        brings."""
        self.slot.enter(PartitionPhase.TAKING_OVER)
        self.producers = [MemoryProducer(self.broker, p.transactional_id) for p in self.producers]
        for producer in self.producers:
            await producer.start()
        self.slot.producers, self.slot.turn = list(self.producers), 0
        state = self.processor.state
        position = state.tracking.offset if state is not None else self.broker.group("echo").offsets.get(TP, 0)
        self.slot.position = self.slot.committed_position = position
        self.slot.enter(PartitionPhase.READY)
        return self.read(start=position)

    def arrive(self, *values: bytes) -> None:
        self.broker.produce(INPUT, 0, values, key=b"k")

    def read(self, start: int | None = None) -> list[ConsumerRecord]:
        records, self.fetched = self.broker.read_committed(TP, self.fetched if start is None else start, None)
        return records

    async def deliver(self, records: list[ConsumerRecord]) -> None:
        await self.committer.deliver(self.slot, records)

    def outputs(self) -> list[bytes]:
        return [r.value for r in self.broker.committed_records(OUTPUT, 0)]

    def dead_letters(self) -> int:
        return len(self.broker.committed_records(DEAD, 0))

    def committed_count(self) -> object:
        assert self.processor.state is not None
        return self.processor.state.mappings["echoed"].committed.get("count")


async def test_a_batch_commits_its_outputs_its_state_and_its_position_together() -> None:
    partition = await Partition().ready()
    partition.arrive(b"a", b"b", b"c")

    await partition.deliver(partition.read())
    assert await partition.committer.settle(partition.slot)

    assert partition.outputs() == [b"a", b"b", b"c"]
    assert partition.committed_count() == 3
    state = partition.processor.state
    assert state is not None and state.tracking.offset == 3 and state.tracking.events == 3
    assert partition.slot.phase is PartitionPhase.READY
    assert partition.slot.position == partition.slot.committed_position == 3
    assert [r.key for r in partition.broker.committed_records(STATE, 0)] == [
        b"echoed:count",
        b"echoed:last",
        b"tracking:position",
    ]


async def test_a_batch_its_processor_stops_short_of_is_committed_in_transactions_of_its_own() -> None:
    partition = await Partition(commit_hops=5).ready()
    partition.processor.bound = 2
    partition.arrive(b"a", b"b", b"c", b"d", b"e")

    await partition.deliver(partition.read())
    assert await partition.committer.settle(partition.slot)

    assert partition.outputs() == [b"a", b"b", b"c", b"d", b"e"]  # each once, in order
    assert partition.committed_count() == 5
    positions = [r.value for r in partition.broker.committed_records(STATE, 0) if r.key == b"tracking:position"]
    assert [json.loads(p)["offset"] for p in positions] == [2, 4, 5]  # one transaction per part
    assert partition.slot.position == partition.slot.committed_position == 5


async def test_each_transaction_reports_what_it_folded_how_long_the_fold_held_the_loop_and_how_long_it_took() -> None:
    partition = await Partition(commit_hops=5).ready()
    partition.processor.bound = 2
    partition.arrive(b"a", b"b", b"c", b"d", b"e")

    await partition.deliver(partition.read())
    assert await partition.committer.settle(partition.slot)

    committer = partition.committer
    records = committer.batch_records.collect()[0].samples
    assert {s.name: s.value for s in records if s.name.endswith(("_count", "_sum"))} == {
        "rollout_batch_records_count": 3.0,  # the three transactions of the processor's bound
        "rollout_batch_records_sum": 5.0,
    }
    for histogram in (committer.fold_seconds, committer.transaction_seconds):
        samples = {s.name.rsplit("_", 1)[1]: s.value for s in histogram.collect()[0].samples if "_bucket" not in s.name}
        assert samples["count"] == 3.0 and samples["sum"] > 0.0


async def test_the_next_batch_is_folded_while_the_previous_transaction_is_in_flight() -> None:
    partition = await Partition(commit_hops=50).ready()
    partition.arrive(b"a", b"b")
    await partition.deliver(partition.read())
    assert partition.slot.phase is PartitionPhase.COMMITTING

    partition.arrive(b"c")
    state = partition.processor.state
    assert state is not None and state.sealed, "the first batch's state is sealed, not committed"
    await partition.deliver(partition.read())  # folded on it; its transaction waits for the first
    assert await partition.committer.settle(partition.slot)

    assert partition.outputs() == [b"a", b"b", b"c"]
    assert partition.committed_count() == 3


async def test_the_two_producers_of_a_partition_take_turns() -> None:
    partition = await Partition().ready()
    for value in (b"a", b"b", b"c"):
        partition.arrive(value)
        await partition.deliver(partition.read())
        await partition.committer.settle(partition.slot)
        assert partition.slot.turn == {b"a": 1, b"b": 0, b"c": 1}[value]


async def test_a_refused_commit_breaks_the_partition_and_leaves_nothing_but_what_was_committed() -> None:
    partition = await Partition().ready()
    partition.arrive(b"a")
    await partition.deliver(partition.read())
    await partition.committer.settle(partition.slot)

    partition.broker.inject(FaultPoint.COMMIT)
    partition.arrive(b"b")
    await partition.deliver(partition.read())
    assert not await partition.committer.settle(partition.slot)

    assert partition.slot.phase is PartitionPhase.BROKEN
    assert "injected fault: commit" in (partition.slot.broken or "")
    assert partition.slot.repair.retry_at == 0.2
    assert partition.outputs() == [b"a"], "its records stay hidden in the open transaction"
    assert partition.broker.open_transactions() == ["echo.in.0.1"]
    state = partition.processor.state
    assert state is not None and not state.sealed
    assert partition.committed_count() == 1 and state.tracking.offset == 1


async def test_a_batch_folded_on_a_failed_transaction_is_dropped_with_it() -> None:
    partition = await Partition(commit_hops=50).ready()
    partition.broker.inject(FaultPoint.COMMIT)
    partition.arrive(b"a")
    await partition.deliver(partition.read())
    partition.arrive(b"b")

    await partition.deliver(partition.read())  # folded on "a", which fails

    assert partition.slot.phase is PartitionPhase.BROKEN
    assert partition.slot.inflight is None, "a broken partition has nothing in flight"
    state = partition.processor.state
    assert state is not None and dict(state.mappings["echoed"]) == {}, "neither batch is left in the state"
    assert partition.outputs() == []


async def test_a_failing_record_is_isolated_one_record_at_a_time_and_becomes_a_dead_letter() -> None:
    partition = await Partition().ready()
    partition.arrive(b"a", b"raise", b"c")

    await partition.deliver(partition.read())  # the batch fails: retried one record at a time
    assert partition.slot.phase is PartitionPhase.BROKEN
    assert partition.slot.isolation.until == 2
    await partition.deliver(await partition.taken_over_again())  # "a" commits, "raise" fails alone
    assert partition.slot.isolation.poison == {1}
    await partition.deliver(await partition.taken_over_again())

    assert partition.outputs() == [b"a", b"c"]
    assert partition.dead_letters() == 1
    assert partition.committed_count() == 2
    state = partition.processor.state
    assert state is not None and state.tracking.events == 3


async def test_an_output_larger_than_the_broker_accepts_makes_its_input_a_dead_letter() -> None:
    partition = await Partition().ready()
    partition.arrive(b"huge")

    await partition.deliver(partition.read())
    assert not await partition.committer.settle(partition.slot)
    assert partition.slot.isolation.poison == {0}, "alone in its batch: poison at once"
    await partition.deliver(await partition.taken_over_again())
    assert await partition.committer.settle(partition.slot)

    assert partition.outputs() == []
    assert partition.dead_letters() == 1


async def test_a_processing_failure_waits_for_the_transaction_it_was_folded_on() -> None:
    partition = await Partition(commit_hops=50).ready()
    partition.arrive(b"a")
    await partition.deliver(partition.read())
    partition.arrive(b"raise")

    await partition.deliver(partition.read())

    assert partition.outputs() == [b"a"], "the transaction in flight committed first"
    assert partition.committed_count() == 1
    assert partition.slot.phase is PartitionPhase.BROKEN and partition.slot.inflight is None


async def test_records_below_the_position_are_dropped_as_duplicates() -> None:
    partition = await Partition().ready()
    partition.arrive(b"a", b"b")
    await partition.deliver(partition.read())
    await partition.committer.settle(partition.slot)

    await partition.deliver(partition.read(start=0))  # redelivered
    await partition.committer.settle(partition.slot)

    assert partition.outputs() == [b"a", b"b"]
    assert partition.registry.get_sample_value("duplicates_total", {"stage": "echo"}) == 2


async def test_a_stateless_stage_commits_its_position_as_the_group_offset_in_the_transaction() -> None:
    partition = await Partition(stateful=False).ready()
    partition.arrive(b"a", b"b")
    partition.broker.inject(FaultPoint.OFFSETS)

    await partition.deliver(partition.read())
    assert not await partition.committer.settle(partition.slot)
    assert partition.broker.group("echo").offsets == {}

    await partition.deliver(await partition.taken_over_again())
    assert await partition.committer.settle(partition.slot)
    assert partition.broker.group("echo").offsets == {TP: 2}
    assert partition.outputs() == [b"a", b"b"]


async def test_an_illegal_phase_is_refused_before_anything_is_sent() -> None:
    partition = await Partition().ready()
    partition.slot.enter(PartitionPhase.SUSPENDED)  # revoked behind the committer's back
    partition.arrive(b"a")

    with pytest.raises(RuntimeError, match="in-0: suspended cannot become committing"):
        await partition.deliver(partition.read())
    await asyncio.sleep(0)
    assert partition.outputs() == []


class _Recorder:
    """A processor that records the batches it is given (and their positions)."""

    def __init__(self) -> None:
        self.state = None
        self.batches: list[tuple[list[int], int]] = []

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        self.batches.append(([r.offset for r in records], position))

    def reset(self) -> None:
        pass


async def test_an_empty_batch_moves_the_position_past_transaction_markers() -> None:
    partition = await Partition(stateful=False).ready()
    recorder = _Recorder()
    partition.slot.processor = recorder
    partition.broker.produce_transaction(INPUT, 0, [b"a"], commit=False)  # aborted: only a marker is left

    records = partition.read()
    assert records == [] and partition.fetched == 2
    await partition.deliver(records)
    assert await partition.committer.settle(partition.slot)

    assert recorder.batches == [([], 2)]
    assert partition.broker.group("echo").offsets == {TP: 2}


class RecordingProducer(MemoryProducer):
    """Notes, in order, each batch handed over (topic, partition) and, when the offsets are
    sent, whether every batch handed over before was delivered."""

    def __init__(self, broker: MemoryBroker, transactional_id: str, *, max_batch_bytes: int) -> None:
        super().__init__(broker, transactional_id, max_batch_bytes=max_batch_bytes)
        self.handed: list[tuple[str, int]] = []
        self.futures: list[asyncio.Future[object]] = []
        self.offsets_sent_after_delivery: list[bool] = []
        self._answers: set[asyncio.Future[None]] = set()

    async def send_batch(self, batch: object, topic: str, *, partition: int) -> asyncio.Future[object]:
        self.handed.append((topic, partition))
        written = await super().send_batch(batch, topic, partition=partition)  # type: ignore[arg-type]
        acknowledged: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.futures.append(acknowledged)

        async def answer() -> None:  # as a broker does: the acknowledgement comes a while later
            await asyncio.sleep(0.01)
            try:
                acknowledged.set_result(await written)
            except Exception as error:
                acknowledged.set_exception(error)

        self._answers.add(asyncio.ensure_future(answer()))
        return acknowledged

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        self.offsets_sent_after_delivery.append(all(future.done() for future in self.futures))
        await super().send_offsets_to_transaction(offsets, group_id)


async def test_a_transaction_hands_over_the_first_batch_of_every_partition_before_any_second_one() -> None:
    """A second batch of a partition waits for the first to drain, letting the producer add
    the partitions known so far to the transaction; the rest would then be added while the
    first Produce is verified, which a Kafka ≥ 3.6 broker answers as NOT_ENOUGH_REPLICAS."""
    partition = await Partition().ready()
    partition.broker.create_topic("wide", 3)
    producer = RecordingProducer(partition.broker, "echo.wide", max_batch_bytes=200)
    await producer.start()
    await producer.begin_transaction()
    outputs = [("wide", f"k{i}".encode(), b"v" * 60, i % 3) for i in range(24)]
    state_records = [(STATE, f"s{i}".encode(), b"x" * 60, 0) for i in range(6)]

    sent, state_sent, _ = await partition.committer._send(producer, outputs, state_records)

    streams = {("wide", 0), ("wide", 1), ("wide", 2), (STATE, 0)}
    assert len(producer.handed) > len(streams), "each partition needs several batches here"
    assert set(producer.handed[: len(streams)]) == streams
    assert len(sent) + len(state_sent) == len(producer.handed)
    await asyncio.gather(*sent, *state_sent)
    await producer.commit_transaction()
    for p in range(3):
        values = [r.key for r in partition.broker.committed_records("wide", p)]
        assert values == [f"k{i}".encode() for i in range(p, 24, 3)], "each partition's records in order"
    assert [r.key for r in partition.broker.committed_records(STATE, 0)] == [f"s{i}".encode() for i in range(6)]


async def test_a_stateless_stage_sends_its_offsets_only_once_every_batch_is_written() -> None:
    partition = await Partition(stateful=False).ready()
    recording = RecordingProducer(partition.broker, "echo.in.0", max_batch_bytes=64)
    await recording.start()
    partition.slot.producers = [recording]
    partition.arrive(*(f"value-{i}".encode() for i in range(10)))

    await partition.deliver(partition.read())
    assert await partition.committer.settle(partition.slot)

    assert len(recording.handed) > 1
    assert recording.offsets_sent_after_delivery == [True]
    assert partition.broker.group("echo").offsets == {TP: 10}
