"""The whole worker pipeline in one process — route → decide → assemble, on the real
`StageRunner`s and their delivery (transactions, outputs, state changelogs) over the
in-memory broker (streams/memory_broker.py) — through a fleet's rollout, stage by stage:
where the worker's memory and CPU go per moved cluster.

    .venv/bin/python benchmarks/fleet_pipeline.py [--clusters 20000] [--modules 20] [--partitions 4]
        [--appliers 2] [--lease-seconds 60] [--tick-interval 10] [--heap worker|default]
        [--trace] [--until fleet|wave-1|wave-2|done] [--retake-at N] [--fail-commits-at N] [--session-timeout 45]

The `large` scenario of benchmarks/fleet.py without Kafka and without appliers: the fleet
(labels `ring` canary / wave-1 / wave-2 as fleet.py's) on cluster-observations, then the
modules on intents (m-000 rolls out: canary 10, wave-1 10 % at 50 %, wave-2 the rest at
100 %; the others wait for an approval of their canary, so every cluster is a pending
target of each), then a `succeeded` report on sync-status for every cluster the decider
has moved (what an applier with `--simulate-status` sends), until m-000 is Complete.
The three stages run as the worker runs them (`streams/app.py`'s specs, the worker's heap
policy: streams/heap.py), each stage's partitions fetched at most
`BATCH_BYTES_PER_PARTITION` per poll as aiokafka's consumer does. After each round of
reports, `--appliers` replicas beat with the real heartbeat code (projections/heartbeats.py:
claims of the clusters whose ProxyAssemblage was written) and a Tick moves engine time by
`--tick-interval` — what the end-to-end run's appliers and ticker add.

The broker is memory, not the worker's: of the topics no stage reads (assemblages, status
documents, decisions, state topics) it keeps no values, only their count and bytes; of the
ones the stages read (inputs, journal, assignments, dependencies) it drops each value once
every stage reading it has passed it — so the process's RSS is the worker's (plus a few
hundred bytes per record of bookkeeping).

Printed per phase (fleet, modules joined, canary, wave-1, wave-2): wall and CPU seconds,
CPU per stage (the time each stage's `step` took, fold and delivery) and per cluster moved,
RSS after and its peak (sampled every 5 ms), what a full heap settle would cost and leave then
(a probe), records and bytes per output topic, the largest batch each stage folded, the
longest single `step` of each and the longest the event loop was held at once (past the
session timeout, a worker's heartbeats stop and its groups expel it; the probes not counted).
Each settle the worker's heap policy runs (streams/heap.py: by growth of the frozen
population, within a share of `--session-timeout`) is printed as it happens (HEAP SETTLE),
and a count per kind at the end.
`--retake-at N`: once N wave-2 clusters are reported, the decide stage loses every partition
and takes it back — a rebalance after an expired session, as after a broker's timeouts
(issue 22) — and what the next round costs is printed. `--fail-commits-at N`: there, the next
transaction of each decide partition fails instead (the memory broker's injected fault), as a
broker's timeout fails one: each partition is reset, repaired, and its indexes rebuilt.
`--silence-at N --silence-seconds S`: there, engine time moves S seconds without a beat (a
worker stopped that long), so leases shorter than S expire before the beats come back.
`--trace`: tracemalloc's top allocations still held at the end of
each phase, and those that grew during it (slow: use a small fleet).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from collections import Counter, defaultdict
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from bench_events import cluster_event
from fleet_memory import CANARY, module_event, module_name, ring
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from stage_slices import Sampler, rss_mib

from infra.observability import Metrics
from infra.settings import Settings
from infra.topics import TOPICS, TopicNames
from projections.heartbeats import Heartbeats
from rollout.wire.events import SyncStatusReported, Tick
from streams.app import stage_specs
from streams.decider import DecidePartition
from streams.delivery import StageRunner
from streams.heap import CHECK_INTERVAL, SESSION_TIMEOUT, SETTLE_KINDS, Heap, Settled
from streams.memory_broker import FaultPoint, MemoryBroker, MemoryTransport, _Entry
from streams.transport import BATCH_BYTES_PER_PARTITION

PREFIX = "bench."
READ_BY_STAGES = ("intents", "clusters", "status", "ticks", "heartbeats", "dependencies", "journal", "assignments")


class WorkerBroker(MemoryBroker):
    """The in-memory broker, holding only what the stages still have to read (module doc)."""

    def __init__(self, topics: TopicNames) -> None:
        super().__init__(max_message_bytes=8 * 1024 * 1024)
        self.read = {topics.name(role) for role in READ_BY_STAGES}
        self.records: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.trimmed: dict[TopicPartition, int] = defaultdict(int)
        self.sunk: Counter[TopicPartition] = Counter()
        self.proxy = topics.proxy
        self.snapshots: list[bytes] = []  # clusters whose ProxyAssemblage was written (an applier's reach)

    def write(self, transactional_id: str, epoch: int, tp: TopicPartition, records: Any) -> int:
        self.records[tp.topic] += len(records)
        self.bytes[tp.topic] += sum(len(k or b"") + len(v or b"") for k, v in records)
        if tp.topic == self.proxy:
            self.snapshots.extend(k for k, v in records if v is not None)
        if tp.topic not in self.read:  # nobody reads it: kept as a count (a base offset per write)
            self._transaction(transactional_id, epoch)  # fencing, as the broker's
            self.sunk[tp] += len(records)
            return self.sunk[tp] - len(records)
        return super().write(transactional_id, epoch, tp, records)

    def read_committed(
        self, tp: TopicPartition, start: int, limit: int | None, until: int | None = None
    ) -> tuple[list[ConsumerRecord], int]:
        """A consumer's fetch (`limit` given) is bounded by bytes, as aiokafka's
        `max_partition_fetch_bytes`: the first record always, then up to the bound."""
        if limit is None:
            return super().read_committed(tp, start, limit, until)
        records, position = super().read_committed(tp, start, 2000, until)
        size = 0
        for index, record in enumerate(records):
            size += len(record.value or b"") + len(record.key or b"")
            if index and size > BATCH_BYTES_PER_PARTITION:
                return records[:index], record.offset
        return records, position

    def trim(self, consumers: list[Any]) -> None:
        """Drop the values every consumer reading a partition has passed (Kafka keeps them
        on its disk, not in the worker)."""
        passed: dict[TopicPartition, int] = {}
        for consumer in consumers:
            for tp, position in consumer._positions.items():
                passed[tp] = min(passed.get(tp, position), position)
        for tp, position in passed.items():
            log = self._logs[tp]
            for offset in range(self.trimmed[tp], min(position, len(log))):
                entry = log[offset]
                if entry.value is not None:
                    log[offset] = _Entry(None, None, 0, entry.transaction, entry.control)
            self.trimmed[tp] = max(self.trimmed[tp], position)


class Pipeline:
    """The three stages on a `WorkerBroker`, as one worker process runs them."""

    def __init__(self, partitions: int) -> None:
        self.topics = TopicNames(PREFIX)
        self.broker = WorkerBroker(self.topics)
        for spec in TOPICS:
            self.broker.create_topic(self.topics.name(spec.role), 1 if spec.single_partition else partitions)
        self.transport = MemoryTransport(self.broker, max_records=2000)
        settings = Settings(bootstrap_servers="memory", topic_prefix=PREFIX, partitions=partitions)
        self.metrics = Metrics()
        duplicates = PromCounter("duplicates", "", ["stage"], registry=CollectorRegistry())
        self.runners = [
            StageRunner(spec, metrics=self.metrics, duplicates=duplicates, transport=self.transport)
            for spec in stage_specs(settings, self.metrics)
        ]
        for runner in self.runners:
            self._measure_batches(runner)
        self.outputs: dict[str, tuple[int, int, int]] = defaultdict(lambda: (0, 0, 0))  # stage → largest batch
        self.cpu: Counter[str] = Counter()
        self.largest: dict[str, int] = defaultdict(int)
        self.batches: Counter[str] = Counter()
        self.longest: dict[str, float] = defaultdict(float)  # the longest single step, wall seconds
        self.inputs = 0
        self.heap: Heap | None = None
        self.settles: list[Settled] = []  # the worker's policy's, in order
        self.lag = LoopLag()

    def _measure_batches(self, runner: StageRunner) -> None:
        """Each batch's outputs and state records (records, bytes): the largest per stage."""
        committer, stage = runner.committer, runner.spec.name
        prepare = committer._prepare

        def measured(slot: Any, records: Any, end: int) -> Any:
            prepared = prepare(slot, records, end)
            if not isinstance(prepared, Exception):
                written = [*prepared.outputs, *prepared.state_records]
                size = sum(len(r.key or b"") + len(r.value or b"") for r in written)
                largest = self.outputs[stage]
                if size > largest[2]:
                    self.outputs[stage] = (len(prepared.outputs), len(prepared.state_records), size)
            return prepared

        committer._prepare = measured  # type: ignore[method-assign]

    def settled(self, settled: Settled) -> None:
        self.settles.append(settled)
        estimate = f", a full one estimated {settled.estimate:.2f} s" if settled.estimate is not None else ""
        print(f"    HEAP SETTLE ({settled.kind}): the event loop held {settled.seconds:.2f} s, "
              f"{settled.frozen:,} objects frozen{estimate}", flush=True)  # fmt: skip

    async def start(self) -> None:
        self.lag.start()
        for runner in self.runners:
            await runner.start()
        for runner in self.runners:
            await runner.step(timeout_ms=0)  # joins: the take-overs (empty state topics)

    def publish(self, role: str, values: list[bytes], key: bytes | None = None) -> None:
        topic = self.topics.name(role)
        for index, value in enumerate(values):
            partition = index % self.broker.partitions(topic)
            self.broker.produce(topic, partition, [value], key=key)
        self.inputs += len(values)

    async def run_until_idle(self) -> None:
        """Every stage steps until none has anything left to fold, nor a transaction in flight."""
        while True:
            busy = False
            for runner in self.runners:
                before = self._positions(runner)
                started, wall = time.process_time(), time.perf_counter()
                await runner.step(timeout_ms=0)
                self.longest[runner.spec.name] = max(self.longest[runner.spec.name], time.perf_counter() - wall)
                await asyncio.sleep(0)
                for slot in runner.slots.values():
                    if slot.inflight is not None:
                        await asyncio.shield(slot.inflight)
                self.cpu[runner.spec.name] += time.process_time() - started
                after = self._positions(runner)
                moved = sum(after.values()) - sum(before.values())
                if moved:
                    busy = True
                    self.batches[runner.spec.name] += 1
                    self.largest[runner.spec.name] = max(self.largest[runner.spec.name], moved)
            self.broker.trim(self.transport.consumers)
            if self.heap is not None:
                self.heap.settle_if_due()  # the worker's `_observe` asks every 0.5 s
            if not busy:
                return

    @staticmethod
    def _positions(runner: StageRunner) -> dict[TopicPartition, int]:
        return {tp: slot.position for tp, slot in runner.slots.items()}

    async def retake(self, stage: str) -> float:
        """`stage` loses every partition and is assigned them all back, as after its session
        expired (the group's callbacks, in the order aiokafka calls them); seconds taken."""
        runner = next(runner for runner in self.runners if runner.spec.name == stage)
        owned = sorted(runner.slots)
        started = time.perf_counter()
        await runner.revoke(owned)
        await runner.assign(owned)
        return time.perf_counter() - started

    def deciders(self) -> list[DecidePartition]:
        decide = next(runner for runner in self.runners if runner.spec.name == "decide")
        return [slot.processor for slot in decide.slots.values()]  # type: ignore[misc]

    def updating(self, module: str) -> list[str]:
        return sorted(c for decider in self.deciders() for c in decider.engine.book.updating_clusters(module))

    def status(self, module: str) -> dict[str, Any]:
        for decider in self.deciders():
            status = decider.engine.status_of(module)
            if status is not None:
                return status  # type: ignore[no-any-return]
        return {}


