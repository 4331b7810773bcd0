"""Chaos rounds: a rollout while workers are SIGKILLed, restarted, joined and stopped.

One round: a fleet of ready clusters streams in (in batches, on the real broker) with a
BootstrapModule on 1.0.0; while it streams, a `disruption` hits the workers; then the
module moves to 1.1.0 and the round waits until every cluster runs it. What is checked —
the definition of "effectively once":

* every input event id is in the journal (nothing lost between inputs and the engine);
* each stage's tracked position counts exactly the records of its input partition
  (`events == records`, `offset == end`): no journal or assignment offset skipped, none
  counted twice;
* the projections and the decision records (hashes included) equal a clean refold of the
  journal (`rollout replay --check`), and every decision chain verifies end to end
  (`rollout history --verify`: the chain head is committed with the decisions);
* no snapshot version was published with two different contents;
* no worker exited unless the round killed or stopped it.

`tests/integration/test_crash_recovery.py` runs a few rounds of each disruption in CI;
`benchmarks/chaos.py` runs many and prints a table.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from infra import client
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from rollout_cli.main import cli
from tests.integration.stack import Stack, wait_for

FLEET = 150
DISRUPTIONS = ("sigkill", "sigkill-during-recovery", "sigkill-during-rebalance", "join-and-leave")


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


@dataclass
class RoundResult:
    disruption: str
    prefix: str = ""  # of the round's topics
    inputs: int = 0
    lost: list[str] = field(default_factory=list)
    miscounted: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    broken_chains: list[str] = field(default_factory=list)
    conflicting_versions: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    converged: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.converged and not (
            self.lost
            or self.miscounted
            or self.diverged
            or self.broken_chains
            or self.conflicting_versions
            or self.unexpected_exits
        )

    def explain(self) -> str:
        parts = [f"{self.disruption}: converged={self.converged}"]
        for name in ("lost", "miscounted", "diverged", "broken_chains", "conflicting_versions", "unexpected_exits"):
            items = getattr(self, name)
            if items:
                parts.append(f"{name} ({len(items)}): {items[:10]}")
        return "; ".join(parts)


class Workers:
    """The round's worker processes; knows which exits it caused."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.intended: set[int] = set()  # pids the round killed or stopped
        self.exited: list[str] = []

    def start(self, name: str, *, wait: bool = True) -> subprocess.Popen[bytes]:
        process = self.stack.start_worker_process(name)
        self.processes[name] = process
        if wait:
            self.stack.wait_ready(process, name=name)
        return process

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        self.intended.add(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        self.intended.add(process.pid)
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            self.exited.append(f"{name} did not stop within 60s of SIGTERM: {self.stack.log(name)[-1500:]}")
            return
        if code != 0:
            self.exited.append(f"{name} exited {code} on SIGTERM")

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None and process.pid not in self.intended:
                self.exited.append(f"{name} exited {process.returncode}: {self.stack.log(name)[-500:]}")

    def stop_all(self) -> None:
        self.check_alive()
        for name in list(self.processes):
            if self.processes[name].poll() is None:
                self.stop(name)


def _disrupt(disruption: str, workers: Workers, rng: random.Random) -> None:
    time.sleep(rng.uniform(0.3, 1.2))
    if disruption == "sigkill":
        workers.kill("worker")
        time.sleep(rng.uniform(1.0, 3.0))
        workers.start("worker", wait=False)
    elif disruption == "sigkill-during-recovery":
        workers.kill("worker")
        workers.start("worker", wait=False)
        time.sleep(rng.uniform(0.5, 2.5))  # assigned, restoring or just resumed
        workers.kill("worker")
        time.sleep(rng.uniform(0.5, 1.5))
        workers.start("worker", wait=False)
    elif disruption == "sigkill-during-rebalance":
        workers.start("worker-2", wait=False)
        time.sleep(rng.uniform(0.5, 3.0))  # the groups rebalance as worker-2 joins
        workers.kill("worker")
        time.sleep(rng.uniform(0.5, 1.5))
        workers.start("worker", wait=False)
    elif disruption == "join-and-leave":
        workers.start("worker-2", wait=False)
        time.sleep(rng.uniform(0.5, 1.5))
        workers.start("worker-3", wait=False)
        time.sleep(rng.uniform(1.0, 3.0))
        workers.stack.wait_ready(workers.processes["worker-2"], name="worker-2")  # leaves after it joined
        workers.stop("worker-2")
        time.sleep(rng.uniform(0.5, 1.5))
        workers.stop("worker")
        time.sleep(rng.uniform(0.5, 1.5))
        workers.start("worker", wait=False)
    else:
        raise ValueError(disruption)


def run_round(bootstrap: str, workdir: Path, disruption: str, *, seed: int, fleet: int = FLEET) -> RoundResult:
    rng = random.Random(seed)
    result = RoundResult(disruption)
    started = time.monotonic()
    stack = Stack(bootstrap, workdir, partitions=3, tick_interval=0.5)
    result.prefix = stack.prefix
    workers = Workers(stack)
    try:
        workers.start("worker")
        stack.send("intents", "base", module("base", "1.0.0"))

        def feed() -> None:
            for start in range(0, fleet, 10):
                batch = [(f"k-{i:03d}", cluster(i).to_bytes()) for i in range(start, min(start + 10, fleet))]
                asyncio.run(client.publish(stack.bootstrap, stack.topics.clusters, batch))
                time.sleep(0.1)

        feeder = threading.Thread(target=feed)
        feeder.start()
        _disrupt(disruption, workers, rng)
        feeder.join()
        stack.send("intents", "base", module("base", "1.1.0"))

        def converged() -> bool:
            workers.check_alive()
            remote = stack.latest("remote")
            return len(remote) == fleet and all(s["spec"]["syncs"][0]["revision"] == "1.1.0" for s in remote.values())

        try:
            wait_for("every cluster on 1.1.0", converged, timeout=120)
            result.converged = True
        except AssertionError:
            pass
        _settle(stack)
        _check(stack, result)
        workers.stop_all()
        result.unexpected_exits = workers.exited
    finally:
        for process in workers.processes.values():
            if process.poll() is None:
                process.kill()
        stack.stop()
    result.seconds = time.monotonic() - started
    return result


def _settle(stack: Stack) -> None:
    """Wait until every stage has processed its inputs to their end."""

    def tracked_to_end() -> bool:
        return all(
            tracking.get(p, {}).get("offset", -1) >= end
            for topic, state in (("journal", "decide_state"), ("assignments", "assemble_state"))
            for tracking, ends in [(_tracking(stack, state), _ends(stack, topic))]
            for p, end in ends.items()
            if end > 0
        )

    wait_for("every stage to reach the end of its input", tracked_to_end, timeout=60)


def _ends(stack: Stack, role: str) -> dict[int, int]:
    records = stack.records(role)
    ends: dict[int, int] = {}
    for record in records:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return ends


def _tracking(stack: Stack, state_role: str) -> dict[int, dict[str, int]]:
    tracking: dict[int, dict[str, int]] = {}
    for record in stack.records(state_role):
        if record.key == "tracking:position" and record.value is not None:
            tracking[record.partition] = json.loads(record.value)
    return tracking


def _check(stack: Stack, result: RoundResult) -> None:
    inputs: dict[str, str] = {}
    for role in ("intents", "clusters"):
        for record in stack.records(role):
            inputs[json.loads(record.value or b"{}")["id"]] = f"{role}@{record.partition}:{record.offset}"
    result.inputs = len(inputs)
    journal = stack.records("journal")
    routed = {json.loads(r.value or b"{}").get("id") for r in journal}
    result.lost = sorted(where for event_id, where in inputs.items() if event_id not in routed)
    for topic, state in (("journal", "decide_state"), ("assignments", "assemble_state")):
        tracking = _tracking(stack, state)  # first: ticks keep arriving while we read
        records = stack.records(topic)
        for partition in sorted({r.partition for r in records}):
            tracked = tracking.get(partition, {})
            count = sum(1 for r in records if r.partition == partition and r.offset < tracked.get("offset", 0))
            if tracked.get("events") != count:
                result.miscounted.append(f"{topic}-{partition}: {count} records below the tracked {tracked}")
    seen: dict[tuple[str, int], bytes] = {}
    for role in ("remote", "proxy"):
        for record in stack.records(role):
            if record.value is None:
                continue
            key = (f"{role}/{record.key}", json.loads(record.value)["version"])
            if seen.setdefault(key, record.value) != record.value:
                result.conflicting_versions.append(f"{key[0]} v{key[1]}")
    replay = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
    if replay.exit_code != 0:
        result.diverged = [line for line in replay.output.splitlines() if line.strip()][-20:]
    verified = CliRunner().invoke(cli, ["history", "--verify"], env=stack.env, catch_exceptions=False)
    if verified.exit_code != 0:
        lines = [line for line in verified.output.splitlines() if "BROKEN" in line or "match" in line]
        result.broken_chains = lines or [verified.output[-500:]]


def table(results: list[RoundResult]) -> str:
    """rounds, inputs, lost, miscounted, diverged, worker exits — per disruption."""
    rows = ["disruption                 rounds  inputs   lost  miscounted  diverged  conflicts  exits  failed"]
    by: dict[str, list[RoundResult]] = {}
    for r in results:
        by.setdefault(r.disruption, []).append(r)
    for name, group in [*sorted(by.items()), ("all", results)]:
        total: Callable[[str], int] = lambda attr, g=group: sum(len(getattr(r, attr)) for r in g)  # noqa: E731
        rows.append(
            f"{name:<26} {len(group):>6} {sum(r.inputs for r in group):>7} {total('lost'):>6} "
            f"{total('miscounted'):>11} {total('diverged'):>9} {total('conflicting_versions'):>10} "
            f"{total('unexpected_exits'):>6} {sum(1 for r in group if not r.ok):>7}"
        )
    return "\n".join(rows)
