"""A fleet rolled out through the user's path, end to end, on one broker (prints figures; asserts nothing).

    .venv/bin/python benchmarks/fleet.py --scenario stages       # (a) 10,000 clusters, one 3-stage module
    .venv/bin/python benchmarks/fleet.py --scenario concurrent   # (b) 100 3-stage modules over 1,000 clusters
    .venv/bin/python benchmarks/fleet.py --scenario large        # (c) 100,000 clusters x 20 modules (slow)
    .venv/bin/python benchmarks/fleet.py --scenario large --installed-first   # the 19 held modules joined first
    .venv/bin/python benchmarks/fleet.py --clusters 1000,10000 --modules 1,20   # a grid, no targets
    options: --appliers N (default 2), --idle-seconds S (default 60; 0 skips the idle window),
             --tick-interval S / --lease-seconds S (the worker's ticks, the appliers' leases:
             the product's defaults, 10 and 60), --rolled K (how many of the modules roll out),
             --no-restart, --keep DIR (keep the manifests, logs and sinks there),
             --keep-topics (leave the fleet's topics on the broker at the end, their prefix
             printed: `benchmarks/restart.py --prefix P` restarts a worker against them),
             --rollout-timeout S (default 900: past it, what stands is printed and the run goes on),
             --workers N (worker processes sharing the partitions, default 1: each stage's consumer
             group spreads them; per-worker RSS, partitions and restart-to-ready are printed),
             --partitions P (of every topic, default 4),
             --static-membership (each worker with --instance-id, the same after the restart:
             restart-to-ready without the dead member's session timeout),
             --pause broker|worker (SIGSTOP it once mid-rollout, then SIGCONT: --pause-during STAGE,
             default wave-2, --pause-after N members succeeded there, --pause-seconds S, default 60),
             --from-commit REV (run the `rollout` processes from `git archive REV`: in a working
             tree others edit meanwhile, a half-saved file would otherwise end up in a worker)

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`). Every run creates
its topics with a fresh random prefix (`rollout topics create`) and deletes them at the end
(unless --keep-topics).

Nothing is published behind the product's back: manifests are generated as files and
published with `rollout apply -f` (the clusters in two files — more for big fleets, 10,000
clusters a file: apply refuses more in one — then the modules in one), `rollout worker` runs every stage in one
process, and `--appliers` replicas of `rollout applier --sink dir:… --simulate-status`
(one consumer group) write the Flux objects and report every sync `succeeded`: health is
instant. The module-status topic is followed live and read with `ModuleStatus`.

The fleet: clusters `c-000000…` with labels env=prod and ring=canary (10 clusters), wave-1
(10 % of the fleet) or wave-2 (the rest). Each module selects env=prod and has three stages:
canary (ring=canary, maxConcurrency 10), wave-1 (ring=wave-1, maxConcurrency 50 %), wave-2
(the rest, 100 %). Modules that do not roll out (`--rolled`, the `large` scenario's 19
others) have `requireApproval` on their canary: every cluster is a pending target of each
(the decider's state holds 20 x 100,000 targets), but nothing moves.

What is printed, and from what:

* apply: wall time of each `rollout apply` subprocess; the fleet folded = until the
  decide-state changelog holds every cluster in every journal partition (followed).
* rollout: applied → Complete per module, from the ModuleApplied record's timestamp on the
  intents topic to the first module-status record with phase Complete; each stage from the
  first record where it is no longer Pending to the first where it is Succeeded (record
  timestamps); p50/p90 over the modules rolled out.
* decision latency: the pair is a cluster's first `succeeded` SyncStatusReported record on
  the sync-status topic (written by an applier) → the first decision record (decisions
  topic, `DecisionDocument`) with action `succeeded` for the same module and cluster —
  the decision that report causes. Record timestamps (CreateTime: producer clocks of the
  same machine); p50/p90/p99/max over every cluster of every module rolled out. Split at
  the same event (by id) routed into the journal: applier → router, and the decider's
  part. An applier stamps a report when it sends it and flushes after its batch: a slow
  batch shows in the first half.
* CPU from /proc/<pid>/stat: the broker (`kafka.Kafka`), the worker, the appliers (summed),
  this benchmark; seconds and % of one core over the rollout window (first module apply →
  last Complete), the idle window, and the whole run. A progress line every 5 s gives each
  process's share of that interval: which one burned the CPU when.
* worker RSS: VmRSS polled every 0.5 s (peak) and VmHWM before the kill.
* broker responsiveness: a metadata request (no topics, as the processes' own probes do)
  every 0.5 s during the whole run: p99 and max latency; the count of NotEnoughReplicas
  warnings in the worker's log (a "(N similar suppressed)" line counts N+1) and of "not
  reachable" warnings in the appliers' logs.
* idle: after Complete, `--idle-seconds` with ticks and heartbeats only; the journal's and
  decide-state's records and bytes (key + value of what a read_committed consumer gets in
  the window, and the growth of the broker's segment files when the broker is local),
  extrapolated to one hour — an extrapolation of the window printed beside it.
* restart-to-ready: the worker SIGKILLed after the idle window and started again; seconds
  until its /readyz answers 200, its "worker ready:" line, and its "taken over in … s" lines
  (per stage: max and sum over partitions); RSS once ready. With `--workers N`: every worker
  killed and N started again, each one's figures, the slowest the restart-to-ready; and which
  decide partitions each holds with the state records each restored (the fleet's facts plus
  that partition's own modules' targets).

Targets, each printed met / not met: stages — module applied → Complete ≤ 60 s; concurrent —
p90 of applied → Complete ≤ 60 s; large — worker peak RSS ≤ 2 GiB, restart-to-ready ≤ 60 s,
the module's rollout ≤ 10 min. Two cores: the load average before the run is printed; other
work on the machine shows in it.

Measured on the 2-core dev machine (2026-11-26, 15:36-16:51; shared: load average 4-10 from
other sessions' tests and rollouts — the figures are what a loaded machine gives):

* stages (10,000 x 1), at a3b48be and later (the applier's batch yields between
  snapshots): applied → Complete 29.3 s (canary 0.4 s, wave-1 4.0 s, wave-2 23.7 s) — met;
  clusters applied in 5.6 s, folded 8.7 s; CPU per cluster moved: appliers 1.75 ms, worker
  0.48, broker 0.23 — the appliers the busiest (60-77 % of a core together in wave-2);
  decision latency p99 0.32 s; idle, extrapolated from 60 s: journal 33,600 records/h
  (30 MiB/h), decide-state 6.6 M records/h (1.3 GiB/h) — each applier heartbeat (every
  20 s) rewrites every cluster's record in the decide-state of all 4 partitions, so it
  grows with the fleet (2,000 clusters: 1.5 M records/h); restart-to-ready 12.6 s, most of
  it the groups waiting out the killed member's 10 s session (state restored in ~3 s).
* stages before a3b48be: wave-2 stopped at 3,000/8,990 (first run) and 5,000/8,990
  (second) for the rest of the 900 s: the applier group lost members ("member_id was not
  recognized") 17 times, partitions were assigned 15+15 times, each assignment replaying
  the projection topics from the start — 11,808 reports for 6,010 distinct clusters. The
  broker answered this benchmark's probe within 166 ms all along while the appliers' own
  probes timed out at 2 s: their event loops were held by a batch.
* concurrent (1,000 x 100), after a3b48be: 67 of 100 modules Complete in 600 s, 78,683 of
  100,000 moves (~130/s) — not met; CPU per cluster moved: appliers 5.8 ms (73 % of a core
  together: every snapshot carries each of the cluster's up to 100 syncs), worker 2.0 ms,
  broker 0.44; decision latency p50 5.9 s, p90 64 s (applier → router p90 27 s, the
  decider p90 40 s); worker RSS 74 MiB → 1.6 GiB within 10 s of applying the modules, peak
  1.8 GiB (18 KiB a target); restart-to-ready 95 s: decide restored 760,000 records in
  56 s and assemble in 79 s, partition after partition, and each stage's group then took
  its partitions away and gave them back (a second, short take-over). Before a3b48be: 8
  Complete, 21,617 moves; restart-to-ready 136 s.
* large, with 2 modules (one held) instead of 20 — 20 would need ~30 GiB: the guard skips
  it. After a3b48be (16:42, load 3-4): 100,000 clusters applied in 26 s (10 files), folded
  45 s; 97,414 of 100,000 moved when the 300 s given ran out — the worker the bottleneck
  at the end (70-90 % of a core, appliers idle, no progress for 30 s; 2.1 ms of its CPU per
  cluster moved); journal → decision p50 0.25 s, p90 63 s; worker RSS peak 4.3 GiB (21 KiB a
  target; 2.6 GiB between the peaks) — not met; restart-to-ready 128 s — not met: the
  process served its port after 38 s, its route group's JoinGroup timed out after 40 s,
  decide restored 5.0 M records in 24 s, ready 24 s later. Before a3b48be (load 7):
  applied 54 s, folded 93 s, 40,587 moved in 600 s, RSS peak 3.9 GiB, restart 34 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.metadata import MetadataRequest
from throughput import cpu_seconds, following

from infra.localkafka import discover_bootstrap
from infra.settings import kafka_client_options
from infra.topics import TopicNames, delete_topics
from rollout.wire.decisions import DecisionDocument
from rollout.wire.status import ModuleStatus

ROOT = Path(__file__).resolve().parent.parent
SOURCE = {"dir": ROOT}  # where the `rollout` subprocesses run from (`--from-commit`: an export)
ROLLOUT = [sys.executable, "-m", "rollout_cli.main"]
PARTITIONS = 4  # the worker's default (journal, assignments, state topics)
CLUSTERS_PER_FILE = 10_000  # `rollout apply` refuses a file of more than 10,000 documents or 4 MiB
CANARY = 10
GIB = 1024**3
TARGET_BYTES = 4 * 1024
"""The worker's peak RSS per target (cluster x module) above the folded fleet: what a run is
estimated to need before it starts (`--force` runs it anyway). It was 18 KiB when a module
apply created every target in one event (this benchmark, 2026-11-26: 100,000 targets +1.5
GiB, 200,000 targets +3.5 GiB); with joins sliced and targets stored small the decider's
own peak is ~1.9 KiB a target (benchmarks/fleet_memory.py at 20,000 x 20), the worker's
client buffers and outputs on top."""


# -- scenarios ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    what: str
    metric: str  # a key of Run.metrics
    limit: float
    unit: str


@dataclass(frozen=True)
class Scenario:
    name: str
    clusters: int
    modules: int
    rolled: int | None = None  # None: every module rolls out
    targets: tuple[Target, ...] = ()


SCENARIOS: dict[str, Scenario] = {
    "stages": Scenario("stages", 10_000, 1, targets=(Target("module applied → Complete", "rollout_max_s", 60, "s"),)),
    "concurrent": Scenario(
        "concurrent", 1_000, 100, targets=(Target("p90 of applied → Complete", "rollout_p90_s", 60, "s"),)
    ),
    "large": Scenario(
        "large",
        100_000,
        20,
        rolled=1,
        targets=(
            Target("worker peak RSS", "rss_peak_gib", 2, "GiB"),
            Target("restart-to-ready", "restart_ready_s", 60, "s"),
            Target("one module's 3-stage rollout", "rollout_max_s", 600, "s"),
        ),
    ),
}


# -- manifests ------------------------------------------------------------------------------


def cluster_name(i: int) -> str:
    return f"c-{i:06d}"


def ring(i: int, n: int) -> str:
    return "canary" if i < CANARY else "wave-1" if i < CANARY + n // 10 else "wave-2"


CLUSTER = """---
apiVersion: rollout.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: fleet, labels: {{env: prod, ring: {ring}}}}}
status: {{controlPlaneReady: true, kubeconfigSecret: true}}
"""

MODULE = """---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {{name: {name}, namespace: fleet}}
spec:
  selector: {{matchLabels: {{env: prod}}}}
  sync:
    source: {{git: {{url: https://github.com/stefanprodan/podinfo, version: {{tag: 6.7.0}}}}}}
    package:
      kustomize:
        path: ./kustomize
  rollout:
    stages:
      - {{name: canary, selector: {{matchLabels: {{ring: canary}}}}, maxConcurrency: 10{held}}}
      - {{name: wave-1, selector: {{matchLabels: {{ring: wave-1}}}}, maxConcurrency: "50%"}}
      - {{name: wave-2, maxConcurrency: "100%"}}
"""


def module_name(i: int) -> str:
    return f"m-{i:03d}"


def write_manifests(directory: Path, clusters: int, modules: int, rolled: int) -> tuple[list[Path], Path]:
    """Cluster files (two, or one per CLUSTERS_PER_FILE) and one file of modules; plain text
    formatting, not a YAML dumper: 100,000 clusters take well under a second."""
    files = max(2, -(-clusters // CLUSTERS_PER_FILE))
    per_file = -(-clusters // files)
    cluster_files = []
    for f in range(files):
        path = directory / f"clusters-{f}.yaml"
        indices = range(f * per_file, min(clusters, (f + 1) * per_file))
        path.write_text("".join(CLUSTER.format(name=cluster_name(i), ring=ring(i, clusters)) for i in indices))
        cluster_files.append(path)
    module_file = directory / "modules.yaml"
    documents = [
        MODULE.format(name=module_name(m), held="" if m < rolled else ", requireApproval: true") for m in range(modules)
    ]
    module_file.write_text("".join(documents))
    # for --installed-first: the modules that do not roll out, then the ones that do
    (directory / "modules-held.yaml").write_text("".join(documents[rolled:]))
    (directory / "modules-rolled.yaml").write_text("".join(documents[:rolled]))
    return cluster_files, module_file


# -- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def spawn(name: str, args: list[str], log: Path, env: dict[str, str]) -> Process:
    with log.open("ab") as sink:
        popen = subprocess.Popen([*ROLLOUT, *args], env=env, cwd=SOURCE["dir"], stdout=sink, stderr=subprocess.STDOUT)
    return Process(name, popen, log)


def start_worker(
    env: dict[str, str],
    log: Path,
    port: int,
    tick: float,
    name: str = "worker",
    instance_id: str | None = None,
    stages: str | None = None,
) -> Process:
    static = ["--instance-id", instance_id] if instance_id is not None else []
    only = ["--stages", stages] if stages is not None else []
    return spawn(
        name,
        ["worker", "--web-port", str(port), "--tick-interval", str(tick), "--partitions", str(PARTITIONS), *static,
         *only],
        log,
        env,
    )  # fmt: skip


async def until_logged(process: Process, text: str, timeout: float) -> float:
    """time.time() when `text` first shows in the process's log (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in process.text():
            return time.time()
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}: {process.text()[-3000:]}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{process.name} did not log {text!r} within {timeout:.0f} s")


def stop(process: Process, timeout: float = 30) -> None:
    if process.popen.poll() is None:
        process.popen.send_signal(signal.SIGTERM)
        try:
            process.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()


async def run_cli(args: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    """Run a `rollout` command to its end (its output to `log`): (wall seconds, exit code)."""
    started = time.perf_counter()
    with log.open("ab") as sink:
        process = await asyncio.create_subprocess_exec(
            *ROLLOUT, *args, env=env, cwd=SOURCE["dir"], stdout=sink, stderr=sink
        )
        code = await process.wait()
    return time.perf_counter() - started, code


def rss_bytes(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    return 0


# -- watching the run -----------------------------------------------------------------------


class CpuClock:
    """CPU seconds of the measured processes between two marks (/proc/<pid>/stat)."""

    def __init__(self, pids: Callable[[], dict[str, list[int]]]) -> None:
        self.pids = pids
        self.retired: dict[str, float] = {}  # the CPU of processes of that name that ended

    def retire(self, name: str, pid: int) -> None:
        """`pid` (of `name`) is about to end: keep the CPU it spent in `name`'s totals."""
        self.retired[name] = self.retired.get(name, 0.0) + cpu_seconds(pid)

    def read(self) -> tuple[float, dict[str, float]]:
        spent: dict[str, float] = {}
        for name, pids in self.pids().items():
            total = self.retired.get(name, 0.0)
            for pid in pids:
                with contextlib.suppress(OSError):
                    total += cpu_seconds(pid)
            spent[name] = total
        return time.monotonic(), spent


def cpu_between(
    before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]], per: tuple[int, str] | None = None
) -> str:
    """Each process's CPU seconds and % of one core between two readings; with `per`
    (count, what) also its ms per unit."""
    wall = after[0] - before[0]
    parts = []
    for name, cpu in before[1].items():
        spent = after[1][name] - cpu
        unit = f", {spent / per[0] * 1000:.2f} ms/{per[1]}" if per else ""
        parts.append(f"{name} {spent:.1f} s ({spent / wall * 100:.0f} %{unit})")
    return f"over {wall:.1f} s: " + ", ".join(parts)


@dataclass
class StageTimes:
    started_ms: int | None = None  # first record where the stage is no longer Pending
    succeeded_ms: int | None = None


@dataclass
class ModuleHistory:
    latest: ModuleStatus | None = None
    complete_ms: int | None = None
    stages: dict[str, StageTimes] = field(default_factory=dict)


class StatusFollower:
    """Follows module-status (read_committed) from its beginning, with `ModuleStatus`: each
    module's latest document, the record timestamp of its first Complete, and of each
    stage's first leaving Pending and first Succeeded."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.bootstrap = bootstrap
        self.topic = names.module_status
        self.modules: dict[str, ModuleHistory] = {}
        self.moved_at = time.monotonic()  # when a module's succeeded count last changed

    def stalled_s(self) -> float:
        return time.monotonic() - self.moved_at

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            **kafka_client_options(),
        )
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or [])]
            if not tps:
                tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while True:
                batch = await consumer.getmany(timeout_ms=200, max_records=5000)
                for records in batch.values():
                    for record in records:
                        if record.value is not None:
                            self.note(ModuleStatus.read(record.value), record.timestamp)
        finally:
            await consumer.stop()

    def note(self, status: ModuleStatus, timestamp: int) -> None:
        history = self.modules.setdefault(status.module, ModuleHistory())
        if history.latest is None or history.latest.succeeded != status.succeeded:
            self.moved_at = time.monotonic()
        history.latest = status
        if status.phase == "Complete" and history.complete_ms is None:
            history.complete_ms = timestamp
        for stage in status.stages:
            times = history.stages.setdefault(stage.name, StageTimes())
            if stage.state != "Pending" and times.started_ms is None:
                times.started_ms = timestamp
            if stage.state == "Succeeded" and times.succeeded_ms is None:
                times.succeeded_ms = timestamp

    def succeeded(self, modules: Iterable[str]) -> int:
        """Clusters on the target (staged members succeeded), summed over `modules`."""
        return sum(h.latest.succeeded for m in modules if (h := self.modules.get(m)) and h.latest is not None)

    def complete(self, modules: Iterable[str]) -> int:
        return sum(1 for m in modules if m in self.modules and self.modules[m].complete_ms is not None)

    def describe(self, module: str) -> str:
        history = self.modules.get(module)
        if history is None or history.latest is None:
            return f"{module}: no status yet"
        status = history.latest
        stage = status.stage(status.current_stage)
        where = f"{stage.name} {stage.counts.succeeded}/{stage.counts.members}" if stage else "-"
        return f"{module} {status.phase}, stage {where}, {status.succeeded}/{status.members} succeeded"


class MetadataProbe:
    """A metadata request naming no topic every `interval` s, each timed (a failure or a
    wait past `timeout` counts as `timeout`): how responsive the broker stays."""

    def __init__(self, bootstrap: str, interval: float = 0.5, timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.interval = interval
        self.timeout = timeout
        self.latencies: list[float] = []
        self.failures = 0

    async def run(self) -> None:
        client = AIOKafkaClient(
            bootstrap_servers=self.bootstrap, client_id="fleet-bench-probe", **kafka_client_options()
        )
        await client.bootstrap()
        try:
            while True:
                started = time.perf_counter()
                try:
                    node = client.get_random_node()
                    await asyncio.wait_for(client.send(node, MetadataRequest(topics=[])), self.timeout)
                    self.latencies.append(time.perf_counter() - started)
                except Exception:  # any failure is the broker not answering in time
                    self.failures += 1
                    self.latencies.append(max(time.perf_counter() - started, self.timeout))
                await asyncio.sleep(self.interval)
        finally:
            await client.close()


class Sampler:
    """Every 0.5 s each worker's RSS (peaks kept: the largest, and per worker); every
    `every` s a progress line: the modules Complete, the slowest one, and each process's CPU
    share of the interval."""

    def __init__(self, clock: CpuClock, workers: Callable[[], list[Process]], every: float = 5.0) -> None:
        self.clock = clock
        self.workers = workers
        self.every = every
        self.rss_peak = 0
        self.peaks: dict[str, int] = {}  # per worker (its name)
        self.progress: Callable[[], str] | None = None  # set while a rollout is followed
        self.started = time.monotonic()

    async def run(self) -> None:
        last = self.clock.read()
        next_line = time.monotonic() + self.every
        while True:
            await asyncio.sleep(0.5)
            for worker in self.workers():
                with contextlib.suppress(OSError):
                    rss = rss_bytes(worker.pid)
                    self.peaks[worker.name] = max(self.peaks.get(worker.name, 0), rss)
                    self.rss_peak = max(self.rss_peak, rss)
            if time.monotonic() >= next_line:
                now = self.clock.read()
                if self.progress is not None:
                    wall = now[0] - last[0]
                    shares = ", ".join(
                        f"{name} {(now[1][name] - cpu) / wall * 100:.0f}%" for name, cpu in last[1].items()
                    )
                    rss = []
                    for worker in self.workers():
                        with contextlib.suppress(OSError):
                            rss.append(f"{rss_bytes(worker.pid) / 2**20:.0f}")
                    print(f"  [{time.monotonic() - self.started:6.0f} s] {self.progress()}; CPU {shares}; "
                          f"worker RSS {' + '.join(rss)} MiB; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
                last = now
                next_line += self.every


@contextlib.asynccontextmanager
async def running(*tasks: Any) -> Any:
    started = [asyncio.create_task(t.run()) for t in tasks]
    try:
        yield
    finally:
        for task in started:
            task.cancel()
        for task in started:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# -- reading topics -------------------------------------------------------------------------


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **kafka_client_options())
    await consumer.start()
    try:
        consumer._client.add_topic(topic)  # partitions_for_topic knows only the topics the client tracks
        await consumer._client.force_metadata_update()
        partitions = consumer.partitions_for_topic(topic) or set(range(PARTITIONS))
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def read_range(
    bootstrap: str, topic: str, start: dict[int, int] | None, end: dict[int, int], each: Callable[[Any], None]
) -> None:
    """Every record of `topic` from `start` (None: the beginning) up to `end` (read_committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **kafka_client_options(),
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in end if end[p] > (start or {}).get(p, 0)]
        if not tps:
            return
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, (start or {}).get(tp.partition, 0))
        while tps:
            batch = await consumer.getmany(timeout_ms=500, max_records=20000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset < end[tp.partition]:
                        each(record)
            done = []
            for tp in tps:  # a transaction marker may be the last offset: position, not records
                if await consumer.position(tp) >= end[tp.partition]:
                    done.append(tp)
            for tp in done:
                tps.remove(tp)
    finally:
        await consumer.stop()


async def applied_at(bootstrap: str, names: TopicNames) -> dict[str, int]:
    """Each module's first ModuleApplied record timestamp (ms) on the intents topic."""
    found: dict[str, int] = {}

    def each(record: Any) -> None:
        event = json.loads(record.value)
        if event.get("type") == "ModuleApplied":
            found.setdefault(event["module"]["metadata"]["name"], record.timestamp)

    await read_range(bootstrap, names.intents, None, await end_offsets(bootstrap, names.intents), each)
    return found


@dataclass
class DecisionLatency:
    """Seconds, one entry per (module, cluster) with all three records."""

    report_to_decision: list[float] = field(default_factory=list)
    report_to_journal: list[float] = field(default_factory=list)  # the applier's send → the router's write
    journal_to_decision: list[float] = field(default_factory=list)  # the decider's part


async def decision_latencies(bootstrap: str, names: TopicNames, modules: set[str]) -> DecisionLatency:
    """For each (module, cluster): its first `succeeded` SyncStatusReported on sync-status
    (the applier's record), the same event (by id) routed into the journal, and the first
    `succeeded` decision for it; record timestamps."""
    reports: dict[tuple[str, str], tuple[str, int]] = {}  # → (event id, timestamp ms)
    routed: dict[str, int] = {}  # event id → journal record timestamp (ms)
    decisions: dict[tuple[str, str], int] = {}

    def report(record: Any) -> None:
        event = json.loads(record.value)
        if event.get("type") == "SyncStatusReported" and event.get("state") == "succeeded":
            if event["module"] in modules:
                reports.setdefault((event["module"], event["cluster"]), (event["id"], record.timestamp))

    def journal(record: Any) -> None:
        if record.value is not None and b'"SyncStatusReported"' in record.value:
            routed.setdefault(json.loads(record.value)["id"], record.timestamp)

    def decision(record: Any) -> None:
        document = DecisionDocument.read(record.value)
        if document.action == "succeeded" and document.cluster is not None and document.module in modules:
            decisions.setdefault((document.module, document.cluster), record.timestamp)

    for topic, each in ((names.status, report), (names.journal, journal), (names.decisions, decision)):
        await read_range(bootstrap, topic, None, await end_offsets(bootstrap, topic), each)
    found = DecisionLatency()
    for key, (event_id, reported) in reports.items():
        if key in decisions and event_id in routed:
            found.report_to_decision.append((decisions[key] - reported) / 1000)
            found.report_to_journal.append((routed[event_id] - reported) / 1000)
            found.journal_to_decision.append((decisions[key] - routed[event_id]) / 1000)
    return found


@dataclass
class Growth:
    records: int = 0
    bytes: int = 0


async def growth(bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int]) -> Growth:
    seen = Growth()

    def each(record: Any) -> None:
        seen.records += 1
        seen.bytes += len(record.key or b"") + len(record.value or b"")

    await read_range(bootstrap, topic, start, end, each)
    return seen


def broker_pid(bootstrap: str) -> int | None:
    """The pid of the process listening on the bootstrap port on this machine, if any. Not
    "the first `kafka.Kafka` process": the tests start brokers of their own meanwhile."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                for fd in (entry / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd) in inodes:
                            return int(entry.name)
    return None


def broker_log_dir(pid: int | None) -> Path | None:
    """The local broker's log directory (its `-Dkafka.logs.dir` + kraft-logs), if local."""
    if pid is None:
        return None
    for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
        if arg.startswith(b"-Dkafka.logs.dir="):
            path = Path(arg.split(b"=", 1)[1].decode()) / "kraft-logs"
            return path if path.is_dir() else None
    return None


def segment_bytes(log_dir: Path | None, topic: str) -> int | None:
    if log_dir is None:
        return None
    total = 0
    for partition in log_dir.glob(f"{topic}-*"):
        for segment in partition.glob("*.log"):
            with contextlib.suppress(OSError):
                total += segment.stat().st_size
    return total


# -- logs -----------------------------------------------------------------------------------


def warnings_in(text: str, pattern: str) -> int:
    """Lines matching `pattern`, a "(N similar suppressed)" tail counting N more."""
    count = 0
    for line in text.splitlines():
        if pattern in line:
            count += 1
            suppressed = re.search(r"\((\d+) similar suppressed\)", line)
            if suppressed:
                count += int(suppressed.group(1))
    return count


def take_overs(text: str) -> dict[str, list[float]]:
    """Per stage, the "taken over in … s" of each partition."""
    found: dict[str, list[float]] = {}
    for stage, seconds in re.findall(r"(\w+) \S+: state restored \(\d+ records, taken over in ([\d.]+) s\)", text):
        found.setdefault(stage, []).append(float(seconds))
    return found


def logged_at(text: str, needle: str | None = None) -> float | None:
    """The timestamp (seconds since the epoch) of the first log line of `text` containing
    `needle` (None: the first line) — when the line was written, not when it was looked for."""
    for line in text.splitlines():
        if (needle is None or needle in line) and (stamp := re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line)):
            return datetime.strptime(stamp.group(0), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def spread(values: list[float], unit: str = "s", ps: tuple[int, ...] = (50, 90)) -> str:
    if not values:
        return "n/a"
    parts = [f"p{p} {percentile(values, p):.2f} {unit}" for p in ps]
    return ", ".join(parts) + f", max {max(values):.2f} {unit} (n = {len(values)})"


# -- one run --------------------------------------------------------------------------------


@dataclass
class Options:
    appliers: int
    idle_s: float
    tick_s: float
    lease_s: float
    restart: bool
    keep: Path | None
    rollout_timeout_s: float
    ready_timeout_s: float = 300
    workers: int = 1  # worker processes sharing the partitions (one consumer group per stage)
    split_stages: str = ""  # worker processes by their stages, e.g. "route/decide,assemble" (`--split-stages`)
    static_membership: bool = False  # each worker started with --instance-id (the same after the restart)
    # the modules that do not roll out applied first, and joined, before the measured ones are
    installed_first: bool = False
    pause: str | None = None  # "broker" or "worker": SIGSTOPped once, mid-rollout (`--pause`)
    pause_during: str = "wave-2"  # the stage of the first measured module it is paused in
    pause_after: int = 1  # ... once that many of the stage's members succeeded
    pause_seconds: float = 60.0  # ... for this long (past the worker's 45 s session timeout: its groups expire)
    keep_topics: bool = False  # the fleet's topics left on the broker at the end (`benchmarks/restart.py`)


@dataclass
class Run:
    metrics: dict[str, float] = field(default_factory=dict)


async def install_held(
    status: StatusFollower, env: dict[str, str], workdir: Path, held: list[str], sampler: Sampler, run: Run
) -> None:
    """Apply the modules that do not roll out and wait until every one has joined the fleet
    (its canary waits for its approval: every cluster was considered), so the measured rollout
    runs on a fleet where they are installed, as a new module or version would in production."""

    def joined() -> int:
        return sum(
            1
            for m in held
            if (h := status.modules.get(m)) and h.latest is not None
            and any(stage.state == "AwaitingApproval" for stage in h.latest.stages)
        )  # fmt: skip

    sampler.progress = lambda: f"{joined()}/{len(held)} modules installed (joined the fleet)"
    started = time.perf_counter()
    wall, code = await run_cli(["apply", "--timeout", "5m", "-f", str(workdir / "modules-held.yaml")], env,
                               workdir / "apply-held.log")  # fmt: skip
    if code:
        raise RuntimeError(f"rollout apply failed: {(workdir / 'apply-held.log').read_text()[-2000:]}")
    while joined() < len(held):
        await asyncio.sleep(0.5)
    run.metrics["install_held_s"] = time.perf_counter() - started
    print(f"  apply {len(held)} module(s) that do not roll out: {wall:.2f} s (exit 0); every one joined the fleet "
          f"{run.metrics['install_held_s']:.1f} s after the apply began", flush=True)  # fmt: skip


async def fleet_run(bootstrap: str, clusters: int, modules: int, rolled: int, options: Options) -> Run:
    prefix = f"fleet-{uuid.uuid4().hex[:6]}."
    names = TopicNames(prefix)
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    if options.keep is not None:
        options.keep.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="fleet-", dir=options.keep))
    print(f"broker {bootstrap}, {clusters} clusters, {modules} module(s) ({rolled} rolled out), "
          f"{options.appliers} appliers, topic prefix {prefix}, files in {workdir}", flush=True)  # fmt: skip
    run = Run()
    processes: list[Process] = []
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)  # cleaned up as on Ctrl-C
    try:
        t0 = time.perf_counter()
        cluster_files, module_file = write_manifests(workdir, clusters, modules, rolled)
        print(f"  manifests written: {len(cluster_files)} cluster files, 1 module file, "
              f"{time.perf_counter() - t0:.2f} s", flush=True)  # fmt: skip
        _, code = await run_cli(["topics", "create", "--partitions", str(PARTITIONS)], env, workdir / "topics.log")
        if code:
            raise RuntimeError(f"rollout topics create failed: {(workdir / 'topics.log').read_text()}")
        await body(bootstrap, names, env, workdir, clusters, modules, rolled, options, cluster_files, module_file,
                   processes, run)  # fmt: skip
    finally:
        for process in processes:
            stop(process)
        if options.keep_topics:
            print(f"  topics kept on the broker: prefix {prefix} (--keep-topics)", flush=True)
        else:
            with contextlib.suppress(Exception):
                await delete_topics(bootstrap, prefix)
        if options.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return run


