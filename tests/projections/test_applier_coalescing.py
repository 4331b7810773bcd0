"""An applier's consumer batch applies, per cluster, only what applying every record in order
would end with (projections/coalescing.py): the newest snapshot, after the last tombstone;
the others are counted superseded, and applied after all when the one chosen fails."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from projections.coalescing import coalesce
from projections.sinks.directory import STATE_FILE, DirectorySink
from tests.projections.test_applier_batches import NAMES, RecordingProducer, message, simulating_applier
from tests.projections.test_directory_sink import CountingRenderer


def record(key: str | None, value: bytes | None, offset: int) -> SimpleNamespace:
    return SimpleNamespace(key=key.encode() if key is not None else None, value=value, offset=offset, timestamp=0)


def tombstone(cluster: str, offset: int) -> SimpleNamespace:
    return record(cluster, None, offset)


def written_version(root: Path, cluster: str) -> int | None:
    if not (root / STATE_FILE).exists():
        return None
    state = json.loads((root / STATE_FILE).read_text())["snapshots"]
    entry = state.get(f"ProxyAssemblage/{cluster}")
    return None if entry is None else int(entry["version"])


def modules_on_disk(root: Path, cluster: str) -> list[str]:
    return sorted(path.stem for path in (root / "proxy" / cluster).glob("*.yaml"))


def apply(applier: Any, *records: Any, producer: RecordingProducer | None = None) -> None:
    asyncio.run(applier._apply_batch({TopicPartition(NAMES.proxy, 0): list(records)}, producer))


def reported(producer: RecordingProducer) -> list[tuple[str, str]]:
    return [(args[2]["cluster"], args[2]["module"]) for verb, args in producer.calls if verb == "send"]


def test_a_batch_applies_only_each_clusters_newest_snapshot_and_counts_the_others_superseded(tmp_path: Path) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    renderer = CountingRenderer()
    applier.sink = DirectorySink(tmp_path, renderer)
    apply(
        applier,
        message("eu-1", 1, "a", offset=0),
        message("eu-2", 1, "a", offset=1),
        message("eu-1", 2, "a", "b", offset=2),
        message("eu-1", 3, "a", "b", "c", offset=3),
        producer=producer,
    )
    assert sorted(renderer.rendered) == ["a", "a", "b", "c"]  # eu-1's three syncs once, eu-2's one
    assert modules_on_disk(tmp_path, "eu-1") == ["a", "b", "c"] and written_version(tmp_path, "eu-1") == 3
    assert sorted(reported(producer)) == [("eu-1", "a"), ("eu-1", "b"), ("eu-1", "c"), ("eu-2", "a")]
    assert (applier.stats.snapshots, applier.stats.superseded) == (2, 2)
    applies = applier.metrics.applies.labels("ProxyAssemblage", "superseded")._value.get()
    consumed = applier.metrics.events_consumed.labels(NAMES.proxy)._value.get()
    assert (applies, consumed) == (2, 4)  # every record consumed is counted, applied or superseded


def test_an_older_snapshot_behind_a_newer_one_in_a_batch_is_superseded_as_it_would_be_ignored(tmp_path: Path) -> None:
    applier = simulating_applier(tmp_path)
    apply(applier, message("eu-1", 5, "a", offset=0), message("eu-1", 4, "b", offset=1))
    assert modules_on_disk(tmp_path, "eu-1") == ["a"] and written_version(tmp_path, "eu-1") == 5
    assert applier.stats.superseded == 1


def test_a_tombstone_in_a_batch_clears_the_cluster_before_the_snapshots_after_it_start_anew(tmp_path: Path) -> None:
    applier = simulating_applier(tmp_path)
    apply(applier, message("eu-1", 7, "a", offset=0))
    apply(
        applier,
        message("eu-1", 8, "a", "b", offset=1),
        tombstone("eu-1", offset=2),
        message("eu-1", 1, "c", offset=3),  # versions may start anew after a tombstone
    )
    assert modules_on_disk(tmp_path, "eu-1") == ["c"] and written_version(tmp_path, "eu-1") == 1
    assert (applier.stats.tombstones, applier.stats.superseded, applier.stats.stale) == (1, 1, 0)


def test_a_tombstone_last_in_a_batch_leaves_nothing_of_the_cluster(tmp_path: Path) -> None:
    applier = simulating_applier(tmp_path)
    apply(applier, message("eu-1", 1, "a", offset=0), message("eu-1", 2, "b", offset=1), tombstone("eu-1", offset=2))
    assert not (tmp_path / "proxy" / "eu-1").exists() and written_version(tmp_path, "eu-1") is None
    assert (applier.stats.snapshots, applier.stats.superseded) == (0, 2)


def test_when_the_newest_snapshot_of_a_batch_fails_the_ones_it_superseded_are_applied_in_order(
    tmp_path: Path,
) -> None:
    applier, producer = simulating_applier(tmp_path), RecordingProducer()
    apply(
        applier,
        message("eu-1", 1, "a", offset=0),
        message("eu-1", 2, "a", "b", offset=1),
        message("eu-1", 3, "a", "a", offset=2),  # two syncs for one module: the sink refuses it
        producer=producer,
    )
    assert modules_on_disk(tmp_path, "eu-1") == ["a", "b"] and written_version(tmp_path, "eu-1") == 2
    assert (applier.stats.errors, applier.stats.snapshots, applier.stats.superseded) == (1, 2, 0)
    assert reported(producer) == [("eu-1", "a"), ("eu-1", "b")]


def test_records_of_a_cluster_that_will_not_decode_are_not_judged_but_applied_in_order() -> None:
    good = message("eu-1", 2, "a", offset=1)
    broken = record("eu-1", b"{not json", 2)
    plan = coalesce([message("eu-1", 1, "a", offset=0), good, broken])
    assert [[(step.record.offset, [r.offset for r in step.supersedes]) for step in steps] for steps in plan] == [
        [(0, []), (1, []), (2, [])]
    ]


def test_coalescing_keeps_clusters_apart_and_records_without_a_key_alone() -> None:
    records = [
        message("eu-1", 1, "a", offset=0),
        record(None, b"{}", 1),
        message("eu-2", 1, "a", offset=2),
        message("eu-1", 2, "a", offset=3),
        record(None, b"{}", 4),
    ]
    plan = coalesce(records)
    assert [[(step.record.offset, [r.offset for r in step.supersedes]) for step in steps] for steps in plan] == [
        [(1, [])],
        [(2, [])],
        [(3, [0])],
        [(4, [])],
    ]
