"""Exactly once, whatever the interleaving: a Hypothesis state machine drives the real
`StageRunner`/`BatchCommitter` on the in-memory broker (streams/memory_broker.py).

Rules: inputs arrive (plain, in a committed or an aborted transaction, some of them poison),
workers fetch and commit batches (alone, or several at once so that rebalances land in the
middle of batches), transactions are left in flight, faults are injected (an initialisation,
a begin, a send, the offsets, a commit — refused or done with its answer lost —, a group
offset read, a state catch-up), time passes (repairs), workers start, stop, crash (SIGKILL)
or lose their session without being told (zombies). After every rule:

* every input that took effect did so once, in order: per partition, the committed outputs
  and dead letters are exactly the effects of a prefix of its visible inputs;
* a partition READY at a group member (its producers not fenced since) holds in memory
  exactly what was committed — what a new owner restores from the state topic (stateful),
  its group offset (stateless);
* a partition restored after a crash holds the state committed before it;
* a transaction still running belongs to a COMMITTING partition, and a COMMITTING
  partition has one.

At the end, faults cleared and time passing, the workers drain everything: every visible
input took effect exactly once, in order, and no transaction is left open.

100 sequences of 50 rules for a stateful and a stateless stage take 2 to 5 s each; they are
derandomized (the same sequences every run, no example database), so a failure here is a
change in the code, never luck. (A failing run shrinks for minutes: that is Hypothesis
finding the shortest sequence.) The first run found that a partition repaired during a poll
delivered what the poll had fetched before the repair sought back — skipping inputs
(tests/streams/test_stage_runner.py keeps the case).

The broker-backed counterparts — real aiokafka, real SIGKILLs — are
tests/integration/test_crash_recovery.py, test_pipelined_commits.py and test_fencing.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streams.lifecycle import PartitionPhase
from streams.memory_broker import FaultPoint
from tests.streams.memory_stage import INPUT, Stage, Worker

PARTITIONS = 2
TAKE_OVER_READS = (FaultPoint.GROUP_OFFSETS, FaultPoint.CATCH_UP)  # not a producer's requests
GROUP_CHANGES = [
    "a worker starts",
    "a worker stops",
    "a worker crashes",
    "a worker crashes and restarts",
    "a worker loses its session",
]
MACHINE_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Input:
    offset: int
    value: bytes

    @property
    def poison(self) -> bool:
        return self.value.startswith((b"raise", b"huge"))


class DeliveryMachine(RuleBasedStateMachine):
    stateful = True

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        # a commit takes longer than a fetch: a partition's next batch is folded while its
        # previous batch's transaction is in flight
        self.stage = Stage(stateful=self.stateful, partitions=PARTITIONS, max_records=3, commit_hops=20)
        self.inputs: dict[int, list[Input]] = {p: [] for p in range(PARTITIONS)}
        self.serial = 0
        self.restored: dict[int, tuple[int, dict[str, Any]]] = {}  # partition → (effects, state) at a crash
        for _ in range(2):
            self.run(self.stage.start_worker())

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(work)

    # -- rules ---------------------------------------------------------------------------

    @rule(
        partition=st.integers(0, PARTITIONS - 1),
        count=st.integers(1, 6),
        how=st.sampled_from(["plain", "committed", "aborted"]),
        poison=st.sampled_from([None, None, "raise", "huge"]),
    )
    def inputs_arrive(self, partition: int, count: int, how: str, poison: str | None) -> None:
        values = []
        for index in range(count):
            self.serial += 1
            kind = poison if poison is not None and index == count // 2 else "v"
            values.append(f"{kind}{self.serial}".encode())
        if how == "plain":
            offsets = self.stage.produce(partition, *values)
        else:
            offsets = self.stage.broker.produce_transaction(INPUT, partition, values, commit=how == "committed")
        if how != "aborted":
            self.inputs[partition].extend(Input(o, v) for o, v in zip(offsets, values, strict=True))

    @precondition(lambda self: self.stage.workers)
    @rule(which=st.integers(0, 2), polls=st.integers(1, 4), later=st.booleans())
    def a_worker_runs_batches(self, which: int, polls: int, later: bool) -> None:
        """Fetch and deliver, `polls` times (`later`: after time passed — broken partitions
        are due for repair); the last transactions started stay in flight."""
        worker = self.stage.workers[which % len(self.stage.workers)]
        if later:
            self.stage.clock.advance()
        for _ in range(polls):
            self.run(worker.runner.step(timeout_ms=0))

    @precondition(lambda self: len(self.stage.workers) > 1)
    @rule()
    def every_worker_runs_a_batch_at_once(self) -> None:
        """Concurrent workers: one's poll may rebalance the group while another commits."""

        async def together() -> None:
            await asyncio.gather(*(w.runner.step(timeout_ms=0) for w in self.stage.workers))

        self.run(together())

    @rule()
    def transactions_in_flight_end(self) -> None:
        self.run(self.stage.settle())

    @rule(at=st.sampled_from(FaultPoint), partition=st.sampled_from([None, *range(PARTITIONS)]))
    def a_fault_will_strike(self, at: FaultPoint, partition: int | None) -> None:
        """The next request at `at` fails (streams/memory_broker.py says what each leaves
        behind): a transaction's — of one partition's producers, or anyone's — before it sent
        anything, at a send, at the offsets, at its commit (refused, or done with the answer
        lost); a take-over's — fencing, the group offset, the state catch-up."""
        self.stage.broker.inject(at, match="" if at in TAKE_OVER_READS else _producers_of(partition))

    @rule(change=st.sampled_from(GROUP_CHANGES), which=st.integers(0, 2), unaware_polls=st.integers(0, 2))
    def the_group_changes(self, change: str, which: int, unaware_polls: int) -> None:
        workers = self.stage.workers
        worker = workers[which % len(workers)] if workers else None
        if change == "a worker starts" and len(workers) < 3:
            self.run(self.stage.start_worker())
        elif change == "a worker stops" and worker is not None:
            self.run(self.stage.stop(worker))
        elif change.startswith("a worker crashes") and worker is not None:
            self.crash(worker, restarts=change.endswith("restarts"))
        elif change == "a worker loses its session":
            self.lose_session(which, unaware_polls)

    def crash(self, worker: Worker, *, restarts: bool) -> None:
        """SIGKILL (and a new process in its place, or not)."""
        for _, tp, slot in self.current_slots():
            if slot in worker.runner.partitions.values() and slot.processor.state is not None:
                self.restored[tp.partition] = (self.effects(tp.partition), committed(slot.processor.state))
        self.stage.crash(worker)
        if restarts:
            self.run(self.stage.start_worker())

    def lose_session(self, which: int, unaware_polls: int) -> None:
        """Out of the group, and not told: a zombie that goes on fetching and committing for
        `unaware_polls` polls (its producers fenced as soon as another worker takes over)."""
        members = [w for w in self.stage.workers if not self.zombie(w)]
        if members:
            worker = members[which % len(members)]
            self.stage.broker.group("echo").expel(worker.transport.consumers[0], unaware_polls=unaware_polls)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def each_input_took_effect_at_most_once_in_order(self) -> None:
        for partition in range(PARTITIONS):
            self.check_effects(partition, complete=False)

    @invariant()
    def a_ready_partition_holds_what_was_committed(self) -> None:
        for _, tp, slot in self.current_slots():
            state = slot.processor.state
            if state is None:
                group_offset = self.stage.broker.group("echo").offsets.get(tp, 0)
                assert slot.position == slot.committed_position == group_offset, (tp, slot)
                continue
            held = committed(state)
            assert held == self.stage.committed_state(tp.partition), (tp, held)
            tracking = state.tracking
            assert tracking.events == self.effects(tp.partition)
            assert tracking.offset == slot.position == slot.committed_position

    @invariant()
    def a_partition_restored_after_a_crash_holds_the_state_before_it(self) -> None:
        for partition, (effects, before) in list(self.restored.items()):
            if self.effects(partition) != effects:  # committed more since: nothing to compare
                del self.restored[partition]
                continue
            for _, tp, slot in self.current_slots():
                if tp.partition == partition:
                    assert slot.processor.state is not None
                    assert committed(slot.processor.state) == before

    @invariant()
    def a_transaction_runs_only_while_its_partition_is_committing(self) -> None:
        for _, tp, slot in self.owned_slots():
            running = slot.inflight is not None and not slot.inflight.done()
            if running:
                assert slot.phase is PartitionPhase.COMMITTING, (tp, slot.phase)
            if slot.phase is PartitionPhase.COMMITTING:
                assert slot.inflight is not None, tp

    # -- the end -------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self.stage.broker.clear_faults()
            if not self.stage.workers:
                self.run(self.stage.start_worker())
            self.run(self.stage.run_until_quiet(rounds=1000))
            assert self.stage.quiet(), "the workers did not drain the inputs"
            for partition in range(PARTITIONS):
                self.check_effects(partition, complete=True)
            assert self.stage.broker.open_transactions() == []
        finally:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()

    # -- helpers -------------------------------------------------------------------------

    def zombie(self, worker: Worker) -> bool:
        return worker.transport.consumers[0] not in self.stage.broker.group("echo").members

    def owned_slots(self) -> list[tuple[Worker, TopicPartition, Any]]:
        """The partitions the group members own (not a zombie's: it does not know yet)."""
        return [(w, tp, slot) for w in self.stage.workers if not self.zombie(w) for tp, slot in w.runner.slots.items()]

    def current_slots(self) -> list[tuple[Worker, TopicPartition, Any]]:
        """The owned partitions READY with producers nobody fenced since (a zombie that took a
        partition back fences its rightful owner, which finds out at its next transaction)."""
        broker = self.stage.broker
        return [
            (w, tp, slot)
            for w, tp, slot in self.owned_slots()
            if slot.phase is PartitionPhase.READY
            and all(broker.current(p.transactional_id, p.epoch) for p in slot.producers)
        ]

    def effects(self, partition: int) -> int:
        outputs = len(self.stage.outputs(partition))
        return outputs + sum(1 for p, _ in self.stage.dead_letters() if p == partition)

    def check_effects(self, partition: int, *, complete: bool) -> None:
        """The outputs and dead letters of `partition` are the effects of a prefix of its
        visible inputs (all of them if `complete`), each once, in order."""
        inputs = self.inputs[partition]
        outputs = self.stage.outputs(partition)
        letters = [offset for p, offset in self.stage.dead_letters() if p == partition]
        done = len(outputs) + len(letters)
        assert done <= len(inputs), f"partition {partition}: {done} effects of {len(inputs)} inputs"
        prefix = inputs if complete else inputs[:done]
        assert outputs == [i.value for i in prefix if not i.poison], f"partition {partition}: outputs {outputs}"
        assert letters == [i.offset for i in prefix if i.poison], f"partition {partition}: dead letters {letters}"


class StatelessDeliveryMachine(DeliveryMachine):
    """The same for a stage without state (the router): its position is its group offset,
    committed in its transactions, and it commits a batch also when only its position moved."""

    stateful = False


def _producers_of(partition: int | None) -> str:
    """What the transactional ids of input partition `partition`'s producers contain."""
    return "" if partition is None else f".{INPUT}.{partition}"


def committed(state: Any) -> dict[str, Any]:
    """The committed values of a partition's state, as `Stage.committed_state` reads them."""
    mappings = state.mappings.items()
    return {f"{name}:{key}": value for name, mapping in mappings for key, value in mapping.committed.items()}


TestAStatefulStageCountsEveryInputOnceInOrderWhateverHappens = DeliveryMachine.TestCase
TestAStatefulStageCountsEveryInputOnceInOrderWhateverHappens.settings = MACHINE_SETTINGS
TestAStatelessStageCountsEveryInputOnceInOrderWhateverHappens = StatelessDeliveryMachine.TestCase
TestAStatelessStageCountsEveryInputOnceInOrderWhateverHappens.settings = MACHINE_SETTINGS
