"""`rollout up --clusters N`: the local fleet on real Flux, as a user starts it.

One `rollout up --clusters 2` process (the session's broker, topics of its own, no web
ports): it must start two workload clusters and a management cluster with their Flux
controllers, roll the example's BootstrapModule and staged Module out to Complete — Flux
applying them in the clusters — and, on Ctrl-C, stop every process it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from infra.localflux import FluxBinaries
from tests.integration.stack import wait_for

pytestmark = pytest.mark.integration


def processes_under(directory: Path) -> list[str]:
    """Command lines of running processes that mention `directory` (the fleet's API servers, controllers)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in command:
            found.append(command)
    return found


def test_up_with_clusters_rolls_the_example_out_on_real_flux_and_stops_everything(
    kafka_bootstrap: str, tmp_path: Path, local_fleet_binaries: FluxBinaries
) -> None:
    log = tmp_path / "up.log"
    command = [sys.executable, "-m", "rollout_cli.main", "up", "--clusters", "2", "--tick-interval", "1"]
    command += ["--web-port", "0", "--dashboard-port", "0", "--bootstrap-servers", kafka_bootstrap]
    command += ["--topic-prefix", f"up-{uuid.uuid4().hex[:8]}."]
    with log.open("wb") as output:
        up = subprocess.Popen(command, cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT)
    try:

        def complete() -> bool:
            if up.poll() is not None:
                raise AssertionError(f"rollout up exited with {up.returncode}:\n{log.read_text()[-4000:]}")
            lines = [line for line in log.read_text().splitlines() if " Complete " in line]
            return all(any(f" {module} " in line for line in lines) for module in ("podinfo", "platform"))

        wait_for("both example modules Complete", complete, timeout=600, interval=1)
        fleet = tmp_path / ".rollout" / "local-fleet"
        assert (fleet / "manifests" / "podinfo-v1.1.0.yaml").is_file()
        assert processes_under(fleet), "the local fleet's processes should be running"
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=120)
    text = log.read_text()
    assert "local fleet stopped" in text, text[-3000:]
    assert code == 0, text[-3000:]
    deadline = time.monotonic() + 20
    while processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_under(tmp_path) == [], "processes left behind after Ctrl-C"
