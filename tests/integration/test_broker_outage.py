"""A broker outage and restart under a running applier: readiness follows the broker within
seconds, the process stays up without flooding its log, and once the broker is back (on the
same port) it applies new snapshots again.

Uses its own broker — the session broker and a developer's `rollout kafka start` broker are
never stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import client
from infra.localkafka import BrokerInfo, LocalKafka
from infra.topics import TopicNames, ensure_topics
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync
from tests.integration.stack import free_port, http_get, wait_for

pytestmark = pytest.mark.integration

OUTAGE_SECONDS = 10.0
READY_WITHIN = 5.0
MAX_LOG_LINES_DURING_OUTAGE = 50


def snapshot(cluster: str, version: int, *modules: str) -> bytes:
    syncs: list[dict[str, Any]] = []
    for module in modules:
        record = Sync.model_validate(
            {
                "source": {"git": {"url": f"https://example.com/{module}", "version": {"tag": "1.0.0"}}},
                "package": {"kustomize": {"path": "./deploy"}},
            }
        )
        syncs.append(
            AssignedSync(module=module, module_namespace="fleet", revision="1.0.0", sync=record).model_dump(
                by_alias=True
            )
        )
    document = Assemblage.model_validate(
        {
            "kind": "ProxyAssemblage",
            "metadata": {"name": cluster, "namespace": "fleet"},
            "version": version,
            "spec": {"syncs": syncs},
        }
    )
    return document.model_dump_json(by_alias=True).encode()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[LocalKafka, BrokerInfo]]:
    kafka = LocalKafka(tmp_path / "kafka.json")
    info = kafka.start(data_dir=tmp_path / "kafka-data", heap="256m")
    try:
        yield kafka, info
    finally:
        kafka.stop()


def readyz(port: int) -> int:
    answer = http_get(port, "/readyz")
    return answer[0] if answer else 0


class Applier:
    """`rollout applier --sink dir:... --simulate-status` as a process, on its own topics."""

    def __init__(self, info: BrokerInfo, workdir: Path) -> None:
        self.bootstrap = info.bootstrap
        self.prefix = f"outage-{uuid.uuid4().hex[:8]}."
        self.topics = TopicNames(self.prefix)
        asyncio.run(ensure_topics(info.bootstrap, self.prefix, 1))
        self.out = workdir / "flux-out"
        self.log_path = workdir / "applier.log"
        self.web_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.args = ["applier", "--sink", f"dir:{self.out}", "--web-port", str(self.web_port), "--simulate-status"]
        self.env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": info.bootstrap, "ROLLOUT_TOPIC_PREFIX": self.prefix}
        self.workdir = workdir

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rollout_cli.main", *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            assert self.process.wait(timeout=30) == 0
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the applier did not stop within 30s of SIGTERM") from None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_lines(self) -> int:
        return len(self.log_text().splitlines())

    def alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"applier exited with {self.process.returncode}:\n{self.log_text()[-3000:]}")
        return True

    def ready(self) -> int:
        return readyz(self.web_port)

    def publish(self, version: int, *modules: str) -> None:
        asyncio.run(client.publish(self.bootstrap, self.topics.proxy, [("c1", snapshot("c1", version, *modules))]))

    def applied(self, module: str) -> bool:
        return self.alive() and (self.out / "proxy" / "c1" / f"{module}.yaml").exists()

    def reported(self, module: str) -> bool:
        records = asyncio.run(client.read_all(self.bootstrap, self.topics.status))
        return any(r.json()["module"] == module and r.json()["state"] == "succeeded" for r in records)


@pytest.fixture
def applier(broker: tuple[LocalKafka, BrokerInfo], tmp_path: Path) -> Iterator[Applier]:
    process = Applier(broker[1], tmp_path)
    try:
        yield process
    finally:
        process.stop()


def test_applier_rides_out_a_broker_outage_and_restart(broker: tuple[LocalKafka, BrokerInfo], applier: Applier) -> None:
    kafka, info = broker
    applier.start()
    applier.publish(1, "alpha")
    wait_for("the first snapshot's file", lambda: applier.applied("alpha"), timeout=60)
    wait_for("readiness", lambda: applier.alive() and applier.ready() == 200, timeout=30, interval=0.2)

    before = applier.log_lines()
    kafka.stop()
    stopped = time.monotonic()
    wait_for("/readyz to answer 503 after the broker stopped", lambda: applier.ready() == 503, READY_WITHIN, 0.2)
    not_ready_after = time.monotonic() - stopped
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped)))
    assert applier.alive()
    assert applier.ready() == 503
    grown = applier.log_lines() - before
    assert grown <= MAX_LOG_LINES_DURING_OUTAGE, (
        f"{grown} log lines during a {OUTAGE_SECONDS:.0f}s outage:\n{applier.log_text()[-5000:]}"
    )

    again = kafka.start(data_dir=info.data_dir, heap="256m")
    assert again.bootstrap == info.bootstrap
    restarted = time.monotonic()
    wait_for("readiness after the restart", lambda: applier.alive() and applier.ready() == 200, 30, 0.2)
    ready_again_after = time.monotonic() - restarted

    applier.publish(2, "alpha", "beta")
    wait_for("a snapshot published after the restart", lambda: applier.applied("beta"))
    wait_for("its simulated status report", lambda: applier.reported("beta"), timeout=30)
    print(
        f"503 after {not_ready_after:.1f}s, {grown} log lines during the outage, "
        f"200 again {ready_again_after:.1f}s after the restart"
    )


def test_applier_started_while_the_broker_is_down_waits_for_it(
    broker: tuple[LocalKafka, BrokerInfo], applier: Applier
) -> None:
    kafka, info = broker
    applier.publish(1, "alpha")
    kafka.stop()
    applier.start()
    wait_for("the web port", lambda: applier.alive() and applier.ready() == 503, timeout=30, interval=0.2)
    time.sleep(8)  # several failed attempts to create the clients
    assert applier.alive()
    assert applier.log_lines() <= MAX_LOG_LINES_DURING_OUTAGE, applier.log_text()[-5000:]

    kafka.start(data_dir=info.data_dir, heap="256m")
    wait_for("readiness once the broker is up", lambda: applier.alive() and applier.ready() == 200, 45, 0.2)
    wait_for("the snapshot published before the outage", lambda: applier.applied("alpha"))
    applier.publish(2, "alpha", "beta")
    wait_for("a snapshot published afterwards", lambda: applier.applied("beta"))


def test_worker_rides_out_a_broker_outage_and_restart(broker: tuple[LocalKafka, BrokerInfo], tmp_path: Path) -> None:
    """The worker, started in an empty directory, keeps running through a 10 s outage,
    says so on /readyz within 5 s without flooding its log, and afterwards rolls a new
    revision out — nothing lost, replay identical."""
    from tests.integration.chaos import cluster, module
    from tests.integration.stack import Stack

    kafka, info = broker
    workdir = tmp_path / "empty"
    workdir.mkdir()
    stack = Stack(info.bootstrap, workdir, partitions=2, tick_interval=0.5)
    try:
        stack.start_worker()
        assert stack.worker is not None
        for i in range(20):
            stack.send("clusters", f"k-{i:03d}", cluster(i))
        stack.send("intents", "base", module("base", "1.0.0"))
        wait_for("20 snapshots", lambda: len(stack.latest("remote")) == 20, timeout=60)
        wait_for("readiness", lambda: readyz(stack.worker_port) == 200, timeout=30, interval=0.2)

        before = len(stack.log("worker").splitlines())
        kafka.stop()
        stopped = time.monotonic()
        wait_for("/readyz 503 after the broker stopped", lambda: readyz(stack.worker_port) == 503, READY_WITHIN, 0.2)
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped)))
        assert stack.worker.poll() is None, stack.log("worker")[-3000:]
        grown = len(stack.log("worker").splitlines()) - before
        assert grown <= MAX_LOG_LINES_DURING_OUTAGE, f"{grown} lines:\n{stack.log('worker')[-5000:]}"

        assert kafka.start(data_dir=info.data_dir, heap="256m").bootstrap == info.bootstrap
        try:
            wait_for("readiness after the restart", lambda: readyz(stack.worker_port) == 200, 60, 0.2)
        except AssertionError as timeout:  # say why: what /readyz names, and what the worker logged
            answer = http_get(stack.worker_port, "/readyz")
            raise AssertionError(f"{timeout}\n/readyz: {answer}\nworker log:\n{stack.log('worker')[-6000:]}") from None
        stack.send("intents", "base", module("base", "1.1.0"))

        def rolled_out() -> bool:
            remote = stack.latest("remote")
            return len(remote) == 20 and all(s["spec"]["syncs"][0]["revision"] == "1.1.0" for s in remote.values())

        wait_for("every cluster on 1.1.0 after the outage", rolled_out, timeout=90)
        assert stack.worker.poll() is None
        from click.testing import CliRunner

        from rollout_cli.main import cli

        replay = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
        assert replay.exit_code == 0, replay.output
    finally:
        stack.stop()
