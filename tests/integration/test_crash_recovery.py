"""At-least-once for real: the worker is killed with SIGKILL while events stream in, then
restarted. Faust replays what was not committed; every transition being idempotent, the
projections must end exactly as if nothing had happened — every cluster gets its sync, no
snapshot version is published twice with different content, and refolding the log gives
the same projections."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from infra import client
from rollout.events import ClusterObserved, ModuleApplied
from rollout.manifests import MANIFEST_ADAPTER
from rollout_cli.main import cli
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration
FLEET = 150


def cluster(i: int) -> ClusterObserved:
    return ClusterObserved(
        cluster=MANIFEST_ADAPTER.validate_python(
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": f"k-{i:03d}", "namespace": "fleet", "labels": {"tier": str(i % 3)}},
                "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
            }
        )
    )


def module(name: str, tag: str) -> ModuleApplied:
    return ModuleApplied(
        module=MANIFEST_ADAPTER.validate_python(
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "BootstrapModule",
                "metadata": {"name": name, "namespace": "fleet"},
                "spec": {
                    "selector": {},
                    "sync": {"source": {"git": {"url": "https://example.com/base", "version": {"tag": tag}}}},
                },
            }
        )
    )


@pytest.mark.xfail(
    strict=False,
    reason="KNOWN DEFECT, under investigation: after a SIGKILL, the restarted worker's router sometimes "
    "skips a run of input events published while it was down (they never reach the journal), so "
    "those clusters get nothing; about half the rounds fail. Clean stops lose nothing "
    "(test_walking_skeleton). See docs/architecture.md, 'What remains'.",
)
@pytest.mark.parametrize("round_", range(1, int(os.environ.get("ROLLOUT_CRASH_ROUNDS", "2")) + 1))
def test_sigkill_mid_stream_loses_and_duplicates_nothing(kafka_bootstrap: str, tmp_path: Path, round_: int) -> None:
    stack = Stack(kafka_bootstrap, tmp_path, partitions=2, tick_interval=0.5)
    try:
        stack.start_worker()
        stack.send("intents", "base", module("base", "1.0.0"))

        def feed() -> None:
            for start in range(0, FLEET, 10):
                batch = [(f"k-{i:03d}", cluster(i).to_bytes()) for i in range(start, start + 10)]
                asyncio.run(client.publish(stack.bootstrap, stack.topics.clusters, batch))
                time.sleep(0.2)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_for("some snapshots", lambda: len(stack.latest("remote")) >= 10, timeout=60, interval=0.05)
        assert stack.worker is not None
        stack.worker.send_signal(signal.SIGKILL)
        stack.worker.wait()
        at_kill = len(stack.latest("remote"))
        feeder.join()
        assert at_kill < FLEET, "the worker was killed after the stream ended: nothing was tested"
        stack.send("intents", "base", module("base", "1.1.0"))
        stack.start_worker()

        def converged() -> bool:
            remote = stack.latest("remote")
            return len(remote) == FLEET and all(s["spec"]["syncs"][0]["revision"] == "1.1.0" for s in remote.values())

        try:
            wait_for("every cluster on 1.1.0", converged, timeout=120)
        except AssertionError:
            remote = stack.latest("remote")
            stale = sorted(c for c, s in remote.items() if s["spec"]["syncs"][0]["revision"] != "1.1.0")
            missing = sorted({f"k-{i:03d}" for i in range(FLEET)} - set(remote))
            raise AssertionError(f"prefix {stack.prefix}: missing {missing}, not on 1.1.0: {stale}") from None
        seen: dict[tuple[str, int], str] = {}
        for record in stack.records("remote"):
            if record.value is None:
                continue
            document = record.json()
            key = (record.key or "", document["version"])
            assert seen.setdefault(key, record.value.decode()) == record.value.decode(), f"{key}: two contents"
        time.sleep(1)
        result = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    finally:
        stack.stop()
