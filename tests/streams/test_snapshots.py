"""Which snapshots retention keeps, and how far it may cut the journal (streams/snapshots.py)."""

from __future__ import annotations

from pathlib import Path

from streams.snapshots import (
    Cut,
    PartitionSnapshot,
    StageSnapshot,
    StateSnapshot,
    kept_snapshots,
    listed,
    load,
    save,
    taken_at,
)

DAY = 86400.0
NOW = 1_800_000_000.0


def snapshot_at(when: float, position: int = 10) -> StateSnapshot:
    part = PartitionSnapshot(position=position, events=position, records={"tracking:position": "{}"})
    return StateSnapshot(
        taken_at=when,
        decide=StageSnapshot(state_topic="s", input_topic="j", partitions={0: part}),
        assemble=StageSnapshot(state_topic="a", input_topic="x", partitions={}),
        decisions_from={0: 0},
        assignments_from={0: 0},
    )


def test_a_saved_snapshot_loads_as_it_was_and_is_named_by_its_time(tmp_path: Path) -> None:
    taken = snapshot_at(NOW + 0.25)
    path = save(taken, tmp_path)
    assert load(path) == taken == load(tmp_path)
    assert taken_at(path) == NOW + 0.25
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file left


def test_retention_keeps_the_recent_snapshots_and_the_newest_one_older_than_the_retention(tmp_path: Path) -> None:
    for days_ago in (30, 9, 8, 6, 1):
        save(snapshot_at(NOW - days_ago * DAY), tmp_path)
    paths = listed(tmp_path)
    kept = kept_snapshots(paths, 7 * DAY, NOW)
    assert [round((NOW - taken_at(p)) / DAY) for p in kept] == [8, 6, 1]


def test_the_newest_snapshot_is_kept_however_old(tmp_path: Path) -> None:
    save(snapshot_at(NOW - 30 * DAY), tmp_path)
    save(snapshot_at(NOW - 20 * DAY), tmp_path)
    assert [round((NOW - taken_at(p)) / DAY) for p in kept_snapshots(listed(tmp_path), 7 * DAY, NOW)] == [20]
    assert kept_snapshots([], 7 * DAY, NOW) == []


def test_the_journal_is_never_cut_past_the_deciders_committed_position() -> None:
    assert Cut(partition=0, log_start=0, covered=100, committed=40).below == 40
    assert Cut(partition=0, log_start=0, covered=100, committed=400).below == 100
