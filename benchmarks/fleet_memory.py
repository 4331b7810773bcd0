"""A large fleet's decider state, folded and restored in-process: memory and time of
100,000 clusters x 20 modules on the real decider (`DecidePartition`), without a broker.

    .venv/bin/python benchmarks/fleet_memory.py [--clusters 100000] [--modules 20] [--partitions 4]
        [--rollout] [--trace]

What a worker owning `--partitions` journal partitions does with the `large` scenario of
benchmarks/fleet.py, folded as the worker folds it (`process` → `changelog()` →
`commit_batch()`), each phase in a process of its own (clean RSS):

* fold: the fleet, broadcast to every partition in batches of 2,000 cluster events; then
  the modules — each routed to its journal partition by Kafka's default partitioner on its
  name, as the router does, all of a partition's modules in one batch (they are applied from
  one file) — with every continuation the decider sends put back into its journal, as the
  router does, until none is left. Module m-000 rolls out (3 stages, as fleet.py's); the
  others wait for an approval of their canary: every cluster is a pending target of each.
  With `--rollout`, m-000's rollout is then driven to Complete by a `succeeded` report for
  every assignment (the decider's share of the rollout, CPU). Each batch's changelog is
  appended to a file per partition: the decide-state topic, uncompacted.
* restore: a new process takes the partitions over from those files
  (`PartitionState.restore`, as streams/restore.py does with the records it reads), then
  folds one status report per partition (the first reads after a take-over).

Printed: CPU and wall seconds, RSS after the fleet, the peak while the modules are applied
(sampled every 5 ms) and after; the largest batch (records sent, changelog records); state
records and bytes per partition; restore seconds, µs per record, RSS once restored.
`--trace`: where the fold's memory is held (tracemalloc, top lines; slow — use a small fleet).
"""

from __future__ import annotations

import argparse
import gc
import json
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, BinaryIO

from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord
from bench_events import cluster_event, cluster_name
from stage_slices import Sampler, rss_mib

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ModuleApplied, SyncStatusReported
from streams.decider import DecidePartition
from streams.heap import Heap
from streams.outputs import Outputs

CANARY = 10


def ring(i: int, n: int) -> str:
    return "canary" if i < CANARY else "wave-1" if i < CANARY + n // 10 else "wave-2"


def module_name(i: int) -> str:
    return f"m-{i:03d}"


def module_event(i: int) -> bytes:
    held = {} if i == 0 else {"requireApproval": True}
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": module_name(i), "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"env": "prod"}},
                "sync": {
                    "source": {"git": {"url": "https://github.com/stefanprodan/podinfo", "version": {"tag": "6.7.0"}}},
                    "package": {"kustomize": {"path": "./kustomize"}},
                },
                "rollout": {
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 10}
                        | held,
                        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "50%"},
                        {"name": "wave-2", "maxConcurrency": "100%"},
                    ]
                },
            },
        }
    )
    return ModuleApplied(module=manifest).to_bytes()


def partition_of(key: str, partitions: int) -> int:
    """The journal partition the router's producer picks for `key` (murmur2, as Kafka's)."""
    every = list(range(partitions))
    return int(DefaultPartitioner()(key.encode(), every, every))


class Partition:
    """One journal partition: its decider, its offsets, its changelog file."""

    def __init__(self, number: int, names: TopicNames, log: BinaryIO | None) -> None:
        self.decider = DecidePartition(TopicPartition(names.journal, number), names, Metrics())
        self.names = names
        self.offset = 0
        self.log = log
        self.state_records = 0
        self.state_bytes = 0

    def batch(self, values: list[bytes]) -> tuple[Outputs, int]:
        names = self.names
        records = []
        for value in values:
            records.append(ConsumerRecord(names.journal, 0, self.offset, 0, 0, None, value, None, 0, len(value), ()))
            self.offset += 1
        out = Outputs(names.dead_letters)
        written = 0
        while records:  # a batch stops at BATCH_WRITES: the rest is the next transaction's, as in the worker
            folded = self.decider.process(records, self.offset, out)
            records = records[folded:]
            changelog = self.decider.state.changelog()
            written = max(written, len(changelog))
            if self.log is not None:
                for key, value in changelog:
                    raw = b"" if value is None else value
                    self.log.write(struct.pack(">II", len(key), len(raw) if value is not None else 0xFFFFFFFF))
                    self.log.write(key + raw)
                    self.state_records += 1
                    self.state_bytes += len(key) + len(raw)
            self.decider.state.commit_batch()
        return out, written


