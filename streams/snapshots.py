"""State snapshots: the stateful stages' state at a known input position, copied out of
their state topics, so that `rollout replay --from-snapshot` refolds only the journal's
tail and the journal can be cut below what a snapshot covers.

    decisions, assignments: end offsets (read_committed) ──┐
    assemble-state, then decide-state (read_committed, to the end) ──► StateSnapshot ──► a file
                                                          └─ per partition: every key's latest
                                                             value and `tracking:position`

Why a copy of the state topics read at their end is a consistent snapshot: a stage writes
its state changes *and* its tracked input position (`tracking:position`, streams/state.py)
in one transaction per batch, so the committed records of state partition p up to its last
stable offset are exactly the state after the last committed batch — the position they
cover is the `tracking:position` among them. A compacted topic holds only the latest
state, so a snapshot "as of position P" is captured deliberately, by copying it out: kept
as a file (gzipped JSON, `snapshot-<UTC time>.json.gz` in one directory). Nothing in the
worker changes for it, and a snapshot can be taken while the worker runs.

Where its tail starts on the output topics. The decisions' and the assignments' end
offsets are read *before* the state topics: a batch past a snapshot's position had not
committed when its state was read, so it was still open (its records at or past the last
stable offset) or not begun when those end offsets were read — every record the tail of
the journal produced lies at or past them. (Records before them may also come from before
the snapshot's positions: a decision's id says which; an assignment does not, so replay
compares each (cluster, module)'s replayed assignments with the end of what is on the
topic from there.)

Retention (`retain`): the snapshots younger than the retention, and the newest one older
than it — so the journal keeps at least the retention's worth of inputs — are kept; the
journal's records below the oldest kept snapshot's decide positions are deleted, never
past the decider's committed position (and the assignments' below what that snapshot's
replay reads of them, never past the assembler's position) (its state covers everything below that: a decider
restoring after any outage restores from decide-state and seeks to its tracked position,
at or past the journal's new start). Kafka's own time or size retention cannot promise
that — it deletes segments whether or not the decider read them — so the journal keeps
retention -1 and is only ever cut here.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import TopicPartition
from pydantic import BaseModel, ConfigDict, Field

from infra import client
from infra.topics import TopicNames, delete_records_below, log_start_offsets
from streams.state import PartitionState, Tracking

SNAPSHOT_FORMAT = 1
TRACKING_KEY = f"{PartitionState.TRACKING}:position"
DEFAULT_RETENTION = 7 * 24 * 3600.0
"""Seconds of journal `rollout snapshot retain` keeps by default (see `retain`)."""


class PartitionSnapshot(BaseModel):
    """One state partition: every key's latest value (`<mapping>:<key>` → its JSON, as on
    the state topic) and the input position they cover."""

    model_config = ConfigDict(extra="forbid")

    position: int = 0  # the next input offset: the state holds every input record below it
    events: int = 0
    records: dict[str, str] = Field(default_factory=dict)

    def state(self, schema: dict[str, type], *, lazy: tuple[str, ...] = ()) -> PartitionState:
        """The partition's state as the stage restores it (streams/state.py's decode path;
        `lazy`: the mappings decoded only when read, as the decider restores its own)."""
        state = PartitionState(schema, lazy=lazy)
        state.restore((key.encode(), value.encode()) for key, value in self.records.items())
        return state


class StageSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state_topic: str
    input_topic: str
    partitions: dict[int, PartitionSnapshot]

    def positions(self) -> dict[int, int]:
        return {partition: snapshot.position for partition, snapshot in self.partitions.items()}


class StateSnapshot(BaseModel):
    """The decider's and the assembler's state at their positions, and where their tail
    starts on the output topics (see the module doc)."""

    model_config = ConfigDict(extra="forbid")

    format: int = SNAPSHOT_FORMAT
    taken_at: float  # seconds since the epoch
    decide: StageSnapshot
    assemble: StageSnapshot
    decisions_from: dict[int, int]
    assignments_from: dict[int, int]

    def name(self) -> str:
        stamp = datetime.fromtimestamp(self.taken_at, UTC)
        return f"snapshot-{stamp:%Y%m%dT%H%M%S}{stamp.microsecond // 1000:03d}Z.json.gz"


async def capture(bootstrap: str, topics: TopicNames) -> StateSnapshot:
    """Copy the state topics as they are committed now (see the module doc for the order)."""
    decisions_from = await client.end_offsets(bootstrap, topics.decisions)
    assignments_from = await client.end_offsets(bootstrap, topics.assignments)
    taken_at = time.time()
    assemble = await _stage(bootstrap, topics.name("assemble_state"), topics.assignments)
    decide = await _stage(bootstrap, topics.name("decide_state"), topics.journal)
    return StateSnapshot(
        taken_at=taken_at,
        decide=decide,
        assemble=assemble,
        decisions_from=decisions_from,
        assignments_from=assignments_from,
    )


async def _stage(bootstrap: str, state_topic: str, input_topic: str) -> StageSnapshot:
    """Every partition of `state_topic` read to its last stable offset: the latest value per
    key (tombstoned keys dropped) and the tracked position among them."""
    partitions = {p: PartitionSnapshot() for p in await client.end_offsets(bootstrap, state_topic)}
    for record in await client.read_all(bootstrap, state_topic):
        if record.key is None:
            continue
        records = partitions[record.partition].records
        if record.value is None:
            records.pop(record.key, None)
        else:
            records[record.key] = record.value.decode()
    for snapshot in partitions.values():
        if TRACKING_KEY in snapshot.records:
            tracking = Tracking.model_validate_json(snapshot.records[TRACKING_KEY])
            snapshot.position, snapshot.events = tracking.offset, tracking.events
    return StageSnapshot(state_topic=state_topic, input_topic=input_topic, partitions=partitions)


# -- the files ----------------------------------------------------------------------------


def save(snapshot: StateSnapshot, directory: Path) -> Path:
    """Write `snapshot` into `directory` (atomically: a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / snapshot.name()
    partial = directory / f".{path.name}.tmp"
    partial.write_bytes(gzip.compress(snapshot.model_dump_json().encode(), compresslevel=5))
    partial.replace(path)
    return path


def load(path: Path) -> StateSnapshot:
    """The snapshot in `path`, or (a directory) the newest snapshot in it."""
    if path.is_dir():
        found = listed(path)
        if not found:
            raise FileNotFoundError(f"no snapshot in {path} (take one with `rollout snapshot take --dir {path}`)")
        path = found[-1]
    return StateSnapshot.model_validate_json(gzip.decompress(path.read_bytes()))


def listed(directory: Path) -> list[Path]:
    """The snapshot files in `directory`, oldest first (their names sort by time)."""
    return sorted(directory.glob("snapshot-*.json.gz")) if directory.is_dir() else []


def taken_at(path: Path) -> float:
    """When the snapshot in `path` was taken, from its name."""
    stamp = path.name.removeprefix("snapshot-").removesuffix(".json.gz")
    return datetime.strptime(stamp[:-4], "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp() + int(stamp[-4:-1]) / 1000


# -- retention ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """What retention does to one journal partition."""

    partition: int
    log_start: int  # the journal's first offset before the cut
    covered: int  # the oldest kept snapshot's decide position
    committed: int  # the decider's committed position now

    @property
    def below(self) -> int:
        """Delete below this: what the oldest kept snapshot covers, never past the decider."""
        return min(self.covered, self.committed)


@dataclass(frozen=True)
class Retention:
    kept: list[Path]
    dropped: list[Path]
    cuts: list[Cut]  # the journal's
    deleted: dict[int, int]  # partition → the journal's new log start (empty on a dry run)
    assignment_cuts: list[Cut] = field(default_factory=list)
    input_cuts: dict[str, list[Cut]] = field(default_factory=dict)  # ROUTED_INPUTS' topics


ROUTED_INPUTS = ("status", "ticks")
"""Input topics retention cuts too: status reports (and gate results) and ticks — what grows
with time on an installation at rest. The journal holds each of their records once the
router has routed it, so below the router's committed position they are copies; cut below
that and below the oldest kept snapshot's time, they keep the same window as the journal.
Intents and cluster observations are what users published (kept as its record; they grow
with what users do, not with time), heartbeats are compacted, and the dependencies topic
keeps its 7 days (infra/topics.py)."""


def kept_snapshots(paths: list[Path], keep: float, now: float) -> list[Path]:
    """The snapshots younger than `keep` seconds and the newest one older than that (the
    oldest kept then covers at least `keep` of the journal); the newest always."""
    if not paths:
        return []
    older = [p for p in paths if taken_at(p) < now - keep]
    younger = [p for p in paths if taken_at(p) >= now - keep]
    return ([older[-1]] if older else []) + younger


async def retain(
    bootstrap: str,
    topics: TopicNames,
    directory: Path,
    *,
    keep: float,
    now: float,
    dry_run: bool = False,
    router_group: str | None = None,
) -> Retention:
    """Drop the snapshots `kept_snapshots` does not keep and cut the journal below the
    oldest kept one (capped by the decider's committed position, read now); with the
    router's consumer group, cut `ROUTED_INPUTS` below what it routed before that snapshot."""
    paths = listed(directory)
    kept = kept_snapshots(paths, keep, now)
    dropped = [p for p in paths if p not in kept]
    if not kept:
        return Retention([], [], [], {})
    oldest = load(kept[0])
    if oldest.decide.input_topic != topics.journal:
        raise ValueError(f"{kept[0]} is a snapshot of {oldest.decide.input_topic}, not of {topics.journal}")
    committed = (await _stage(bootstrap, topics.name("decide_state"), topics.journal)).positions()
    cuts = await _cuts(bootstrap, topics.journal, oldest.decide.positions(), committed)
    # the assignments: below what the oldest snapshot's replay reads of them (its assembler's
    # position, and where the tail's assignments start) and below the assembler's position
    assembled = (await _stage(bootstrap, topics.name("assemble_state"), topics.assignments)).positions()
    needed = {
        p: min(oldest.assignments_from.get(p, 0), oldest.assemble.positions().get(p, 0))
        for p in set(oldest.assignments_from) | set(oldest.assemble.positions())
    }
    assignment_cuts = await _cuts(bootstrap, topics.assignments, needed, assembled)
    input_cuts: dict[str, list[Cut]] = {}
    if router_group is not None:
        when = taken_at(kept[0])
        before = {role: await client.offsets_at(bootstrap, topics.name(role), when) for role in ROUTED_INPUTS}
        # the group's offsets of these partitions only: Describe on the topics retention cuts
        # is all it takes (infra/kafka_acls.py, the snapshotter), not on every topic routed
        asked = [TopicPartition(topics.name(role), p) for role in ROUTED_INPUTS for p in sorted(before[role])]
        routed = await client.committed_offsets(bootstrap, router_group, asked)
        for role in ROUTED_INPUTS:
            topic = topics.name(role)
            committed = {tp.partition: offset for tp, offset in routed.items() if tp.topic == topic}
            input_cuts[role] = await _cuts(bootstrap, topic, before[role], committed)
    deleted: dict[int, int] = {}
    if not dry_run:
        deleted = await delete_records_below(bootstrap, topics.journal, _wanted(cuts))
        await delete_records_below(bootstrap, topics.assignments, _wanted(assignment_cuts))
        for role, role_cuts in input_cuts.items():
            await delete_records_below(bootstrap, topics.name(role), _wanted(role_cuts))
        for path in dropped:
            path.unlink(missing_ok=True)
    return Retention(kept, dropped, cuts, deleted, assignment_cuts, input_cuts)


async def _cuts(bootstrap: str, topic: str, covered: dict[int, int], committed: dict[int, int]) -> list[Cut]:
    starts = await log_start_offsets(bootstrap, topic)
    return [
        Cut(partition, start, covered.get(partition, 0), committed.get(partition, 0))
        for partition, start in sorted(starts.items())
    ]


def _wanted(cuts: list[Cut]) -> dict[int, int]:
    return {cut.partition: cut.below for cut in cuts if cut.below > cut.log_start}
