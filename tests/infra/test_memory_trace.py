"""The worker's opt-in memory trace (infra/memory_trace.py): a line per look, and tracemalloc's
top sites once RSS reached the threshold — off unless ROLLOUT_MEMORY_TRACE names a directory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from infra.memory_trace import MemoryTrace


def test_the_trace_is_off_unless_a_directory_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLOUT_MEMORY_TRACE", raising=False)

    assert MemoryTrace.from_environment() is None


def test_each_look_logs_rss_and_the_heaps_and_tracing_starts_at_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_MEMORY_TRACE", str(tmp_path))
    monkeypatch.setenv("ROLLOUT_MEMORY_TRACE_FROM_MIB", "1")  # any process is past 1 MiB
    trace = MemoryTrace.from_environment()
    assert trace is not None
    try:
        first = trace.look()
        kept = [bytes(1000) for _ in range(2000)]  # ~2 MiB allocated once traced
        trace.look()
    finally:
        tracemalloc.stop()

    lines = trace.log_path.read_text().splitlines()
    assert len(lines) == 2 and first.rss > 0
    assert all("rss=" in line and "c_in_use=" in line for line in lines)
    assert "traced=" not in lines[0] and "traced=" in lines[1]
    top = trace.top_path.read_text()
    assert "test_memory_trace.py" in top and len(kept) == 2000
