"""A worker and a directory-sink applier as real processes against the session broker.

Integration tests drive the system the way users do: manifests and events go onto the
input topics, the `rollout worker` and `rollout applier` processes (started exactly as the
CLI starts them) do their work, and the tests read the projection topics and the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Counter

from infra import client
from infra.observability import Metrics
from infra.topics import TopicNames, ensure_topics
from rollout.wire.events import EventBase, ModuleApplied
from rollout_cli.main import cli
from rollout_cli.publishing.intents import fleet_stamp, intents_for, publish_intents
from rollout_cli.publishing.manifest_files import load_manifest_files
from streams.delivery import StageRunner, StageSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
T = TypeVar("T")
WORKER_READY = "worker ready:"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last probe: {last!r}")


def stage_runner(bootstrap: str, spec: StageSpec) -> StageRunner:
    """A `StageRunner` in this test process, with metrics of its own (not the global registry)."""
    duplicates = Counter("duplicates", "", ["stage"], registry=CollectorRegistry())
    return StageRunner(spec, bootstrap=bootstrap, client_options={}, metrics=Metrics(), duplicates=duplicates)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str] | None:
    """(status, body) from the process's web port, or None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@contextlib.contextmanager
def started(
    bootstrap: str, workdir: Path, *, partitions: int = 2, applier: tuple[str, ...] | None = None
) -> Iterator[Stack]:
    """A Stack whose worker is ready — and, when `applier` is given, a directory-sink applier
    started with those flags — stopped when the block ends (a test module's fixture)."""
    stack = Stack(bootstrap, workdir, partitions=partitions, tick_interval=1.0)
    try:
        stack.start_worker()
        if applier is not None:
            stack.start_applier(*applier)
        yield stack
    finally:
        stack.stop()


class Stack:
    def __init__(self, bootstrap: str, workdir: Path, *, partitions: int = 2, tick_interval: float = 1.0) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.prefix = f"it-{uuid.uuid4().hex[:8]}."
        self.topics = TopicNames(self.prefix)
        self.partitions = partitions
        self.tick_interval = tick_interval
        self.out = workdir / "flux-out"
        self.worker_port = free_port()
        self.applier_port = free_port()
        self.worker: subprocess.Popen[bytes] | None = None
        self._ready_counts: dict[str, int] = {}
        self.applier: subprocess.Popen[bytes] | None = None
        self.env = {
            **os.environ,
            "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap,
            "ROLLOUT_TOPIC_PREFIX": self.prefix,
        }
        asyncio.run(ensure_topics(bootstrap, self.prefix, partitions))

    # -- processes ----------------------------------------------------------------------

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "rollout_cli.main", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_worker(self) -> None:
        self.worker = self.start_worker_process()
        self.wait_ready(self.worker)

    def wait_ready(self, process: subprocess.Popen[bytes], *, name: str = "worker", timeout: float = 90) -> None:
        """Wait until `process` announces it has joined its groups (since it started)."""
        before = self._ready_counts.get(name, 0)

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}:\n{self.log(name)[-3000:]}")
            return self.log(name).count(WORKER_READY) > before

        wait_for(f"{name} to be ready", ready, timeout=timeout, interval=0.1)
        self._ready_counts[name] = before + 1

    def start_worker_process(self, name: str = "worker", *extra: str) -> subprocess.Popen[bytes]:
        """Start a worker; `name` names its log (several workers share the groups); `extra`
        flags are appended."""
        self._ready_counts[name] = self.log(name).count(WORKER_READY)
        return self._spawn(
            name,
            "worker",
            "--partitions",
            str(self.partitions),
            "--tick-interval",
            str(self.tick_interval),
            "--loglevel",
            "info",
            "--web-port",
            str(self.worker_port if name == "worker" else free_port()),
            *extra,
        )

    def start_applier(self, *extra: str) -> None:
        self.applier = self._spawn(
            "applier", "applier", "--sink", f"dir:{self.out}", "--web-port", str(self.applier_port), *extra
        )

    @staticmethod
    def _stop(process: subprocess.Popen[bytes] | None) -> int | None:
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop_worker(self) -> int | None:
        code = self._stop(self.worker)
        self.worker = None
        return code

    def stop(self) -> None:
        self._stop(self.applier)
        self.stop_worker()

    # -- publishing and reading ---------------------------------------------------------

    def apply(self, *paths: Path) -> None:
        """What `rollout apply -f` publishes: clusters, then modules stamped with the fleet."""
        asyncio.run(publish_intents(self.bootstrap, self.topics, intents_for(load_manifest_files(list(paths)))))

    def send(self, role: str, key: str, event: EventBase | bytes | None) -> None:
        """Publish one event. A ModuleApplied without a fleet stamp gets the one every
        publisher gives it (the cluster observations published so far): unstamped, it may
        overtake the clusters sent just before it (send raw bytes to publish one unstamped)."""
        if isinstance(event, ModuleApplied) and not event.fleet:
            known = asyncio.run(client.end_offsets(self.bootstrap, self.topics.clusters))
            event = event.model_copy(update={"fleet": fleet_stamp(known, [])})
        value = event.to_bytes() if isinstance(event, EventBase) else event
        asyncio.run(client.publish(self.bootstrap, self.topics.name(role), [(key, value)]))

    def latest(self, role: str) -> dict[str, Any]:
        return asyncio.run(client.read_latest(self.bootstrap, self.topics.name(role)))

    def records(self, role: str) -> list[client.Record]:
        return asyncio.run(client.read_all(self.bootstrap, self.topics.name(role)))

    def rollout(self, *args: str) -> tuple[int, str]:
        """`rollout <args>` against this stack's broker and topics, in-process: exit code, output."""
        result = CliRunner().invoke(cli, [*args, "--bootstrap-servers", self.bootstrap, "--topic-prefix", self.prefix])
        return result.exit_code, result.output

    def files(self) -> set[str]:
        if not self.out.exists():
            return set()
        return {str(p.relative_to(self.out)) for p in self.out.rglob("*.yaml")}
