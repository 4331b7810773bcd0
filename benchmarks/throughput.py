"""Throughput of the stream core on one broker, in one run (prints figures; asserts nothing).

    .venv/bin/python benchmarks/throughput.py 3000            # N = 3000 (the default)
    .venv/bin/python benchmarks/throughput.py 3000 --sizes 1000,10000,50000 --profile
    options: --skip-pipe / --skip-table (run one half only), --sizes (table-layer fleet sizes),
             --layouts "1 process,2 processes" (how the worker's stages are spread over processes),
             --rounds R (modules rolled out and reported on, one after another)

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`). Every run uses
fresh topics (a random prefix) and deletes them at the end.

1. **Raw pipe** — the floor any Kafka stream processor in Python pays: one aiokafka consumer
   (batched `getmany`) → `json.loads` → `json.dumps` → one producer (acks=all, no flush per
   message) over N status-like JSON messages on 4 partitions; messages/s from the first
   record fetched to the last acknowledgement, median of 5 passes.
2. **The real worker** — `rollout worker` (4 partitions) as subprocesses, in each layout: one
   process with every stage, then `--stages route` beside `--stages decide,assemble` (two
   cores); each waited for until it logs "worker ready:". N ready clusters are published and
   folded (the decide-state changelog holds every cluster in every journal partition), then
   `--rounds` rounds (default 3), each with a new Module without a rollout block (one stage,
   everyone at once):
   * fan-out: from publishing the module to N assemblage snapshots naming it;
   * status: N `succeeded` SyncStatusReported, published at once (record batches per
     partition: `publish_timed`), from the first one written to phase Complete written on
     module-status (record timestamps) → events/s, with the CPU each worker
     process, the broker (a local `kafka.Kafka` process, if any) and this benchmark spent
     per report meanwhile.
   The median round's status figure is compared with the raw pipe (target ≥ 20 % at
   N = 3000; fan-out target ≤ 5 s at N = 3000). Each phase's observer follows only the
   topics it needs: reading every topic would load the broker and the two cores.
   * catch-up: one more module reaches every cluster, the worker stops, N reports are
     published, the worker starts again: events/s from when the first report is routed and
     the decider has its state back (its "decide: assigned" log line) to Complete (record
     timestamps) — what a restart costs on top of the live figure; and how long the decider
     took to take its partitions over before that (the "taken over in … s" log lines).
3. **Table layer** (benchmarks/table_layer.py) — per-event cost of the decider's engine over
   its changelogged state, without Kafka, at each fleet size (`--sizes`): label changes and
   `succeeded` reports, µs/event, and cost(largest)/cost(smallest) (target ≤ 1.3).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from bench_events import cluster_event, cluster_name, module_event, report
from table_layer import table_layer

from infra import client
from infra.localkafka import discover_bootstrap
from infra.settings import kafka_client_options
from infra.topics import TopicNames, delete_topics, ensure_topics
from rollout.wire.status import ModuleStatus
from streams.outputs import key_slot

PARTITIONS = 4
ROOT = Path(__file__).resolve().parent.parent


# -- 1. raw pipe ----------------------------------------------------------------------------


async def create_topics(bootstrap: str, names: Sequence[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, num_partitions=PARTITIONS, replication_factor=1) for n in names])
    finally:
        await admin.close()
    for _ in range(100):  # the broker answers before every metadata cache knows the topics
        try:
            return await client.require_topics(bootstrap, names)
        except client.MissingTopic:
            await asyncio.sleep(0.1)
    await client.require_topics(bootstrap, names)


async def raw_pipe(bootstrap: str, prefix: str, n: int, runs: int = 5) -> list[float]:
    """msg/s of `runs` passes over the same N messages (a pass over 3000 takes ~0.1 s: noisy)."""
    source, sink = f"{prefix}raw-in", f"{prefix}raw-out"
    await create_topics(bootstrap, [source, sink])
    await client.publish(bootstrap, source, [(cluster_name(i), report(cluster_name(i), "bench")) for i in range(n)])
    return [await raw_pass(bootstrap, source, sink, n) for _ in range(runs)]


async def raw_pass(bootstrap: str, source: str, sink: str, n: int) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **kafka_client_options(),
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=2, max_batch_size=256 * 1024, **kafka_client_options()
    )
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        futures = []
        started: float | None = None
        while len(futures) < n:
            # everything fetched, as the worker's stages take it (streams/delivery.py: a cap
            # leaves records in the buffer, and aiokafka then holds back the next fetch)
            batch = await consumer.getmany(timeout_ms=100)
            if batch and started is None:
                started = time.perf_counter()
            for records in batch.values():
                for record in records:
                    value = json.dumps(json.loads(record.value)).encode()
                    futures.append(await producer.send(sink, key=record.key, value=value))
        await asyncio.gather(*futures)
        assert started is not None
        return n / (time.perf_counter() - started)
    finally:
        await producer.stop()
        await consumer.stop()


# -- 2. the real worker ---------------------------------------------------------------------


class Follower:
    """Reads the topics one phase needs (read_committed) as they grow, noting when conditions
    first hold. Each phase follows only what it measures: an observer reading every topic
    would load the broker and the two cores the worker is measured on."""

    def __init__(self, bootstrap: str, names: TopicNames, roles: set[str]) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.topics = [FOLLOWED[role](names) for role in sorted(roles)]
        self.snapshots: dict[bytes, bytes] = {}  # cluster → its latest assemblage snapshot
        self.folded: set[tuple[int, bytes]] = set()
        self.statuses: dict[bytes, tuple[ModuleStatus, int]] = {}  # module → (status, record timestamp ms)
        self.first_routed_report: dict[bytes, int] = {}  # module → timestamp (ms) of its first report in the journal
        self.waiters: list[tuple[Callable[[], bool], asyncio.Future[float]]] = []

    async def run(self) -> None:
        names = self.names
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=4 * 1024 * 1024,
            **kafka_client_options(),
        )
        await consumer.start()
        try:
            tps = [TopicPartition(t, p) for t in self.topics for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while True:
                batch = await consumer.getmany(timeout_ms=50, max_records=10000)
                now = time.monotonic()
                for tp, records in batch.items():
                    for r in records:
                        if tp.topic == names.module_status:
                            if r.value is not None:
                                self.statuses[r.key] = (ModuleStatus.read(r.value), r.timestamp)
                        elif tp.topic == names.journal:
                            if r.key not in self.first_routed_report and b'"SyncStatusReported"' in r.value:
                                self.first_routed_report[r.key] = r.timestamp
                        elif tp.topic in (names.remote, names.proxy):
                            if r.value is None:
                                self.snapshots.pop(r.key, None)
                            else:
                                self.snapshots[r.key] = r.value
                        elif r.key is not None and r.key.startswith(b"clusters:"):
                            self.folded.add((tp.partition, r.key))
                for condition, future in list(self.waiters):
                    if not future.done() and condition():
                        future.set_result(now)
                        self.waiters.remove((condition, future))
        finally:
            await consumer.stop()

    async def until(self, condition: Callable[[], bool], what: str, timeout: float = 300) -> float:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters.append((condition, future))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            known = {k.decode(): v[0].phase for k, v in self.statuses.items()}
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (phases: {known})") from None

    def carrying(self, module: bytes) -> int:
        """How many clusters' snapshots name `module`."""
        quoted = b'"' + module + b'"'
        return sum(1 for value in self.snapshots.values() if quoted in value)

    def phase(self, module: bytes) -> str | None:
        known = self.statuses.get(module)
        return known[0].phase if known is not None else None

    def updating(self, module: bytes) -> int:
        known = self.statuses.get(module)
        return known[0].count("updating") if known is not None else 0