class Appliers:
    """Two applier replicas' heartbeats (projections/heartbeats.py, the real code): each
    reaches the clusters whose ProxyAssemblage it wrote (split by the cluster's hash, as the
    applier group splits the assemblage partitions), and beats once per round; and the
    worker's ticks, one per round, `interval` seconds of engine time apart."""

    def __init__(self, pipeline: Pipeline, replicas: int, lease_seconds: float, interval: float) -> None:
        self.pipeline = pipeline
        self.interval = interval
        self.now = 1_800_000_000.0
        self.beats = [
            Heartbeats(self._publish, lease_seconds=lease_seconds, holder=f"applier-{i}", clock=lambda: self.now)
            for i in range(replicas)
        ]

    async def _publish(self, key: str, value: bytes) -> None:
        self.pipeline.publish("heartbeats", [value], key=key.encode())

    async def round(self) -> None:
        """What the appliers and the ticker say in `interval` seconds."""
        self.now += self.interval
        snapshots, self.pipeline.broker.snapshots = self.pipeline.broker.snapshots, []
        for key in snapshots:
            self.beats[hash(key) % len(self.beats)].written("ProxyAssemblage", key.decode())
        for beats in self.beats:
            await beats.beat()
        self.pipeline.publish("ticks", [Tick(now=self.now).to_bytes()], key=b"tick")
        await self.pipeline.run_until_idle()

    async def silence(self, seconds: float) -> None:
        """Engine time moves `seconds` with no beat (a worker stopped that long: its ticker
        and its reading of the appliers' beats): every lease shorter than that expires."""
        self.now += seconds
        self.pipeline.publish("ticks", [Tick(now=self.now).to_bytes()], key=b"tick")
        await self.pipeline.run_until_idle()