async def body(
    bootstrap: str,
    names: TopicNames,
    env: dict[str, str],
    workdir: Path,
    clusters: int,
    modules: int,
    rolled: int,
    options: Options,
    cluster_files: list[Path],
    module_file: Path,
    processes: list[Process],
    run: Run,
) -> None:
    workers = start_workers(env, workdir, options, "worker")
    processes.extend(workers)
    current = {"workers": workers}
    group = ["--group-id", f"{names.prefix}bench-appliers", "--lease-seconds", str(options.lease_s)]
    appliers = [
        spawn(
            f"applier-{i}",
            ["applier", "--sink", f"dir:{workdir / f'sink-{i}'}", "--simulate-status", *group, "--web-port", "0"],
            workdir / f"applier-{i}.log",
            env,
        )
        for i in range(options.appliers)
    ]
    processes.extend(appliers)
    broker = broker_pid(bootstrap)
    print(f"  broker pid {broker} (listening on {bootstrap})", flush=True)
    clock = CpuClock(
        lambda: {
            "worker": [w.pid for w in current["workers"]],
            "broker": [broker] if broker else [],
            "appliers": [a.pid for a in appliers],
            "benchmark": [os.getpid()],
        }
    )
    probe = MetadataProbe(bootstrap)
    sampler = Sampler(clock, lambda: current["workers"])
    status = StatusFollower(bootstrap, names)
    whole = clock.read()
    async with running(probe, sampler, status):
        for worker in workers:
            await until_logged(worker, "worker ready:", 120)
        pids = ", ".join(str(w.pid) for w in workers)
        print(f"  {len(workers)} worker(s) ready (pid {pids}), {options.appliers} appliers started", flush=True)

        # 1. the fleet: `rollout apply` of the cluster files, then folded by the decider
        async with following(bootstrap, names, "state") as fold:
            args = ["apply", "--timeout", "10m"]
            for path in cluster_files:
                args += ["-f", str(path)]
            sampler.progress = lambda: f"fleet folded in {len(fold.folded)}/{PARTITIONS * clusters} partition-clusters"
            started = time.perf_counter()
            wall, code = await run_cli(args, env, workdir / "apply-clusters.log")
            print(f"  apply {clusters} clusters ({len(cluster_files)} files): {wall:.2f} s (exit {code})", flush=True)
            if code:
                raise RuntimeError(f"rollout apply failed: {(workdir / 'apply-clusters.log').read_text()[-2000:]}")
            await fold.until(lambda: len(fold.folded) >= PARTITIONS * clusters, "the fleet folded", timeout=3600)
            folded_s = time.perf_counter() - started
            run.metrics["apply_clusters_s"] = wall
        folded_rss = {w.name: rss_bytes(w.pid) for w in workers}
        print(f"  fleet folded (every cluster in the decide-state of all {PARTITIONS} partitions): "
              f"{folded_s:.2f} s after the apply began; worker RSS {per_worker(folded_rss)}",
              flush=True)  # fmt: skip

        # 2. the modules: one `rollout apply`, then followed to Complete (with --installed-first:
        # the ones that do not roll out applied before, and followed until each has joined the
        # fleet — its first stage waits for its approval)
        measured = [module_name(m) for m in range(rolled)]
        if options.installed_first and rolled < modules:
            await install_held(status, env, workdir, [module_name(m) for m in range(rolled, modules)], sampler, run)
            module_file = workdir / "modules-rolled.yaml"
            print(f"  installed: {per_worker({w.name: rss_bytes(w.pid) for w in workers})} worker RSS", flush=True)
        sampler.progress = lambda: rollout_progress(status, measured)
        rollout_start = clock.read()
        wall, code = await run_cli(["apply", "--timeout", "5m", "-f", str(module_file)], env,
                                   workdir / "apply-modules.log")  # fmt: skip
        print(f"  apply {len(measured) if options.installed_first else modules} module(s): {wall:.2f} s (exit {code})",
              flush=True)  # fmt: skip
        if code:
            raise RuntimeError(f"rollout apply failed: {(workdir / 'apply-modules.log').read_text()[-2000:]}")
        pausing = asyncio.create_task(pause_mid_rollout(status, measured[0], workers, broker, options))
        try:
            complete = await until_complete(status, measured, workers, options.rollout_timeout_s)
        finally:
            pausing.cancel()
        rollout_end = clock.read()
        sampler.progress = None
        run.metrics["rss_hwm_gib"] = max(rss_bytes(w.pid, "VmHWM") for w in workers) / GIB
        if complete:
            print(f"  {status.describe(measured[0])}", flush=True)
            await report_rollout_times(bootstrap, names, status, measured, run)
        else:
            waiting = [m for m in measured if status.modules.get(m) is None or status.modules[m].complete_ms is None]
            print(f"  NOT Complete after {options.rollout_timeout_s:.0f} s (--rollout-timeout): "
                  f"{len(waiting)} of {len(measured)} modules, e.g. {status.describe(waiting[0])}",
                  flush=True)  # fmt: skip
            done = [m for m in measured if m not in waiting]
            if done:
                await report_rollout_times(bootstrap, names, status, done, run, of=len(measured))
            run.metrics.update(rollout_max_s=float("inf"), rollout_p50_s=float("inf"), rollout_p90_s=float("inf"))
        moved = (max(1, status.succeeded(measured)), "cluster moved")
        print(f"  CPU during the rollout (first module apply → {'last Complete' if complete else 'giving up'}) "
              f"{cpu_between(rollout_start, rollout_end, moved)}", flush=True)  # fmt: skip

        # 3. idle: ticks and heartbeats only
        if options.idle_s > 0 and complete:
            await idle_window(bootstrap, names, clock, options, run)

        # 4. decision latency (read after the idle window: reading loads the broker)
        latency = await decision_latencies(bootstrap, names, set(measured))
        if latency.report_to_decision:
            run.metrics["decision_p99_s"] = percentile(latency.report_to_decision, 99)
        print("  decision latency, a cluster's first succeeded report (sync-status record) → its succeeded decision:\n"
              f"    report → decision  {spread(latency.report_to_decision, ps=(50, 90, 99))}\n"
              f"    report → journal   {spread(latency.report_to_journal, ps=(50, 90, 99))}  (applier → router)\n"
              f"    journal → decision {spread(latency.journal_to_decision, ps=(50, 90, 99))}  (the decider)",
              flush=True)  # fmt: skip

        for worker in workers:
            print(f"  {worker.name}'s batches by stage (its /metrics): {stage_batches(web_port(worker))}", flush=True)

        # 5. restart-to-ready
        hwm = {w.name: rss_bytes(w.pid, "VmHWM") for w in workers}
        run.metrics["rss_hwm_gib"] = max(run.metrics["rss_hwm_gib"], max(hwm.values()) / GIB)
        run.metrics["rss_peak_gib"] = max(sampler.rss_peak / GIB, run.metrics["rss_hwm_gib"])
        targets = clusters * modules
        per_target = (sum(hwm.values()) - sum(folded_rss.values())) / targets
        print(f"  worker RSS: peak sampled {per_worker(sampler.peaks)}, VmHWM {per_worker(hwm)}; above the folded "
              f"fleet's: {per_target / 1024:.1f} KiB per target, all workers together ({targets} = {clusters} "
              f"clusters x {modules} modules)", flush=True)  # fmt: skip
        if len(workers) > 1:
            print(f"  partitions per worker (decide, held at the end): {partitions_held(workers)}", flush=True)
        worker_logs = [w.text() for w in workers]
        if options.restart:
            for worker in workers:
                clock.retire("worker", worker.pid)
            restarted = await restart(env, workdir, workers, options, run)
            processes.extend(restarted)
            current["workers"] = restarted
            worker_logs.extend(w.text() for w in restarted)
        end = clock.read()

    print(f"  CPU over the whole run {cpu_between(whole, end)}")
    latencies_s = probe.latencies
    print(f"  broker metadata probe every 0.5 s: {len(latencies_s)} requests, p99 "
          f"{percentile(latencies_s, 99) * 1000:.0f} ms, max {max(latencies_s) * 1000:.0f} ms, "
          f"{probe.failures} failed or over 10 s" if latencies_s else "  broker probe: no answers")  # fmt: skip
    not_enough = sum(warnings_in(text, "NotEnoughReplicas") for text in worker_logs)
    unreachable = sum(warnings_in(a.text(), "not reachable") for a in appliers)
    print(f"  warnings: NotEnoughReplicas in the worker's log {not_enough}; "
          f"'not reachable' in the appliers' logs {unreachable}", flush=True)  # fmt: skip
    assigned = [a.text().count("Setting newly assigned partitions") for a in appliers]
    expelled = sum(warnings_in(a.text(), "member_id was not recognized") for a in appliers)
    print(f"  applier group: partitions assigned {'+'.join(map(str, assigned))} times (one each when calm), "
          f"{expelled} 'member_id was not recognized' (a session expired: no heartbeat for 10 s)",
          flush=True)  # fmt: skip
    run.metrics["probe_max_s"] = max(latencies_s) if latencies_s else float("nan")


