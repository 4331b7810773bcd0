"""The transport seam: what a stage's delivery needs of Kafka, and the clients that give it.

    StageRunner (streams/delivery.py) ──► StageConsumer        the group: assignments, fetch,
                                      │                        positions, seek, group offsets
                                      ├─► StateReading         a stateful stage's take-overs:
                                      │                        its state topic, read_committed
    BatchCommitter (streams/slots.py) ──► TransactionalProducer  begin, record batches, offsets
                                                               (the router), commit

A `Transport` makes those clients. Two implement it:

* `KafkaTransport`, in production: aiokafka's own clients, with the settings measured for
  the worker (below). The protocols are the subset of `AIOKafkaProducer` and
  `AIOKafkaConsumer` the delivery calls, with aiokafka's signatures, so the production
  clients *are* the implementation — nothing wraps them, a batch pays no extra call.
* `MemoryTransport` (streams/memory_broker.py), for tests: an in-memory broker with topics,
  transactions, read_committed visibility, fencing and injectable faults — a fault-injection
  tool that runs the real `StageRunner` and `BatchCommitter` in milliseconds, beside (not
  instead of) the broker-backed tests in tests/integration/.

Nothing here knows a stage: a stage says what a batch produces (`PartitionProcessor`), the
delivery decides when it is committed, the transport only moves records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from streams.restore import StateReader
from streams.state import PartitionState

FETCH_MAX_WAIT_MS = 100
BATCH_BYTES_PER_PARTITION = 1024 * 1024
"""The most one fetch brings of an input partition, so the most one batch holds: ~5,000
status reports, ~0.25 s of the decider's CPU (the event loop is its stages' and health
server's, one at a time). A single larger record still comes whole (the broker returns at
least one record batch)."""
TRANSACTION_RETRY_BACKOFF_MS = 20
MAX_BATCH_BYTES = 1_000_000
"""A record batch of a stage's outputs: up to just under the broker's default
message.max.bytes (1,048,588). A transaction's second batch for a partition waits until the
first is in a produce request, and aiokafka keeps one in flight per broker: with 256 kB, a
decider batch of 1,000 reports wrote its state partition in ~3 produce round trips, one
after another."""


class RecordBatch(Protocol):
    """Records for one topic-partition, sent as one (aiokafka's `BatchBuilder`)."""

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: int | None) -> object | None:
        """Metadata of the appended record, or None when the batch is full (never for the
        first record of a batch: it is appended whatever its size)."""


class TransactionalProducer(Protocol):
    """What a partition's transactions need of a producer (`AIOKafkaProducer` with a
    `transactional_id`). `start` initialises the id — fencing the id's previous producer
    and aborting its open transaction."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def begin_transaction(self) -> None: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None: ...

    async def partitions_for(self, topic: str) -> set[int]: ...

    def create_batch(self) -> RecordBatch: ...

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        """Queue `batch`; the future of its delivery (a `RecordMetadata`: `offset` is the
        batch's base offset), or of the error that refused it."""


class StageConsumer(Protocol):
    """A stage's group member (`AIOKafkaConsumer`, read_committed, no auto commit): its
    assignment changes through the listener's callbacks."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def subscribe(self, topics: Sequence[str], *, listener: ConsumerRebalanceListener) -> None: ...

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]: ...

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group offset of `partition`, or None."""

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset each partition still holds (past records deleted by retention)."""

    async def position(self, partition: TopicPartition) -> int:
        """The next offset a fetch reads (past transaction markers too)."""

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    def pause(self, *partitions: TopicPartition) -> None:
        """Not fetched until resumed (a partition being taken over)."""

    def resume(self, *partitions: TopicPartition) -> None: ...

    async def commit(self, offsets: dict[TopicPartition, int]) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def highwater(self, partition: TopicPartition) -> int | None: ...


class StateReading(Protocol):
    """Folds a stage's state topic into a partition's state (`streams.restore.StateReader`)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def catch_up(self, state: PartitionState, partition: int, start: int) -> tuple[int, int]:
        """(records folded, the offset the next catch-up starts from)."""


class Transport(Protocol):
    """Makes the clients of one stage."""

    def stage_consumer(
        self, group_id: str, *, session_timeout: float, instance_id: str | None = None
    ) -> StageConsumer: ...

    def state_reader(self, topic: str, client_id: str) -> StateReading: ...

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer: ...


class KafkaTransport:
    """aiokafka's clients on a real broker, as the worker runs them."""

    def __init__(self, bootstrap: str, client_options: dict[str, Any]) -> None:
        self.bootstrap = bootstrap
        self.client_options = client_options

    def stage_consumer(self, group_id: str, *, session_timeout: float, instance_id: str | None = None) -> StageConsumer:
        consumer: StageConsumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group_id,
            # static membership (`Settings.instance_id`): the same id after a restart takes
            # the dead member's place — and its partitions — without waiting for its session
            group_instance_id=instance_id,
            client_id=f"{group_id}-consumer",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=int(session_timeout * 1000),
            # Kafka's default beat (3 s), or more often in a shorter session
            heartbeat_interval_ms=int(min(3.0, session_timeout / 4) * 1000),
            # A batch is what one fetch brought: every getmany takes all of it (StageRunner.step).
            max_partition_fetch_bytes=BATCH_BYTES_PER_PARTITION,
            # A fetch that finds nothing new waits on the broker this long (a long poll: it is
            # answered as soon as data is committed). aiokafka keeps one fetch in flight per
            # broker, and a partition whose records were just handed over joins only the next
            # one: so this is also how long a busy partition may wait behind idle ones. 500 ms
            # (the default) idled the pipeline between batches; 20 ms cost an idle worker 8.5 %
            # of a core in empty fetches (and the broker as much), ~30 µs per status report
            # in benchmarks/throughput.py. 100 ms: 4.3 % idle (`rollout worker`, 4 partitions).
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            **self.client_options,
        )
        return consumer

    def state_reader(self, topic: str, client_id: str) -> StateReading:
        return StateReader(self.bootstrap, topic, client_id, self.client_options)

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        producer: TransactionalProducer = transactional_producer(self.bootstrap, transactional_id, self.client_options)
        return producer


def transactional_producer(bootstrap: str, transactional_id: str, client_options: dict[str, Any]) -> AIOKafkaProducer:
    """A stage's transactional producer (also what benchmarks/transaction_cost.py measures)."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=transactional_id,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=2,
        max_batch_size=MAX_BATCH_BYTES,
        request_timeout_ms=15000,
        # Any other request told "concurrent transactions" (or a retriable error) is
        # retried after this, not aiokafka's default 100 ms.
        retry_backoff_ms=TRANSACTION_RETRY_BACKOFF_MS,
        **client_options,
    )


__all__ = [
    "KafkaTransport",
    "RecordBatch",
    "StageConsumer",
    "StateReading",
    "TransactionalProducer",
    "Transport",
    "transactional_producer",
]
