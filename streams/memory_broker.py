"""An in-memory Kafka for the delivery's tests: a fault-injection tool, not a broker.

    MemoryBroker ── topics of partitions (offset-ordered logs), transactions, groups, faults
      └─ MemoryTransport (one per simulated worker process; `crash` kills its clients at once)
           ├─ MemoryConsumer     a stage's group member   (StageConsumer)
           ├─ MemoryStateReader  a take-over's catch-up   (StateReading)
           └─ MemoryProducer     a transactional producer (TransactionalProducer)

It runs the real `StageRunner` and `BatchCommitter` (streams/delivery.py, streams/slots.py)
through the transport seam (streams/transport.py), in milliseconds and deterministically:
every request yields to the event loop `hops` times (a commit `commit_hops` times) and then
acts at once, so tasks interleave as they do on a network — a transaction in flight while
the next batch is folded, a rebalance while a batch is committing — but in an order that
depends only on the test. A task cancelled at one of those points (a crash) did nothing.

What it keeps of Kafka, because exactly-once rests on it:

* **Logs and markers.** A transaction's commit or abort writes a control marker to every
  partition it wrote; a marker takes an offset, so a consumer's position moves past records
  it never returns (as `StageRunner._position` expects).
* **Fencing.** Initialising a transactional id (a producer's `start`) bumps its epoch and
  aborts the id's open transaction; a producer of an older epoch is refused
  (`ProducerFenced`) at its next send, offsets or commit — a zombie can no longer commit.
* **read_committed.** A reader sees records below the partition's last stable offset (the
  first offset of its oldest open transaction) and never one of an aborted transaction; a
  transaction left open by a crash or a failed commit hides what follows it until its id is
  initialised again (Kafka would also time it out; nothing here has a clock).
* **Groups.** Members join and leave; the next poll of any member runs an eager rebalance
  (every member's partitions revoked through its listener, then the new assignment given,
  round robin); group offsets are committed directly or inside a transaction. An expelled
  member (`MemoryGroup.expel`: its session expired) is not told: it goes on fetching and
  committing as a zombie for as many polls as the test says, then finds out, revokes
  everything and joins again.
* **Message size.** A record batch over `max_message_bytes` is refused for good
  (`MessageSizeTooLargeError`), and every later batch of that producer's transaction to the
  same partition fails out of sequence — what `slots._delivered` guards against.

Faults: `broker.inject(FaultPoint.COMMIT, match="…")` fails the next matching request
(`FaultPoint` lists where, and what each leaves behind). Out of scope: replication, time
(sessions and transaction timeouts), compaction, quotas, the wire protocol.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    ProducerClosed,
    ProducerFenced,
)
from aiokafka.structs import ConsumerRecord, RecordMetadata

from streams.state import PartitionState
from streams.transport import MAX_BATCH_BYTES

MAX_MESSAGE_BYTES = 1_048_588  # the broker's default message.max.bytes
RECORD_OVERHEAD = 20  # bytes a record takes in a batch besides its key and value (roughly)


class FaultPoint(enum.Enum):
    """Where an injected fault strikes, and what it leaves behind."""

    INIT = "init"
    """A producer's initialisation (a take-over's fencing) fails: the id is not initialised."""
    BEGIN = "begin"
    """A transaction's begin fails: nothing was sent."""
    SEND = "send"
    """A record batch is refused (a retriable error): nothing of it is written; batches sent
    before it in the transaction are, and stay pending in the open transaction."""
    OFFSETS = "offsets"
    """`send_offsets_to_transaction` fails (a stateless stage's position), after its outputs."""
    COMMIT = "commit"
    """The commit is refused: the transaction stays open — its records written, hidden from
    read_committed readers — until its id is initialised again."""
    COMMIT_UNANSWERED = "commit unanswered"
    """The commit is done but its answer lost: the producer sees a timeout (Kafka's
    ambiguous commit)."""
    GROUP_OFFSETS = "group offsets"
    """A take-over's read of the group offset fails."""
    CATCH_UP = "catch up"
    """A take-over's read of the state topic fails."""


