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
  never stops on one input. What a poll fetched before it repaired a partition is not
  delivered: it was read from where the consumer was, past the batch that broke it, and
  the repair sought back to the tracked position (delivered, it skipped the inputs between).

Each partition the stage holds is in one phase of its lifecycle (streams/lifecycle.py),
changed only through `Slot.enter`, which refuses a change the table does not list:

    SUSPENDED ─assign─► TAKING_OVER ─► READY ⇄ COMMITTING        (any failure ─► BROKEN,
        ▲                    ▲                                     a revoke ─► SUSPENDED)
        └──── revoke ────────┴──── repair, after a backoff ──── BROKEN

An assignment or a repair is a take-over (this module); a batch's transaction is
READY → COMMITTING → READY (streams/slots.py); a revoke settles the transaction in flight,
closes the producers and keeps the partition SUSPENDED, state and all, in case it comes back.

The clients come through the transport seam (streams/transport.py): aiokafka's in
production; in tests an in-memory broker (streams/memory_broker.py) with transactions,
read_committed, fencing and injectable faults, on which tests/streams/ drives this module —
a Hypothesis state machine among them — in seconds, beside the broker-backed tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import Counter

from infra.observability import Metrics
from streams.lifecycle import PartitionPhase
from streams.slots import BatchCommitter, PartitionProcessor, Slot, name
from streams.transport import (
    KafkaTransport,
    StageConsumer,
    StateReading,
    TransactionalProducer,
    Transport,
    transactional_producer,
)

__all__ = ["InputTruncated", "PartitionProcessor", "Slot", "StageRunner", "StageSpec", "transactional_producer"]

log = logging.getLogger("rollout.delivery")

STOP_TIMEOUT = 10.0  # per step of a stop
TAKE_OVER_TIMEOUT = 30.0
"""Bounds each step of a partition's take-over (fencing, the group offset); a take-over that
exceeds one fails and is retried. Not its state catch-up, which the reader bounds by its
progress (streams/restore.py `STALL_TIMEOUT`): bounded as a whole, one 100,000-cluster
partition's 1.2 million state records were cut short at 30 s under load and read again from
the start by the repair (issue 22)."""


OFFSETS_REPORTED_EVERY = 5.0  # seconds: a stateful stage's group offsets, for monitoring
TURNS = 2
"""Transactional producers per owned input partition, used in turn (see the module doc)."""


class InputTruncated(RuntimeError):
    """A stateful stage's input starts past the position its state covers."""