async def pause_mid_rollout(
    status: StatusFollower, module: str, workers: list[Process], broker: int | None, options: Options
) -> None:
    """`--pause`: once `options.pause_during` of `module` has `pause_after` members succeeded,
    SIGSTOP the broker (or the workers) for `pause_seconds`, then SIGCONT, and print
    the progress and the worker RSS right after and every 15 s for a minute. A paused worker
    past its session timeout (45 s) is expelled from its groups and takes its own partitions
    back once it runs again — what a worker whose event loop was blocked that long meets (issue
    22: a 100,000-cluster wave-2); a paused broker stops its own clocks too, so its groups
    mostly survive, but every request in flight times out."""
    if options.pause is None:
        return
    pids = [broker] if options.pause == "broker" and broker else [w.pid for w in workers]
    if not pids:
        print("  --pause broker: no local broker pid; not paused", flush=True)
        return
    while True:
        history = status.modules.get(module)
        stage = history.latest.stage(options.pause_during) if history and history.latest else None
        if stage is not None and stage.counts.succeeded >= options.pause_after:
            break
        await asyncio.sleep(0.1)
    before = status.describe(module)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    print(f"  PAUSED the {options.pause} (SIGSTOP {', '.join(map(str, pids))}) for {options.pause_seconds:.0f} s "
          f"at: {before}", flush=True)  # fmt: skip
    try:
        await asyncio.sleep(options.pause_seconds)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    print(f"  RESUMED the {options.pause} (SIGCONT)", flush=True)
    for _ in range(5):
        rss = " + ".join(f"{rss_bytes(w.pid) / 2**20:.0f}" for w in workers if w.popen.poll() is None)
        print(f"  [{time.monotonic() - resumed:4.0f} s after the pause] {status.describe(module)}; "
              f"worker RSS {rss} MiB", flush=True)  # fmt: skip
        await asyncio.sleep(15)


