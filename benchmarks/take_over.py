"""What a take-over costs per state record: the decider's state topic read back through the
real reader (`StateReader.catch_up`, read_committed) into a new partition's state
(`PartitionState.restore`), on a real broker.

    ROLLOUT_BOOTSTRAP_SERVERS=… .venv/bin/python benchmarks/take_over.py [--clusters 50000]
        [--modules 20] [--runs 3] [--profile N] [--keep-topic PREFIX]

The records are the real decider's: benchmarks/fleet_memory.py's fold (the fleet broadcast
to the partition, then `--modules` modules, m-000 rolling out and the others holding their
canary — every cluster a pending target of each) writes each batch's `changelog()`; they
are produced to a fresh `decide-state` topic (infra/topics.py's settings) in transactions
of one batch's records, as the decider commits them. With one journal partition,
clusters x (modules + 1) records: 50,000 x 20 is ~1.05 M, one of the four partitions of
100,000 x 20 (~0.85 M each; the issue's restart read 3.4 M over four).

Then, `--runs` times, a fresh `DecidePartition` takes the partition over as the worker does
(streams/restore.py's reader, the stage's `PartitionState`): printed per run are the records
folded, wall and CPU seconds (this process: aiokafka's fetch parsing and the fold; the broker
is another process), records/s and µs of CPU a record, and the load average.
`--profile N`: cProfile of one more catch-up, the N costliest functions by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from fleet_memory import fold, read_changelog

from infra.observability import Metrics
from infra.topics import TopicNames, delete_topics, ensure_topics
from streams.decider import DecidePartition
from streams.restore import StateReader


def changelog_records(path: Path) -> list[list[tuple[bytes, bytes | None]]]:
    """fleet_memory's changelog file, as the batches (transactions) the decider wrote."""
    records = read_changelog(path)
    # the file does not mark batches: transactions of 2,000, the decider's batches' order of size
    return [records[i : i + 2000] for i in range(0, len(records), 2000)]


async def fill(bootstrap: str, topic: str, batches: list[list[tuple[bytes, bytes | None]]]) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"take-over-bench-{uuid.uuid4().hex[:8]}",
        enable_idempotence=True,
        acks="all",
        linger_ms=2,
        max_batch_size=1024 * 1024,
    )
    await producer.start()
    sent = 0
    try:
        for batch in batches:
            async with producer.transaction():
                futures = [await producer.send(topic, key=k, value=v, partition=0) for k, v in batch]
                await asyncio.gather(*futures)
            sent += len(batch)
    finally:
        await producer.stop()
    return sent


async def take_over(bootstrap: str, names: TopicNames, profile: cProfile.Profile | None) -> tuple[int, float, float]:
    decider = DecidePartition(TopicPartition(names.journal, 0), names, Metrics())
    assert decider.state is not None
    reader = StateReader(bootstrap, names.name("decide_state"), "take-over-bench", {})
    await reader.start()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        folded, _ = await reader.catch_up(decider.state, 0, 0)
        if profile is not None:
            profile.disable()
        return folded, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await reader.stop()


async def main_async(args: argparse.Namespace) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    prefix = args.keep_topic or f"take-over-{uuid.uuid4().hex[:6]}."
    names = TopicNames(prefix)
    if args.keep_topic is None:
        with tempfile.TemporaryDirectory(prefix="take-over-") as directory:
            started = time.perf_counter()
            folded = fold(
                argparse.Namespace(
                    clusters=args.clusters, modules=args.modules, partitions=1, directory=directory, trace=False,
                    rollout=False,
                )
            )  # fmt: skip
            state = folded["state"][0]
            print(f"decider folded {args.clusters:,} clusters x {args.modules} modules on one partition in "
                  f"{time.perf_counter() - started:.1f} s: {state['records']:,} state records, "
                  f"{state['bytes'] / 2**20:.0f} MiB", flush=True)  # fmt: skip
            batches = changelog_records(Path(directory) / "decide-state-0.bin")
        await ensure_topics(bootstrap, prefix, 1)
        started = time.perf_counter()
        topic = names.name("decide_state")
        sent = await fill(bootstrap, topic, batches)
        del batches
        print(f"produced {sent:,} records to {topic} in {time.perf_counter() - started:.1f} s", flush=True)
    try:
        for run in range(args.runs):
            folded_n, wall, cpu = await take_over(bootstrap, names, None)
            print(f"take-over {run + 1}: {folded_n:,} records, {wall:.2f} s wall, {cpu:.2f} s CPU "
                  f"({folded_n / wall:,.0f} records/s, {1e6 * cpu / max(folded_n, 1):.2f} µs of CPU a record); "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        if args.profile:
            profile = cProfile.Profile()
            await take_over(bootstrap, names, profile)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.profile)
            print(out.getvalue())
    finally:
        if args.keep_topic is None and not args.keep:
            await delete_topics(bootstrap, prefix)
        elif args.keep_topic is None:
            print(f"kept: --keep-topic {prefix}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=50_000)
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, help="cProfile one more catch-up: the N costliest")
    parser.add_argument("--keep", action="store_true", help="keep the topic (its prefix is printed)")
    parser.add_argument("--keep-topic", help="read an existing topic (a prefix --keep printed); no fold")
    args = parser.parse_args()
    sys.setrecursionlimit(10_000)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
