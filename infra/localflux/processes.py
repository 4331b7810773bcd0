"""Child processes of the local Flux setup: `infra.child_processes` with Flux's timeouts and error.

A process that exits while starting (or is not healthy within ``START_TIMEOUT``) raises
:class:`LocalFluxError` with the end of its log; a stop is SIGTERM to the process group,
then SIGKILL after ``STOP_TIMEOUT``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra import child_processes
from infra.child_processes import Process, log_tail, spawn
from infra.localflux.defaults import START_TIMEOUT, STOP_TIMEOUT
from infra.localflux.errors import LocalFluxError

__all__ = ["Process", "http_ok", "log_tail", "spawn", "terminate", "wait_healthy"]


def wait_healthy(what: str, process: Process, log: Path, healthy: Callable[[], bool]) -> None:
    """Poll `healthy` until it is true; raise with the log tail if the process exits or stalls."""
    child_processes.wait_until_ready(
        what, process, log, healthy, error=LocalFluxError, timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT
    )


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
    child_processes.terminate(process, STOP_TIMEOUT)
