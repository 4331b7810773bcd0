"""What an idle fleet's heartbeats cost per hour: journal and decide-state (changelog) records
and bytes, for 1,000 / 10,000 / 100,000 clusters served by two appliers, leases on.

    .venv/bin/python benchmarks/idle_fleet.py                              # this tree
    .venv/bin/python benchmarks/idle_fleet.py --sizes 1000,10000 --minutes 10

    # the code before holder leases, from a checkout of it (the same script, its code):
    git worktree add --detach /tmp/hb-before 36545a3
    PYTHONPATH=/tmp/hb-before .venv/bin/python benchmarks/idle_fleet.py --minutes 2

Nothing is asserted; it prints. The fleet is observed, each applier (`projections/heartbeats.py`'s
`Heartbeats`, the real one: whatever this tree's applier publishes) reaches half of it and
beats once, and the first tick is folded — then `--minutes` of engine time pass with nothing
but what an idle fleet has: a Tick every 10 s (the worker's default) and each applier's beat
every lease/3 (a 60 s lease: every 20 s). Each input record goes through the real router
(`streams/router.py`, which broadcasts heartbeats and ticks to every journal partition) and
the journal records of partition 0 through the real decider (`streams/decider.py` over the
worker's layered state, `streams/state.py`), one batch per record as an idle fleet's records
arrive, with the tracking record the runtime adds per batch (`streams/slots.py`). An idle
fleet has no modules and every record it gets is broadcast, so every journal partition
folds the same records into the same state: partition 0's changelog is multiplied by the
partition count. Bytes are keys plus values (no Kafka record overhead). The window is
scaled to an hour (its cost is periodic: a window of whole beat intervals is exact); the
decider's CPU time is partition 0's, times the partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import time
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

import streams
from infra.observability import Metrics
from infra.topics import TopicNames
from projections.heartbeats import BEATS_PER_LEASE, Heartbeats
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, Tick
from streams.decider import DecidePartition
from streams.outputs import Outputs
from streams.router import RoutePartition
from streams.state import Tracking

TOPICS = TopicNames("idle.")
T0 = 1_800_000_000.0
TICK_EVERY = 10.0


class Totals:
    def __init__(self) -> None:
        self.journal_records = self.journal_bytes = 0
        self.changelog_records = self.changelog_bytes = 0
        self.cpu = 0.0


class IdleFleet:
    """The router and partition 0's decider, fed input records one batch each."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.routers = {
            role: RoutePartition(TopicPartition(TOPICS.name(role), 0), TOPICS, partitions)
            for role in ("clusters", "ticks", "heartbeats")
        }
        self.offsets = dict.fromkeys(self.routers, 0)
        self.decider = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
        self.journal_offset = 0
        self.totals = Totals()

    def input(self, role: str, key: bytes, value: bytes) -> None:
        offset = self.offsets[role]
        self.offsets[role] += 1
        record = ConsumerRecord(TOPICS.name(role), 0, offset, 0, 0, key, value, None, len(key), len(value), [])
        routed = Outputs(TOPICS.dead_letters)
        self.routers[role].process([record], offset + 1, routed)
        journal = [r for r in routed.all() if r.topic == TOPICS.journal]
        assert not routed.dead_letters, [r.value for r in routed.all() if r.topic != TOPICS.journal]
        self.totals.journal_records += len(journal)
        self.totals.journal_bytes += sum(len(r.key or b"") + len(r.value or b"") for r in journal)
        mine = [r for r in journal if r.partition in (0, None)]  # None: keyed (none here)
        if mine:
            self.decide(mine)

    def decide(self, journal: list) -> None:
        records = []
        for out in journal:
            value = out.value or b""
            records.append(
                ConsumerRecord(TOPICS.journal, 0, self.journal_offset, 0, 0, out.key, value, None, 0, len(value), [])
            )
            self.journal_offset += 1
        state = self.decider.state
        started = time.process_time()
        changes = []
        while records:  # a batch stops at BATCH_WRITES: the rest is the next transaction's
            folded = self.decider.process(records, self.journal_offset, Outputs(TOPICS.dead_letters))
            end = records[folded].offset if folded < len(records) else self.journal_offset
            before = state.tracking
            state.tracking = Tracking(offset=end, events=before.events + folded)
            state.keep_event()
            changes += state.changelog()
            state.commit_batch()
            records = records[folded:]
        self.totals.cpu += time.process_time() - started
        self.totals.changelog_records += len(changes) * self.partitions
        self.totals.changelog_bytes += sum(len(k) + len(v or b"") for k, v in changes) * self.partitions


