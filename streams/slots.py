"""One owned input partition of a stage, and how its batches are committed: pipelined.

    batch N     process ─► seal ─► [ begin ─ send outputs and state ─ delivered ─ send offsets ─ commit ]  (a task)
    batch N+1                 process (on N's sealed state) ─► wait for N ─► seal ─► [ transaction ] ...

A transaction is a chain of broker round trips (AddPartitionsToTxn, Produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn; aiokafka drives them one after another), and the
process has nothing to do while they run. So the next batch of the partition is folded
meanwhile, on top of the state the transaction in flight is writing (the *sealed* layer of
`streams/state.py`). Its transaction begins only once the previous one committed — at most
one is open per partition, and each commits only after everything it was folded on did:

* the previous transaction committed → its sealed layer becomes committed state, this
  batch's layer is sealed and its transaction starts (not awaited: the stage goes on);
* it failed → its sealed layer and this batch are dropped, the slot is broken, and the
  repair rebuilds the state from the state topic and seeks back to the tracked position
  (streams/delivery.py) — the same recovery as before, nothing is lost or applied twice.

A trace of a status round (3,000 reports, the decider) before this: of each batch's wall
time, ~60 % folding and ~40 % waiting for its transaction's round trips.

The slot's phase (streams/lifecycle.py) is where the partition is in that cycle: READY
(nothing in flight), COMMITTING (a transaction in flight — `inflight` is its task — and
maybe the next batch folded on it), BROKEN (waiting for its repair). A batch's transaction
moves it READY → COMMITTING, the transaction's end back to READY or on to BROKEN. A batch
whose processing fails first waits for the transaction it was folded on, then breaks the
partition: a BROKEN partition has nothing in flight, and its repair starts from what is
known to be committed.

A stateful stage's position is the `Tracking` record in its state, written in the same
transaction as the state: its transactions carry no consumer-group offsets (that would be
two more round trips each, AddOffsetsToTxn and TxnOffsetCommit; the group offsets are
reported for monitoring, outside the transactions: streams/delivery.py). A stateless stage
(the router) has no state: its group offset is its position, committed in the transaction.

A processor may fold only part of a batch (`process` returns how many records it folded:
the decider stops once a batch has written `BATCH_WRITES` records, streams/decider.py); that
part is committed as a batch of its own, and the rest of the fetch is folded next, on top
of it, as the next batch would be.

Failure isolation is kept (`Isolation`): a batch whose processing fails, or whose records
cannot be sent (an output over the broker's message size), is retried one record at a time,
each awaited, and the record that still fails is poison — a dead letter; a stream never
stops on one input.

The producers are `TransactionalProducer`s of the transport seam (streams/transport.py):
aiokafka's in production, the in-memory broker's in tests (streams/memory_broker.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aiokafka import TopicPartition
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError
from aiokafka.structs import ConsumerRecord
from prometheus_client import Counter

from infra.denials import refused_by_acls
from infra.observability import RATE_LIMITED, Metrics
from infra.topics import SUFFIXES
from streams.lifecycle import PartitionPhase, RepairSchedule, checked
from streams.outputs import Outputs, OutRecord, key_slot
from streams.state import PartitionState, Tracking
from streams.transport import TransactionalProducer

log = logging.getLogger("rollout.delivery")

PERMANENT_ERRORS = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError)
POISON_REASON = "its outputs cannot be written (larger than the broker accepts); input skipped"


class PartitionProcessor(Protocol):
    """A stage's logic for one input partition. `process` must not do I/O; it evolves
    `state` (None for a stateless stage) and fills `out`."""

    @property
    def state(self) -> PartitionState | None: ...  # read-only here: a stage's own may be narrower

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> int | None:
        """Fold `records` into `out` (and the state); how many of them, from the first, were
        folded — None: all. A processor whose batch would write more than it should (its
        own bound) stops early, after one record at least; the rest is folded into the next
        transaction."""

    def reset(self) -> None:
        """Forget derived caches: the state was dropped back to its committed values."""


@runtime_checkable
class WarmsUp(Protocol):
    """A processor whose derived caches, dropped by a reset, cost more to rebuild than one
    fold may hold the event loop (the decider's indexes: every cluster of every module of the
    partition)."""

    def warm_up(self) -> Iterator[object]:
        """Rebuild what a reset dropped, one bounded step per item (nothing when warm)."""


async def warm_up(processor: PartitionProcessor) -> None:
    """Run `processor`'s warm-up, if it has one, yielding to the event loop between its
    steps: the consumer's heartbeats go on meanwhile. Rebuilt lazily inside the next fold
    instead, the decider's indexes at 100,000 clusters x 20 modules held the loop past the
    session timeout — the broker expelled the worker, whose transactions then failed, whose
    resets dropped the indexes again (issue 22)."""
    if isinstance(processor, WarmsUp):
        for _ in processor.warm_up():
            await asyncio.sleep(0)


@dataclass
class Isolation:
    """Failure isolation: after a batch failed (its processing raised, or the broker refused
    its outputs for good), its records are retried one at a time — each in its own awaited
    transaction — up to offset `until`; a record that fails alone is poison: from then on it
    is only a dead letter."""

    until: int = -1
    poison: set[int] = field(default_factory=set)

    def single_steps(self, first: ConsumerRecord) -> bool:
        """Whether a batch starting with `first` goes one record at a time."""
        return bool(first.offset <= self.until)

    def isolate(self, records: Sequence[ConsumerRecord]) -> int | None:
        """Retry `records` one at a time; the offset of the one record that failed alone."""
        if len(records) == 1:
            self.poison.add(records[0].offset)
            return int(records[0].offset)
        if records:
            self.until = records[-1].offset
        return None


@dataclass(eq=False)
class Slot:
    """An input partition a stage holds: its processor (with the state), its producers, where
    it is in the input and the state topic, and its phase (streams/lifecycle.py), which only
    `enter` changes. A new slot is SUSPENDED until its take-over."""

    tp: TopicPartition
    processor: PartitionProcessor
    producers: list[TransactionalProducer] = field(default_factory=list)  # used in turn
    turn: int = 0  # the producer of the next transaction
    position: int = 0  # next input offset to process (committed, or folded into the batch in flight)
    committed_position: int = 0  # the position of the last transaction committed
    state_position: int = 0  # next state-topic offset not yet folded into the state
    inflight: asyncio.Task[bool] | None = None  # COMMITTING: the last batch's transaction, until settled
    reason: str = ""  # why it broke, the last time it did
    repair: RepairSchedule = field(default_factory=RepairSchedule)
    isolation: Isolation = field(default_factory=Isolation)
    _phase: PartitionPhase = field(default=PartitionPhase.SUSPENDED, init=False, repr=False)

    @property
    def phase(self) -> PartitionPhase:
        return self._phase

    def enter(self, phase: PartitionPhase) -> None:
        """Change the phase; `IllegalTransition` if the lifecycle does not allow it."""
        self._phase = checked(self._phase, phase, what=name(self.tp))

    @property
    def broken(self) -> str | None:
        """Why the partition is broken, or None when it is not."""
        return self.reason if self._phase is PartitionPhase.BROKEN else None

    def fail(self, stage: str, error: BaseException, now: float) -> None:
        """Broken: the stage repairs it once `repair` is due."""
        refused = refused_by_acls(error, "worker", worker_prefix(self.tp.topic))
        self.reason = refused or f"{type(error).__name__}: {error}"
        if refused is not None:  # an error, not a blip: it lasts until an admin acts
            log.error("%s %s: %s", stage, name(self.tp), refused, extra=RATE_LIMITED)
        else:
            log.warning("%s: %s; repairing", stage, self.reason, extra=RATE_LIMITED)
            log.debug("%s %s broken: %s", stage, name(self.tp), self.reason)
        self.enter(PartitionPhase.BROKEN)
        self.repair.failed(now)

    def transaction_ended(self, stage: str, error: BaseException | None, now: float) -> None:
        """The transaction in flight committed (`error` None) or failed: READY or BROKEN —
        if the partition still waits on it. Revoked or taken over meanwhile (waiting for it
        timed out), it keeps its phase: the outcome only reached the state."""
        if self._phase is not PartitionPhase.COMMITTING:
            log.debug("%s %s: a transaction ended while %s", stage, name(self.tp), self._phase.value)
        elif error is None:
            self.enter(PartitionPhase.READY)
        else:
            self.fail(stage, error, now)


def worker_prefix(topic: str) -> str:
    """The topic prefix of an input topic of the worker (its name without the role's suffix)."""
    suffix = next((suffix for suffix in SUFFIXES.values() if topic.endswith(suffix)), "")
    return topic[: len(topic) - len(suffix)]


@dataclass
class Prepared:
    """A batch folded and encoded, ready for its transaction."""

    records: list[ConsumerRecord]
    end: int  # the input position once it commits
    outputs: list[OutRecord]
    state_records: list[OutRecord]
    dead_letters: int
    rest: list[ConsumerRecord] = field(default_factory=list)  # not folded: the next transaction's


class BatchCommitter:
    """Folds each batch of a stage's partitions and commits it in a transaction (see the
    module doc); `position(tp)` is the consumer's position (past transaction markers)."""

    def __init__(
        self,
        *,
        stage: str,
        group_id: str,
        dead_letter_topic: str,
        state_topic: str | None,
        metrics: Metrics,
        duplicates: Counter,
        position: Callable[[TopicPartition], Awaitable[int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stage = stage
        self.group_id = group_id
        self.dead_letter_topic = dead_letter_topic
        self.state_topic = state_topic or ""
        self.metrics = metrics
        self.duplicates = duplicates.labels(stage)
        self.latency = metrics.decision_latency.labels(stage)
        self.position = position
        self.clock = clock  # when a broken partition is repaired
        # what each transaction folded, how long its fold held the event loop — which the
        # worker's stages share: the other stages' fetches and every transaction's round
        # trips wait for it — and how long the transaction took (README, Performance)
        self.batch_records = metrics.batch_records.labels(stage)
        self.fold_seconds = metrics.fold_seconds.labels(stage)
        self.transaction_seconds = metrics.transaction_seconds.labels(stage)
        self._partitions: dict[str, list[int]] = {}  # topic -> partition ids, for keyed records

    async def deliver(self, slot: Slot, records: list[ConsumerRecord]) -> None:
        """Fold `records` (or, with none, only the position's move) and start their
        transaction; one record at a time while `slot.isolation` says so."""
        fresh = [r for r in records if r.offset >= slot.position]
        if len(fresh) < len(records):
            self.duplicates.inc(len(records) - len(fresh))
        if records and not fresh:
            return
        await warm_up(slot.processor)
        end = max(fresh[-1].offset + 1 if fresh else slot.position, await self.position(slot.tp))
        if fresh and slot.isolation.single_steps(fresh[0]):
            for index, record in enumerate(fresh):
                last = index == len(fresh) - 1
                step_end = end if last else fresh[index + 1].offset
                if not await self.transact(slot, [record], step_end, wait=True):
                    return
            return
        await self.transact(slot, fresh, end, wait=False)

    async def transact(self, slot: Slot, records: list[ConsumerRecord], end: int, *, wait: bool) -> bool:
        """Fold `records` and start their transaction once the one in flight committed;
        `wait`: also wait for this one. False if anything failed (the slot is broken)."""
        prepared = self._prepare(slot, records, end)
        committed = await self.settle(slot)  # the transaction this batch was folded on
        if isinstance(prepared, Exception):
            self.isolate(slot, records, prepared)
            if slot.phase is PartitionPhase.READY:  # rewind to the tracked position, start over from there
                slot.fail(self.stage, prepared, self.clock())
            return False
        if not committed:
            self.drop(slot)  # folded on a batch that did not commit
            return False
        slot.enter(PartitionPhase.COMMITTING)
        state = slot.processor.state
        if state is not None:
            state.seal_batch()
        slot.position = prepared.end
        slot.inflight = asyncio.create_task(self._commit(slot, prepared), name=f"{self.stage} {name(slot.tp)}")
        if prepared.rest:  # the processor stopped at its bound: the rest is the next transaction
            return await self.transact(slot, prepared.rest, end, wait=wait)
        return await self.settle(slot) if wait else True

    async def settle(self, slot: Slot) -> bool:
        """Wait for the slot's transaction in flight, if any; whether it committed (with
        none in flight: whether the slot is unbroken)."""
        inflight, slot.inflight = slot.inflight, None
        if inflight is None:
            return slot.phase is not PartitionPhase.BROKEN
        try:
            return await asyncio.shield(inflight)
        except asyncio.CancelledError:
            slot.inflight = inflight  # still running: whoever settles next waits for it
            raise

    def _prepare(self, slot: Slot, records: list[ConsumerRecord], end: int) -> Prepared | Exception:
        """Fold the batch into the state's batch layer and encode what it writes; or the
        error that stopped it (what it folded is dropped)."""
        processor, state, poison = slot.processor, slot.processor.state, slot.isolation.poison
        out = Outputs(self.dead_letter_topic)
        rest: list[ConsumerRecord] = []
        try:
            live = [r for r in records if r.offset not in poison]
            started = time.perf_counter()
            folded = processor.process(live, end, out)
            self.fold_seconds.observe(time.perf_counter() - started)
            self.batch_records.observe(len(live) if folded is None else folded)
            if folded is not None and 0 < folded < len(live):  # stopped at its bound
                cut = live[folded].offset
                records, rest, end = (
                    [r for r in records if r.offset < cut],
                    [r for r in records if r.offset >= cut],
                    cut,
                )
            for record in (r for r in records if r.offset in poison):
                out.reject(POISON_REASON, record, self.stage)
            if state is not None:
                before = state.tracking
                state.tracking = Tracking(offset=end, events=before.events + len(records))
                state.keep_event()
            changes = state.changelog() if state is not None else []
        except Exception as error:  # a bug in a stage must not stop the stream: isolate the record
            log.exception("%s %s: processing failed", self.stage, name(slot.tp))
            self.drop(slot)
            return error
        state_records = [OutRecord(self.state_topic, k, v, slot.tp.partition) for k, v in changes]
        return Prepared(records, end, out.all(), state_records, out.dead_letters, rest)

    async def _commit(self, slot: Slot, batch: Prepared) -> bool:
        """The sealed batch's transaction; on success its state is committed."""
        producers, state = slot.producers, slot.processor.state
        begun = time.perf_counter()
        try:
            producer = producers[slot.turn]
            await producer.begin_transaction()
            sent, state_sent, state_tail = await self._send(producer, batch.outputs, batch.state_records)
            await _delivered([*sent, *state_sent])
            if state is None:  # a stateless stage's position is its group offset
                # only once every batch is written: see `_send` on the broker's verification
                await producer.send_offsets_to_transaction({slot.tp: batch.end}, self.group_id)
            await producer.commit_transaction()
        except Exception as error:
            if state is not None:
                state.drop_sealed()  # and whatever was folded on it since
            slot.processor.reset()
            if isinstance(error, PERMANENT_ERRORS):
                self.isolate(slot, batch.records, error)
            slot.transaction_ended(self.stage, error, self.clock())
            return False
        self.transaction_seconds.observe(time.perf_counter() - begun)
        slot.turn = (slot.turn + 1) % len(producers)
        slot.committed_position = batch.end
        if state is not None:
            state.commit_sealed()
            if state_sent:
                # past the last state record written (its batch's base offset + its records):
                # everything below is folded in this state already, so a catch-up from here —
                # the take-over of a partition this stage gets back — reads only what others
                # wrote since, and finding nothing keeps the processor as it is (delivery.py)
                slot.state_position = max(slot.state_position, state_sent[-1].result().offset + state_tail)
        slot.transaction_ended(self.stage, None, self.clock())
        if batch.records:  # the batch's oldest input: its worst latency, one observation per batch
            self.latency.observe(max(time.time() - batch.records[0].timestamp / 1000, 0.0))
        self.metrics.events_consumed.labels(slot.tp.topic).inc(len(batch.records))
        if batch.dead_letters:
            self.metrics.dead_letters.labels(self.stage).inc(batch.dead_letters)
        return True

    async def _send(
        self, producer: TransactionalProducer, outputs: list[OutRecord], state_records: list[OutRecord]
    ) -> tuple[list[asyncio.Future[Any]], list[asyncio.Future[Any]], int]:
        """Send the outputs and the state records as record batches, one stream per
        topic-partition in order (no future, no partitioner call per record); the futures of
        the output batches and of the state batches, each in order, and how many records the
        last state batch holds.

        The first batch of *every* topic-partition is handed to the producer before any
        second one: a second batch of a partition waits for the first to drain, and that
        wait lets the producer's sender run. Had it run with only some partitions known, it
        would add the rest to the transaction in a second AddPartitionsToTxn while the first
        partitions' Produce is in flight — and a broker verifying that Produce against the
        transaction (transaction.partition.verification.enable, Kafka ≥ 3.6) finds the
        coordinator busy (CONCURRENT_TRANSACTIONS), which it answers as NOT_ENOUGH_REPLICAS:
        a retry after a backoff, and a warning, on a healthy broker. The same holds for
        AddOffsetsToTxn, which `_commit` therefore sends only once every batch is written."""
        streams: dict[tuple[str, int], list[Any]] = {}
        counts: dict[tuple[str, int], list[int]] = {}  # records in each batch of a stream
        state_streams: dict[tuple[str, int], None] = {}  # in order (one: the input partition's)
        for records, is_state in ((outputs, False), (state_records, True)):
            for topic, key, value, partition in records:
                if partition is None:
                    partitions = self._partitions.get(topic)
                    if partitions is None:
                        partitions = sorted(await producer.partitions_for(topic))
                        self._partitions[topic] = partitions
                    partition = partitions[key_slot(key, len(partitions))]
                stream = streams.get((topic, partition))
                if stream is None:
                    stream = streams[(topic, partition)] = [producer.create_batch()]
                    counts[(topic, partition)] = [0]
                    if is_state:
                        state_streams[(topic, partition)] = None
                if stream[-1].append(key=key, value=value, timestamp=None) is None:  # full: start another
                    stream.append(producer.create_batch())
                    counts[(topic, partition)].append(0)
                    if stream[-1].append(key=key, value=value, timestamp=None) is None:
                        raise RecordTooLargeError(f"a record for {topic} does not fit in a batch")
                counts[(topic, partition)][-1] += 1
        futures: dict[tuple[str, int], list[asyncio.Future[Any]]] = {tp: [] for tp in streams}
        for depth in range(max((len(stream) for stream in streams.values()), default=0)):
            for (topic, partition), stream in streams.items():  # every partition's first batch, then the second…
                if depth < len(stream):
                    futures[(topic, partition)].append(
                        await producer.send_batch(stream[depth], topic, partition=partition)
                    )
        sent = [future for tp, batch_futures in futures.items() if tp not in state_streams for future in batch_futures]
        state_sent = [future for tp in state_streams for future in futures[tp]]
        state_tail = counts[list(state_streams)[-1]][-1] if state_streams else 0
        return sent, state_sent, state_tail

    def drop(self, slot: Slot) -> None:
        """Drop what the batch folded (not the sealed batch in flight); rebuild derived caches."""
        if slot.processor.state is not None:
            slot.processor.state.drop_batch()
        slot.processor.reset()

    def isolate(self, slot: Slot, records: list[ConsumerRecord], error: BaseException) -> None:
        """Retry `records` one record at a time; a single record that fails again is poison."""
        poison = slot.isolation.isolate(records)
        if poison is not None:
            log.error("%s %s: offset %d is poison: %s", self.stage, name(slot.tp), poison, error)


async def _delivered(sent: list[asyncio.Future[Any]]) -> None:
    """Every batch of the transaction written, or the error that refused one. aiokafka's
    `commit_transaction` commits whatever was written: a batch the broker refused for good
    (a record over its message size) fails only its own future — and every later batch of
    that partition from the producer then fails too (out-of-order sequence). Committing
    without looking would lose those outputs while the state and the position advance."""
    results = await asyncio.gather(*sent, return_exceptions=True)
    errors = [result for result in results if isinstance(result, BaseException)]
    if errors:
        raise next((e for e in errors if isinstance(e, PERMANENT_ERRORS)), errors[0])


def name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