def continuations(out: Outputs, names: TopicNames) -> list[bytes]:
    return [r.value for r in out.records if r.topic == names.dependencies]


def fold(args: argparse.Namespace) -> dict[str, Any]:
    names = TopicNames("bench.")
    directory = Path(args.directory)
    logs = [(directory / f"decide-state-{p}.bin").open("wb") for p in range(args.partitions)]
    parts = [Partition(p, names, logs[p]) for p in range(args.partitions)]
    if args.trace:
        tracemalloc.start(8)
    started, cpu = time.perf_counter(), time.process_time()
    for first in range(0, args.clusters, 2000):
        events = [
            cluster_event(i, {"env": "prod", "ring": ring(i, args.clusters)}).to_bytes()
            for i in range(first, min(first + 2000, args.clusters))
        ]
        for part in parts:
            part.batch(events)
    Heap().settle()
    fleet = {"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu, "rss": rss_mib()}

    sampler = Sampler()
    sampler.start()
    started, cpu = time.perf_counter(), time.process_time()
    pending: list[list[bytes]] = [[] for _ in parts]
    for m in range(args.modules):
        pending[partition_of(module_name(m), args.partitions)].append(module_event(m))
    largest = {"records": 0, "changelog": 0}
    batches = 0
    while any(pending):
        after: list[list[bytes]] = [[] for _ in parts]
        for number, part in enumerate(parts):
            if not pending[number]:
                continue
            out, changelog = part.batch(pending[number])
            batches += 1
            if len(out.records) > largest["records"]:
                largest = {"records": len(out.records), "changelog": changelog}
            for value in continuations(out, names):  # the router puts them back: by module, its partition
                event = json.loads(value)
                after[partition_of(event["module"], args.partitions)].append(value)
        pending = after
    applied = {"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu}
    sampler.stop()
    Heap().settle()
    applied |= {"peak": sampler.peak, "rss": rss_mib(), "batches": batches} | largest
    if args.trace:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        applied["trace"] = [
            f"{stat.size / 2**20:.1f} MiB in {stat.count} blocks, from:\n      "
            + "\n      ".join(stat.traceback.format(limit=6, most_recent_first=True))
            for stat in snapshot.statistics("traceback")[:12]
        ]
    rollout = drive_rollout(parts, names, args) if args.rollout else None
    for log in logs:
        log.close()
    state = [{"records": p.state_records, "bytes": p.state_bytes} for p in parts]
    return {"fleet": fleet, "applied": applied, "rollout": rollout, "state": state}


def drive_rollout(parts: list[Partition], names: TopicNames, args: argparse.Namespace) -> dict[str, Any]:
    """m-000 to Complete: a `succeeded` report for each assignment, in batches of 2,000."""
    part = parts[partition_of(module_name(0), args.partitions)]
    module = module_name(0)
    started, cpu = time.perf_counter(), time.process_time()
    sampler = Sampler()
    sampler.start()
    reports = 0
    # the clusters moved so far (their assignments sent): the book's index of updating ones
    waiting = sorted(part.decider.engine.book.updating_clusters(module))
    while waiting:
        values = [
            SyncStatusReported(cluster=c, module=module, revision="6.7.0", state="succeeded", generation=1).to_bytes()
            for c in waiting[:2000]
        ]
        reports += len(values)
        out, _ = part.batch(values)
        more = continuations(out, names)
        while more:
            out2, _ = part.batch(more)
            more = continuations(out2, names)
        waiting = sorted(part.decider.engine.book.updating_clusters(module))
    sampler.stop()
    status = part.decider.engine.status_of(module) or {}
    return {
        "wall": time.perf_counter() - started,
        "cpu": time.process_time() - cpu,
        "reports": reports,
        "phase": status.get("phase"),
        "peak": sampler.peak,
    }


def restore(args: argparse.Namespace) -> dict[str, Any]:
    names = TopicNames("bench.")
    gc.collect()
    before = rss_mib()
    parts = [Partition(p, names, None) for p in range(args.partitions)]
    times = []
    records = 0
    read_s = 0.0
    cpu = 0.0
    for number, part in enumerate(parts):
        started = time.perf_counter()
        read = read_changelog(Path(args.directory) / f"decide-state-{number}.bin")
        read_s += time.perf_counter() - started
        started, cpu_started = time.perf_counter(), time.process_time()
        records += part.decider.state.restore(read)
        cpu += time.process_time() - cpu_started
        del read
        times.append(time.perf_counter() - started)
    Heap().settle()
    restored = rss_mib()
    started = time.perf_counter()
    for number, part in enumerate(parts):  # the first reads after a take-over: one report each
        modules = [
            module_name(m) for m in range(args.modules) if partition_of(module_name(m), args.partitions) == number
        ]
        if modules:
            value = SyncStatusReported(
                cluster=cluster_name(args.clusters - 1),
                module=modules[0],
                revision="6.7.0",
                state="succeeded",
                generation=1,
            ).to_bytes()
            part.batch([value])
    first = time.perf_counter() - started
    return {
        "records": records,
        "restore_s": sum(times),
        "restore_cpu_s": cpu,
        "per_partition_s": times,
        "read_s": read_s,
        "rss_before": before,
        "rss": restored,
        "first_report_s": first,
        "rss_after_first": rss_mib(),
    }


def read_changelog(path: Path) -> list[tuple[bytes, bytes | None]]:
    """A changelog file this benchmark wrote: (key, value) records, None a tombstone
    (lengths as two big-endian u32, 0xFFFFFFFF for no value)."""
    raw = path.read_bytes()
    records: list[tuple[bytes, bytes | None]] = []
    at = 0
    while at < len(raw):
        klen, vlen = struct.unpack_from(">II", raw, at)
        at += 8
        key = raw[at : at + klen]
        at += klen
        if vlen == 0xFFFFFFFF:
            records.append((key, None))
        else:
            records.append((key, raw[at : at + vlen]))
            at += vlen
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=100_000)
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rollout", action="store_true", help="drive m-000's rollout to Complete")
    parser.add_argument("--trace", action="store_true", help="tracemalloc: where the fold's memory is held")
    parser.add_argument("--phase", choices=("fold", "restore"), help=argparse.SUPPRESS)
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "fold":
        print(json.dumps(fold(args)))
        return
    if args.phase == "restore":
        print(json.dumps(restore(args)))
        return
    print(
        f"{args.clusters:,} clusters x {args.modules} modules, {args.partitions} journal partitions in one process, "
        "real decider in-process (no broker)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="fleet-memory-") as directory:
        common = ["--clusters", str(args.clusters), "--modules", str(args.modules)]
        common += ["--partitions", str(args.partitions), "--directory", directory]
        extra = (["--rollout"] if args.rollout else []) + (["--trace"] if args.trace else [])
        folded = run_phase(["--phase", "fold", *common, *extra])
        fleet, applied = folded["fleet"], folded["applied"]
        print(f"fleet folded into every partition: {fleet['wall']:.1f} s wall, {fleet['cpu']:.1f} s CPU; "
              f"RSS {fleet['rss']:.0f} MiB", flush=True)  # fmt: skip
        print(f"modules applied: {applied['wall']:.1f} s wall, {applied['cpu']:.1f} s CPU, "
              f"{applied['batches']} batches (largest: {applied['records']:,} records sent, "
              f"{applied['changelog']:,} changelog); "
              f"RSS peak {applied['peak']:.0f} MiB, after {applied['rss']:.0f} MiB", flush=True)  # fmt: skip
        for line in applied.get("trace", []):
            print("   ", line)
        if folded["rollout"] is not None:
            r = folded["rollout"]
            print(f"m-000 rolled out: {r['reports']:,} reports, {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
                  f"phase {r['phase']}, RSS peak {r['peak']:.0f} MiB", flush=True)  # fmt: skip
        for number, s in enumerate(folded["state"]):
            print(
                f"decide-state partition {number}: {s['records']:,} records, {s['bytes'] / 2**20:.0f} MiB (uncompacted)"
            )
        restored = run_phase(["--phase", "restore", *common])
        print(f"restore: {restored['records']:,} records in {restored['restore_s']:.1f} s wall, "
              f"{restored['restore_cpu_s']:.1f} s CPU "
              f"({1e6 * restored['restore_cpu_s'] / max(restored['records'], 1):.1f} µs of CPU a record; "
              f"wall per partition "
              f"{', '.join(f'{t:.1f}' for t in restored['per_partition_s'])} s; "
              f"reading the files {restored['read_s']:.1f} s); "
              f"RSS {restored['rss_before']:.0f} → {restored['rss']:.0f} MiB; first report per partition "
              f"{restored['first_report_s']:.2f} s, RSS {restored['rss_after_first']:.0f} MiB", flush=True)  # fmt: skip


def run_phase(arguments: list[str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, __file__, *arguments], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