async def until_complete(status: StatusFollower, measured: list[str], workers: list[Process], timeout: float) -> bool:
    """Until every measured module is Complete (True) or `timeout` s passed (False)."""
    deadline = time.monotonic() + timeout
    while status.complete(measured) < len(measured):
        if time.monotonic() > deadline:
            return False
        for worker in workers:
            if worker.popen.poll() is not None:
                raise RuntimeError(f"{worker.name} exited: {worker.text()[-3000:]}")
        await asyncio.sleep(0.2)
    return True


def rollout_progress(status: StatusFollower, measured: list[str]) -> str:
    stalled = status.stalled_s()
    line = f"{status.complete(measured)}/{len(measured)} Complete; {status.describe(slowest(status, measured))}"
    if len(measured) > 1:
        moved = status.succeeded(measured)
        members = sum(h.latest.members for m in measured if (h := status.modules.get(m)) and h.latest is not None)
        line += f"; all modules: {moved}/{members} succeeded"
    return line + (f" (no module moved for {stalled:.0f} s)" if stalled > 15 else "")


def slowest(status: StatusFollower, modules: list[str]) -> str:
    """The module not Complete yet with the fewest clusters succeeded (else the first)."""
    waiting = [m for m in modules if status.modules.get(m) is None or status.modules[m].complete_ms is None]
    if not waiting:
        return modules[0]

    def done(module: str) -> int:
        history = status.modules.get(module)
        return history.latest.succeeded if history is not None and history.latest is not None else -1

    return min(waiting, key=done)