class Phases:
    """Per phase: time, CPU per stage, RSS, outputs; tracemalloc when asked."""

    def __init__(self, pipeline: Pipeline, trace: bool) -> None:
        self.pipeline = pipeline
        self.trace = trace
        self.rows: list[str] = []
        self._start()

    def _start(self) -> None:
        self.wall, self.cpu_started = time.perf_counter(), time.process_time()
        self.stage_cpu = Counter(self.pipeline.cpu)
        self.records = Counter(self.pipeline.broker.records)
        self.bytes = Counter(self.pipeline.broker.bytes)
        self.sampler = Sampler()
        self.sampler.start()
        self.snapshot = tracemalloc.take_snapshot() if self.trace else None

    def end(self, name: str) -> None:
        self.sampler.stop()
        pipeline = self.pipeline
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu_started
        stages = {stage: pipeline.cpu[stage] - self.stage_cpu[stage] for stage in ("route", "decide", "assemble")}
        records = pipeline.broker.records - self.records
        size = pipeline.broker.bytes - self.bytes
        moved = records[pipeline.topics.assignments]
        rss = rss_mib()
        # what a full settle would leave and cost now (a probe, not the worker's policy: its
        # loop hold is not counted in the longest one, the policy's own settles are)
        settle_s = Heap().settle()
        pipeline.lag.skip_until = time.perf_counter()
        settled = rss_mib()
        per_move = f", {moved:,} moved, {1000 * cpu / moved:.2f} ms CPU per move" if moved else ""
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU{per_move} "
              f"(route {stages['route']:.1f}, decide {stages['decide']:.1f}, assemble {stages['assemble']:.1f} s); "
              f"RSS peak {self.sampler.peak:.0f} MiB, after {rss:.0f} MiB, "
              f"settled {settled:.0f} MiB (a full settle probed: {settle_s:.2f} s); "
              f"{gc.get_freeze_count():,} objects frozen", flush=True)  # fmt: skip
        written = ", ".join(
            f"{topic.removeprefix(PREFIX)} {records[topic]:,} ({size[topic] / 2**20:.1f} MiB)"
            for topic in sorted(records, key=lambda t: -size[t])
        )
        print(f"    written: {written}", flush=True)
        largest = ", ".join(
            f"{stage} {o:,} outputs + {st:,} state records ({size / 2**20:.1f} MiB)"
            for stage, (o, st, size) in pipeline.outputs.items()
        )
        print(f"    largest batch written: {largest}", flush=True)
        pipeline.outputs.clear()
        if self.snapshot is not None:
            current, peak = tracemalloc.get_traced_memory()
            print(f"    tracemalloc: {current / 2**20:.0f} MiB held, peak {peak / 2**20:.0f} MiB", flush=True)
            tracemalloc.reset_peak()
            now = tracemalloc.take_snapshot()
            for title, stats in (
                ("grew during the phase", now.compare_to(self.snapshot, "traceback")[:8]),
                ("held at its end", now.statistics("traceback")[:8]),
            ):
                print(f"    tracemalloc, {title}:")
                for stat in stats:
                    lines = stat.traceback.format(limit=7, most_recent_first=True)
                    print(f"      {stat.size / 2**20:.1f} MiB in {stat.count} blocks ({stat}):".split(" (")[0])
                    print("        " + "\n        ".join(line for line in lines if not line.startswith("    ")))
        self._start()


