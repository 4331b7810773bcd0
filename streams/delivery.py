"""The delivery policy, in one place: consume a batch, process it, and commit the outputs,
the state changes and the input position in one Kafka transaction.

    getmany ─► per owned input partition: process(records) ─► Outputs + state changes
                   └─► begin ─ send outputs ─ send state records ─ send offsets ─ commit

Why not Faust's agents: Faust commits offsets on a timer, independently of the state it
writes and of the outputs it sends, and during table recovery it can let a stream fetch
before seeking it to the committed offset and then treat the offset jump as processed —
inputs were lost after SIGKILL (docs/architecture.md has the measurements). Here
the three advance together or not at all (Kafka Streams' exactly-once, with the
transactional producer of aiokafka):

* **Two transactional producers per owned input partition, used in turn**,
  `transactional.id` = `<group>.<topic>.<partition>` and the same with `.1`. Whoever takes
  a partition over initialises producers with both ids first, which fences the previous
  owner (a zombie after a rebalance or a network partition can no longer commit) and
  aborts its open transactions. Why two: a transaction begun right after the previous one
  of the *same* id committed is told "concurrent transactions" until the broker has
  written that one's commit markers, and aiokafka then waits a fixed 20 ms before asking
  again — measured, nearly every transaction of a busy partition paid it (a minimal
  begin/send/offsets/commit loop: 23 ms per transaction with one id, 2 ms alternating two).
  A transaction still begins only once the previous one committed, so at most one is open
  per partition.
* **State is in memory and changelogged** (`streams/state.py`) to a compacted state topic,
  partition = input partition, written inside the same transaction. A new owner rebuilds
  it by reading the state topic with `read_committed` (streams/restore.py); a returning
  owner reads only what was written since it last committed.
* **The position is tracked in the state** (`Tracking`) and the consumer is sought to it
  explicitly on every assignment — never left to a library's idea of "committed". A
  stateless stage's position is its group offset, committed in the transaction; a stateful
  stage reports its group offsets every few seconds outside its transactions, for lag
  monitoring only. Records below the tracked position are duplicates and dropped.
* **Batches, not round trips.** One transaction per partition per `getmany`, partitions
  committed concurrently, and a partition's next batch folded while its previous batch's
  transaction is in flight (pipelined: `streams/slots.py`, which also holds the
  transaction itself); outputs of compacted topics are coalesced per batch (only the
  last value per key is sent), and outputs go out as record batches per topic-partition.
  Nobody waits for a broker acknowledgement per event.
* **Failure.** Any error around a transaction drops the batch's state changes, marks the
  partition broken and repairs it (new producer, state caught up from the state topic,
  seek to the tracked position) with backoff until the broker answers. A batch that fails
  for a reason that will not go away (an output over the broker's message size) is retried
  one record at a time, and the record that still fails becomes a dead letter — a stream
  never stops on one input.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import Counter

from infra.observability import Metrics
from streams.restore import StateReader
from streams.slots import BatchCommitter, PartitionProcessor, Slot, name

__all__ = ["PartitionProcessor", "Slot", "StageRunner", "StageSpec", "transactional_producer"]

log = logging.getLogger("rollout.delivery")

STOP_TIMEOUT = 10.0  # per step of a stop
TAKE_OVER_TIMEOUT = 30.0
"""Bounds each step of a partition's take-over (fencing, its state catch-up — not the wait
for the stage's reader, which catches one partition up at a time —, the group offset); a
take-over that exceeds one fails and is retried."""


FETCH_MAX_WAIT_MS = 100
BATCH_BYTES_PER_PARTITION = 1024 * 1024
"""The most one fetch brings of an input partition, so the most one batch holds: ~5,000
status reports, ~0.25 s of the decider's CPU (the event loop is its stages' and health
server's, one at a time). A single larger record still comes whole (the broker returns at
least one record batch)."""
TRANSACTION_RETRY_BACKOFF_MS = 20
OFFSETS_REPORTED_EVERY = 5.0  # seconds: a stateful stage's group offsets, for monitoring
MAX_BATCH_BYTES = 1_000_000
"""A record batch of a stage's outputs: up to just under the broker's default
message.max.bytes (1,048,588). A transaction's second batch for a partition waits until the
first is in a produce request, and aiokafka keeps one in flight per broker: with 256 kB, a
decider batch of 1,000 reports wrote its state partition in ~3 produce round trips, one
after another."""
TURNS = 2
"""Transactional producers per owned input partition, used in turn (see the module doc)."""


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


@dataclass(frozen=True)
class StageSpec:
    name: str  # route | decide | assemble
    topics: tuple[str, ...]
    group_id: str
    dead_letter_topic: str
    new_processor: Callable[[TopicPartition], PartitionProcessor]
    state_topic: str | None = None  # compacted; its partition p holds input partition p's state
    process_idle: bool = False  # also called (no records) when only the position moved


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: StageRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.runner.revoke(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.runner.assign(assigned)


class StageRunner:
    """Runs one stage (its own consumer group) over the partitions the group gives it."""

    def __init__(
        self,
        spec: StageSpec,
        *,
        bootstrap: str,
        client_options: dict[str, Any],
        metrics: Metrics,
        duplicates: Counter,
        session_timeout: float = 10.0,
    ) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self.client_options = client_options
        self.committer = BatchCommitter(
            stage=spec.name,
            group_id=spec.group_id,
            dead_letter_topic=spec.dead_letter_topic,
            state_topic=spec.state_topic,
            metrics=metrics,
            duplicates=duplicates,
            position=self._position,
        )
        self.session_timeout = session_timeout
        self.slots: dict[TopicPartition, Slot] = {}
        self.suspended: dict[TopicPartition, Slot] = {}
        self.lock = asyncio.Lock()
        self.reading = asyncio.Lock()  # the state reader catches one partition up at a time
        self.joined = asyncio.Event()
        self.consumer: AIOKafkaConsumer | None = None
        self.reader: StateReader | None = None
        self.on_assignment: Callable[[set[TopicPartition]], None] | None = None
        self._offsets_task: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.spec.group_id,
            client_id=f"{self.spec.group_id}-consumer",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=int(self.session_timeout * 1000),
            heartbeat_interval_ms=int(self.session_timeout * 1000 / 4),
            # A batch is what one fetch brought: every getmany takes all of it (see `run`).
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
        if self.spec.state_topic is not None:
            self.reader = StateReader(
                self.bootstrap, self.spec.state_topic, f"{self.spec.group_id}-state-reader", self.client_options
            )
            await self.reader.start()
        await self.consumer.start()
        self.consumer.subscribe(list(self.spec.topics), listener=_Rebalance(self))

    async def stop(self) -> None:
        """Leave the group and close everything — bounded: a stop never hangs on a
        rebalance callback or a broker that went away (what is not committed is simply
        redone by the next owner, as after a SIGKILL)."""
        try:
            await asyncio.wait_for(self.lock.acquire(), timeout=STOP_TIMEOUT)
        except TimeoutError:
            log.warning("%s: a batch or a rebalance is still in flight; closing anyway", self.spec.name)
        else:
            self.lock.release()
        if self._offsets_task is not None:
            self._offsets_task.cancel()
        slots = [*self.slots.values(), *self.suspended.values()]
        # the transactions in flight end (or fail) together, within one bound
        await self._settle_all(slots)
        for slot in slots:
            await self._close_producer(slot)
        self.slots.clear()
        for client in (self.consumer, self.reader):
            if client is not None:
                try:
                    await asyncio.wait_for(client.stop(), timeout=STOP_TIMEOUT)
                except Exception as error:  # stopping during a broker outage must not hang the exit
                    log.warning("%s: stopping a client failed: %s", self.spec.name, error)

    async def run(self) -> None:
        assert self.consumer is not None
        reported = time.monotonic()
        while True:
            if self.spec.state_topic is not None and time.monotonic() - reported >= OFFSETS_REPORTED_EVERY:
                reported = time.monotonic()
                self._report_offsets()
            # Everything fetched, never a part: aiokafka sends no fetch to a broker while any
            # partition it leads has records left in the buffer — until 100 ms later, when it
            # fetches the *other* partitions, and that fetch waits fetch_max_wait_ms on idle
            # ones while the busy partition is drained. Leftovers stalled the decider up to
            # 100 ms per batch (a trace of a status round: 57 ms idle with 453 journal records
            # committed). A batch's size is bounded by BATCH_BYTES_PER_PARTITION instead.
            batch = await self.consumer.getmany(timeout_ms=100)
            async with self.lock:
                await self._repair_broken()
                work: list[tuple[Slot, list[ConsumerRecord]]] = []
                for tp, records in batch.items():
                    slot = self.slots.get(tp)
                    if slot is not None and slot.broken is None:
                        work.append((slot, records))
                if self.spec.process_idle:
                    busy = {slot.tp for slot, _ in work}
                    for tp, slot in self.slots.items():
                        if tp not in busy and slot.broken is None and await self._position(tp) > slot.position:
                            work.append((slot, []))
                if work:
                    await asyncio.gather(*(self.committer.deliver(slot, records) for slot, records in work))

    def _report_offsets(self) -> None:
        """A stateful stage's group offsets, for lag monitoring (kafka-consumer-groups, the
        broker's metrics): the positions its last transactions committed, best effort and
        outside them (its position is the tracked one, in its state). Not awaited."""
        assert self.consumer is not None
        offsets = {tp: slot.committed_position for tp, slot in self.slots.items() if slot.committed_position > 0}
        if offsets and (self._offsets_task is None or self._offsets_task.done()):
            self._offsets_task = asyncio.create_task(self._commit_offsets(self.consumer, offsets))

    async def _commit_offsets(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        try:
            await asyncio.wait_for(consumer.commit(offsets), timeout=STOP_TIMEOUT)
        except Exception as error:  # a rebalance, the broker away: the next report will do
            log.debug("%s: group offsets not reported: %s", self.spec.name, error)

    # -- assignment ----------------------------------------------------------------------

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        async with self.lock:  # waits for the batch being folded
            letting_go = {tp: slot for tp in revoked if (slot := self.slots.pop(tp, None)) is not None}
            await self._settle_all(list(letting_go.values()))  # their last transactions end first
            for tp, slot in letting_go.items():
                await self._close_producer(slot)
                slot.broken = None
                self.suspended[tp] = slot
            if revoked:
                log.info("%s: revoked %s", self.spec.name, _names(revoked))

    async def assign(self, assigned: list[TopicPartition]) -> None:
        async with self.lock:
            taken: list[Slot] = []
            for tp in sorted(assigned):
                slot = self.suspended.pop(tp, None)
                if slot is None:
                    try:
                        slot = Slot(tp, self.spec.new_processor(tp))
                    except Exception:  # cannot even hold the partition: a bug, and loud
                        log.exception("%s %s: cannot set up the partition", self.spec.name, name(tp))
                        raise
                self.slots[tp] = slot
                taken.append(slot)
            await asyncio.gather(*(self._take_over_or_fail(slot) for slot in taken))
            for tp in [tp for tp in self.suspended if tp not in self.slots]:
                # another worker owns it now: what we hold may go stale; rebuilt if it returns
                del self.suspended[tp]
            self.joined.set()
            if self.on_assignment is not None:
                self.on_assignment(set(self.slots))
            log.info("%s: assigned %s", self.spec.name, _names(assigned))

    async def _take_over_or_fail(self, slot: Slot) -> None:
        """Take `slot` over, bounded; if that fails it is broken (and repaired later)."""
        try:
            await self._take_over(slot)
        except Exception as error:
            await self._close_producer(slot)
            slot.fail(self.spec.name, error)

    async def _take_over(self, slot: Slot) -> None:
        """Fence the previous owner, fold the state it committed, seek to its position.
        Several partitions are taken over at once (fencing is a few round trips each); only
        the state catch-up goes one partition at a time (one reader per stage)."""
        assert self.consumer is not None
        started = time.perf_counter()
        await self._settle(slot)  # a transaction of ours still in flight ends first
        await self._close_producer(slot)
        slot.producers = [self._new_producer(tid) for tid in self.transactional_ids(slot.tp)]
        slot.turn = 0  # (all closed by the next repair if anything below fails)
        fencing = asyncio.gather(*(self._fence(producer) for producer in slot.producers))
        await asyncio.wait_for(fencing, timeout=TAKE_OVER_TIMEOUT)
        processor = slot.processor
        committed = await asyncio.wait_for(self.consumer.committed(slot.tp), timeout=TAKE_OVER_TIMEOUT)
        if processor.state is not None:
            async with self.reading:
                folded = await asyncio.wait_for(self._catch_up(slot), timeout=TAKE_OVER_TIMEOUT)
            processor.reset()
            tracking = processor.state.tracking
            if processor.state.restored:
                slot.position = tracking.offset
                if committed is not None and committed > tracking.offset:
                    # the group offset is only ever reported from tracked positions: is this
                    # the state topic of another deployment, or was it truncated?
                    log.warning(
                        "%s %s: group offset %s is past the tracked position %s; using the tracked one",
                        self.spec.name,
                        name(slot.tp),
                        committed,
                        tracking.offset,
                    )
            else:
                slot.position = committed or 0
            log.info(
                "%s %s: state restored (%d records, taken over in %.2f s), resuming at offset %d",
                self.spec.name,
                name(slot.tp),
                folded,
                time.perf_counter() - started,
                slot.position,
            )
        else:
            slot.position = committed or 0
        slot.committed_position = slot.position
        self.consumer.seek(slot.tp, slot.position)
        slot.broken = None
        slot.backoff = 0.2

    def transactional_ids(self, tp: TopicPartition) -> list[str]:
        """The ids of the producers that write for input partition `tp`, used in turn."""
        base = f"{self.spec.group_id}.{tp.topic}.{tp.partition}"
        return [base, *(f"{base}.{n}" for n in range(1, TURNS))]

    def _new_producer(self, transactional_id: str) -> AIOKafkaProducer:
        return transactional_producer(self.bootstrap, transactional_id, self.client_options)

    @staticmethod
    async def _fence(producer: AIOKafkaProducer) -> None:
        """Start `producer`. An empty transaction waits for its producer id: from then on the
        previous owner of its transactional id is fenced and its open transaction aborted
        (or, if it was committing, committed first)."""
        await producer.start()
        await producer.begin_transaction()
        await producer.abort_transaction()

    async def _catch_up(self, slot: Slot) -> int:
        """Fold the state topic's records written since `slot.state_position`."""
        assert self.reader is not None and slot.processor.state is not None
        folded, slot.state_position = await self.reader.catch_up(
            slot.processor.state, slot.tp.partition, slot.state_position
        )
        return folded

    # -- one batch -----------------------------------------------------------------------

    async def _position(self, tp: TopicPartition) -> int:
        """The consumer's position for `tp` (past transaction markers too), or -1."""
        assert self.consumer is not None
        try:
            return int(await asyncio.wait_for(self.consumer.position(tp), timeout=1.0))
        except Exception:  # not assigned any more, or no valid position yet
            return -1

    async def _settle_all(self, slots: list[Slot]) -> None:
        settling = asyncio.gather(*(self.committer.settle(slot) for slot in slots), return_exceptions=True)
        try:
            await asyncio.wait_for(settling, timeout=STOP_TIMEOUT)
        except TimeoutError:
            log.warning("%s: transactions still in flight after %.0f s; closing anyway", self.spec.name, STOP_TIMEOUT)

    async def _settle(self, slot: Slot) -> None:
        """Let the slot's transaction in flight end — committed or failed — before its
        producers are closed or replaced (bounded: a broker gone away fails it)."""
        try:
            await asyncio.wait_for(self.committer.settle(slot), timeout=STOP_TIMEOUT)
        except Exception as error:
            log.warning("%s %s: the last transaction did not end: %s", self.spec.name, name(slot.tp), error)

    async def _repair_broken(self) -> None:
        now = time.monotonic()
        due = [slot for slot in self.slots.values() if slot.broken is not None and now >= slot.retry_at]
        if due:
            await asyncio.gather(*(self._repair(slot) for slot in due))

    async def _repair(self, slot: Slot) -> None:
        await self._settle(slot)
        await self._take_over_or_fail(slot)
        if slot.broken is None:
            log.info("%s %s: repaired, resuming at %d", self.spec.name, name(slot.tp), slot.position)

    @property
    def healthy(self) -> bool:
        """Joined its group, and every owned partition is caught up and unbroken."""
        return self.joined.is_set() and all(s.broken is None for s in self.slots.values())

    def broken(self) -> list[str]:
        return [f"{name(s.tp)}: {s.broken}" for s in self.slots.values() if s.broken is not None]

    async def _close_producer(self, slot: Slot) -> None:
        producers, slot.producers = slot.producers, []
        for producer in producers:
            try:
                await asyncio.wait_for(producer.stop(), timeout=5)
            except Exception as error:
                log.debug("closing a producer of %s: %s", name(slot.tp), error)


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(name(tp) for tp in sorted(tps)) or "nothing"