@dataclass(frozen=True)
class StageSpec:
    name: str  # route | decide | assemble
    topics: tuple[str, ...]
    group_id: str
    dead_letter_topic: str
    new_processor: Callable[[TopicPartition], PartitionProcessor]
    state_topic: str | None = None  # compacted; its partition p holds input partition p's state
    process_idle: bool = False  # also called (no records) when only the position moved


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, runner: StageRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.runner.revoke(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.runner.assign(assigned)


class StageRunner:
    """Runs one stage (its own consumer group) over the partitions the group gives it.

    `partitions` holds every partition the stage knows, each in its phase
    (streams/lifecycle.py): the owned ones (`slots`), and the revoked ones kept SUSPENDED in
    case they come back. Two locks, each for a reason the phases cannot express:

    * `lock` — one thing at a time among a batch (`step`) and the group's rebalance
      callbacks (`revoke`, `assign`), which aiokafka runs in its coordinator's task while
      the loop is folding: a partition must not be let go, nor its producers closed, halfway
      through a batch's fold and the start of its transaction.
    * `reading` — the stage has one state reader (a consumer), and a take-over's catch-up
      assigns, seeks and drains it for one partition: several take-overs run at once
      (fencing is round trips), their catch-ups one after another.
    """

    def __init__(
        self,
        spec: StageSpec,
        *,
        metrics: Metrics,
        duplicates: Counter,
        bootstrap: str = "",
        client_options: dict[str, Any] | None = None,
        transport: Transport | None = None,
        session_timeout: float = 10.0,
        instance_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`transport`: where the clients come from — aiokafka's on `bootstrap` unless given
        (tests give an in-memory one); `clock`: when broken partitions are repaired."""
        self.spec = spec
        self.transport = transport if transport is not None else KafkaTransport(bootstrap, client_options or {})
        self.clock = clock
        self.committer = BatchCommitter(
            stage=spec.name,
            group_id=spec.group_id,
            dead_letter_topic=spec.dead_letter_topic,
            state_topic=spec.state_topic,
            metrics=metrics,
            duplicates=duplicates,
            position=self._position,
            clock=clock,
        )
        self.session_timeout = session_timeout
        self.instance_id = instance_id
        self.partitions: dict[TopicPartition, Slot] = {}
        self.lock = asyncio.Lock()
        self.reading = asyncio.Lock()
        self.joined = asyncio.Event()
        self.consumer: StageConsumer | None = None
        self.reader: StateReading | None = None
        self.on_assignment: Callable[[set[TopicPartition]], None] | None = None
        self._taking_over: asyncio.Task[None] | None = None  # the last assignment's take-overs
        self._caught_up: list[Slot] = []  # by that task: made READY by the next step
        self._offsets_task: asyncio.Task[None] | None = None

    @property
    def slots(self) -> dict[TopicPartition, Slot]:
        """The partitions the stage owns now (every phase but SUSPENDED)."""
        return {tp: slot for tp, slot in self.partitions.items() if slot.phase.owned}

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.consumer = self.transport.stage_consumer(
            self.spec.group_id, session_timeout=self.session_timeout, instance_id=self.instance_id
        )
        if self.spec.state_topic is not None:
            self.reader = self.transport.state_reader(self.spec.state_topic, f"{self.spec.group_id}-state-reader")
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
        await self._cancel_take_overs()
        slots = list(self.partitions.values())
        # the transactions in flight end (or fail) together, within one bound
        await self._settle_all(slots)
        for slot in slots:
            await self._close_producer(slot)
        self.partitions.clear()
        for client in (self.consumer, self.reader):
            if client is not None:
                try:
                    await asyncio.wait_for(client.stop(), timeout=STOP_TIMEOUT)
                except Exception as error:  # stopping during a broker outage must not hang the exit
                    log.warning("%s: stopping a client failed: %s", self.spec.name, error)

    async def run(self) -> None:
        reported = self.clock()
        while True:
            if self.spec.state_topic is not None and self.clock() - reported >= OFFSETS_REPORTED_EVERY:
                reported = self.clock()
                self._report_offsets()
            await self.step()

    async def step(self, timeout_ms: int = 100) -> None:
        """One fetch and its batches: repair the broken partitions that are due, then fold
        and commit each owned partition's records."""
        assert self.consumer is not None
        # Everything fetched, never a part: aiokafka sends no fetch to a broker while any
        # partition it leads has records left in the buffer — until 100 ms later, when it
        # fetches the *other* partitions, and that fetch waits fetch_max_wait_ms on idle
        # ones while the busy partition is drained. Leftovers stalled the decider up to
        # 100 ms per batch (a trace of a status round: 57 ms idle with 453 journal records
        # committed). A batch's size is bounded by BATCH_BYTES_PER_PARTITION instead.
        batch = await self.consumer.getmany(timeout_ms=timeout_ms)
        taking_over = self._taking_over
        if timeout_ms and taking_over is not None and not taking_over.done():
            # the take-overs in flight (an assignment's task) may end within a poll's wait:
            # their partitions are then delivered from this step on, not the next
            await asyncio.wait([taking_over], timeout=timeout_ms / 1000)
        async with self.lock:
            # A partition taken over or repaired now was sought to its tracked position: what this
            # fetch brought of it was read before that, from wherever the consumer was (past
            # the batch that broke it) — delivered, it would skip the inputs in between.
            # The next fetch reads them from the tracked position.
            repaired = self._resume_caught_up() | await self._repair_broken()
            work: list[tuple[Slot, list[ConsumerRecord]]] = []
            for tp, records in batch.items():
                slot = self.partitions.get(tp)
                if slot is not None and slot.phase.delivering and tp not in repaired:
                    work.append((slot, records))
            if self.spec.process_idle:
                busy = {slot.tp for slot, _ in work} | repaired
                for tp, slot in list(self.partitions.items()):
                    if tp not in busy and slot.phase.delivering and await self._position(tp) > slot.position:
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

    async def _commit_offsets(self, consumer: StageConsumer, offsets: dict[TopicPartition, int]) -> None:
        try:
            await asyncio.wait_for(consumer.commit(offsets), timeout=STOP_TIMEOUT)
        except Exception as error:  # a rebalance, the broker away: the next report will do
            log.debug("%s: group offsets not reported: %s", self.spec.name, error)

    # -- assignment ----------------------------------------------------------------------

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        async with self.lock:  # waits for the batch being folded
            await self._cancel_take_overs()
            letting_go = [slot for tp in revoked if (slot := self.partitions.get(tp)) and slot.phase.owned]
            await self._settle_all(letting_go)  # their last transactions end first
            for slot in letting_go:
                await self._close_producer(slot)
                slot.enter(PartitionPhase.SUSPENDED)
            if revoked:
                log.info("%s: revoked %s", self.spec.name, _names(revoked))

    async def assign(self, assigned: list[TopicPartition]) -> None:
        """Own `assigned`: each partition is paused and TAKING_OVER, and its take-over runs in
        a task of its own (`taken_over()` awaits it) — not in this callback. aiokafka calls
        it in the middle of its rejoin, with the member's heartbeats stopped until it
        returns: a take-over of the decider's state at 100,000 x 20 (~70 s under load) held
        it past the session timeout, and the group expelled the worker right after it was
        ready (issue 22). Returning at once, the member heartbeats while it catches up, and
        answers the next rebalance within its rebalance timeout (`revoke` cancels the
        take-overs in flight)."""
        async with self.lock:
            if await self._cancel_take_overs():  # an earlier assignment's, still going (no revoke between)
                for cancelled in self.partitions.values():
                    if cancelled.phase is PartitionPhase.TAKING_OVER:
                        await self._close_producer(cancelled)
                        error = RuntimeError("take-over cancelled by a new assignment")
                        cancelled.fail(self.spec.name, error, self.clock())
            taken: list[Slot] = []
            for tp in sorted(assigned):
                slot = self.partitions.get(tp)
                if slot is None or slot.phase is not PartitionPhase.SUSPENDED:
                    try:
                        slot = self.partitions[tp] = Slot(tp, self.spec.new_processor(tp))
                    except Exception:  # cannot even hold the partition: a bug, and loud
                        log.exception("%s %s: cannot set up the partition", self.spec.name, name(tp))
                        raise
                slot.enter(PartitionPhase.TAKING_OVER)
                taken.append(slot)
            if taken and self.consumer is not None:
                # not fetched while taken over: what a fetch brought meanwhile would be read
                # from the group offset and dropped (not delivering); resumed once sought
                self.consumer.pause(*(slot.tp for slot in taken))
            for tp, slot in list(self.partitions.items()):
                if slot.phase is PartitionPhase.SUSPENDED:
                    # another worker owns it now: what we hold may go stale; rebuilt if it returns
                    del self.partitions[tp]
                    _release(slot)
            self._taking_over = asyncio.create_task(
                self._take_over_assigned(taken, assigned), name=f"{self.spec.name}-take-over"
            )

    async def taken_over(self) -> None:
        """Wait for the take-overs of the last assignment (READY, or BROKEN and repaired later)."""
        task = self._taking_over
        if task is not None:
            await asyncio.wait([task])
        async with self.lock:
            self._resume_caught_up()

    async def _take_over_assigned(self, taken: list[Slot], assigned: list[TopicPartition]) -> None:
        await asyncio.gather(*(self._take_over_or_fail(slot, locked=False) for slot in taken))
        self.joined.set()
        if self.on_assignment is not None:
            self.on_assignment(set(self.slots))
        log.info("%s: assigned %s", self.spec.name, _names(assigned))

    async def _cancel_take_overs(self) -> bool:
        """Stop the take-overs in flight (a revoke, a new assignment, a stop): whether any was;
        their partitions stay TAKING_OVER for the caller to let go. What a cancelled catch-up
        folded stays, with the state position it started from: the next catch-up reads
        those records again (a compacted topic's records folded again in order leave the
        same state) and resets the processor's caches."""
        task, self._taking_over = self._taking_over, None
        self._caught_up = []
        if task is None or task.done():
            return False
        task.cancel()
        await asyncio.wait([task])
        self._caught_up = []
        return True

    async def _take_over_or_fail(self, slot: Slot, *, locked: bool = True) -> None:
        """Take `slot` over, bounded: READY, or BROKEN (and repaired later). `locked`: the
        caller holds `lock` (a repair, within a step) and the partition is READY on return;
        otherwise (an assignment's task) the fencing and the catch-up run beside the
        stage's batches, and the last move — seek, resume, READY — is the next step's
        (`_resume_caught_up`, holding `lock`, between two batches). Not this task's, taking
        `lock` itself: a revoke holds it while it cancels this task, and a cancellation
        `asyncio.wait_for` swallows (Python 3.11) left the task waiting for the lock, the
        revoke for the task (found by tests/streams/test_delivery_machine.py)."""
        if slot.phase is not PartitionPhase.TAKING_OVER:
            slot.enter(PartitionPhase.TAKING_OVER)
        try:
            await self._take_over(slot)
        except Exception as error:
            await self._close_producer(slot)
            slot.fail(self.spec.name, error, self.clock())
            return
        if locked:
            self._resume(slot)
        else:
            self._caught_up.append(slot)

    def _resume_caught_up(self) -> set[TopicPartition]:
        """Make the partitions whose take-over task caught up READY (called holding `lock`);
        the partitions resumed."""
        caught_up, self._caught_up = self._caught_up, []
        resumed: set[TopicPartition] = set()
        for slot in caught_up:
            if slot.phase is PartitionPhase.TAKING_OVER and self.partitions.get(slot.tp) is slot:
                self._resume(slot)
                resumed.add(slot.tp)
        return resumed

    def _resume(self, slot: Slot) -> None:
        """The take-over's last move: delivering from the position it found."""
        assert self.consumer is not None
        slot.committed_position = slot.position
        self.consumer.seek(slot.tp, slot.position)
        self.consumer.resume(slot.tp)
        slot.enter(PartitionPhase.READY)
        slot.repair.succeeded()

    async def _take_over(self, slot: Slot) -> None:
        """Fence the previous owner, fold the state it committed, seek to its position.
        Several partitions are taken over at once (fencing is a few round trips each); only
        the state catch-up goes one partition at a time (one reader per stage)."""
        assert self.consumer is not None
        started = time.perf_counter()
        await self._settle(slot)  # a transaction of ours still in flight ends first
        await self._close_producer(slot)
        slot.producers = [self.transport.transactional_producer(tid) for tid in self.transactional_ids(slot.tp)]
        slot.turn = 0  # (all closed by the next repair if anything below fails)
        fencing = asyncio.gather(*(self._fence(producer) for producer in slot.producers))
        await asyncio.wait_for(fencing, timeout=TAKE_OVER_TIMEOUT)
        processor = slot.processor
        committed = await asyncio.wait_for(self.consumer.committed(slot.tp), timeout=TAKE_OVER_TIMEOUT)
        if processor.state is not None:
            async with self.reading:
                folded = await self._catch_up(slot)  # bounded by its progress (StateReader)
            if folded:
                # the state changed under the processor's derived caches: rebuilt lazily. A
                # partition the stage gets back that nobody wrote to since its own last commit
                # folds nothing (`Slot.state_position` is past that commit's state records) and
                # keeps them: at 100,000 clusters x 20 modules the decider's indexes cost ~minutes
                # of one fold to rebuild, which kept its event loop from heartbeating past the
                # session timeout — expelled again, it took the partition back again, and reset
                # again (issue 22)
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
            await self._refuse_a_gap(slot)
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

    async def _refuse_a_gap(self, slot: Slot) -> None:
        """A stateful stage's state covers its input below the tracked position, and nothing
        past it: if the input partition now starts past that position (records deleted that
        the state never absorbed), resuming would skip them — the take-over fails instead,
        and keeps failing, loudly, until the state or the input is put right. (`rollout
        snapshot retain` never deletes past the decider's committed position: it cannot
        cause this.)"""
        assert self.consumer is not None
        starts = await asyncio.wait_for(self.consumer.beginning_offsets([slot.tp]), timeout=TAKE_OVER_TIMEOUT)
        start = starts.get(slot.tp, 0)
        if start > slot.position:
            raise InputTruncated(
                f"{name(slot.tp)} starts at offset {start}, but the {self.spec.name} state covers only the records "
                f"below {slot.position}: records {slot.position}..{start - 1} were deleted before they were folded. "
                f"Not resuming (it would skip them): restore the {self.spec.state_topic} topic that covers them"
            )

    def transactional_ids(self, tp: TopicPartition) -> list[str]:
        """The ids of the producers that write for input partition `tp`, used in turn."""
        base = f"{self.spec.group_id}.{tp.topic}.{tp.partition}"
        return [base, *(f"{base}.{n}" for n in range(1, TURNS))]

    @staticmethod
    async def _fence(producer: TransactionalProducer) -> None:
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

    async def _repair_broken(self) -> set[TopicPartition]:
        """Repair the broken partitions whose backoff is over; the partitions repaired."""
        now = self.clock()
        due = [slot for slot in self.partitions.values() if slot.broken is not None and slot.repair.due(now)]
        if due:
            await asyncio.gather(*(self._repair(slot) for slot in due))
        return {slot.tp for slot in due}

    async def _repair(self, slot: Slot) -> None:
        await self._settle(slot)
        await self._take_over_or_fail(slot)
        if slot.phase is PartitionPhase.READY:
            log.info("%s %s: repaired, resuming at %d", self.spec.name, name(slot.tp), slot.position)

    @property
    def healthy(self) -> bool:
        """Joined its group, and every owned partition taken over (none broken, none still
        catching up)."""
        return self.joined.is_set() and all(
            s.broken is None and s.phase is not PartitionPhase.TAKING_OVER for s in self.partitions.values()
        )

    def broken(self) -> list[str]:
        return [f"{name(s.tp)}: {s.broken}" for s in self.partitions.values() if s.broken is not None]

    async def _close_producer(self, slot: Slot) -> None:
        producers, slot.producers = slot.producers, []
        for producer in producers:
            try:
                await asyncio.wait_for(producer.stop(), timeout=5)
            except Exception as error:
                log.debug("closing a producer of %s: %s", name(slot.tp), error)


def _release(slot: Slot) -> None:
    """Let go of a partition's state now, not whenever the collector finds it: the decider's
    engine is held in reference cycles, and the worker freezes what survives a full
    collection (streams/heap.py) — a dropped partition's state, a fleet's worth, would stay
    until the next settle, minutes later."""
    if slot.processor.state is not None:
        slot.processor.state.release()
    slot.processor.reset()


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(name(tp) for tp in sorted(tps)) or "nothing"
