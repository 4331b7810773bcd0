"""A real `rollout worker` process for CLI tests: its own topic prefix on the session broker,
started as users start it (`python -m rollout_cli.main worker`), stopped with SIGTERM; and
the manifests the CLI tests publish to it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra import client
from infra.topics import TopicNames, ensure_topics
from rollout.api.manifests import ClusterManifest, ModuleManifest
from rollout.wire.events import EventBase

WORKER_READY = "worker ready:"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Worker:
    def __init__(self, bootstrap: str, prefix: str, log: Path) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.topics = TopicNames(prefix)
        self.log = log

    def send(self, role: str, key: str, *events: EventBase) -> None:
        messages: list[tuple[str, bytes | None]] = [(key, event.to_bytes()) for event in events]
        asyncio.run(client.publish(self.bootstrap, self.topics.name(role), messages))

    def latest(self, role: str) -> dict[str, object]:
        return asyncio.run(client.read_latest(self.bootstrap, self.topics.name(role)))


@contextmanager
def running_worker(bootstrap: str, workdir: Path, *, tick_interval: float = 1.0) -> Iterator[Worker]:
    """A worker on a fresh prefix (2 partitions), ready when this yields."""
    prefix = f"cliw-{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(bootstrap, prefix, 2))
    log = workdir / f"worker-{prefix.rstrip('.')}.log"
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    command = [sys.executable, "-m", "rollout_cli.main", "worker", "--partitions", "2"]
    command += ["--tick-interval", str(tick_interval), "--web-port", str(free_port())]
    with log.open("ab") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        deadline = time.monotonic() + 90
        while WORKER_READY not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield Worker(bootstrap, prefix, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


API = "rollout.dev/v1alpha1"


def a_cluster(name: str, ring: str) -> ClusterManifest:
    return ClusterManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )


CANARY = {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}
WAVE_1_APPROVED = {"name": "wave-1", "requireApproval": True}


def podinfo(
    tag: str = "6.7.0", name: str = "podinfo", stages: tuple[dict[str, Any], ...] | None = None
) -> ModuleManifest:
    """A Module of every cluster, staged canary (ring=canary) → wave-1 (after an approval)
    unless `stages` says otherwise."""
    return ModuleManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {}},
                "sync": {
                    "source": {"git": {"url": "https://github.com/stefanprodan/podinfo", "version": {"tag": tag}}},
                    "package": {"kustomize": {"path": "./kustomize"}},
                },
                "rollout": {"stages": list(stages or (CANARY, WAVE_1_APPROVED))},
            },
        }
    )
