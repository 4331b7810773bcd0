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
garbage. The worker settles once its state is restored at start. When it is ready again
after a rebalance or a repair it only collects and freezes what is new (`freeze_new`).

State also grows after the first settle — a fleet folded, modules rolled out — and the
interpreter's own full collections would walk all of it again (measured: CPU per status
report rising from ~150 to ~400 µs over eight 3,000-cluster rollouts in one worker). So,
from the first settle on, whatever survives a full collection the interpreter runs by itself
is frozen right after it (`freeze_after_full_collections`, a `gc.callbacks` hook): the
collection has just walked it anyway, and the next one walks only what is newer.

**When to settle again — by growth, within a budget.** What a freeze costs is cyclic
garbage among frozen objects (rare: a traceback, an asyncio future, a closed producer): the
collector no longer finds it, and only a full settle — unfreeze everything, collect, freeze
again — reclaims it. A full settle walks the whole heap with the event loop stopped:
2.4-17.6 s at 20,000 clusters x 20 modules (load-dependent, `benchmarks/fleet_pipeline.py`),
and the first expulsion of the 100,000-cluster run of issue 22 came right after one (no
heartbeats while the loop is held: past the group session, every consumer group drops the
worker). It used to run every 5 minutes whatever the heap; now `settle_if_due` (the worker
asks every 0.5 s) looks at the frozen population every `interval` seconds (`CHECK_INTERVAL`;
counting it walks a list, ~7 ns an object, no collection) and decides (`plan`):

* frozen population F below `1 + GROWTH` times B, the population the last full settle left
  (all of it alive then: it had just been collected): nothing. CPython's own rule for its
  oldest generation (a full collection once it grew by a quarter), applied to what it no
  longer scans.
* grown by `GROWTH` or more: a full settle, if its estimate (`estimate`) is within `BUDGET`
  of the group session timeout. The estimate is for the W objects a settle walks — F and
  those not frozen yet (measured: those were 40 % of a settle's walk at 20,000 x 20; leaving
  them out underestimated 2.5 times) — and the larger of two: the last full settle's seconds
  times W / B, and the seconds counting W objects takes now (F is counted at each look
  anyway) times the ratio of the last settle's seconds to its own count's. The first alone
  extrapolates the last settle's rate, which a small heap and a quiet machine make low
  (0.5-1.1 µs an object at 80,000, 1.2-4.1 µs at 0.7-2 million in `fleet_pipeline.py`: it
  underestimated 2.2-4.5 times from the nearly empty heap at start); the count follows the
  heap's size and the machine's load as they are at the look — not as they will be during
  the settle: from the empty start it still underestimated 4.3 times once, at load ~10.
  The budget is a quarter of the session because a settle's time still varies with the load
  while it runs (sevenfold for the same heap over earlier runs). Otherwise the settle is
  **deferred**: the cheap `freeze_new` runs instead, logged and counted
  (`rollout_heap_settle_seconds{kind="deferred"}`), once per further `GROWTH` of the
  population, not at every look.
* grown by `CEILING` (doubled) or more: a full settle even over the budget (`kind="forced"`,
  a warning naming the estimate): the heap must stay bounded, and an expulsion costs a
  rebalance whose take-back refolds nothing, while an unbounded heap ends in an OOM kill.

The bound this keeps: frozen objects only leave the population (reference counting frees
them) except when a freeze adds survivors; so after a full settle left B objects, all alive,
the frozen population — live state and the cyclic garbage stuck in it together — stays
below `(1 + GROWTH)` B while settles fit the budget, and below `(1 + CEILING)` B when they do
not, up to what one check interval adds: while the live heap does not shrink, the stuck
garbage is under a quarter of B (under B while deferred). And B, the live heap at the last
full settle, is bounded by the other growth bounds (docs/architecture.md, "Growth bounds"). A heap that stops
growing is never fully settled again — there is nothing to reclaim that the bound does not
already cover — and one that grows settles once per quarter of growth: the settles' total
cost is a geometric series, at most five times the last one.

Each settle (kind `full`, `forced`, `new` after a rebalance, `deferred`) is reported to
`on_settle` with its seconds and the frozen population after it: the worker logs it and
exports `rollout_heap_settle_seconds{kind}` and `rollout_heap_frozen_objects`.

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
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("rollout.heap")

CHECK_INTERVAL = 30.0
"""Seconds between two looks at the frozen population (`Heap.settle_if_due`)."""
GROWTH = 0.25
"""A full settle is due once the frozen population grew by this fraction since the last one."""
CEILING = 1.0
"""... and runs even over the budget once it grew by this much (module doc)."""
BUDGET = 0.25
"""The share of the group session timeout a full settle's estimate may take."""
SESSION_TIMEOUT = 45.0
"""The worker's default (`infra/settings.py`); the worker passes its own."""
YOUNG_THRESHOLDS = (50_000, 20, 10)
"""`gc.set_threshold` while a worker runs: a young collection per 50,000 container
allocations instead of CPython's 700 (see the module doc)."""

SettleKind = Literal["full", "forced", "new", "deferred"]
SETTLE_KINDS: tuple[SettleKind, ...] = ("full", "forced", "new", "deferred")