FOLLOWED: dict[str, Callable[[TopicNames], str]] = {
    "state": lambda names: names.name("decide_state"),
    "remote": lambda names: names.remote,
    "proxy": lambda names: names.proxy,
    "module-status": lambda names: names.module_status,
    "journal": lambda names: names.journal,
}


@contextlib.asynccontextmanager
async def following(bootstrap: str, names: TopicNames, *roles: str) -> AsyncIterator[Follower]:
    follower = Follower(bootstrap, names, set(roles))
    task = asyncio.create_task(follower.run())
    try:
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def publish_timed(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> tuple[float, float]:
    """Publish a burst of keyed records (each to the partition the default partitioner
    picks) as whole record batches per partition, acks=all and idempotent; the first and
    last record timestamps (epoch s; appending stamps each record) — the live phase starts
    when the first report is written. Batches, not one `send` per record: aiokafka's
    `send` costs this process ~15 µs per record, so 3,000 reports took 30-70 ms to go out,
    on the cores the worker and the broker share — the load generator, not the worker,
    set the pace of the first part of a round."""
    options = kafka_client_options()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, max_batch_size=1_000_000, **options
    )
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        batches: dict[int, Any] = {}
        futures = []
        first = time.time()  # at most the first record's timestamp (appending stamps it)
        for key, value in messages:
            partition = partitions[key_slot(key.encode(), len(partitions))]
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = producer.create_batch()
            if batch.append(key=key.encode(), value=value, timestamp=None) is None:  # full: send it
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key.encode(), value=value, timestamp=None)
        last = time.time()  # at least the last record's timestamp
        for partition, batch in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return first, last


