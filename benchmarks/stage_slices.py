"""A fleet-sized stage start, folded by the real decider in-process: one unbounded fold
against slices of `MOVES_PER_EVENT` moves (rollout/engine/stages.py, "Moves per event").

    .venv/bin/python benchmarks/stage_slices.py [--clusters 50000] [--event stage-start|reapply|rollback|delete]

A fleet of N clusters, one module whose canary (1 %) has passed, then a `wave` stage of the
rest at 100 % concurrency: the report that passes the canary starts the wave. Each variant
runs in a process of its own (clean RSS), folding the journal batch by batch as the worker
does (`process` → `changelog()` → `commit_batch()`, the heap settled after the setup); the
continuations the decider sends to the dependencies topic are put back into the journal, as
the router does. Printed per variant: the largest batch (records sent, changelog records,
CPU seconds), how many batches moved the wave, the CPU time to move it all, and the
process's RSS after the setup and its peak while the wave moves (sampled every 5 ms).

`--event reapply`: once the wave has started (99 % of the fleet updating to 1.0.0), the
module applied again with a new revision — every member re-sorted (rollout/engine/
membership.py, "Re-sorts per event": each updating member becomes pending for 2.0.0), then
the new canary started. `--event rollback`: `rollout rollback` then instead, every member
re-sorted in rollback mode and moved back (the fleet had no stable revision yet: its
assignment removed). `--event delete`: the module deleted then — its members' syncs
removed in slices (rollout/engine/deletions.py, "Deletes per event"). The
"variant" column is the engine's limit then (sliced, or 10⁹: one fold); to compare with a
release before re-sorts were sliced, run it with that release first on PYTHONPATH
(`git archive <commit> | tar -x -C /tmp/before`).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from bench_events import cluster_event, cluster_name, module_event, report

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ModuleApplied, ModuleDeleted, RolloutCommanded
from streams.decider import DecidePartition
from streams.heap import Heap
from streams.outputs import Outputs

STRATEGY = {
    "stages": [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "wave", "maxConcurrency": "100%"},
    ]
}


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


class Sampler(threading.Thread):
    """The process's RSS every 5 ms (the GIL is handed over every 5 ms): its peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss_mib()
        self.running = True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_mib())
            time.sleep(0.005)

    def stop(self) -> None:
        self.running = False
        self.join()
        self.peak = max(self.peak, rss_mib())


def reapplied(name: str, tag: str) -> bytes:
    """`name` applied again with the benchmark's strategy at Git tag `tag` (a new revision)."""
    spec = {
        "selector": {"matchLabels": {"env": "bench"}},
        "sync": {"source": {"git": {"url": "https://example.com/r", "version": {"tag": tag}}}},
        "rollout": STRATEGY,
    }
    manifest = MANIFEST_ADAPTER.validate_python(
        {"apiVersion": "rollout.dev/v1alpha1", "kind": "Module", "metadata": {"name": name}, "spec": spec}
    )
    return ModuleApplied(module=manifest).to_bytes()