async def report_rollout_times(
    bootstrap: str, names: TopicNames, status: StatusFollower, measured: list[str], run: Run, of: int = 0
) -> None:
    """Applied → Complete and each stage's time over `measured` (every one Complete; `of`:
    how many were rolled out, when only some are)."""
    applied = await applied_at(bootstrap, names)
    totals = []
    stages: dict[str, list[float]] = {}
    first_stage: list[float] = []
    for module in measured:
        history = status.modules[module]
        assert history.complete_ms is not None
        totals.append((history.complete_ms - applied[module]) / 1000)
        for name, times in history.stages.items():
            if times.started_ms is not None and times.succeeded_ms is not None:
                stages.setdefault(name, []).append((times.succeeded_ms - times.started_ms) / 1000)
        start = min((t.started_ms for t in history.stages.values() if t.started_ms is not None), default=None)
        if start is not None:
            first_stage.append((start - applied[module]) / 1000)
    run.metrics["rollout_max_s"] = max(totals)
    run.metrics["rollout_p50_s"] = percentile(totals, 50)
    run.metrics["rollout_p90_s"] = percentile(totals, 90)
    which = f" (the {len(measured)} of {of} that are)" if of > len(measured) else ""
    print(f"  rollout, module applied → Complete{which} (record timestamps): {spread(totals)}")
    print(f"    applied → first stage started: {spread(first_stage)}")
    for name, seconds in stages.items():
        print(f"    stage {name:<8} started → succeeded: {spread(seconds)}")
    print(flush=True)


