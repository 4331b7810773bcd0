"""One local broker, identified by its state file: start, status, stop, wait.

    LocalKafka(state_file).start(port)  ports -> Java -> jars -> config -> storage format
                                        -> detached JVM -> state file -> ready (or killed)
    LocalKafka(state_file).status()     the recorded broker if its pid is still our JVM
    LocalKafka(state_file).stop()       SIGTERM to the process group, SIGKILL after a grace
    discover_bootstrap(state_file)      the running broker's bootstrap, for other commands

Starts are serialised per state file (a lock file beside it); the state file is written
atomically and removed when its broker is found gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from infra.localkafka.defaults import (
    DEFAULT_HEAP,
    HOST,
    KAFKA_VERSION,
    LOG_TAIL_LINES,
    START_TIMEOUT,
    STOP_TIMEOUT,
    default_state_file,
)
from infra.localkafka.errors import AlreadyRunningError, BrokerStartError, KafkaError, PortInUseError
from infra.localkafka.jars import ensure_jars, file_lock
from infra.localkafka.java import check_java_version, find_java
from infra.localkafka.processes import (
    exit_codes,
    free_ports,
    is_our_broker,
    pid_alive,
    port_is_free,
    spawn_detached,
    tail,
)
from infra.localkafka.readiness import port_accepts, probe
from infra.localkafka.security import Scram, command_config, format_arguments, run_acl_commands
from infra.localkafka.state import (
    LOG4J_PROPERTIES,
    BrokerInfo,
    new_cluster_id,
    now_iso,
    read_ports,
    server_properties,
    write_ports,
)

log = logging.getLogger("infra.localkafka")


class LocalKafka:
    """One local broker, identified by its state file.

    ``LocalKafka()`` is the user's broker (``~/.local/state/rollout/kafka.json``);
    ``LocalKafka(state_file=tmp / "kafka.json")`` is an independent one.
    """

    def __init__(
        self,
        state_file: Path | None = None,
        *,
        lib_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.state_file = Path(state_file) if state_file else default_state_file()
        self.lib_dir = lib_dir
        self.progress = progress

    @property
    def default_data_dir(self) -> Path:
        return self.state_file.with_name(f"{self.state_file.stem}-data")

    # -- state file

    def _read_state(self) -> BrokerInfo | None:
        try:
            return BrokerInfo.from_json(json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable Kafka state file %s: %s", self.state_file, e)
            return None

    def _write_state(self, info: BrokerInfo) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info.to_json(), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    def _clear_state(self, pid: int | None = None) -> None:
        if pid is not None:
            current = self._read_state()
            if current is not None and current.pid != pid:
                return  # someone else's broker by now
        self.state_file.unlink(missing_ok=True)

    # -- public API

    def status(self) -> BrokerInfo | None:
        """The running broker recorded in the state file, or None (a stale file is removed)."""
        info = self._read_state()
        if info is None:
            if self.state_file.exists():
                self._clear_state()
            return None
        if is_our_broker(info.pid, info.data_dir):
            return info
        log.info("removing stale Kafka state file %s (pid %s is gone)", self.state_file, info.pid)
        self._clear_state(info.pid)
        return None

    def ensure_running(self, port: int | None = None, **kwargs) -> BrokerInfo:
        """The running broker if there is one, else :meth:`start` a new one."""
        try:
            return self.status() or self.start(port, **kwargs)
        except AlreadyRunningError as e:  # started concurrently by someone else
            return e.info

    def start(
        self,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        heap: str = DEFAULT_HEAP,
        timeout: float = START_TIMEOUT,
        security: Scram | None = None,
    ) -> BrokerInfo:
        """Start the broker detached and wait until it answers metadata requests.

        Serialised per state file (a lock file beside it), so two concurrent starts can't both
        launch a broker: the second one sees the first one running. `security`: SASL/SCRAM
        users and the StandardAuthorizer (infra/localkafka/security.py); None: PLAINTEXT,
        everything allowed.
        """
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_file.with_name(f"{self.state_file.name}.lock")):
            return self._start(port, data_dir=data_dir, heap=heap, timeout=timeout, security=security)

    def _start(
        self, port: int | None, *, data_dir: Path | None, heap: str, timeout: float, security: Scram | None
    ) -> BrokerInfo:
        running = self.status()
        if running is not None:
            raise AlreadyRunningError(running, self.state_file)
        if not re.fullmatch(r"\d+[kKmMgG]?", heap):
            raise KafkaError(f"invalid heap size {heap!r} (expected e.g. 512m or 1g)")
        data_dir = Path(data_dir or self.default_data_dir).expanduser().resolve()
        # cheap checks first: no download when the port is taken or Java is missing
        port, controller_port = self._choose_ports(port, data_dir)
        java = find_java()
        check_java_version(java)
        lib_dir = ensure_jars(self.lib_dir, progress=self.progress)

        data_dir.mkdir(parents=True, exist_ok=True)
        log_dirs = data_dir / "kraft-logs"
        props = data_dir / "server.properties"
        log4j = data_dir / "log4j.properties"
        props.write_text(server_properties(port, controller_port, log_dirs, security))
        log4j.write_text(LOG4J_PROPERTIES)
        jvm = [
            java,
            f"-Dlog4j.configuration=file:{log4j}",
            f"-Dkafka.logs.dir={data_dir}",
            "-Djava.awt.headless=true",
        ]
        classpath = ["-cp", f"{lib_dir}/*"]
        if not (log_dirs / "meta.properties").exists():
            users = format_arguments(security) if security is not None else []
            _format_storage([*jvm, "-Xmx256m", *classpath], props, log_dirs, users)

        # re-check right before launching: another process may have grabbed it meanwhile
        for p, what in ((port, "port"), (controller_port, "controller port")):
            if not port_is_free(p):
                raise PortInUseError(p, what)
        cmd = [
            *jvm,
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            f"-XX:ErrorFile={data_dir}/hs_err_pid%p.log",
            # every pause, for when the broker stops answering: is it the JVM or the load?
            f"-Xlog:gc:file={data_dir}/gc.log:time,uptime:filecount=2,filesize=5m",
            *classpath,
            "kafka.Kafka",
            str(props),
        ]
        return self._launch(cmd, data_dir, port, controller_port, heap=heap, timeout=timeout, security=security)

    def _launch(
        self,
        cmd: list[str],
        data_dir: Path,
        port: int,
        controller_port: int,
        *,
        heap: str,
        timeout: float,
        security: Scram | None,
    ) -> BrokerInfo:
        """Spawn the broker JVM, record it, and wait until it is ready (or kill it)."""
        log_file = data_dir / "broker.log"
        with log_file.open("ab") as lf:
            offset = lf.tell()
            lf.write(f"\n=== localkafka: starting Kafka {KAFKA_VERSION} at {now_iso()} ===\n".encode())
        pid = spawn_detached(cmd, log_file)
        write_ports(data_dir, port, controller_port)
        info = BrokerInfo(
            bootstrap=f"{HOST}:{port}",
            pid=pid,
            port=port,
            controller_port=controller_port,
            log_file=log_file,
            data_dir=data_dir,
            started_at=now_iso(),
            heap=heap,
            security_protocol="PLAINTEXT" if security is None else "SASL_PLAINTEXT",
        )
        self._write_state(info)
        try:
            self._wait_ready(info, timeout, offset, security.client_options() if security is not None else None)
        except BaseException:
            self._kill(pid, grace=5.0)
            self._clear_state(pid)
            raise
        return info

    def _choose_ports(self, port: int | None, data_dir: Path) -> tuple[int, int]:
        """(port, controller port): the given port, else the one this data dir's broker used
        last time (``ports.json`` in the data dir) when it is free, else a free one."""
        recorded = read_ports(data_dir)
        if port is not None:
            if not 0 < port < 65536:
                raise KafkaError(f"invalid port {port}")
            if not port_is_free(port):
                raise PortInUseError(port)
        elif recorded is not None and port_is_free(recorded[0]):
            port = recorded[0]
        else:
            (port,) = free_ports(1)
            if recorded is not None:
                self._say(
                    f"port {recorded[0]} (the broker's port last time) is taken now; using port {port} instead: "
                    f"clients configured with {HOST}:{recorded[0]} must be pointed at {HOST}:{port}"
                )
        if recorded is not None and recorded[1] != port and port_is_free(recorded[1]):
            controller_port = recorded[1]
        else:
            (controller_port,) = free_ports(1, exclude={port})
        return port, controller_port

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)
        else:
            log.warning("%s", message)

    def _wait_ready(
        self, info: BrokerInfo, timeout: float, offset: int, client_options: dict[str, object] | None
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not pid_alive(info.pid):
                code = exit_codes.get(info.pid, "?")
                raise BrokerStartError(
                    f"Kafka exited with code {code} while starting (port {info.port})",
                    info.log_file,
                    tail(info.log_file, start=offset),
                )
            if port_accepts(info.port) and probe(info.bootstrap, client_options=client_options):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"Kafka did not answer metadata requests at {info.bootstrap} within {timeout:.0f}s",
                    info.log_file,
                    tail(info.log_file, start=offset),
                )
            time.sleep(0.3)

    def stop(self, timeout: float = STOP_TIMEOUT) -> BrokerInfo | None:
        """Stop the recorded broker (SIGTERM, then SIGKILL after ``timeout``).

        Returns the stopped broker's info, or None if none was running.
        """
        info = self.status()
        if info is None:
            return None
        self._kill(info.pid, grace=timeout)
        self._clear_state(info.pid)
        return info

    def reset(self, data_dir: Path | None = None) -> Path | None:
        """Stop the broker if it runs, then delete its data dir (the running broker's, else
        `data_dir`, else the default): every topic and offset is gone. Returns the removed
        dir, or None when there was none. A dir that is not a broker's is never removed."""
        running = self.status()
        target = Path(running.data_dir if running is not None else data_dir or self.default_data_dir)
        self.stop()
        if not target.exists():
            return None
        if not any((target / marker).exists() for marker in ("server.properties", "kraft-logs", "ports.json")):
            raise KafkaError(f"{target} does not look like a Kafka data dir of `rollout kafka start`; not removing it")
        shutil.rmtree(target)
        return target

    def _kill(self, pid: int, grace: float) -> None:
        def signal_group(sig: int) -> None:
            try:
                os.killpg(pid, sig)  # pgid == pid: started with start_new_session
            except ProcessLookupError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            except PermissionError as e:
                raise KafkaError(f"not allowed to signal Kafka process {pid}: {e}") from e

        signal_group(signal.SIGTERM)
        if self._wait_dead(pid, grace):
            return
        log.warning("Kafka (pid %s) ignored SIGTERM for %.0fs; sending SIGKILL", pid, grace)
        signal_group(signal.SIGKILL)
        if not self._wait_dead(pid, 10.0):
            raise KafkaError(f"Kafka process {pid} survived SIGKILL")

    @staticmethod
    def _wait_dead(pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def apply_acls(self, security: Scram, commands: Sequence[Sequence[str]]) -> None:
        """Run `kafka-acls.sh` argument lists (infra/kafka_acls.py: `acl_commands`, with
        ``--bootstrap-server $BOOTSTRAP --command-config …`` as placeholders) against the running
        secured broker as its admin, through the jars' `kafka.admin.AclCommand`."""
        info = self.status()
        if info is None:
            raise KafkaError(f"no broker of {self.state_file} is running")
        config = command_config(info.data_dir, security)
        placeholders = {"$BOOTSTRAP": info.bootstrap, "admin.properties": str(config)}
        lines = [[placeholders.get(argument, argument) for argument in command] for command in commands]
        run_acl_commands(find_java(), ensure_jars(self.lib_dir), lines, info.data_dir / "log4j.properties")

    def wait(self) -> None:
        """Block until the recorded broker exits (for foreground use)."""
        info = self.status()
        while info is not None and pid_alive(info.pid):
            time.sleep(0.5)


def discover_bootstrap(state_file: Path | None = None) -> str | None:
    """Bootstrap string of the running broker recorded in ``state_file`` (default: the user's)."""
    info = LocalKafka(state_file).status()
    return info.bootstrap if info else None


def _format_storage(java: list[str], props: Path, log_dirs: Path, users: list[str]) -> None:
    """``kafka.tools.StorageTool format``: a new cluster id for a log dir never formatted;
    `users`: ``--add-scram`` arguments (the SCRAM credentials of a secured broker)."""
    fmt = subprocess.run(
        [
            *java,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            new_cluster_id(),
            "-c",
            str(props),
            *users,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if fmt.returncode != 0:
        out = "\n".join((fmt.stdout + fmt.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise BrokerStartError(f"formatting Kafka storage in {log_dirs} failed (exit {fmt.returncode}):\n{out}")