async def rollout(args: argparse.Namespace) -> None:
    pipeline = Pipeline(args.partitions)
    await pipeline.start()
    heap = Heap(session_timeout=args.session_timeout, on_settle=pipeline.settled)
    if args.heap == "worker":  # as streams/app.py's Worker: young collections rarer, survivors frozen
        heap.collect_young_less_often()
        heap.settle()
        heap.freeze_after_full_collections()
    pipeline.heap = heap
    appliers = Appliers(pipeline, args.appliers, args.lease_seconds, args.tick_interval) if args.appliers else None
    if args.trace:
        tracemalloc.start(10)
    print(f"{args.clusters:,} clusters x {args.modules} modules, {args.partitions} partitions: route → decide → "
          f"assemble in one process on the in-memory broker; RSS at start {rss_mib():.0f} MiB", flush=True)  # fmt: skip
    phases = Phases(pipeline, args.trace)
    for first in range(0, args.clusters, 2000):
        pipeline.publish(
            "clusters",
            [
                cluster_event(i, {"env": "prod", "ring": ring(i, args.clusters)}).to_bytes()
                for i in range(first, min(first + 2000, args.clusters))
            ],
        )
        await pipeline.run_until_idle()
    phases.end("fleet folded")
    if args.until == "fleet":
        return
    if appliers is not None:
        await appliers.round()
    pipeline.publish("intents", [module_event(m) for m in range(args.modules)])
    await pipeline.run_until_idle()
    if appliers is not None:
        await appliers.round()
    module = module_name(0)
    phases.end(f"{args.modules} modules joined, m-000's canary started")
    stage = "canary"
    reported: set[str] = set()
    wave_2_from = 0
    retake: tuple[float, float, float] | None = None
    while True:
        waiting = [c for c in pipeline.updating(module) if c not in reported]
        if not waiting:
            status = pipeline.status(module)
            current = status.get("stage") or status.get("currentStage") or "?"
            print(f"    m-000: phase {status.get('phase')}, stage {current}", flush=True)
            break
        for first in range(0, len(waiting), 2000):
            chunk = waiting[first : first + 2000]
            reported.update(chunk)
            pipeline.publish(
                "status",
                [
                    SyncStatusReported(
                        cluster=c, module=module, revision="6.7.0", state="succeeded", generation=1
                    ).to_bytes()
                    for c in chunk
                ],
                key=module.encode(),
            )
            await pipeline.run_until_idle()
            if appliers is not None:
                await appliers.round()
            if retake is not None:
                after_retake(pipeline, retake)
                retake = None
            if stage == "wave-2" and args.retake_at is not None and len(reported) - wave_2_from >= args.retake_at:
                args.retake_at = None
                retake = await retaken(pipeline)
            if stage == "wave-2" and args.silence_at is not None and len(reported) - wave_2_from >= args.silence_at:
                args.silence_at = None
                assert appliers is not None, "--silence-at needs appliers"
                before = rss_mib()
                pipeline.lag.longest = 0.0
                await appliers.silence(args.silence_seconds)
                held = pipeline.lag.longest
                print(f"    SILENCE: {args.silence_seconds:.0f} s of engine time without beats; "
                      f"RSS {before:.0f} → {rss_mib():.0f} MiB, the event loop held {held:.2f} s at most",
                      flush=True)  # fmt: skip
                retake = (0.0, before, time.process_time())
            if (
                stage == "wave-2"
                and args.fail_commits_at is not None
                and len(reported) - wave_2_from >= args.fail_commits_at
            ):
                args.fail_commits_at = None
                pipeline.broker.inject(FaultPoint.COMMIT, match=".journal.", times=args.partitions)
                retake = (0.0, rss_mib(), time.process_time())
                pipeline.longest.clear()
                pipeline.lag.longest = 0.0
        print(f"      {len(reported):,} reported, RSS {rss_mib():.0f} MiB", flush=True)
        now_stage = next_stage(len(reported), args.clusters)
        if now_stage != stage:
            phases.end(f"{stage} succeeded, {now_stage} started")
            stage = now_stage
            wave_2_from = len(reported)
            if args.until == stage:
                break
    if args.until != stage:
        phases.end(f"{stage} succeeded")
    print(f"largest batch per stage (input records): {dict(pipeline.largest)}; batches {dict(pipeline.batches)}")
    longest = ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in pipeline.longest.items())
    print(
        f"longest single step per stage (wall, awaits included): {longest}; the event loop held "
        f"{pipeline.lag.longest:.2f} s at most since the last retake (or the start)"
    )
    settles = ", ".join(
        f"{kind} {len(times)} (longest {max(times):.2f} s)"
        for kind in SETTLE_KINDS
        if (times := [s.seconds for s in pipeline.settles if s.kind == kind])
    )
    print(f"heap settles by the worker's policy (streams/heap.py, checked every {CHECK_INTERVAL:.0f} s): {settles}")