async def idle_window(bootstrap: str, names: TopicNames, clock: CpuClock, options: Options, run: Run) -> None:
    topics = {"journal": names.journal, "decide-state": names.name("decide_state")}
    log_dir = broker_log_dir(broker_pid(bootstrap))
    before = {role: await end_offsets(bootstrap, topic) for role, topic in topics.items()}
    disk_before = {role: segment_bytes(log_dir, topic) for role, topic in topics.items()}
    cpu_before = clock.read()
    print(f"  idle window: {options.idle_s:.0f} s with ticks every {options.tick_s:g} s and leases of "
          f"{options.lease_s:g} s (a heartbeat every third) ...", flush=True)  # fmt: skip
    await asyncio.sleep(options.idle_s)
    cpu_after = clock.read()
    after = {role: await end_offsets(bootstrap, topic) for role, topic in topics.items()}
    disk_after = {role: segment_bytes(log_dir, topic) for role, topic in topics.items()}
    per_hour = 3600 / options.idle_s
    print(f"  idle, extrapolated from the {options.idle_s:.0f} s window to one hour (x{per_hour:.0f}):")
    for role, topic in topics.items():
        grown = await growth(bootstrap, topic, before[role], after[role])
        offsets = sum(after[role].values()) - sum(before[role].values())
        disk = ""
        if disk_before[role] is not None and disk_after[role] is not None:
            disk = f", segment files {(disk_after[role] - disk_before[role]) * per_hour / 2**20:.1f} MiB/h"  # type: ignore[operator]
        print(f"    {role:<12} {grown.records * per_hour:10.0f} records/h, {grown.bytes * per_hour / 2**20:8.1f} MiB/h "
              f"(key+value; window: {grown.records} records, {grown.bytes} bytes, {offsets} offsets "
              f"incl. transaction markers{disk})", flush=True)  # fmt: skip
        run.metrics[f"idle_{role}_records_h"] = grown.records * per_hour
    print(f"  CPU while idle {cpu_between(cpu_before, cpu_after)}", flush=True)


