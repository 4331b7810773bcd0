"""Ports and processes: free ports on 127.0.0.1, the detached broker JVM, its liveness and log.

spawn_detached(cmd, log_file) -> pid    own session (pgid == pid), output appended to the log
pid_alive(pid)                          running and not a zombie; reaps our exited children
                                        (their exit codes land in ``exit_codes``)
is_our_broker(pid, data_dir)            a live ``kafka.Kafka`` JVM of that data dir
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Set
from pathlib import Path

from infra.localkafka.defaults import HOST, LOG_TAIL_LINES


def _bind(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # like the JVM's server sockets: TIME_WAIT leftovers don't count as "taken"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((HOST, port))
    except OSError:
        s.close()
        raise
    return s


def port_is_free(port: int) -> bool:
    try:
        _bind(port).close()
    except OSError:
        return False
    return True


def free_ports(n: int, exclude: Set[int] = frozenset()) -> list[int]:
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            s = _bind(0)
            if s.getsockname()[1] in exclude:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


exit_codes: dict[int, int] = {}
"""Exit codes of brokers this process spawned and reaped (``pid_alive`` reaps them)."""


def spawn_detached(cmd: list[str], log_file: Path) -> int:
    """Start ``cmd`` in a new session (pgid == pid), stdin /dev/null, stdout+stderr appended
    to ``log_file``; return its pid.

    ``posix_spawn`` rather than ``subprocess.Popen``: the broker outlives the ``Popen``
    object (``rollout kafka start`` exits while it runs), which Popen reports as a leaked
    resource. This process still reaps it: see :func:`pid_alive`.
    """
    java = os.path.abspath(cmd[0])
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_file), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # like Popen(restore_signals=True): Python ignores SIGPIPE/SIGXFSZ and the child would
    # inherit that; also undo any inherited ignore of the signals we stop it with
    sigdef = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    try:
        pid = os.posix_spawn(
            java,
            [java, *cmd[1:]],
            dict(os.environ),
            file_actions=actions,
            setsid=True,
            setsigdef=sigdef,
            setsigmask=set(),
        )
        exit_codes.pop(pid, None)
        return pid
    except (AttributeError, NotImplementedError):  # no posix_spawn / POSIX_SPAWN_SETSID here
        pass
    with log_file.open("ab") as lf:
        proc = subprocess.Popen(
            [java, *cmd[1:]],
            stdin=subprocess.DEVNULL,
            stdout=lf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _popen_keepalive.append(proc)
    exit_codes.pop(proc.pid, None)
    return proc.pid


_popen_keepalive: list[subprocess.Popen] = []


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a running (non-zombie) process? Reaps it if it is our exited child."""
    if pid <= 0:
        return False
    if pid in exit_codes:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:  # our own child (a broker this process spawned) has exited: reaped now
            exit_codes[pid] = os.waitstatus_to_exitcode(status)
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def is_our_broker(pid: int, data_dir: Path) -> bool:
    if not pid_alive(pid):
        return False
    cmd = _proc_cmdline(pid)
    if cmd is None:  # no /proc (macOS): trust the pid
        return True
    return b"kafka.Kafka" in cmd and str(data_dir).encode() in cmd


def tail(path: Path, lines: int = LOG_TAIL_LINES, start: int = 0) -> str:
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
