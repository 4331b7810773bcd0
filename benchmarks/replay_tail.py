"""Replay time: the whole journal against only its tail past a snapshot (prints figures;
asserts nothing).

    .venv/bin/python benchmarks/replay_tail.py                      # 10,000 clusters, 3 modules, 20,000 ticks
    .venv/bin/python benchmarks/replay_tail.py --clusters 2000 --ticks 5000 --tail-ticks 200
    .venv/bin/python benchmarks/replay_tail.py --modules 8 --no-tail-module   # a heavier history, a tail of ticks

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`); fresh topics
(a random prefix), deleted at the end. A `rollout worker` (4 partitions) folds the history
of an installation that has aged: N ready clusters, M modules rolled out to all of them
(N `succeeded` reports each), then `--ticks` ticks (each copied into every journal
partition). Then `rollout snapshot take`, the tail — `--tail-ticks` more ticks and (unless
`--no-tail-module`) one more module rolled out — and the worker stops. Timed, each as the CLI runs it:

* `rollout replay --check` (the whole journal) and `rollout replay --check --from-snapshot`
  (the tail): seconds, journal events refolded, identical or not;
* the snapshot: seconds to take it, its size;
* `rollout snapshot retain --keep 0s`: the journal's records before and after, and that the
  full replay is then refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from bench_events import cluster_event, cluster_name, module_event, report

from infra import client
from infra.localkafka import discover_bootstrap
from infra.settings import kafka_client_options
from infra.topics import TopicNames, delete_topics, ensure_topics
from rollout.wire.events import Tick

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4


@contextlib.contextmanager
def worker(bootstrap: str, prefix: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "rollout_cli.main", "worker", "--web-port", "0", "--partitions", str(PARTITIONS),
             "--tick-interval", "86400", "--loglevel", "info"],
            env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "worker ready:" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


async def caught_up(bootstrap: str, names: TopicNames, timeout: float = 900) -> None:
    """Until the decider's reported group offsets reach the journal's end, and the journal
    stops growing (the router done too)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    try:
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            ends = await client.end_offsets(bootstrap, names.journal)
            offsets = await admin.list_consumer_group_offsets(f"{names.prefix}rollout-worker.decide")
            decided = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == names.journal}
            if decided == ends and ends == last:
                return
            last = ends
            await asyncio.sleep(6)  # the group offsets are reported every 5 s
        raise SystemExit("the decider did not catch up")
    finally:
        await admin.close()


async def publish_history(bootstrap: str, names: TopicNames, n: int, modules: list[str], ticks: range) -> None:
    labels = {"env": "bench"}
    await client.publish(
        bootstrap, names.clusters, [(cluster_name(i), cluster_event(i, labels).to_bytes()) for i in range(n)]
    )
    fleet = await client.end_offsets(bootstrap, names.clusters)
    for module in modules:
        await client.publish(bootstrap, names.intents, [(module, module_event(module, fleet=fleet))])
        await client.publish(
            bootstrap, names.status, [(cluster_name(i), report(cluster_name(i), module)) for i in range(n)]
        )
    start = time.time()
    await client.publish(bootstrap, names.ticks, [("tick", Tick(now=start + t).to_bytes()) for t in ticks])


def timed_cli(prefix: str, bootstrap: str, *args: str) -> tuple[float, str, int]:
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rollout_cli.main", *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    return time.perf_counter() - started, done.stdout + done.stderr, done.returncode


def first_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return " / ".join(lines[:3])


async def run(n: int, module_count: int, ticks: int, tail_ticks: int, tail_module: bool, keep: Path | None) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    prefix = f"bench-replay-{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    with tempfile.TemporaryDirectory() as tmp:
        log, snapshots_dir = Path(tmp) / "worker.log", (keep or Path(tmp)) / "snapshots"
        try:
            modules = [f"bench-{m}" for m in range(module_count)]
            with worker(bootstrap, prefix, log):
                begun = time.monotonic()
                await publish_history(bootstrap, names, n, modules, range(ticks))
                await caught_up(bootstrap, names)
                print(f"history folded by the worker in {time.monotonic() - begun:.0f} s")
                seconds, output, _ = timed_cli(prefix, bootstrap, "snapshot", "take", "--dir", str(snapshots_dir))
                [path] = list(snapshots_dir.iterdir())
                print(
                    f"snapshot take: {seconds:.1f} s, {path.stat().st_size / 1e6:.1f} MB gzipped ({first_line(output)})"
                )
                await publish_history(bootstrap, names, 0, [], range(ticks, ticks + tail_ticks))
                if tail_module:
                    fleet = await client.end_offsets(bootstrap, names.clusters)
                    await client.publish(
                        bootstrap, names.intents, [("bench-tail", module_event("bench-tail", fleet=fleet))]
                    )
                    reports = [(cluster_name(i), report(cluster_name(i), "bench-tail")) for i in range(n)]
                    await client.publish(bootstrap, names.status, reports)
                await caught_up(bootstrap, names)
            journal = sum((await client.end_offsets(bootstrap, names.journal)).values())
            print(f"journal: {journal} offsets on {PARTITIONS} partitions (records and transaction markers)")
            for label, args in (
                ("full replay", ("replay", "--check")),
                ("from the snapshot", ("replay", "--check", "--from-snapshot", str(snapshots_dir))),
            ):
                seconds, output, code = timed_cli(prefix, bootstrap, *args)
                print(f"{label}: {seconds:.1f} s, exit {code}: {first_line(output)}")
            before = len(await client.read_all(bootstrap, names.journal))
            seconds, output, code = timed_cli(
                prefix, bootstrap, "snapshot", "retain", "--dir", str(snapshots_dir), "--keep", "0s"
            )
            after = len(await client.read_all(bootstrap, names.journal))
            print(f"snapshot retain --keep 0s: {seconds:.1f} s, exit {code}; journal records {before} → {after}")
            seconds, output, code = timed_cli(prefix, bootstrap, "replay", "--check")
            print(f"full replay after retention: exit {code}: {first_line(output)[:160]}")
            seconds, output, code = timed_cli(
                prefix, bootstrap, "replay", "--check", "--from-snapshot", str(snapshots_dir)
            )
            print(f"from the snapshot after retention: {seconds:.1f} s, exit {code}: {first_line(output)}")
        finally:
            if keep is None:
                await delete_topics(bootstrap, prefix)
            else:
                print(f"kept: the topics of ROLLOUT_TOPIC_PREFIX={prefix}, the snapshot in {snapshots_dir}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--modules", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=20_000, help="ticks before the snapshot")
    parser.add_argument("--tail-ticks", type=int, default=500, help="ticks after it")
    parser.add_argument("--keep", type=Path, help="keep the topics, and the snapshot in this directory")
    parser.add_argument(
        "--tail-module", action=argparse.BooleanOptionalAction, default=True, help="one more module rolled out after it"
    )
    args = parser.parse_args()
    asyncio.run(run(args.clusters, args.modules, args.ticks, args.tail_ticks, args.tail_module, args.keep))


if __name__ == "__main__":
    main()