def start_workers(env: dict[str, str], workdir: Path, options: Options, log_name: str) -> list[Process]:
    """`options.workers` worker processes (one: "worker", else "worker-0", …), each with its
    own web port; the partitions are spread over them by each stage's consumer group."""

    def instance(i: int) -> str | None:
        return f"fleet-worker-{i}" if options.static_membership else None

    if options.split_stages:  # `rollout worker --stages`: e.g. the router on a core of its own
        return [
            start_worker(env, workdir / f"{log_name}-{stages.split(',')[0]}.log", free_port(), options.tick_s,
                         name=f"worker-{stages.split(',')[0]}", instance_id=instance(i), stages=stages)
            for i, stages in enumerate(options.split_stages.split("/"))
        ]  # fmt: skip
    if options.workers == 1:
        return [start_worker(env, workdir / f"{log_name}.log", free_port(), options.tick_s, instance_id=instance(0))]
    return [
        start_worker(
            env,
            workdir / f"{log_name}-{i}.log",
            free_port(),
            options.tick_s,
            name=f"worker-{i}",
            instance_id=instance(i),
        )
        for i in range(options.workers)
    ]


def per_worker(values: dict[str, int]) -> str:
    """Bytes per worker as "worker-0 812 MiB, worker-1 790 MiB" (one worker: "812 MiB")."""
    if len(values) == 1:
        return f"{next(iter(values.values())) / 2**20:.0f} MiB"
    return ", ".join(f"{name} {value / 2**20:.0f} MiB" for name, value in sorted(values.items()))


def web_port(process: Process) -> int:
    arguments = process.popen.args
    assert isinstance(arguments, list)
    return int(arguments[arguments.index("--web-port") + 1])


def stage_batches(port: int) -> str:
    """Per stage, from the worker's histograms (streams/slots.py): transactions, input records
    folded in each (mean), how long a fold held the event loop and a transaction took (mean,
    p99 as the bucket bound it falls under) — or why they are not there (an older worker)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError as error:
        return f"not read ({error})"
    series: dict[tuple[str, str], dict[str, Any]] = {}
    pattern = r"^rollout_(batch_records|fold_seconds|transaction_seconds)_(bucket|sum|count)\{([^}]*)\} (\S+)$"
    for name, part, labels, value in re.findall(pattern, text, re.MULTILINE):
        stage = re.search(r'stage="([^"]*)"', labels)
        entry = series.setdefault((name, stage.group(1) if stage else ""), {"buckets": []})
        if part == "bucket":
            entry["buckets"].append((float(re.search(r'le="([^"]*)"', labels).group(1)), float(value)))  # type: ignore[union-attr]
        else:
            entry[part] = float(value)
    if not series:
        return "none (this worker has no batch histograms)"

    def p99(entry: dict[str, Any]) -> float:
        count = entry.get("count", 0.0)
        return next((bound for bound, seen in sorted(entry["buckets"]) if seen >= 0.99 * count), float("inf"))

    parts = []
    for stage in sorted({stage for _, stage in series}):
        records, fold, transaction = (series.get((name, stage), {"buckets": []}) for name in
                                      ("batch_records", "fold_seconds", "transaction_seconds"))  # fmt: skip
        count = max(transaction.get("count", 0.0), 1.0)
        each = records.get("sum", 0) / max(records.get("count", 0), 1)
        fold_ms = 1000 * fold.get("sum", 0) / max(fold.get("count", 0), 1)
        parts.append(
            f"{stage} {transaction.get('count', 0):.0f} transactions, {each:.0f} records each; fold mean "
            f"{fold_ms:.0f} ms, p99 ≤ {p99(fold):g} s; transaction mean "
            f"{1000 * transaction.get('sum', 0) / count:.0f} ms, p99 ≤ {p99(transaction):g} s"
        )
    return "; ".join(parts)


def partitions_held(workers: list[Process]) -> str:
    """Per worker, the decide partitions it holds at the end, and the state records each
    folded when that worker last restored it from the state topic.

    Read from every worker's log in time order (the lines' own timestamps): a partition is
    held by whoever was assigned it last and has not had it revoked since. (It read the logs
    one worker after the other and kept the last take-over found, so the second worker's
    take-overs won whatever their time: with two workers started together, the first to
    join takes all four partitions, the second takes half of them a few seconds later, and
    the first takes its half back — printed as the second worker holding all four, each with
    "0 records", the fold of a partition taken back with its state kept.)"""
    return describe_partitions_held({worker.name: worker.text() for worker in workers})


_DECIDE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+\s+rollout\.delivery: decide"
    r"(?::\s+(?P<change>assigned|revoked) (?P<partitions>.*)"
    r"| \S+?-(?P<partition>\d+): state restored \((?P<records>\d+) records)",
    re.MULTILINE,
)


def describe_partitions_held(logs: dict[str, str]) -> str:
    """`partitions_held` on the workers' log texts (by worker name)."""
    events: list[tuple[str, int, str, re.Match[str]]] = []
    for order, (name, text) in enumerate(sorted(logs.items())):
        events.extend((match.group(1), order, name, match) for match in _DECIDE_LINE.finditer(text))
    owner: dict[int, str] = {}
    restored: dict[tuple[str, int], int] = {}  # (worker, partition) -> records of its last fold that read any
    for _, _, name, match in sorted(events, key=lambda event: event[:2]):
        if match.group("partition") is not None:
            records = int(match.group("records"))
            key = (name, int(match.group("partition")))
            if records or key not in restored:
                restored[key] = records
            continue
        partitions = [int(number) for number in re.findall(r"-(\d+)(?:,|$)", match.group("partitions").strip())]
        for partition in partitions:
            if match.group("change") == "assigned":
                owner[partition] = name
            elif owner.get(partition) == name:
                del owner[partition]
    held: dict[str, list[str]] = {}
    for partition, name in sorted(owner.items()):
        held.setdefault(name, []).append(f"{partition} ({restored.get((name, partition), 0)} records restored)")
    return "; ".join(f"{name}: {', '.join(parts)}" for name, parts in sorted(held.items())) or "none"


