"""Where a worker's memory is: an opt-in trace for finding what a peak is made of.

`ROLLOUT_MEMORY_TRACE=<directory>` makes the worker append one line to
`<directory>/memory-<pid>.log` every `ROLLOUT_MEMORY_TRACE_INTERVAL` seconds (default 10):

* RSS — what the system counts (and what the benchmarks' targets are about);
* the Python heap: blocks allocated by the interpreter (`sys.getallocatedblocks`), and the
  objects `gc.freeze` holds out of collection (streams/heap.py);
* the C heap as glibc sees it (`mallinfo2`): in use by `malloc` (large Python objects —
  bytes of records, lists and dict tables past 512 bytes — and aiokafka's buffers), free but
  not handed back (fragmentation, or garbage freed since the last `malloc_trim`), and mmapped.

RSS far above in-use memory is memory freed but kept; in-use memory that grows is live data.
What the live data is: with `ROLLOUT_MEMORY_TRACE_FROM_MIB=<MiB>` tracemalloc starts once RSS
first reaches that many MiB (tracing a 2 GiB heap from the start would double the worker's
CPU and memory; from there on it traces only what is allocated since — what a peak adds),
and each later line is followed by the top allocation sites still alive, grouped by
traceback (`ROLLOUT_MEMORY_TRACE_FRAMES`, default 12 frames), into
`<directory>/memory-<pid>-top.txt`. Off by default; a diagnostic, not a production setting
(docs/configuration.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

log = logging.getLogger("rollout.memory")

TOP_SITES = 25


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _load_mallinfo2() -> Callable[[], _Mallinfo2] | None:
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None
    function.restype = _Mallinfo2
    return cast("Callable[[], _Mallinfo2]", function)


_MALLINFO2 = _load_mallinfo2()


@dataclass(frozen=True)
class MemoryReading:
    """One look at the process's memory, in bytes (C heap figures 0 without glibc)."""

    rss: int
    python_blocks: int
    frozen_objects: int
    c_heap_in_use: int
    c_heap_free: int
    c_heap_mmapped: int

    def line(self) -> str:
        mib = 2**20
        return (
            f"rss={self.rss / mib:.0f}MiB python_blocks={self.python_blocks} frozen={self.frozen_objects} "
            f"c_in_use={self.c_heap_in_use / mib:.0f}MiB c_free={self.c_heap_free / mib:.0f}MiB "
            f"c_mmapped={self.c_heap_mmapped / mib:.0f}MiB"
        )


def rss_bytes() -> int:
    """VmRSS of this process (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def read_memory() -> MemoryReading:
    info = _MALLINFO2() if _MALLINFO2 is not None else _Mallinfo2()
    return MemoryReading(
        rss=rss_bytes(),
        python_blocks=sys.getallocatedblocks(),
        frozen_objects=gc.get_freeze_count(),
        c_heap_in_use=info.uordblks,
        c_heap_free=info.fordblks,
        c_heap_mmapped=info.hblkhd,
    )


class MemoryTrace:
    """The worker's opt-in memory trace (module doc)."""

    def __init__(self, directory: Path, *, interval: float, trace_from_mib: float | None, frames: int) -> None:
        self.directory = directory
        self.interval = interval
        self.trace_from = None if trace_from_mib is None else trace_from_mib * 2**20
        self.frames = frames
        self.log_path = directory / f"memory-{os.getpid()}.log"
        self.top_path = directory / f"memory-{os.getpid()}-top.txt"
        self.started = time.monotonic()

    @classmethod
    def from_environment(cls) -> MemoryTrace | None:
        directory = os.environ.get("ROLLOUT_MEMORY_TRACE")
        if not directory:
            return None
        from_mib = os.environ.get("ROLLOUT_MEMORY_TRACE_FROM_MIB")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        return cls(
            path,
            interval=float(os.environ.get("ROLLOUT_MEMORY_TRACE_INTERVAL", "10")),
            trace_from_mib=float(from_mib) if from_mib else None,
            frames=int(os.environ.get("ROLLOUT_MEMORY_TRACE_FRAMES", "12")),
        )

    def look(self) -> MemoryReading:
        """One line of the log; starts tracemalloc at the threshold, writes its top sites after."""
        reading = read_memory()
        elapsed = time.monotonic() - self.started
        traced = ""
        if tracemalloc.is_tracing():
            current, peak = tracemalloc.get_traced_memory()
            traced = f" traced={current / 2**20:.0f}MiB traced_peak={peak / 2**20:.0f}MiB"
        with self.log_path.open("a") as out:
            out.write(f"{time.time():.1f} t={elapsed:.0f}s {reading.line()}{traced}\n")
        if tracemalloc.is_tracing():
            self._write_top(elapsed)
        elif self.trace_from is not None and reading.rss >= self.trace_from:
            tracemalloc.start(self.frames)
            log.warning("memory trace: RSS %.0f MiB, tracemalloc started", reading.rss / 2**20)
        return reading

    def _write_top(self, elapsed: float) -> None:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [
                tracemalloc.Filter(False, tracemalloc.__file__),
                tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            ]
        )
        stats = snapshot.statistics("traceback")
        total = sum(stat.size for stat in stats)
        with self.top_path.open("a") as out:
            out.write(f"=== {time.time():.1f} t={elapsed:.0f}s traced alive {total / 2**20:.1f} MiB\n")
            for stat in stats[:TOP_SITES]:
                out.write(f"--- {stat.size / 2**20:.1f} MiB in {stat.count} blocks\n")
                for frame in stat.traceback.format(limit=self.frames):
                    out.write(f"    {frame}\n")
            by_line = snapshot.statistics("lineno")
            out.write("--- by line:\n")
            for stat in by_line[:TOP_SITES]:
                out.write(f"    {stat.size / 2**20:8.1f} MiB {stat.count:9d}  {stat.traceback[0]}\n")

    async def run(self) -> None:
        while True:
            try:
                self.look()
            except Exception:  # a diagnostic must never stop the worker
                log.exception("memory trace failed")
            await asyncio.sleep(self.interval)


__all__ = ["MemoryReading", "MemoryTrace", "read_memory", "rss_bytes"]
