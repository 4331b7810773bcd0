"""Part 3 of benchmarks/throughput.py: the decider's table layer without Kafka.

Per-event CPU cost of a `streams.decider.DecidePartition` (the real engine over the
changelogged `PartitionState`) at each fleet size, folded in batches as the runtime does
(`process` → `changelog()` → `commit_batch()`), the heap settled as the worker does once its
state is restored; `--profile` adds a cProfile at the smallest and the largest size.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import random
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from bench_events import cluster_event, module_event, report

from infra.observability import Metrics
from infra.topics import TopicNames
from streams.decider import DecidePartition
from streams.heap import Heap
from streams.outputs import Outputs

TABLE_MODULES = ("app-a", "app-b", "app-c")
STAGED = {
    "sortingLabelKey": "order",
    "stages": [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 50},
        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": 50},
        {"name": "wave-2", "maxConcurrency": 50},
    ],
}


class Journal:
    """ConsumerRecords of journal partition 0, as the decider receives them."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.offset = 0

    def record(self, value: bytes, key: bytes | None = None) -> ConsumerRecord:  # type: ignore[type-arg]
        r = ConsumerRecord(self.topic, 0, self.offset, 0, 0, key, value, None, 0, len(value), ())
        self.offset += 1
        return r


class Table:
    def __init__(self, size: int) -> None:
        self.size = size
        names = TopicNames("bench.")
        self.names = names
        self.journal = Journal(names.journal)
        self.decider = DecidePartition(TopicPartition(names.journal, 0), names, Metrics())
        self.updating: dict[str, list[str]] = {m: [] for m in TABLE_MODULES}
        self.changelog_records = 0
        self.rng = random.Random(7)
        self.version = 0  # of the label changes: every one is a real change

    def labels(self, i: int, version: int = 0) -> dict[str, str]:
        ring = "canary" if i < max(self.size // 100, 1) else ("wave-1" if i < self.size // 4 else "wave-2")
        labels = {"env": "bench", "ring": ring, "order": str(i)}
        if version:
            labels["version"] = str(version)
        return labels

    def batch(self, records: list[ConsumerRecord]) -> Outputs:  # type: ignore[type-arg]
        """One batch as the runtime runs it: process, changelog, (commit), commit_batch."""
        out = Outputs(self.names.dead_letters)
        while records:  # a batch stops at BATCH_WRITES: the rest is the next transaction's
            records = records[self.decider.process(records, self.journal.offset, out) :]
            self.changelog_records += len(self.decider.state.changelog())
            self.decider.state.commit_batch()
        return out

    def note(self, out: Outputs) -> None:
        """Track which clusters are being updated (outside the timed part)."""
        if out.dead_letters:
            raise RuntimeError(f"{out.dead_letters} dead letters: {[r.value for r in out.records][-1]!r}")
        for r in out.records:
            if r.topic == self.names.assignments:
                a = json.loads(r.value)
                if a.get("sync") is not None:
                    self.updating[a["module"]].append(a["cluster"])

    def setup(self) -> float:
        started = time.perf_counter()
        for first in range(0, self.size, 2000):
            events = [cluster_event(i, self.labels(i)).to_bytes() for i in range(first, min(first + 2000, self.size))]
            self.note(self.batch([self.journal.record(e) for e in events]))
        for module in TABLE_MODULES:
            values = [module_event(module, STAGED)]
            while values:  # the module joins the fleet in slices: its continuations fed back, as the router does
                out = self.batch([self.journal.record(v) for v in values])
                self.note(out)
                values = [r.value for r in out.records if r.topic == self.names.dependencies]
        return time.perf_counter() - started

    def timed(self, batches: int, per_batch: int = 100) -> dict[str, float]:
        """Alternating batches of label changes and of reports; seconds per event of each kind."""
        spent = {"label change": 0.0, "status report": 0.0}
        count = {"label change": 0, "status report": 0}
        for b in range(batches):
            if b % 2 == 0:
                self.version += 1
                kind = "label change"
                chosen = self.rng.sample(range(self.size), per_batch)
                values = [cluster_event(i, self.labels(i, self.version)).to_bytes() for i in chosen]
            else:
                kind = "status report"
                values = []  # up to per_batch of the clusters being updated, modules in turn
                while len(values) < per_batch and any(self.updating.values()):
                    for module in TABLE_MODULES:
                        if self.updating[module] and len(values) < per_batch:
                            values.append(report(self.updating[module].pop(0), module))
                if not values:
                    raise RuntimeError("nothing is being updated (every rollout done?)")
            records = [self.journal.record(v) for v in values]
            started = time.process_time()  # CPU time: other processes on the machine do not count
            out = self.batch(records)
            spent[kind] += time.process_time() - started
            count[kind] += len(records)
            self.note(out)
        return {kind: spent[kind] / count[kind] for kind in spent}


def profile(table: Table, batches: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    table.timed(batches)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats(os.environ.get("PROFILE_SORT", "tottime")).print_stats(int(os.environ.get("PROFILE_ROWS", "15")))


def table_layer(sizes: list[int], with_profile: bool) -> None:
    print(f"table layer: DecidePartition, {len(TABLE_MODULES)} modules x all clusters (3 stages, maxConcurrency 50), "
          "batches of 100 events, process + changelog + commit_batch; CPU µs per event", flush=True)  # fmt: skip
    print(f"{'clusters':>9} {'targets':>8} {'setup s':>8} {'µs/label change':>16} {'µs/status report':>17} "
          f"{'µs/event':>9}", flush=True)  # fmt: skip
    results: dict[int, float] = {}
    heap = Heap()
    heap.collect_young_less_often()  # the worker's collector policy (streams/heap.py)
    for size in sizes:
        table = Table(size)
        setup_s = table.setup()
        heap.settle()  # as the worker does once its state is restored
        targets = len(table.decider.state.mappings["targets"].committed)
        table.timed(4)  # warm-up
        cost = table.timed(40)  # 2000 label changes, 2000 reports
        mean = sum(cost.values()) / len(cost)
        results[size] = mean
        print(f"{size:>9} {targets:>8} {setup_s:>8.1f} {cost['label change'] * 1e6:>16.1f} "
              f"{cost['status report'] * 1e6:>17.1f} {mean * 1e6:>9.1f}", flush=True)  # fmt: skip
        if with_profile and size in (sizes[0], sizes[-1]):
            print(f"--- cProfile, {size} clusters, 10 batches of 100 events (top by own time):")
            profile(table, 10)
        del table
        gc.unfreeze()
        gc.collect()
    heap.restore_thresholds()
    small, large = sizes[0], sizes[-1]
    ratio = results[large] / results[small]
    print(f"cost({large}) / cost({small}) = {ratio:.2f}   (target ≤ 1.3: {'met' if ratio <= 1.3 else 'NOT met'})")
