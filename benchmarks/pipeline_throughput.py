"""End-to-end throughput of the real worker on a real broker (prints figures).

Starts a `rollout worker` (4 partitions) against the broker of ROLLOUT_BOOTSTRAP_SERVERS or
the local one (`rollout kafka start`), publishes N ready clusters and a Module without a
rollout block (one stage, everyone at once), then N `succeeded` reports, and measures:

* fan-out: from the module's arrival to N assignments on the module status topic;
* status: from the first report to phase Complete — status events per second through
  router → journal → decider (each agent settles every event with the broker).

    .venv/bin/python benchmarks/pipeline_throughput.py [N]      # default 2000
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from infra import client
from infra.localkafka import discover_bootstrap
from infra.topics import TopicNames, ensure_topics
from rollout.events import ClusterObserved, ModuleApplied, SyncStatusReported
from rollout.manifests import MANIFEST_ADAPTER


def cluster(i: int) -> bytes:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": f"b-{i:06d}", "labels": {"env": "bench"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest).to_bytes()


MODULE = ModuleApplied(
    module=MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "bench"},
            "spec": {
                "selector": {"matchLabels": {"env": "bench"}},
                "sync": {"source": {"git": {"url": "https://example.com/r", "version": {"tag": "1.0.0"}}}},
            },
        }
    )
).to_bytes()


async def wait_status(bootstrap: str, topic: str, done: Any, timeout: float = 600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        status = (await client.read_latest(bootstrap, topic)).get("bench")
        if status and done(status):
            return time.monotonic()
        await asyncio.sleep(0.5)
    raise TimeoutError("the worker did not finish in time")


async def main(n: int) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        sys.exit("no broker: run `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    prefix = f"bench-{uuid.uuid4().hex[:6]}."
    names = TopicNames(prefix)
    await ensure_topics(bootstrap, prefix, 4)
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    with tempfile.TemporaryDirectory() as data:
        worker = subprocess.Popen(
            [sys.executable, "-m", "rollout_cli.main", "worker", "--data-dir", data, "--web-port", "0",
             "--partitions", "4", "--loglevel", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await client.publish(bootstrap, names.clusters, [(f"b-{i:06d}", cluster(i)) for i in range(n)])
            start = time.monotonic()
            await client.publish(bootstrap, names.intents, [("bench", MODULE)])

            def all_assigned(status: dict[str, Any]) -> bool:
                counts = status["stages"][0]["counts"]
                return counts["members"] == n and counts["pending"] == 0

            assigned = await wait_status(bootstrap, names.module_status, all_assigned)
            reports = [
                (f"b-{i:06d}", SyncStatusReported(cluster=f"b-{i:06d}", module="bench", revision="1.0.0",
                                                  state="succeeded").to_bytes())
                for i in range(n)
            ]  # fmt: skip
            reported = time.monotonic()
            await client.publish(bootstrap, names.status, reports)
            complete = await wait_status(bootstrap, names.module_status, lambda s: s["phase"] == "Complete")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
    print(f"clusters: {n}, partitions: 4, broker: {bootstrap}")
    print(f"fan-out   (module → {n} assignments, incl. worker start-up): {assigned - start:7.1f} s")
    print(
        f"status    ({n} reports → Complete): {complete - reported:7.1f} s = {n / (complete - reported):6.0f} events/s"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
