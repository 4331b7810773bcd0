"""The decider stage's CPU per move, in-process: the 100-concurrent-rollouts benchmark
(benchmarks/fleet.py --scenario concurrent) folded on the real `DecidePartition`s, without a
broker.

    .venv/bin/python benchmarks/decider_moves.py [--clusters 1000] [--modules 100] [--partitions 4]
        [--batch 2000] [--profile FILE]

The fleet (labels env=prod, ring canary / wave-1 / wave-2 as fleet.py's) is broadcast to every
journal partition, then `--modules` three-stage modules (canary 10, wave-1 10 % at 50 %, wave-2
the rest at 100 %; none held), each on the partition the router's partitioner picks for its
name, with every continuation put back into its journal (benchmarks/fleet_memory.py's
`Partition`). Then, round after round, every cluster the decider has moved (the book's
updating clusters of every module) gets a `succeeded` report — what an applier with
`--simulate-status` sends — in batches of `--batch` per partition, modules interleaved as
the appliers' reports arrive, until every module is Complete.

Printed: CPU microseconds per move (assignment written) while the reports are folded (the
stage's `process`, its changelog and commit), the moves and reports, and a digest of every
output record (topic, key, value: assignments, decisions with their chain, status and target
documents, verdicts) and every state record written, so two versions of the stage can be
compared for byte identity (run this file from each commit: `git archive <rev> | tar -x -C
DIR`, `PYTHONPATH=DIR:DIR/benchmarks`). `--profile FILE`: cProfile of the report rounds (CPU time). The
worker's heap policy applies (streams/heap.py): the state frozen once folded.

Figures (CPU per move while the reports are folded; digest e265e5488b8cbb4e throughout): 299 µs
at 2fc87eb (load 9-12); c74e00f 276 / 277 µs → 8da2d73 189 / 207 µs, runs alternating from a
`git archive` of each (load 6.0-6.7): the engine's assignments and decisions not validated
again, a wave's sync encoded once, budgets resolved only where they bind (README, "The
worker's CPU per move").
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import itertools
import json
import time
from typing import Any

from aiokafka.structs import ConsumerRecord
from bench_events import cluster_event
from fleet_memory import Partition, continuations, module_name, partition_of, ring

from infra.topics import TopicNames
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ModuleApplied, SyncStatusReported
from streams.heap import Heap
from streams.outputs import Outputs

TAG = "6.7.0"
AT = "2026-01-01T00:00:00+00:00"
_ids = itertools.count()


def pinned(event: Any) -> bytes:
    """The event's bytes with an id and a time of its own (not random, not the clock): two
    runs publish the same bytes, so their output digests compare."""
    return bytes(event.model_copy(update={"id": f"bench-{next(_ids):08d}", "at": AT}).to_bytes())


def module_event(i: int) -> bytes:
    """fleet.py's concurrent module: three stages, none held."""
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": module_name(i), "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"env": "prod"}},
                "sync": {
                    "source": {"git": {"url": "https://github.com/stefanprodan/podinfo", "version": {"tag": TAG}}},
                    "package": {"kustomize": {"path": "./kustomize"}},
                },
                "rollout": {
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 10},
                        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "50%"},
                        {"name": "wave-2", "maxConcurrency": "100%"},
                    ]
                },
            },
        }
    )
    return pinned(ModuleApplied(module=manifest))


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.names = TopicNames("bench.")
        self.parts = [Partition(p, self.names, None) for p in range(args.partitions)]
        self.digest = hashlib.sha256()
        self.moves = 0

    def batch(self, number: int, values: list[bytes]) -> list[bytes]:
        """Fold `values` on partition `number`; digest what it wrote; its continuations."""
        part = self.parts[number]
        decider = part.decider
        names = self.names
        records = [part_record(part, value) for value in values]
        out = Outputs(names.dead_letters)
        while records:  # as fleet_memory's Partition.batch, the changelog digested
            folded = decider.process(records, part.offset, out)
            records = records[folded:]
            for key, value in decider.state.changelog():
                self.digest.update(b"S" + key + b"=" + (value if value is not None else b"-"))
            decider.state.commit_batch()
        for record in out.all():
            self.digest.update(
                record.topic.encode() + b"|" + (record.key or b"-") + b"=" + (record.value or b"-") + b"\n"
            )
            if record.topic == names.assignments:
                self.moves += 1
        return continuations(out, names)

    def settle(self, pending: list[list[bytes]]) -> None:
        """Fold until no continuation is left (the router puts each back on its module's partition)."""
        while any(pending):
            after: list[list[bytes]] = [[] for _ in self.parts]
            for number, values in enumerate(pending):
                if values:
                    for value in self.batch(number, values):
                        after[partition_of(json.loads(value)["module"], len(self.parts))].append(value)
            pending = after

    def updating(self) -> list[list[tuple[str, str]]]:
        """Per partition, the (cluster, module) pairs moved and not yet reported, interleaved."""
        per_partition = []
        for part in self.parts:
            book = part.decider.engine.book
            modules = sorted(part.decider.state.mappings["modules"])
            queues = [[(c, m) for c in sorted(book.updating_clusters(m))] for m in modules]
            pairs = [pair for row in interleaved(queues) for pair in row]
            per_partition.append(pairs)
        return per_partition


