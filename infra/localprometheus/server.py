"""Build and run the local Prometheus (see the package docstring)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from infra.child_processes import Process, spawn, terminate, wait_until_ready
from infra.localflux.build import GoProgram, Progress, ensure_program, go_install
from infra.localflux.errors import BuildError

PROMETHEUS_VERSION = "v0.316.0"
"""github.com/prometheus/prometheus: the module version of Prometheus 3.x the proxy serves."""
PROMETHEUS_MODULE = "github.com/prometheus/prometheus/cmd/prometheus"
PROMETHEUS = GoProgram("prometheus", PROMETHEUS_VERSION, "tools")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
HOST = "127.0.0.1"


class LocalPrometheusError(Exception):
    """The local Prometheus could not be built or started; the message says why."""


def ensure_prometheus(progress: Progress | None = None) -> Path:
    """The cached Prometheus binary, built first when it is not there."""
    try:
        return ensure_program(PROMETHEUS, go_install(PROMETHEUS_MODULE), progress)
    except BuildError as error:
        raise LocalPrometheusError(str(error)) from None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class LocalPrometheus:
    """One running Prometheus scraping `targets` (host:port, path /metrics) every second:
    `url` (http://127.0.0.1:<port>), its log, `stop()`."""

    workdir: Path
    targets: list[str] = field(default_factory=list)
    port: int = 0
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "prometheus.log"

    def start(self, progress: Progress | None = None) -> LocalPrometheus:
        binary = ensure_prometheus(progress)
        self.port = self.port or _free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        document = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "fleet", "static_configs": [{"targets": self.targets}]}],
        }
        config.write_text(json.dumps(document, indent=2))  # JSON is YAML
        command = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={HOST}:{self.port}",
            "--log.level=warn",
        ]
        self.process = spawn(command, self.log)
        wait_until_ready(
            "Prometheus",
            self.process,
            self.log,
            self._ready,
            error=LocalPrometheusError,
            timeout=START_TIMEOUT,
            stop_timeout=STOP_TIMEOUT,
        )
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, STOP_TIMEOUT)
            self.process = None