@dataclass
class Fault:
    point: FaultPoint
    match: str = ""  # only requests whose subject (transactional id, group or topic) contains it
    times: int = 1
    error: Exception | None = None  # default: a connection error naming the point

    def raised(self) -> Exception:
        return self.error if self.error is not None else KafkaConnectionError(f"injected fault: {self.point.value}")


@dataclass(eq=False)
class _Transaction:
    transactional_id: str
    epoch: int
    first: dict[TopicPartition, int] = field(default_factory=dict)  # partition → its first offset written
    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)  # group → offsets
    status: str = "open"  # open | committed | aborted


@dataclass
class _Entry:
    key: bytes | None
    value: bytes | None
    timestamp: int
    transaction: _Transaction | None = None
    control: bool = False  # a commit or abort marker

    @property
    def visible(self) -> bool:
        """Whether a read_committed reader sees it once it is below the last stable offset."""
        return not self.control and (self.transaction is None or self.transaction.status == "committed")


class MemoryBroker:
    """Topics, transactions and groups in memory (see the module doc)."""

    def __init__(self, *, max_message_bytes: int = MAX_MESSAGE_BYTES, hops: int = 1, commit_hops: int = 1) -> None:
        self.max_message_bytes = max_message_bytes
        self.hops = hops  # event-loop turns a request yields before it acts
        self.commit_hops = commit_hops  # the same for a commit (EndTxn: markers on every partition written)
        self.groups: dict[str, MemoryGroup] = {}
        self.fenced = 0  # requests refused to a fenced producer
        self._topics: dict[str, int] = {}
        self._logs: dict[TopicPartition, list[_Entry]] = {}
        self._epochs: dict[str, int] = {}
        self._open: dict[str, _Transaction] = {}
        self._faults: list[Fault] = []

    # -- what a test does directly -------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics[topic] = partitions
        for partition in range(partitions):
            self._logs.setdefault(TopicPartition(topic, partition), [])

    def partitions(self, topic: str) -> int:
        if topic not in self._topics:
            raise KafkaError(f"unknown topic {topic}")
        return self._topics[topic]

    def produce(self, topic: str, partition: int, values: Iterable[bytes], *, key: bytes | None = None) -> list[int]:
        """Write `values` without a transaction (visible at once); their offsets."""
        log = self._log(TopicPartition(topic, partition))
        offsets = []
        for value in values:
            offsets.append(len(log))
            log.append(_Entry(key, value, _now_ms()))
        return offsets

    def produce_transaction(
        self, topic: str, partition: int, values: Iterable[bytes], *, commit: bool, key: bytes | None = None
    ) -> list[int]:
        """Write `values` in a transaction of their own, committed or aborted (a marker
        follows them either way); their offsets."""
        tp = TopicPartition(topic, partition)
        transaction = _Transaction(f"test-producer-{topic}-{partition}", 0)
        log = self._log(tp)
        offsets = []
        for value in values:
            transaction.first.setdefault(tp, len(log))
            offsets.append(len(log))
            log.append(_Entry(key, value, _now_ms(), transaction))
        transaction.status = "committed" if commit else "aborted"
        log.append(_Entry(None, None, _now_ms(), transaction, control=True))
        return offsets

    def committed_records(self, topic: str, partition: int) -> list[ConsumerRecord]:
        """Every record a read_committed reader will ever see of the partition (committed
        or plain), in offset order — an observer's view, not stopped by open transactions."""
        tp = TopicPartition(topic, partition)
        return [_record(tp, offset, e) for offset, e in enumerate(self._log(tp)) if e.visible]

    def end_offset(self, tp: TopicPartition) -> int:
        return len(self._log(tp))

    def last_stable_offset(self, tp: TopicPartition) -> int:
        firsts = [t.first[tp] for t in self._open.values() if tp in t.first]
        return min(firsts, default=self.end_offset(tp))

    def open_transactions(self) -> list[str]:
        """The transactional ids with a transaction open (written to, not ended)."""
        return sorted(tid for tid, transaction in self._open.items() if transaction.first or transaction.offsets)

    def inject(self, point: FaultPoint, *, match: str = "", times: int = 1, error: Exception | None = None) -> None:
        """The next `times` requests at `point` whose subject contains `match` fail."""
        self._faults.append(Fault(point, match, times, error))

    def clear_faults(self) -> None:
        self._faults.clear()

    def group(self, group_id: str) -> MemoryGroup:
        if group_id not in self.groups:
            self.groups[group_id] = MemoryGroup(self, group_id)
        return self.groups[group_id]

    # -- what the clients' requests do ---------------------------------------------------

    async def hop(self, hops: int | None = None) -> None:
        for _ in range(self.hops if hops is None else hops):
            await asyncio.sleep(0)

    def current(self, transactional_id: str, epoch: int | None) -> bool:
        """Whether a producer of `epoch` still holds `transactional_id` (is not fenced)."""
        return epoch is not None and self._epochs.get(transactional_id) == epoch

    def strike(self, point: FaultPoint, subject: str) -> None:
        """Raise the error of the first fault injected at `point` for `subject`, if any."""
        for fault in self._faults:
            if fault.point is point and fault.match in subject:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                raise fault.raised()

    def init_producer(self, transactional_id: str) -> int:
        """A new epoch for the id; its open transaction (of an older epoch) is aborted."""
        self._end(transactional_id, commit=False)
        epoch = self._epochs.get(transactional_id, -1) + 1
        self._epochs[transactional_id] = epoch
        return epoch

    def write(self, transactional_id: str, epoch: int, tp: TopicPartition, records: Sequence[tuple[Any, Any]]) -> int:
        """Append `records` in the id's open transaction; the base offset."""
        transaction = self._transaction(transactional_id, epoch)
        log = self._log(tp)
        base = len(log)
        transaction.first.setdefault(tp, base)
        log.extend(_Entry(key, value, _now_ms(), transaction) for key, value in records)
        return base

    def add_offsets(self, transactional_id: str, epoch: int, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._transaction(transactional_id, epoch).offsets.setdefault(group_id, {}).update(offsets)

    def end_transaction(self, transactional_id: str, epoch: int, *, commit: bool) -> None:
        self._check_epoch(transactional_id, epoch)
        self._end(transactional_id, commit=commit)

    def read_committed(
        self, tp: TopicPartition, start: int, limit: int | None, until: int | None = None
    ) -> tuple[list[ConsumerRecord], int]:
        """The visible records from `start` below the last stable offset (and `until`), at
        most `limit`; and the position after them (past markers and aborted records)."""
        log = self._log(tp)
        stop = self.last_stable_offset(tp) if until is None else min(until, self.last_stable_offset(tp))
        found: list[ConsumerRecord] = []
        position = start
        while position < stop and (limit is None or len(found) < limit):
            entry = log[position]
            if entry.visible:
                found.append(_record(tp, position, entry))
            position += 1
        return found, position

    def _transaction(self, transactional_id: str, epoch: int) -> _Transaction:
        self._check_epoch(transactional_id, epoch)
        transaction = self._open.get(transactional_id)
        if transaction is None:
            transaction = self._open[transactional_id] = _Transaction(transactional_id, epoch)
        return transaction

    def _check_epoch(self, transactional_id: str, epoch: int) -> None:
        if self._epochs.get(transactional_id) != epoch:
            self.fenced += 1
            raise ProducerFenced()

    def _end(self, transactional_id: str, *, commit: bool) -> None:
        transaction = self._open.pop(transactional_id, None)
        if transaction is None:
            return
        transaction.status = "committed" if commit else "aborted"
        for tp in transaction.first:
            self._log(tp).append(_Entry(None, None, _now_ms(), transaction, control=True))
        if commit:
            for group_id, offsets in transaction.offsets.items():
                self.group(group_id).offsets.update(offsets)

    def _log(self, tp: TopicPartition) -> list[_Entry]:
        if tp not in self._logs:
            raise KafkaError(f"unknown topic-partition {tp.topic}-{tp.partition}")
        return self._logs[tp]


class MemoryGroup:
    """A consumer group: members, an eager rebalance, committed offsets."""

    def __init__(self, broker: MemoryBroker, group_id: str) -> None:
        self.broker = broker
        self.group_id = group_id
        self.members: list[MemoryConsumer] = []
        self.offsets: dict[TopicPartition, int] = {}
        self.generation = 0
        self._stale = False  # members changed: the next poll rebalances
        self._rebalancing: asyncio.Lock | None = None

    def join(self, consumer: MemoryConsumer) -> None:
        if consumer not in self.members:
            self.members.append(consumer)
            self._stale = True

    def leave(self, consumer: MemoryConsumer) -> None:
        if consumer in self.members:
            self.members.remove(consumer)
            self._stale = True

    def expel(self, consumer: MemoryConsumer, *, unaware_polls: int = 0) -> None:
        """The member's session expired: it is out, and not told — a zombie that goes on
        fetching its old partitions for `unaware_polls` polls, and finds out at the next."""
        self.leave(consumer)
        consumer.unaware_polls = unaware_polls

    async def sync(self, consumer: MemoryConsumer) -> None:
        """What a member's poll does first: rejoin if it was expelled (once it finds out),
        rebalance if due."""
        if consumer not in self.members:
            if consumer.unaware_polls > 0:
                consumer.unaware_polls -= 1
                return
            await consumer.revoke_all()
            self.join(consumer)
        if self._rebalancing is None:
            self._rebalancing = asyncio.Lock()
        async with self._rebalancing:
            if self._stale:
                await self.rebalance()

    async def rebalance(self) -> None:
        self._stale = False
        self.generation += 1
        members = list(self.members)
        for member in members:
            await member.revoke_all()
        topics = sorted({topic for member in members for topic in member.topics})
        partitions = [TopicPartition(t, p) for t in topics for p in range(self.broker.partitions(t))]
        for index, member in enumerate(members):
            await member.assign(partitions[index :: len(members)])


class MemoryConsumer:
    """A stage's group member (read_committed, no auto commit)."""

    def __init__(self, broker: MemoryBroker, group_id: str, *, max_records: int | None = None) -> None:
        self.broker = broker
        self.group = broker.group(group_id)
        self.max_records = max_records  # per partition and fetch (Kafka's bound is bytes)
        self.topics: list[str] = []
        self.closed = False
        self.unaware_polls = 0  # expelled: polls left before it finds out
        self._listener: ConsumerRebalanceListener | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()

    async def start(self) -> None:
        await self.broker.hop()

    async def stop(self) -> None:
        self.closed = True
        self.group.leave(self)

    def subscribe(self, topics: Sequence[str], *, listener: ConsumerRebalanceListener) -> None:
        self.topics, self._listener = list(topics), listener
        self.group.join(self)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        self._check_open()
        await self.broker.hop()
        await self.group.sync(self)
        fetched: dict[TopicPartition, list[Any]] = {}
        for tp in sorted(self._positions):
            if (partitions and tp not in partitions) or tp in self._paused:
                continue
            records, self._positions[tp] = self.broker.read_committed(tp, self._positions[tp], self.max_records)
            if records:
                fetched[tp] = records
        return fetched

    async def committed(self, partition: TopicPartition) -> int | None:
        self._check_open()
        await self.broker.hop()
        self.broker.strike(FaultPoint.GROUP_OFFSETS, self.group.group_id)
        return self.group.offsets.get(partition)

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in partitions}  # nothing is ever deleted here

    async def position(self, partition: TopicPartition) -> int:
        if partition not in self._positions:
            raise IllegalStateError(f"Partition {partition} is not assigned")
        return self._positions[partition]

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if partition not in self._positions:
            raise IllegalStateError(f"Partition {partition} is not assigned")
        self._positions[partition] = offset

    def pause(self, *partitions: TopicPartition) -> None:
        for partition in partitions:
            if partition not in self._positions:
                raise IllegalStateError(f"Partition {partition} is not assigned")
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused.difference_update(partitions)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self._check_open()
        await self.broker.hop()
        if self not in self.group.members:
            raise CommitFailedError()
        self.group.offsets.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def highwater(self, partition: TopicPartition) -> int | None:
        if partition not in self._positions:
            raise AssertionError(f"Partition {partition} is not assigned")  # as aiokafka
        return self.broker.end_offset(partition)

    async def revoke_all(self) -> None:
        revoked = sorted(self._positions)
        if self._listener is not None and not self.closed:
            await self._listener.on_partitions_revoked(revoked)
        self._positions.clear()
        self._paused.clear()

    async def assign(self, partitions: list[TopicPartition]) -> None:
        self._positions = {tp: self.group.offsets.get(tp, 0) for tp in partitions}
        self._paused.clear()  # a new assignment's partitions are fetchable (as aiokafka's)
        if self._listener is not None:
            await self._listener.on_partitions_assigned(sorted(partitions))

    def _check_open(self) -> None:
        if self.closed:
            raise ConsumerStoppedError()