async def wait_ready(log: Path, worker: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "worker ready:" in log.read_text(errors="replace"):
            return
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode}; log: {log.read_text()[-3000:]}")
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the worker was not ready after {timeout:.0f} s")


# How the worker's stages are spread over processes: one process (the default deployment), or
# the router beside the decider + assembler (`rollout worker --stages ...`, two cores).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "1 process": ("route,decide,assemble",),
    "2 processes": ("route", "decide,assemble"),
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    """One module's rollout to the whole fleet, then its N status reports."""

    fan_out_s: float
    status_per_s: float  # first report written → Complete written (record timestamps)
    written_s: float  # how long writing the N reports took (the arrival of the load)
    cpu_per_report: list[float]  # seconds of CPU per status report, per worker process
    others_per_report: dict[str, float]  # the broker's and this benchmark's own CPU per report


@dataclass
class WorkerRun:
    fold_s: float
    rounds: list[Round]
    backlog_per_s: float  # N reports waiting while the worker was down: first routed → Complete
    take_over_s: float  # after that restart: the decider's partitions taken over, one after another

    @property
    def median(self) -> Round:
        """The round with the median status figure."""
        return sorted(self.rounds, key=lambda r: r.status_per_s)[len(self.rounds) // 2]


@contextlib.asynccontextmanager
async def workers(
    bootstrap: str, prefix: str, layout: tuple[str, ...], logs: list[Path] | None = None
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """`rollout worker` processes, one per entry of `layout`, each waited for until ready."""
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = logs if logs is not None else []
        try:
            for index, stages in enumerate(layout):
                log = Path(tmp) / f"worker-{index}.log"
                with log.open("wb") as sink:
                    started.append(subprocess.Popen(
                        [sys.executable, "-m", "rollout_cli.main", "worker", "--web-port", "0", "--stages", stages,
                         "--partitions", str(PARTITIONS), "--loglevel", "info"],
                        env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                    ))  # fmt: skip
                logs.append(log)
            for log, worker in zip(logs, started, strict=True):
                await wait_ready(log, worker)
            yield started
        finally:
            for worker in started:
                worker.send_signal(signal.SIGTERM)
            for worker in started:
                try:
                    worker.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    worker.kill()


async def real_worker(bootstrap: str, prefix: str, n: int, layout: tuple[str, ...], rounds: int) -> WorkerRun:
    names = TopicNames(prefix)
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    async with workers(bootstrap, prefix, layout) as processes:
        async with following(bootstrap, names, "state") as follower:
            started = time.monotonic()
            labels = {"env": "bench"}
            await client.publish(
                bootstrap, names.clusters, [(cluster_name(i), cluster_event(i, labels).to_bytes()) for i in range(n)]
            )
            ends = await end_offsets(bootstrap, names.clusters)
            folded = await follower.until(lambda: len(follower.folded) >= PARTITIONS * n, "the fleet to be folded")
        done = [await status_round(bootstrap, names, n, f"bench-{r}", ends, processes) for r in range(1, rounds + 1)]
        # the backlog: one more module reaches every cluster, then the worker stops
        async with following(bootstrap, names, "module-status") as follower:
            await client.publish(bootstrap, names.intents, [("backlog", module_event("backlog", fleet=ends))])
            await follower.until(lambda: follower.updating(b"backlog") == n, "the backlog module's fan-out")
    backlog = [(cluster_name(i), report(cluster_name(i), "backlog")) for i in range(n)]
    await client.publish(bootstrap, names.status, backlog)  # ... while no worker runs
    logs: list[Path] = []
    async with following(bootstrap, names, "module-status", "journal") as follower:
        async with workers(bootstrap, prefix, layout, logs):
            await follower.until(lambda: follower.phase(b"backlog") == "Complete", "backlog phase Complete")
            # from when both hold — the first report is in the journal and the decider has its
            # state back (a restart restores it first) — to Complete
            begun = max(follower.first_routed_report[b"backlog"] / 1000, decider_assigned_at(logs))
            take_over_s = decider_take_over_s(logs)
        backlog_s = follower.statuses[b"backlog"][1] / 1000 - begun
    return WorkerRun(folded - started, done, n / backlog_s, take_over_s)


async def status_round(
    bootstrap: str,
    names: TopicNames,
    n: int,
    module: str,
    ends: dict[int, int],
    processes: list[subprocess.Popen[bytes]],
) -> Round:
    key = module.encode()
    async with following(bootstrap, names, "remote", "proxy") as follower:
        published = time.monotonic()
        await client.publish(bootstrap, names.intents, [(module, module_event(module, fleet=ends))])
        fanned = await follower.until(lambda: follower.carrying(key) >= n, f"{n} snapshots naming {module}")
    async with following(bootstrap, names, "module-status") as follower:
        await follower.until(lambda: follower.updating(key) == n, f"{module} updating everywhere")
        reports = [(cluster_name(i), report(cluster_name(i), module)) for i in range(n)]
        others = {"broker": broker_pid(), "benchmark": os.getpid()}
        pids = {**{f"worker {i}": p.pid for i, p in enumerate(processes)}, **others}
        before = {name: cpu_seconds(pid) for name, pid in pids.items() if pid is not None}
        first, last = await publish_timed(bootstrap, names.status, reports)
        await follower.until(lambda: follower.phase(key) == "Complete", f"{module} phase Complete")
        spent = {name: (cpu_seconds(pids[name]) - cpu) / n for name, cpu in before.items()}
        live_s = follower.statuses[key][1] / 1000 - first
    cpu = [spent[f"worker {i}"] for i in range(len(processes))]
    return Round(fanned - published, n / live_s, last - first, cpu, {k: spent[k] for k in others if k in spent})


def broker_pid() -> int | None:
    """The pid of a broker on this machine (`kafka.Kafka` on the command line), if one."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if b"kafka.Kafka" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
    return None


def decider_take_over_s(logs: list[Path]) -> float:
    """Seconds the decider's partitions took to be taken over ("taken over in … s" lines)."""
    times = re.findall(r"decide \S+: state restored \(\d+ records, taken over in ([\d.]+) s\)", _text(logs))
    return sum(float(t) for t in times)


def _text(logs: list[Path]) -> str:
    return "\n".join(log.read_text(errors="replace") for log in logs)


def decider_assigned_at(logs: list[Path]) -> float:
    """Epoch seconds of the last "decide: assigned" log line (the decider's state is back)."""
    stamps = []
    for line in _text(logs).splitlines():
        if "decide: assigned" in line:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            stamps.append(stamp.replace(tzinfo=datetime.UTC).timestamp())
    if not stamps:
        raise RuntimeError("no worker logged 'decide: assigned'")
    return max(stamps)


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **kafka_client_options())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def pipe_and_worker(n: int, layouts: list[str], rounds: int) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        sys.exit("no broker: run `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    for layout in layouts:
        prefix = f"bench-{uuid.uuid4().hex[:6]}."
        print(f"broker {bootstrap}, N = {n}, {PARTITIONS} partitions, topic prefix {prefix}", flush=True)
        passes = sorted(await raw_pipe(bootstrap, prefix, n))
        raw = passes[len(passes) // 2]
        print(f"raw pipe   consume → json → produce (acks=all):       {raw:9.0f} msg/s   "
              f"(median of {len(passes)} passes: {', '.join(f'{p:.0f}' for p in passes)})", flush=True)  # fmt: skip
        run = await real_worker(bootstrap, prefix, n, LAYOUTS[layout], rounds)
        report_worker(layout, n, raw, run)
        with contextlib.suppress(Exception):
            await delete_topics(bootstrap, prefix)


def report_worker(layout: str, n: int, raw: float, run: WorkerRun) -> None:
    median = run.median
    ratio = median.status_per_s / raw * 100
    print(f"worker, {layout} ({' | '.join(LAYOUTS[layout])}):")
    print(f"  fleet of {n} folded into {PARTITIONS} journal partitions: {run.fold_s:7.2f} s")
    for index, r in enumerate(run.rounds, 1):
        processes = " + ".join(
            f"{stages} {cpu * 1e6:.0f}" for stages, cpu in zip(LAYOUTS[layout], r.cpu_per_report, strict=True)
        )
        others = ", ".join(f"{name} {cpu * 1e6:.0f}" for name, cpu in r.others_per_report.items())
        print(f"  round {index}: fan-out to {n} snapshots {r.fan_out_s:5.2f} s; status {r.status_per_s:6.0f} events/s "
              f"(reports written in {r.written_s:.2f} s); CPU µs per report: {processes}; {others}")  # fmt: skip
    fan_out = sorted(r.fan_out_s for r in run.rounds)[len(run.rounds) // 2]
    print(f"  fan-out: module → {n} snapshots (median):     {fan_out:7.2f} s   "
          f"(target ≤ 5 s at 3000: {'met' if fan_out <= 5 else 'NOT met'})")  # fmt: skip
    print(f"  status: {n} reports → Complete (median):     {median.status_per_s:9.0f} events/s")
    backlog_ratio = run.backlog_per_s / raw * 100
    print(f"  restart: the decider's {PARTITIONS} partitions taken over (state folded) in {run.take_over_s:.2f} s")
    print(f"  catch-up: {n} reports published while the worker was down; from its restart (first report "
          f"routed, decider's state back) to Complete: {run.backlog_per_s:.0f} events/s = "
          f"{backlog_ratio:.1f} % of the raw pipe")  # fmt: skip
    print(f"  ratio status events/s ÷ raw pipe msg/s:       {ratio:8.1f} %   "
          f"(target ≥ 20 %: {'met' if ratio >= 20 else 'NOT met'})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=3000, help="clusters and reports for parts 1-2")
    parser.add_argument("--sizes", default="1000,10000,50000", help="fleet sizes of the table-layer part")
    parser.add_argument("--skip-pipe", action="store_true", help="skip the raw pipe and the real worker")
    parser.add_argument("--skip-table", action="store_true", help="skip the table-layer part")
    parser.add_argument("--profile", action="store_true", help="cProfile the table layer at both ends")
    parser.add_argument("--rounds", type=int, default=3, help="modules rolled out and reported on, one after another")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"worker layouts to run: {', '.join(LAYOUTS)}")
    args = parser.parse_args()
    print("load average before the run (2 cores: above 2 means others compete): "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()), flush=True)  # fmt: skip
    if not args.skip_pipe:
        asyncio.run(pipe_and_worker(args.n, [layout.strip() for layout in args.layouts.split(",")], args.rounds))
    if not args.skip_table:
        table_layer([int(s) for s in args.sizes.split(",")], args.profile)


if __name__ == "__main__":
    main()