@dataclass(frozen=True)
class Settled:
    """One settle: what ran (`full` unfreezes and collects everything; `forced` is a full one
    over the budget; `new` and `deferred` collect and freeze only what is not frozen yet —
    after a rebalance, or instead of a full settle over the budget), its seconds (the event
    loop held as long), the frozen population after it, and the full settle's estimate when
    one was considered."""

    kind: SettleKind
    seconds: float
    frozen: int
    estimate: float | None = None


def estimate(walked: int, base: int, last_seconds: float, counted: float, ratio: float) -> float:
    """Seconds a full settle walking `walked` objects would take: the larger of the last
    one's rate (`last_seconds` for the `base` objects it left) and `ratio` times `counted` —
    the seconds counting those objects takes now (the frozen ones are counted at each look,
    and that follows the heap's size and the machine's load), `ratio` a settle's seconds per
    second of counting what it left, measured at the last one (module doc)."""
    return max(last_seconds * walked / max(base, 1), ratio * counted)


def plan(frozen: int, base: int, expected: float, budget: float, deferred_at: int | None) -> SettleKind | None:
    """What `settle_if_due` does with `frozen` objects frozen now, `base` left by the last
    full settle, a full settle `expected` to take that many seconds, `budget` seconds for
    one, and the frozen population at the last deferral (`deferred_at`, None since the last
    full settle); None: nothing (the module doc argues the rule)."""
    if frozen < (1 + GROWTH) * base:
        return None
    if expected <= budget:
        return "full"
    if frozen >= (1 + CEILING) * base:
        return "forced"
    if deferred_at is not None and frozen < (1 + GROWTH) * deferred_at:
        return None  # deferred already at this size: once per further growth
    return "deferred"


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
    def __init__(
        self,
        interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        *,
        session_timeout: float = SESSION_TIMEOUT,
        on_settle: Callable[[Settled], None] | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.timer = timer  # measures each settle (injected by tests)
        self.budget = BUDGET * session_timeout
        self.on_settle = on_settle
        self.settled_at: float | None = None  # the last full settle
        self.checked_at: float | None = None  # the last look at the frozen population
        self.base = 0  # frozen population the last full settle left
        self.last_seconds = 0.0  # ... and its measured duration
        self.ratio = 0.0  # ... per second of counting what it left (`estimate`)
        self.deferred_at: int | None = None  # frozen population at the last deferral since
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
        return self._settle("full").seconds

    def _settle(self, kind: SettleKind, estimate: float | None = None) -> Settled:
        started = self.timer()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _trim()
        spent = self.timer() - started
        counting = self.timer()
        self.base = gc.get_freeze_count()
        counted = self.timer() - counting
        self.ratio = spent / counted if counted > 0 else 0.0
        self.settled_at = self.checked_at = self.clock()
        self.last_seconds, self.deferred_at = spent, None
        return self._report(Settled(kind, spent, self.base, estimate))

    def freeze_new(self) -> float:
        """Collect what is not frozen yet, freeze the survivors, trim; seconds spent. What a
        take-over restored is frozen out of later scans as by `settle`, for the cost of the
        objects made since the last freeze — not of the whole heap, which `settle` walks: at
        20,000 clusters x 20 modules a settle took 2.4-17.6 s (`benchmarks/fleet_pipeline.py`,
        load-dependent) with the event loop stopped, and the time grows with the heap (at
        100,000 clusters about five times larger) — past the session timeout, the broker
        expels the worker (issue 22). Cyclic garbage already frozen waits for the next full
        settle (module doc: once the frozen population grew by `GROWTH`)."""
        return self._freeze_new("new").seconds

    def _freeze_new(self, kind: SettleKind, estimate: float | None = None) -> Settled:
        started = self.timer()
        gc.collect()
        gc.freeze()
        _trim()
        spent = self.timer() - started
        return self._report(Settled(kind, spent, gc.get_freeze_count(), estimate))

    def _report(self, settled: Settled) -> Settled:
        level = logging.WARNING if settled.kind in ("forced", "deferred") else logging.INFO
        estimate = f", a full settle estimated {settled.estimate:.1f} s" if settled.estimate is not None else ""
        log.log(
            level,
            "heap settle (%s) held the event loop %.3f s: %d objects frozen (%d after the last full one)%s; "
            "budget %.1f s",
            settled.kind,
            settled.seconds,
            settled.frozen,
            self.base,
            estimate,
            self.budget,
        )
        if self.on_settle is not None:
            self.on_settle(settled)
        return settled

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

    def settle_if_due(self) -> Settled | None:
        """Every `interval` seconds, the frozen population against the last full settle's:
        a full settle, a deferred one, a forced one or nothing (`plan`, module doc); what ran.
        Never settled: nothing — the first settle is the caller's, once its state is restored."""
        if self.checked_at is None or self.clock() - self.checked_at < self.interval:
            return None
        self.checked_at = self.clock()
        counting = self.timer()
        frozen = gc.get_freeze_count()
        counted = self.timer() - counting
        if frozen < (1 + GROWTH) * self.base:
            return None
        walked = frozen + len(gc.get_objects())  # the not yet frozen: walked by a settle too
        expected = estimate(walked, self.base, self.last_seconds, counted * walked / max(frozen, 1), self.ratio)
        kind = plan(frozen, self.base, expected, self.budget, self.deferred_at)
        if kind is None:
            return None
        if kind == "deferred":
            self.deferred_at = frozen
            return self._freeze_new(kind, expected)
        return self._settle(kind, expected)
