"""Child processes of the local Flux setup: start in their own session, wait for health, stop.

The same pattern as ``infra.localkube.server``: output appended to a log file, a process that
exits while starting (or is not healthy within ``START_TIMEOUT``) raises
:class:`LocalFluxError` with the end of its log, and a stop is SIGTERM to the process group,
then SIGKILL after ``STOP_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.localflux.defaults import LOG_TAIL_LINES, START_TIMEOUT, STOP_TIMEOUT
from infra.localflux.errors import LocalFluxError
from infra.localkafka.processes import tail

Process = subprocess.Popen[bytes]


def spawn(command: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    """Start `command` in a new session, stdin /dev/null, stdout and stderr appended to `log`."""
    with open(log, "ab") as output:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )


def log_tail(log: Path) -> str:
    return tail(log, LOG_TAIL_LINES) or "(empty log)"


def wait_healthy(what: str, process: Process, log: Path, healthy: Callable[[], bool]) -> None:
    """Poll `healthy` until it is true; raise with the log tail if the process exits or stalls."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalFluxError(
                f"{what} exited with code {process.returncode} while starting; {log}:\n{log_tail(log)}"
            )
        if healthy():
            return
        time.sleep(0.1)
    terminate(process)
    raise LocalFluxError(f"{what} was not healthy within {START_TIMEOUT:.0f}s; {log}:\n{log_tail(log)}")


def http_ok(url: str) -> bool:
    """Does `url` answer 200 (no proxy: everything here is on 127.0.0.1)?"""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=1) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def terminate(process: Process) -> None:
    """SIGTERM the process group, SIGKILL it after ``STOP_TIMEOUT``; reaps the process."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
