"""Child processes of the local infrastructure: started in their own session, waited for, stopped.

etcd and kube-apiservers (`infra.localkube`), the Flux controllers and the OCI registry
(`infra.localflux`) are all run the same way: output appended to a log file, stdin closed,
a session of their own (so a Ctrl-C in the terminal reaches the parent only, which then
stops them in order); a process that exits while starting, or does not pass its readiness
check within the timeout, raises the caller's error type with the end of its log; a stop
is SIGTERM to the process group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from infra.localkafka.processes import tail

Process = subprocess.Popen[bytes]
LOG_TAIL_LINES = 30


def spawn(command: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    """Start `command` in a new session, stdin /dev/null, stdout and stderr appended to `log`;
    `env` is added to this process's environment."""
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


def wait_until_ready(
    what: str,
    process: Process,
    log: Path,
    ready: Callable[[], bool],
    *,
    error: type[Exception],
    timeout: float,
    stop_timeout: float,
    interval: float = 0.1,
) -> None:
    """Poll `ready` until it is true; raise `error` with the log tail if the process exits
    or is not ready within `timeout` seconds (then it is stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise error(f"{what} exited with code {process.returncode} while starting; {log}:\n{log_tail(log)}")
        if ready():
            return
        time.sleep(interval)
    terminate(process, stop_timeout)
    raise error(f"{what} was not ready within {timeout:.0f}s; {log}:\n{log_tail(log)}")


def terminate(process: Process, timeout: float) -> None:
    """SIGTERM the process group, SIGKILL it after `timeout` seconds; reaps the process."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
