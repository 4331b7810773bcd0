"""A stage on the in-memory broker (streams/memory_broker.py), for the delivery's tests.

`Echo` echoes every input's value to the output topic — same partition, in order — and, when
stateful, counts them in its state (with a `bound`, at most that many a batch: the rest is
the next transaction's); an input whose value starts with `raise` makes its
processing fail, one starting with `huge` makes an output larger than the broker accepts
(both are poison: dead letters, never outputs). `Stage` holds a broker, the topics and the
workers (one `StageRunner` each, with a transport of its own that can crash).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry, Counter

from infra.observability import Metrics
from streams.delivery import StageRunner, StageSpec
from streams.memory_broker import MemoryBroker, MemoryTransport
from streams.outputs import Outputs
from streams.state import PartitionState

INPUT, OUTPUT, STATE, DEAD = "in", "out", "in.state", "dead"
HUGE = b"x" * 2000
MAX_MESSAGE_BYTES = 1000


class Echo:
    def __init__(self, tp: TopicPartition, *, stateful: bool) -> None:
        self.tp = tp
        self.state = PartitionState({"echoed": int}) if stateful else None
        self.resets = 0
        self.bound: int | None = None  # folds at most this many records a batch (the rest: the next)

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> int | None:
        if self.bound is not None:
            records = records[: self.bound]
        for record in records:
            if record.value.startswith(b"raise"):
                raise ValueError(f"cannot process {record.value!r}")
            value = HUGE if record.value.startswith(b"huge") else record.value
            out.send(OUTPUT, record.key, value, partition=self.tp.partition)
            if self.state is not None:
                echoed = self.state.mappings["echoed"]
                echoed["count"] = echoed.get("count", 0) + 1
                echoed["last"] = record.offset
                self.state.keep_event()
        return None if self.bound is None else len(records)

    def reset(self) -> None:
        self.resets += 1


class Clock:
    """Monotonic time the test moves (a broken partition is repaired once its backoff is over)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 10.0) -> None:
        self.now += seconds


@dataclass(eq=False)
class Worker:
    runner: StageRunner
    transport: MemoryTransport
    processors: list[Echo] = field(default_factory=list)


class Stage:
    """One stage's topics on a broker, and the workers that run it."""

    def __init__(
        self,
        *,
        stateful: bool = True,
        partitions: int = 2,
        hops: int = 1,
        commit_hops: int = 1,
        max_records: int | None = None,
    ) -> None:
        self.broker = MemoryBroker(max_message_bytes=MAX_MESSAGE_BYTES, hops=hops, commit_hops=commit_hops)
        self.stateful = stateful
        self.partitions = partitions
        self.max_records = max_records
        self.clock = Clock()
        for topic in (INPUT, OUTPUT, STATE):
            self.broker.create_topic(topic, partitions)
        self.broker.create_topic(DEAD, 1)
        self.workers: list[Worker] = []

    def spec(self, processors: list[Echo]) -> StageSpec:
        def new_processor(tp: TopicPartition) -> Echo:
            processors.append(Echo(tp, stateful=self.stateful))
            return processors[-1]

        return StageSpec(
            name="echo",
            topics=(INPUT,),
            group_id="echo",
            dead_letter_topic=DEAD,
            new_processor=new_processor,
            state_topic=STATE if self.stateful else None,
            process_idle=not self.stateful,  # as the router
        )

    async def start_worker(self) -> Worker:
        transport = MemoryTransport(self.broker, max_records=self.max_records)
        processors: list[Echo] = []
        duplicates = Counter("duplicates", "", ["stage"], registry=CollectorRegistry())
        runner = StageRunner(
            self.spec(processors), metrics=Metrics(), duplicates=duplicates, transport=transport, clock=self.clock
        )
        worker = Worker(runner, transport, processors)
        await runner.start()
        self.workers.append(worker)
        return worker

    def crash(self, worker: Worker) -> None:
        """SIGKILL: its tasks never run again, its clients are gone."""
        for slot in worker.runner.partitions.values():
            if slot.inflight is not None:
                slot.inflight.cancel()
        worker.transport.crash()
        self.workers.remove(worker)

    async def stop(self, worker: Worker) -> None:
        await worker.runner.stop()
        self.workers.remove(worker)

    def produce(self, partition: int, *values: bytes) -> list[int]:
        return self.broker.produce(INPUT, partition, values, key=b"k")

    def outputs(self, partition: int) -> list[bytes]:
        return [r.value for r in self.broker.committed_records(OUTPUT, partition)]

    def dead_letters(self) -> list[tuple[int, int]]:
        """(partition, offset) of every input dead-lettered, in order."""
        letters = [json.loads(r.value) for r in self.broker.committed_records(DEAD, 0)]
        return [(letter["partition"], letter["offset"]) for letter in letters]

    def committed_state(self, partition: int) -> dict[str, object]:
        """The state partition `partition` as a new owner would restore it."""
        state = PartitionState({"echoed": int})
        state.restore((r.key, r.value) for r in self.broker.committed_records(STATE, partition))
        return {f"{name}:{key}": value for name, mapping in state.mappings.items() for key, value in mapping.items()}

    async def settle(self) -> None:
        """Let every transaction in flight end."""
        for worker in self.workers:
            for slot in list(worker.runner.partitions.values()):
                await worker.runner.committer.settle(slot)
        await asyncio.sleep(0)

    async def run_until_quiet(self, rounds: int = 30) -> None:
        """Step every worker (time passing) until nothing is left to read or repair."""
        for _ in range(rounds):
            for worker in list(self.workers):
                await worker.runner.step()
            await self.settle()
            self.clock.advance()
            if self.quiet():
                return

    def quiet(self) -> bool:
        for worker in self.workers:
            runner = worker.runner
            if runner.broken():
                return False
            for tp, slot in runner.slots.items():
                if slot.position < self.broker.end_offset(tp) and self._unread(tp, slot.position):
                    return False
        return bool(self.workers) and all(w.runner.joined.is_set() for w in self.workers)

    def _unread(self, tp: TopicPartition, position: int) -> bool:
        records, _ = self.broker.read_committed(tp, position, 1)
        return bool(records)