def interleaved(queues: list[list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
    """Rows of the queues' i-th entries: each module's first, then each one's second..."""
    longest = max((len(q) for q in queues), default=0)
    return [[q[i] for q in queues if i < len(q)] for i in range(longest)]


def part_record(part: Partition, value: bytes) -> Any:
    """`value` as the next record of the partition's journal."""
    record = ConsumerRecord(part.names.journal, 0, part.offset, 0, 0, None, value, None, 0, len(value), ())
    part.offset += 1
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--modules", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    heap = Heap()  # the worker's heap policy (streams/app.py's Worker): survivors frozen
    heap.collect_young_less_often()
    heap.settle()
    heap.freeze_after_full_collections()
    run = Run(args)
    fleet = [pinned(cluster_event(i, {"env": "prod", "ring": ring(i, args.clusters)})) for i in range(args.clusters)]
    for number in range(args.partitions):
        for first in range(0, len(fleet), 2000):
            run.batch(number, fleet[first : first + 2000])
    pending: list[list[bytes]] = [[] for _ in run.parts]
    for m in range(args.modules):
        pending[partition_of(module_name(m), args.partitions)].append(module_event(m))
    heap.settle()
    started = time.process_time()
    run.settle(pending)
    applied_cpu, applied_moves = time.process_time() - started, run.moves
    print(f"{args.modules} modules applied over {args.clusters} clusters ({args.partitions} partitions): "
          f"{applied_moves} moves, {applied_cpu * 1e6 / max(applied_moves, 1):.0f} µs CPU/move")  # fmt: skip
    heap.settle()
    profile = cProfile.Profile(time.process_time) if args.profile else None
    reports = rounds = 0
    cpu = 0.0
    while True:
        waiting = run.updating()
        if not any(waiting):
            break
        rounds += 1
        for number, pairs in enumerate(waiting):
            for first in range(0, len(pairs), args.batch):
                values = [
                    pinned(SyncStatusReported(cluster=c, module=m, revision=TAG, state="succeeded", generation=1))
                    for c, m in pairs[first : first + args.batch]
                ]
                reports += len(values)
                began = time.process_time()
                if profile is not None:
                    profile.enable()
                more = run.batch(number, values)
                pending = [[] for _ in run.parts]
                for value in more:
                    pending[partition_of(json.loads(value)["module"], len(run.parts))].append(value)
                run.settle(pending)
                if profile is not None:
                    profile.disable()
                cpu += time.process_time() - began
    moves = run.moves - applied_moves
    phases: dict[str, int] = {}
    for part in run.parts:
        for module in sorted(part.decider.state.mappings["modules"]):
            phase = str((part.decider.engine.status_of(module) or {}).get("phase"))
            phases[phase] = phases.get(phase, 0) + 1
    print(f"reports folded: {reports} in {rounds} rounds, {moves} moves, "
          f"{cpu * 1e6 / max(moves, 1):.0f} µs CPU/move ({cpu:.2f} s); modules by phase {phases}")  # fmt: skip
    print(f"output digest {run.digest.hexdigest()[:16]}")
    if profile is not None:
        profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