async def restart(
    env: dict[str, str], workdir: Path, workers: list[Process], options: Options, run: Run
) -> list[Process]:
    """Every worker SIGKILLed, then as many started again: each one's seconds to /readyz 200,
    its take-overs and its RSS once ready; the slowest is the restart-to-ready."""
    for worker in workers:
        worker.popen.send_signal(signal.SIGKILL)
    for worker in workers:
        worker.popen.wait()
    started = time.time()
    restarted = start_workers(env, workdir, options, "worker-restarted")
    ready: dict[str, float] = {}
    deadline = time.monotonic() + options.ready_timeout_s
    while len(ready) < len(restarted) and time.monotonic() < deadline:
        for worker in restarted:
            if worker.name in ready:
                continue
            if worker.popen.poll() is not None:
                raise RuntimeError(f"the restarted {worker.name} exited: {worker.text()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{web_port(worker)}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        ready[worker.name] = time.time() - started
        await asyncio.sleep(0.1)
    if len(ready) < len(restarted):
        for worker in restarted:
            if worker.name not in ready:
                errors = [line for line in worker.text().splitlines() if " ERROR " in line][:3]
                print(f"  restart: {worker.name}: /readyz not 200 within {options.ready_timeout_s:.0f} s; "
                      f"its first errors: {errors}", flush=True)  # fmt: skip
        return restarted
    run.metrics["restart_ready_s"] = max(ready.values())
    for worker in restarted:
        await until_logged(worker, "worker ready:", 60)
        text = worker.text()
        first, logged = logged_at(text), logged_at(text, "worker ready:")
        taken = take_overs(text)
        overs = "; ".join(f"{stage} max {max(s):.2f} s, sum {sum(s):.2f} s over {len(s)} partitions"
                          for stage, s in taken.items())  # fmt: skip
        rss = rss_bytes(worker.pid)
        # the log's own timestamps (when the line was written): the time the benchmark saw a
        # line is only when it looked — after /readyz answered, which a held event loop delays
        print(f"  restart ({worker.name}): SIGKILL, started again: /readyz 200 after {ready[worker.name]:.2f} s "
              f"(first log line after {(first or started) - started:.2f} s, 'worker ready:' logged after "
              f"{(logged or started) - started:.2f} s); taken over: {overs}; "
              f"RSS once ready {rss / 2**20:.0f} MiB", flush=True)  # fmt: skip
    if len(restarted) > 1:
        print(f"  partitions per worker after the restart: {partitions_held(restarted)}", flush=True)
    return restarted


# -- main -----------------------------------------------------------------------------------


def print_targets(scenario: Scenario, run: Run) -> None:
    for target in scenario.targets:
        value = run.metrics.get(target.metric)
        if value is None:
            print(f"  target {target.what} ≤ {target.limit:g} {target.unit}: not measured")
            continue
        if value == float("inf"):
            print(f"  target {target.what} ≤ {target.limit:g} {target.unit}: not Complete — NOT met")
            continue
        verdict = "met" if value <= target.limit else "NOT met"
        print(f"  target {target.what} ≤ {target.limit:g} {target.unit}: {value:.2f} {target.unit} — {verdict}")


def memory_allows(clusters: int, modules: int) -> bool:
    """Whether the worker's estimated peak (TARGET_BYTES a target) fits in 80 % of the
    memory available now; if not, say so. The machine is shared: an OOM kill may hit anyone."""
    needed = clusters * modules * TARGET_BYTES
    available = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemAvailable:")
    )
    if needed <= 0.8 * available:
        return True
    print(f"skipped: {clusters} clusters x {modules} modules: the worker would need ~{needed / GIB:.1f} GiB "
          f"({TARGET_BYTES // 1024} KiB a target), {available / GIB:.1f} GiB available (--force runs it)",
          flush=True)  # fmt: skip
    return False


def main() -> None:
    global PARTITIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="a named scenario, with its targets")
    parser.add_argument(
        "--clusters", help="fleet sizes of a grid, e.g. 1000,10000,100000 (or a scenario's, overridden)"
    )
    parser.add_argument("--modules", help="modules of a grid, e.g. 1,20,100 (or a scenario's, overridden)")
    parser.add_argument("--rolled", type=int, help="how many of the modules roll out (default: all; large: 1)")
    parser.add_argument("--appliers", type=int, default=2)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes sharing the partitions (their groups spread them)"
    )
    parser.add_argument(
        "--split-stages",
        nargs="?",
        const="route/decide,assemble",
        default="",
        help="a worker process per group of stages, e.g. route/decide,assemble (the default) or route/decide/assemble "
        "(`rollout worker --stages`; instead of --workers)",
    )
    parser.add_argument(
        "--static-membership",
        action="store_true",
        help="start each worker with --instance-id (the same after the restart: it takes its partitions "
        "back without waiting for the dead member's session)",
    )
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions of every topic")
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--tick-interval", type=float, default=10.0)
    parser.add_argument("--lease-seconds", type=float, default=60.0)
    parser.add_argument(
        "--rollout-timeout", type=float, default=900, help="seconds to wait for Complete before reporting what stands"
    )
    parser.add_argument("--force", action="store_true", help="run even where the worker would outgrow the memory")
    parser.add_argument(
        "--installed-first",
        action="store_true",
        help="apply the modules that do not roll out first and wait until they joined the fleet, then the measured "
        "ones: a rollout on a fleet where the others are installed (without: all modules in one apply)",
    )
    parser.add_argument("--no-restart", action="store_true", help="skip the worker's kill and restart")
    parser.add_argument(
        "--pause",
        choices=("broker", "worker"),
        help="SIGSTOP the local broker (or the workers) once mid-rollout, then SIGCONT (see --pause-during)",
    )
    parser.add_argument("--pause-during", default="wave-2", help="the stage of the first module to pause in")
    parser.add_argument("--pause-after", type=int, default=1, help="... once this many of its members succeeded")
    parser.add_argument("--pause-seconds", type=float, default=60.0, help="... for this long")
    parser.add_argument("--keep", type=Path, help="keep the manifests, logs and sinks under this directory")
    parser.add_argument(
        "--keep-topics",
        action="store_true",
        help="leave the fleet's topics on the broker at the end (their prefix is printed), e.g. for "
        "benchmarks/restart.py",
    )
    parser.add_argument(
        "--from-commit",
        metavar="REV",
        help="run the rollout processes from `git archive REV` (a shared working tree that others edit "
        "meanwhile: HEAD) instead of the working tree",
    )
    args = parser.parse_args()
    if args.scenario is None and not args.clusters:
        parser.error("give --scenario NAME or --clusters (and --modules)")
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        sys.exit("no broker: run `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    options = Options(args.appliers, args.idle_seconds, args.tick_interval, args.lease_seconds, not args.no_restart,
                      args.keep, args.rollout_timeout, workers=args.workers, split_stages=args.split_stages,
                      static_membership=args.static_membership, installed_first=args.installed_first,
                      pause=args.pause, pause_during=args.pause_during, pause_after=args.pause_after,
                      pause_seconds=args.pause_seconds, keep_topics=args.keep_topics)  # fmt: skip
    PARTITIONS = args.partitions
    scenario = SCENARIOS[args.scenario] if args.scenario else Scenario("grid", 0, 1)
    sizes = [int(c) for c in args.clusters.split(",")] if args.clusters else [scenario.clusters]
    counts = [int(m) for m in args.modules.split(",")] if args.modules else [scenario.modules]
    runs = [(scenario, c, m) for c in sizes for m in counts]  # a scenario's sizes overridden: its targets still shown
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {os.cpu_count()} cores; load average before "
          f"the run (above the core count: others compete): " + " ".join(f"{x:.2f}" for x in os.getloadavg()),
          flush=True)  # fmt: skip
    if args.from_commit:
        export = Path(tempfile.mkdtemp(prefix="fleet-src-"))
        archive = subprocess.run(["git", "archive", args.from_commit], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
        revision = subprocess.run(["git", "rev-parse", "--short", args.from_commit], cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout.strip()  # fmt: skip
        SOURCE["dir"] = export
        print(f"rollout processes run from commit {revision} (exported to {export})", flush=True)
    else:
        print(f"rollout processes run from the working tree {ROOT}", flush=True)
    try:
        for scenario, clusters, modules in runs:
            if not args.force and not memory_allows(clusters, modules):
                continue
            rolled = args.rolled if args.rolled is not None else (scenario.rolled or modules)
            print(f"scenario {scenario.name}:", flush=True)
            run = asyncio.run(fleet_run(bootstrap, clusters, modules, min(rolled, modules), options))
            print_targets(scenario, run)
            print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    finally:
        if SOURCE["dir"] != ROOT:
            shutil.rmtree(SOURCE["dir"], ignore_errors=True)


if __name__ == "__main__":
    main()