class LoopLag:
    """The longest the event loop went without running this task (it asks every 10 ms): how
    long one synchronous stretch — a fold, an index rebuild — held it, which is what stops a
    worker's heartbeats. A step's wall time also counts its awaits; this does not."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.skip_until = 0.0  # a probe (a phase's full settle) held it until then: not counted
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            if before >= self.skip_until:
                self.longest = max(self.longest, time.perf_counter() - before - 0.01)


async def retaken(pipeline: Pipeline) -> tuple[float, float, float]:
    """The decide stage takes its own partitions back (`--retake-at`); (seconds it took, RSS
    before, CPU seconds at the end) — the round that follows is printed by `after_retake`."""
    pipeline.longest.clear()
    pipeline.lag.longest = 0.0
    rss = rss_mib()
    taken = await pipeline.retake("decide")
    return taken, rss, time.process_time()


def after_retake(pipeline: Pipeline, retake: tuple[float, float, float]) -> None:
    taken, rss, cpu = retake
    print(f"    RETAKEN (or commits failed): decide lost and took back its partitions in {taken:.2f} s; "
          f"the round after it "
          f"{time.process_time() - cpu:.2f} s CPU, its longest decide step {pipeline.longest['decide']:.2f} s, "
          f"the event loop held {pipeline.lag.longest:.2f} s at most; "
          f"RSS {rss:.0f} → {rss_mib():.0f} MiB", flush=True)  # fmt: skip


def next_stage(reported: int, clusters: int) -> str:
    if reported < CANARY:
        return "canary"
    if reported < CANARY + clusters // 10:
        return "wave-1"
    return "wave-2" if reported < clusters else "done"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=20_000)
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--appliers", type=int, default=2, help="applier replicas beating (0: no leases, no ticks)")
    parser.add_argument("--lease-seconds", type=float, default=60.0, help="the appliers' lease (as fleet.py's)")
    parser.add_argument("--tick-interval", type=float, default=10.0, help="engine seconds between rounds")
    parser.add_argument(
        "--heap",
        choices=("worker", "default"),
        default="worker",
        help="the worker's collector policy (streams/heap.py), or CPython's defaults",
    )
    parser.add_argument("--trace", action="store_true", help="tracemalloc per phase (slow: use a small fleet)")
    parser.add_argument("--until", choices=("fleet", "wave-1", "wave-2", "done"), default="done")
    parser.add_argument(
        "--retake-at", type=int, help="wave-2 reports after which decide loses and takes back its partitions"
    )
    parser.add_argument("--silence-at", type=int, help="wave-2 reports after which no beat comes for a while")
    parser.add_argument("--silence-seconds", type=float, default=65.0, help="... this long (engine time)")
    parser.add_argument(
        "--fail-commits-at", type=int, help="wave-2 reports after which each decide partition's next commit fails"
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=SESSION_TIMEOUT,
        help="the group session a full heap settle must stay well within (streams/heap.py BUDGET)",
    )
    args = parser.parse_args()
    asyncio.run(rollout(args))


if __name__ == "__main__":
    main()
