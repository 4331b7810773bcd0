"""Garbage collection for a process that holds a large, long-lived state.

The decider keeps every cluster, module and target of its partitions in memory: hundreds
of thousands of small objects that live as long as the process. CPython's cyclic collector
scans its oldest generation whenever that generation has grown by a quarter, and each such
full scan walks every one of them — measured on the throughput benchmark (3,000 clusters,
`rollout worker --stages decide,assemble`): a 70-200 ms pause each time, and frozen vs not,
2,900 → 5,800 status reports/s, 143 → 107 µs of CPU per report.

State records hold no reference cycles, so reference counting frees them when they are
replaced. Hence `Heap.settle`: one full collection, then `gc.freeze()` of what survived —
the collector never scans it again, while reference counting keeps freeing what becomes
garbage. The worker settles once its state is restored at start and every `interval`
seconds: cyclic garbage among frozen objects (rare: a traceback, an asyncio future, a closed
producer) waits at most that long, since each settle unfreezes before collecting. When it is
ready again after a rebalance or a repair it only collects and freezes what is new
(`freeze_new`): a settle walks the whole heap with the event loop stopped — 2.4-17.6 s at
20,000 clusters x 20 modules (load-dependent), and the first expulsion of the 100,000-cluster
run of issue 22 came right after one (its RSS dropped by 1 GiB, then the group session
expired) — and every return to ready after a repair settled again.

State also grows after the first settle — a fleet folded, modules rolled out — and the
interpreter's own full collections would walk all of it again (measured: CPU per status
report rising from ~150 to ~400 µs over eight 3,000-cluster rollouts in one worker). So,
from the first settle on, whatever survives a full collection the interpreter runs by itself
is frozen right after it (`freeze_after_full_collections`, a `gc.callbacks` hook): the
collection has just walked it anyway, and the next one walks only what is newer.

A settle also hands the C heap's free memory back to the system (`_trim`): measured on a
10,000-cluster fan-out of three modules at once, RSS +372 MiB without, +160 MiB with.

Young collections cost too: every status report allocates a few dozen containers (records,
documents, outputs), and CPython collects its youngest generation every 700 of them —
measured on the decider's table layer (20,000 reports): 79 µs per report with the default
thresholds, 64 with the collector off, 68 with a young collection per 50,000 allocations.
The worker runs with `YOUNG_THRESHOLDS`; garbage cycles, rare here, just wait a little longer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("rollout.heap")

SETTLE_INTERVAL = 300.0
YOUNG_THRESHOLDS = (50_000, 20, 10)
"""`gc.set_threshold` while a worker runs: a young collection per 50,000 container
allocations instead of CPython's 700 (see the module doc)."""


def _load_trim() -> Callable[[int], object] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_MALLOC_TRIM = _load_trim()


def _trim() -> None:
    """Return the free memory of the C heap to the system (glibc's `malloc_trim(0)`): a
    large batch — a module fanned out to a whole fleet — allocates its outputs, documents and
    changelog at once, and glibc keeps the freed memory mapped, so the worker's RSS would
    stay at that batch's peak for good."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class Heap:
    def __init__(self, interval: float = SETTLE_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.settled_at: float | None = None
        self.full_collections = 0  # seen by the hook (a settle's own collection counts too)
        self._thresholds: tuple[int, int, int] | None = None  # as they were before `collect_young_less_often`

    def collect_young_less_often(self) -> None:
        """`YOUNG_THRESHOLDS` until `restore_thresholds`."""
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
        gc.set_threshold(*YOUNG_THRESHOLDS)

    def restore_thresholds(self) -> None:
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def settle(self) -> float:
        """Collect everything (frozen objects included), then freeze the survivors, and hand
        the memory freed since back to the system; seconds spent."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _trim()
        self.settled_at = self.clock()
        spent = time.perf_counter() - started
        log.debug("heap settled in %.3f s: %d objects frozen", spent, gc.get_freeze_count())
        return spent

    def freeze_new(self) -> float:
        """Collect what is not frozen yet, freeze the survivors, trim; seconds spent. What a
        take-over restored is frozen out of later scans as by `settle`, for the cost of the
        objects made since the last freeze — not of the whole heap, which `settle` walks: at
        20,000 clusters x 20 modules a settle took 2.4-17.6 s (`benchmarks/fleet_pipeline.py`,
        load-dependent) with the event loop stopped, and the time grows with the heap (at
        100,000 clusters about five times larger) — past the session timeout, the broker
        expels the worker (issue 22). Cyclic garbage
        already frozen waits for the next `settle` (every `interval` seconds)."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        _trim()
        return time.perf_counter() - started

    def ready(self) -> None:
        """The worker is ready (again): the first time, a settle of everything restored at
        start, and from then on freezing after full collections; each time after (a rebalance,
        a repair), only what is new is collected and frozen (`freeze_new`)."""
        if self.settled_at is None:
            self.settle()
            self.freeze_after_full_collections()
        else:
            self.freeze_new()

    def freeze_after_full_collections(self) -> None:
        """From now on, whatever survives a full collection the interpreter runs by itself
        is frozen right after it (see the module doc)."""
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def stop_freezing(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()
            self.full_collections += 1

    def settle_if_due(self) -> bool:
        """Settle when the last settle is `interval` seconds old (never settled: not due —
        the first settle is the caller's, once its state is restored)."""
        if self.settled_at is None or self.clock() - self.settled_at < self.interval:
            return False
        self.settle()
        return True