def run(clusters: int, limit: int | None, event: str = "stage-start") -> dict[str, float]:
    names = TopicNames("bench.")
    decider = DecidePartition(TopicPartition(names.journal, 0), names, Metrics())
    if limit is not None:
        decider.engine.stages.moves_per_event = limit
    offset = 0

    def batch(values: list[bytes]) -> tuple[Outputs, int, float]:
        nonlocal offset
        records = []
        for value in values:
            records.append(ConsumerRecord(names.journal, 0, offset, 0, 0, None, value, None, 0, len(value), ()))
            offset += 1
        out = Outputs(names.dead_letters)
        started = time.process_time()
        changelog = 0
        while records:  # a batch stops at BATCH_WRITES: the rest is the next transaction's
            records = records[decider.process(records, offset, out) :]
            changelog = max(changelog, len(decider.state.changelog()))
            decider.state.commit_batch()
        return out, changelog, time.process_time() - started

    canaries = max(clusters // 100, 1)
    for first in range(0, clusters, 2000):
        ring = lambda i: "canary" if i < canaries else "wave"  # noqa: E731
        batch(
            [
                cluster_event(i, {"env": "bench", "ring": ring(i)}).to_bytes()
                for i in range(first, min(first + 2000, clusters))
            ]
        )
    joining = [module_event("fleetwide", STRATEGY)]
    while joining:  # the module joins the fleet in slices (membership.py): continuations back, as the router does
        out, _, _ = batch(joining)
        joining = [r.value for r in out.records if r.topic == names.dependencies]
    batch([report(cluster_name(i), "fleetwide") for i in range(canaries - 1)])
    if event != "stage-start":  # the canary passes and the wave starts: 99 % of the fleet updating
        started = [report(cluster_name(canaries - 1), "fleetwide")]
        while started:
            out, _, _ = batch(started)
            started = [r.value for r in out.records if r.topic == names.dependencies]
    Heap().settle()
    before = rss_mib()
    sampler = Sampler()
    sampler.start()

    pending = {
        "stage-start": [report(cluster_name(canaries - 1), "fleetwide")],  # passes the canary: the wave starts
        "reapply": [reapplied("fleetwide", "2.0.0")],  # a new revision: every member re-sorted
        "rollback": [RolloutCommanded(module="fleetwide", command="rollback", user="bench").to_bytes()],
        "delete": [ModuleDeleted(kind="Module", name="fleetwide").to_bytes()],
    }[event]
    largest = {"records": 0, "changelog": 0, "cpu": 0.0}
    moved, batches, cpu = 0, 0, 0.0
    while pending:
        out, changelog, spent = batch(pending)
        batches += 1
        cpu += spent
        pending = [r.value for r in out.records if r.topic == names.dependencies]  # the router's part
        moved += sum(1 for r in out.records if r.topic == names.assignments)
        if len(out.records) > largest["records"]:
            largest = {"records": len(out.records), "changelog": changelog, "cpu": spent}
    sampler.stop()
    return {
        "moved": moved,
        "batches": batches,
        "cpu": cpu,
        "largest_records": largest["records"],
        "largest_changelog": largest["changelog"],
        "largest_cpu": largest["cpu"],
        "rss_after_setup": before,
        "peak": sampler.peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=50_000)
    parser.add_argument("--event", choices=("stage-start", "reapply", "rollback", "delete"), default="stage-start")
    parser.add_argument("--variant", choices=("sliced", "unbounded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        limit = None if args.variant == "sliced" else 10**9
        print(json.dumps(run(args.clusters, limit, args.event)))
        return
    what = {
        "stage-start": f"stage start of {args.clusters:,} clusters x 99 % at 100 % concurrency",
        "reapply": f"re-apply with a new revision of a module on {args.clusters:,} clusters (wave updating)",
        "rollback": f"rollback of a module on {args.clusters:,} clusters (wave updating)",
        "delete": f"delete of a module on {args.clusters:,} clusters (wave updating)",
    }[args.event]
    print(f"{what}, real decider in-process", flush=True)
    print(f"{'variant':>10} {'moved':>7} {'batches':>8} {'CPU s':>7} {'largest batch: records':>23} "
          f"{'changelog':>10} {'CPU s':>6} {'RSS after setup MiB':>20} {'peak while moving MiB':>22}",
          flush=True)  # fmt: skip
    for variant in ("unbounded", "sliced"):
        result = subprocess.run(
            [sys.executable, __file__, "--clusters", str(args.clusters), "--event", args.event, "--variant", variant],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"{variant:>10} {r['moved']:>7,.0f} {r['batches']:>8.0f} {r['cpu']:>7.1f} {r['largest_records']:>23,.0f} "
              f"{r['largest_changelog']:>10,.0f} {r['largest_cpu']:>6.1f} {r['rss_after_setup']:>20.0f} "
              f"{r['peak']:>22.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