class MemoryStateReader:
    """Folds a stage's state topic (read_committed) into a partition's state."""

    def __init__(self, broker: MemoryBroker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self.closed = False

    async def start(self) -> None:
        await self.broker.hop()

    async def stop(self) -> None:
        self.closed = True

    async def catch_up(self, state: PartitionState, partition: int, start: int) -> tuple[int, int]:
        if self.closed:
            raise ConsumerStoppedError()
        await self.broker.hop()
        self.broker.strike(FaultPoint.CATCH_UP, self.topic)
        tp = TopicPartition(self.topic, partition)
        end = self.broker.last_stable_offset(tp)  # what end_offsets answers a read_committed reader
        if end <= start:
            return 0, start
        records, _ = self.broker.read_committed(tp, start, None, until=end)
        return state.restore((r.key, r.value) for r in records), end


class MemoryBatch:
    """A record batch: the first record always fits, then up to `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.size = 0

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: int | None) -> object | None:
        size = len(key or b"") + len(value or b"") + RECORD_OVERHEAD
        if self.records and self.size + size > self.max_bytes:
            return None
        self.records.append((key, value))
        self.size += size
        return size


class MemoryProducer:
    """A transactional producer (see the module doc for fencing and refused batches)."""

    def __init__(self, broker: MemoryBroker, transactional_id: str, *, max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        self.broker = broker
        self.transactional_id = transactional_id
        self.max_batch_bytes = max_batch_bytes
        self.epoch: int | None = None
        self.closed = False
        self._in_transaction = False
        self._refused: set[TopicPartition] = set()  # in this transaction: later batches fail out of sequence

    async def start(self) -> None:
        self._check_open()
        await self.broker.hop()
        self.broker.strike(FaultPoint.INIT, self.transactional_id)
        self.epoch = self.broker.init_producer(self.transactional_id)

    async def stop(self) -> None:
        self.closed = True  # an open transaction stays open: it hangs until the id is initialised again

    async def begin_transaction(self) -> None:
        self._check_open()
        self.broker.strike(FaultPoint.BEGIN, self.transactional_id)
        if self._in_transaction:
            raise IllegalOperation("a transaction is already open")
        self._in_transaction = True
        self._refused.clear()

    async def partitions_for(self, topic: str) -> set[int]:
        await self.broker.hop()
        return set(range(self.broker.partitions(topic)))

    def create_batch(self) -> MemoryBatch:
        return MemoryBatch(self.max_batch_bytes)

    async def send_batch(self, batch: MemoryBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        self._check_transaction()
        await self.broker.hop()
        tp = TopicPartition(topic, partition)
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            if tp in self._refused:
                raise OutOfOrderSequenceNumber()
            self.broker.strike(FaultPoint.SEND, self.transactional_id)
            if batch.size > self.broker.max_message_bytes:
                raise MessageSizeTooLargeError()
            assert self.epoch is not None
            base = self.broker.write(self.transactional_id, self.epoch, tp, batch.records)
        except KafkaError as error:
            self._refused.add(tp)
            delivered.set_exception(error)
        else:
            delivered.set_result(RecordMetadata(topic, partition, tp, base, -1, 0, -1))
        return delivered

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        self._check_transaction()
        await self.broker.hop()
        self.broker.strike(FaultPoint.OFFSETS, self.transactional_id)
        assert self.epoch is not None
        self.broker.add_offsets(self.transactional_id, self.epoch, group_id, offsets)

    async def commit_transaction(self) -> None:
        self._check_transaction()
        await self.broker.hop(self.broker.commit_hops)
        self.broker.strike(FaultPoint.COMMIT, self.transactional_id)
        assert self.epoch is not None
        self.broker.end_transaction(self.transactional_id, self.epoch, commit=True)
        self._in_transaction = False
        self.broker.strike(FaultPoint.COMMIT_UNANSWERED, self.transactional_id)

    async def abort_transaction(self) -> None:
        self._check_transaction()
        await self.broker.hop()
        assert self.epoch is not None
        self.broker.end_transaction(self.transactional_id, self.epoch, commit=False)
        self._in_transaction = False

    def _check_open(self) -> None:
        if self.closed:
            raise ProducerClosed()

    def _check_transaction(self) -> None:
        self._check_open()
        if self.epoch is None or not self._in_transaction:
            raise IllegalOperation("not in a transaction")


class MemoryTransport:
    """The clients of one simulated worker process on a `MemoryBroker`."""

    def __init__(self, broker: MemoryBroker, *, max_records: int | None = None) -> None:
        self.broker = broker
        self.max_records = max_records
        self.consumers: list[MemoryConsumer] = []
        self.readers: list[MemoryStateReader] = []
        self.producers: list[MemoryProducer] = []

    def stage_consumer(
        self, group_id: str, *, session_timeout: float, instance_id: str | None = None
    ) -> MemoryConsumer:
        consumer = MemoryConsumer(self.broker, group_id, max_records=self.max_records)
        self.consumers.append(consumer)
        return consumer

    def state_reader(self, topic: str, client_id: str) -> MemoryStateReader:
        reader = MemoryStateReader(self.broker, topic)
        self.readers.append(reader)
        return reader

    def transactional_producer(self, transactional_id: str) -> MemoryProducer:
        producer = MemoryProducer(self.broker, transactional_id)
        self.producers.append(producer)
        return producer

    def crash(self) -> None:
        """The process is gone (SIGKILL): every client stops answering, open transactions
        hang until their ids are initialised again, and the groups drop its members (as
        once their sessions expire) without telling them."""
        for producer in self.producers:
            producer.closed = True
        for reader in self.readers:
            reader.closed = True
        for consumer in self.consumers:
            consumer.closed = True
            consumer.group.expel(consumer)


def _record(tp: TopicPartition, offset: int, entry: _Entry) -> ConsumerRecord:
    return ConsumerRecord(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        timestamp=entry.timestamp,
        timestamp_type=0,
        key=entry.key,
        value=entry.value,
        checksum=None,
        serialized_key_size=len(entry.key) if entry.key is not None else -1,
        serialized_value_size=len(entry.value) if entry.value is not None else -1,
        headers=(),
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
