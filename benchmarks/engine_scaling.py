"""Per-event cost of the decision core against fleet size (prints figures; asserts nothing).

For each fleet size: N ready clusters, one Module with three stages (canary 1%, wave-1
25%, wave-2 rest; maxConcurrency 10), rolled out by `succeeded` reports. It measures the
mean wall time and the mean number of state writes per SyncStatusReported event over the
whole rollout, the time of the ModuleApplied event (which visits the fleet once), and —
in a second, traced pass — the peak memory allocated from the module's arrival to the end.

    .venv/bin/python benchmarks/engine_scaling.py [SIZES...]     # default: 100 1000 10000 50000

Per-status-event work must not grow with the fleet: the writes column should stay flat and
the time column roughly flat (dict and cache effects aside).
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import MutableMapping
from typing import Any

from rollout.engine import RolloutEngine
from rollout.events import ClusterObserved, ModuleApplied, SyncStatusReported, Tick
from rollout.manifests import MANIFEST_ADAPTER


class CountingDict(dict):  # type: ignore[type-arg]
    writes = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        CountingDict.writes += 1
        super().__setitem__(key, value)


def cluster(i: int, size: int) -> ClusterObserved:
    ring = "canary" if i < max(size // 100, 1) else ("wave-1" if i < size // 4 else "wave-2")
    return ClusterObserved(
        cluster=MANIFEST_ADAPTER.validate_python(
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": f"c-{i:06d}", "labels": {"ring": ring, "order": str(i)}},
                "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
            }
        )
    )


MODULE = ModuleApplied(
    module=MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "app"},
            "spec": {
                "selector": {},
                "sync": {"source": {"git": {"url": "https://example.com/r", "version": {"tag": "1.0.0"}}}},
                "rollout": {
                    "sortingLabelKey": "order",
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 10},
                        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": 10},
                        {"name": "wave-2", "maxConcurrency": 10},
                    ],
                },
            },
        }
    )
)


def run(size: int, *, trace: bool = False) -> dict[str, float]:
    state: dict[str, MutableMapping[str, Any]] = {
        k: CountingDict() for k in ("clusters", "modules", "targets", "clock")
    }
    engine = RolloutEngine(**state)  # type: ignore[arg-type]
    engine.handle(Tick(now=1.0))
    for i in range(size):
        engine.handle(cluster(i, size))
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    outcome = engine.handle(MODULE)
    apply_seconds = time.perf_counter() - started
    pending = [a.cluster for a in outcome.assignments]
    reports = 0
    writes_before = CountingDict.writes
    started = time.perf_counter()
    while pending:
        name = pending.pop()
        outcome = engine.handle(SyncStatusReported(cluster=name, module="app", revision="1.0.0", state="succeeded"))
        reports += 1
        pending.extend(a.cluster for a in outcome.assignments if a.sync is not None)
    status_seconds = time.perf_counter() - started
    peak = 0
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert reports == size, (reports, size)
    assert engine.modules["app"].phase == "Complete"
    return {
        "clusters": size,
        "apply_ms": apply_seconds * 1000,
        "status_us": status_seconds / reports * 1e6,
        "writes_per_status": (CountingDict.writes - writes_before) / reports,
        "peak_mib": peak / 2**20,
    }


def main(sizes: list[int]) -> None:
    print(f"{'clusters':>9} {'ModuleApplied ms':>17} {'µs/status event':>16} {'writes/status':>14} {'peak MiB':>9}")
    for size in sizes:
        r = run(size)
        r["peak_mib"] = run(size, trace=True)["peak_mib"]  # a second pass: tracing distorts the timings
        print(
            f"{r['clusters']:>9} {r['apply_ms']:>17.1f} {r['status_us']:>16.1f} "
            f"{r['writes_per_status']:>14.2f} {r['peak_mib']:>9.1f}"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100, 1000, 10000, 50000])