def observation(name: str) -> bytes:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"ring": "wave"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest).to_bytes()


class Replica:
    """An applier replica's heartbeats (the real `Heartbeats`), publishing into an outbox."""

    def __init__(self, holder: str, lease: float, clusters: list[str]) -> None:
        self.outbox: list[tuple[str, bytes]] = []
        self.heartbeats = Heartbeats(self.publish, lease_seconds=lease, holder=holder)
        for name in clusters:
            self.heartbeats.written("ProxyAssemblage", name)

    async def publish(self, key: str, value: bytes) -> None:
        self.outbox.append((key, value))

    def beat(self, fleet: IdleFleet) -> None:
        asyncio.run(self.heartbeats.beat())
        for key, value in self.outbox:
            fleet.input("heartbeats", key.encode(), value)
        self.outbox.clear()


def tick(fleet: IdleFleet, now: float) -> None:
    fleet.input("ticks", b"tick", Tick(now=now).to_bytes())


def measure(size: int, partitions: int, minutes: float, lease: float) -> Totals:
    fleet = IdleFleet(partitions)
    names = [f"cluster-{number:06d}" for number in range(size)]
    tick(fleet, T0)
    for name in names:
        fleet.input("clusters", name.encode(), observation(name))
    replicas = [Replica(f"applier-{index}", lease, names[index::2]) for index in range(2)]
    for replica in replicas:  # each applier's first beat (claims, if it claims), then idle
        replica.beat(fleet)
    fleet.totals = Totals()
    gc.collect()
    interval = lease / BEATS_PER_LEASE
    now, next_beat, end = T0, T0 + interval, T0 + minutes * 60
    while now < end:
        now += TICK_EVERY
        tick(fleet, now)
        while next_beat <= now:
            for replica in replicas:
                replica.beat(fleet)
            next_beat += interval
    return fleet.totals


def tree() -> str:
    where = Path(streams.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return f"{where} @ {head.stdout.strip()}"
    except OSError:
        return str(where)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="cluster counts, comma separated")
    parser.add_argument("--partitions", type=int, default=4, help="journal partitions")
    parser.add_argument("--minutes", type=float, default=60.0, help="idle engine time measured (scaled to an hour)")
    parser.add_argument("--lease", type=float, default=60.0, help="the appliers' --lease-seconds")
    args = parser.parse_args()
    scale = 60.0 / args.minutes
    print(f"code: {tree()}")
    print(
        f"idle hour: 2 appliers, lease {args.lease:.0f} s (a beat every {args.lease / BEATS_PER_LEASE:.0f} s), "
        f"a tick every {TICK_EVERY:.0f} s, {args.partitions} journal partitions; "
        f"measured over {args.minutes:g} min of engine time, scaled to 60"
    )
    columns = ("journal rec/h", "journal MB/h", "changelog rec/h", "changelog MB/h", "decider CPU s/h")
    print(f"{'clusters':>9} " + " ".join(f"{c:>{len(c) + 1}}" for c in columns))
    for size in (int(s) for s in args.sizes.split(",")):
        totals = measure(size, args.partitions, args.minutes, args.lease)
        print(
            f"{size:>9,} {totals.journal_records * scale:>14,.0f} {totals.journal_bytes * scale / 1e6:>13,.3f} "
            f"{totals.changelog_records * scale:>16,.0f} {totals.changelog_bytes * scale / 1e6:>15,.3f} "
            f"{totals.cpu * args.partitions * scale:>16,.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
