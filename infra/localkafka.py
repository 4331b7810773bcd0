"""The project's own local Apache Kafka broker: KRaft, one combined broker+controller node.

Used by ``rollout kafka start|stop|status``, by ``rollout up`` and by the pytest session
fixture. No Docker, no Kafka distribution, no Maven at run time: Java is the only
prerequisite.

Flow
----
1. **Jars.** ``infra/kafka-jars.lock`` pins the broker's runtime classpath — the runtime
   dependencies of ``org.apache.kafka:kafka_2.13:<KAFKA_VERSION>`` plus the logging binding
   ``org.slf4j:slf4j-reload4j`` — one ``group:artifact:version sha1`` line per jar. The lock
   is produced with Maven by ``scripts/lock-kafka-jars.sh`` (strict checksum checking against
   the ``.sha1`` files Maven Central publishes). :func:`ensure_jars` downloads each locked
   jar straight from Maven Central over HTTPS (``urllib``) into the cache dir
   ``$ROLLOUT_CACHE_DIR/kafka/<version>/lib`` (default ``~/.cache/rollout/...``), hashing it
   while streaming into a temp file in the same directory; only a jar whose SHA-1 equals the
   lock's is renamed into place, so an interrupted or corrupted download never leaves a
   broken jar behind. Every run re-hashes the cached jars (≈60 jars, ~40 MB: well under a
   second) and re-downloads any that don't match; verified jars are reused. A file lock
   serialises concurrent runs (e.g. a test session next to ``rollout kafka start``). Jars
   not in the lock are removed so ``-cp '<lib>/*'`` is exactly the locked classpath.
   ``ROLLOUT_MAVEN_REPO`` can point at a Maven Central mirror; the pinned SHA-1s still apply.
2. **Config.** :meth:`LocalKafka.start` uses two ports on 127.0.0.1 (PLAINTEXT and
   CONTROLLER): a given port (one that is taken is an error naming it), else the ports the
   broker of the same data dir listened on last time (recorded in ``<data dir>/ports.json``,
   which outlives ``stop``) so clients reconnect after a restart, else — first start, or the
   recorded port is taken now, which is reported through ``progress`` — free ones. It
   writes ``server.properties`` and ``log4j.properties`` into the data dir. Topic
   auto-creation is left **on** (Kafka's default): Faust creates its internal topics itself
   and the engine's code creates its topics explicitly, so auto-create only helps ad-hoc
   tooling (console producers, quick scripts) and never hides a missing topic in tests that
   create topics explicitly.
3. **Storage.** ``kafka.tools.StorageTool format -t <cluster-id> -c server.properties`` runs
   only when the log dir holds no ``meta.properties`` yet, so restarting on the same data dir
   keeps topics, offsets and the cluster id.
4. **Process.** ``java -Xmx<heap> -cp '<lib>/*' kafka.Kafka server.properties`` starts in its
   own session/process group (``start_new_session``), stdin from /dev/null, stdout+stderr
   appended to ``<data dir>/broker.log``. It is ready once aiokafka gets a metadata answer
   listing the broker (``AIOKafkaAdminClient`` + ``list_topics``), polled for up to
   ``timeout`` (60 s). If the JVM exits meanwhile, or never gets ready, the error carries the
   last 30 lines of the log.
5. **State.** A JSON state file (default ``$ROLLOUT_STATE_DIR/kafka.json``, default dir
   ``~/.local/state/rollout``) records pid, ports, bootstrap, data dir, log path and start
   time. :meth:`LocalKafka.status` checks that pid is still a live ``kafka.Kafka`` JVM —
   a stale file (dead pid, zombie, reused pid) is removed and reported as not running.
   :meth:`LocalKafka.stop` sends SIGTERM to the process group, waits up to 20 s, then
   SIGKILLs it, and removes the state file. :func:`discover_bootstrap` returns the recorded
   running broker's bootstrap string for other commands.

Several brokers can run at once: give each :class:`LocalKafka` its own state file (and so
its own default data dir, ``<state file stem>-data`` next to it). The pytest fixture does
that, so it never touches the broker of a user's ``rollout kafka start``; the jar cache is
shared.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.2"
"""Latest 3.9.x on Maven Central. aiokafka 0.14 speaks the protocol versions 3.9 serves."""

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
LOCK_FILE = Path(__file__).with_name("kafka-jars.lock")
HOST = "127.0.0.1"
DEFAULT_HEAP = "512m"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
LOG_TAIL_LINES = 30
MIN_JAVA = 11

_DOWNLOAD_WORKERS = 6
_DOWNLOAD_ATTEMPTS = 3
_STALE_PART_SECONDS = 3600


# --------------------------------------------------------------------------- errors


class KafkaError(RuntimeError):
    """Any failure of the local broker machinery; the message is meant for humans."""


class JavaNotFoundError(KafkaError):
    pass


class PortInUseError(KafkaError):
    def __init__(self, port: int, what: str = "port") -> None:
        super().__init__(
            f"{what} {port} on {HOST} is already in use; pick another with --port, or omit it to use a free port"
        )
        self.port = port


class AlreadyRunningError(KafkaError):
    def __init__(self, info: BrokerInfo, state_file: Path) -> None:
        super().__init__(
            f"a local Kafka broker is already running at {info.bootstrap} (pid {info.pid}, "
            f"state {state_file}); stop it first"
        )
        self.info = info


class JarVerificationError(KafkaError):
    pass


class BrokerStartError(KafkaError):
    def __init__(self, message: str, log_file: Path | None = None, log_tail: str = "") -> None:
        text = message
        if log_file is not None:
            text += f"\n--- last lines of {log_file} ---\n{log_tail or '(log is empty)'}"
        super().__init__(text)
        self.log_file = log_file
        self.log_tail = log_tail


# --------------------------------------------------------------------------- paths


def cache_root() -> Path:
    """``$ROLLOUT_CACHE_DIR`` or ``~/.cache/rollout``."""
    env = os.environ.get("ROLLOUT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rollout"


def default_lib_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / "kafka" / version / "lib"


def state_dir() -> Path:
    """``$ROLLOUT_STATE_DIR`` or ``~/.local/state/rollout``."""
    env = os.environ.get("ROLLOUT_STATE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".local" / "state" / "rollout"


def default_state_file() -> Path:
    return state_dir() / "kafka.json"


# --------------------------------------------------------------------------- jars


@dataclass(frozen=True)
class LockedJar:
    group: str
    artifact: str
    version: str
    sha1: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def filename(self) -> str:
        # group-qualified: two artifacts with the same name (metrics-core!) must not collide
        return f"{self.group}__{self.artifact}-{self.version}.jar"

    def url(self, repo: str = MAVEN_CENTRAL) -> str:
        path = self.group.replace(".", "/")
        return f"{repo.rstrip('/')}/{path}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"


_LOCK_LINE = re.compile(r"^([\w.\-]+):([\w.\-]+):([\w.\-]+)\s+([0-9a-f]{40})$")


def read_lock(lock_file: Path = LOCK_FILE) -> list[LockedJar]:
    try:
        text = lock_file.read_text()
    except OSError as e:
        raise KafkaError(f"cannot read the jar lock {lock_file}: {e}") from e
    jars = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LOCK_LINE.match(line)
        if not m:
            raise KafkaError(f"{lock_file}:{n}: malformed lock line {line!r}")
        jars.append(LockedJar(*m.groups()))
    if not jars:
        raise KafkaError(f"{lock_file} lists no jars")
    return jars


def _sha1_of(path: Path) -> str:
    h = hashlib.sha1()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(jar: LockedJar, lib_dir: Path, repo: str) -> None:
    """Fetch one jar into ``lib_dir`` atomically: temp file, SHA-1 check, rename."""
    url = jar.url(repo)
    last: Exception | None = None
    for attempt in range(1, _DOWNLOAD_ATTEMPTS + 1):
        fd, tmp_name = tempfile.mkstemp(prefix=f".{jar.filename}.", suffix=".part", dir=lib_dir)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha1()
            req = urllib.request.Request(url, headers={"User-Agent": "rollout-localkafka"})
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(req, timeout=60) as resp:
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    h.update(chunk)
                    out.write(chunk)
            got = h.hexdigest()
            if got != jar.sha1:
                raise JarVerificationError(
                    f"{jar.coordinate}: SHA-1 mismatch for {url}: expected {jar.sha1} (from the lock), got {got}"
                )
            os.replace(tmp, lib_dir / jar.filename)
            return
        except JarVerificationError:
            raise
        except urllib.error.HTTPError as e:
            last = e
            if e.code == 404:
                break
        except (OSError, urllib.error.URLError) as e:
            last = e
        finally:
            tmp.unlink(missing_ok=True)
        time.sleep(0.5 * attempt)
    raise KafkaError(f"cannot download {jar.coordinate} from {url}: {last}")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_jars(
    lib_dir: Path | None = None,
    *,
    lock_file: Path = LOCK_FILE,
    repo: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Make ``lib_dir`` hold exactly the locked jars, each verified; return ``lib_dir``.

    Cached jars are re-hashed; a mismatching one is reported and downloaded again. A
    download whose SHA-1 differs from the lock raises :class:`JarVerificationError` and
    leaves nothing behind.
    """
    lib_dir = lib_dir or default_lib_dir()
    repo = repo or os.environ.get("ROLLOUT_MAVEN_REPO") or MAVEN_CENTRAL
    say = progress or (lambda msg: log.info("%s", msg))
    jars = read_lock(lock_file)
    lib_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(lib_dir / ".lock"):
        wanted = {j.filename for j in jars}
        now = time.time()
        for p in lib_dir.iterdir():
            if p.suffix == ".jar" and p.name not in wanted:
                p.unlink()  # keep `-cp lib/*` equal to the lock
            elif p.suffix == ".part" and now - p.stat().st_mtime > _STALE_PART_SECONDS:
                p.unlink(missing_ok=True)
        missing = []
        for j in jars:
            path = lib_dir / j.filename
            if not path.exists():
                missing.append(j)
            elif _sha1_of(path) != j.sha1:
                say(f"cached {path.name} fails its SHA-1 check; downloading it again")
                path.unlink()
                missing.append(j)
        if missing:
            say(f"downloading {len(missing)} Kafka {KAFKA_VERSION} jar(s) from {repo} into {lib_dir}")
            with concurrent.futures.ThreadPoolExecutor(_DOWNLOAD_WORKERS) as pool:
                futures = [pool.submit(_download, j, lib_dir, repo) for j in missing]
                errors = [f.exception() for f in futures if f.exception() is not None]
            if errors:
                verification = [e for e in errors if isinstance(e, JarVerificationError)]
                raise (verification or errors)[0]
    return lib_dir


# --------------------------------------------------------------------------- java


def find_java() -> str:
    """Path of the ``java`` to use: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    hint = f" (JAVA_HOME={home} has no bin/java)" if home else ""
    raise JavaNotFoundError(
        f"Java not found{hint}: the local Kafka broker needs a Java {MIN_JAVA}+ runtime "
        "(17 recommended). Install one — e.g. `apt-get install openjdk-17-jre-headless`, "
        "`dnf install java-17-openjdk-headless` or `brew install openjdk@17` — and put `java` "
        "on PATH or set JAVA_HOME."
    )


def _check_java_version(java: str) -> None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"cannot run {java}: {e}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_..."
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java {MIN_JAVA}+ (17 recommended)"
        )


# --------------------------------------------------------------------------- ports & processes


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


def _free_ports(n: int, exclude: set[int] = frozenset()) -> list[int]:
    socks = []
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


_exit_codes: dict[int, int] = {}
"""Exit codes of brokers this process spawned and reaped (``pid_alive`` reaps them)."""


def _spawn_detached(cmd: list[str], log_file: Path) -> int:
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
        _exit_codes.pop(pid, None)
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
    _exit_codes.pop(proc.pid, None)
    return proc.pid


_popen_keepalive: list[subprocess.Popen] = []


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a running (non-zombie) process? Reaps it if it is our exited child."""
    if pid <= 0:
        return False
    if pid in _exit_codes:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:  # our own child (a broker this process spawned) has exited: reaped now
            _exit_codes[pid] = os.waitstatus_to_exitcode(status)
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


def _is_our_broker(pid: int, data_dir: Path) -> bool:
    if not pid_alive(pid):
        return False
    cmd = _proc_cmdline(pid)
    if cmd is None:  # no /proc (macOS): trust the pid
        return True
    return b"kafka.Kafka" in cmd and str(data_dir).encode() in cmd


def _tail(path: Path, lines: int = LOG_TAIL_LINES, start: int = 0) -> str:
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


# --------------------------------------------------------------------------- readiness


async def _metadata_ok(bootstrap: str, request_timeout_ms: int = 3000) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms)
    try:
        await asyncio.wait_for(admin.start(), request_timeout_ms / 1000 + 1)
        await asyncio.wait_for(admin.list_topics(), request_timeout_ms / 1000 + 1)
        return bool(admin._client.cluster.brokers())
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def _run_coro(coro_fn: Callable[[], object]) -> object:
    """``asyncio.run`` that also works when called from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro_fn())
        except BaseException as e:
            result["error"] = e

    t = threading.Thread(target=target, name="localkafka-probe")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def probe(bootstrap: str, request_timeout_ms: int = 3000) -> bool:
    """One metadata round trip with aiokafka; True when the broker answers and lists itself."""
    try:
        return bool(_run_coro(lambda: _metadata_ok(bootstrap, request_timeout_ms)))
    except Exception:
        return False


# --------------------------------------------------------------------------- broker


@dataclass(frozen=True)
class BrokerInfo:
    bootstrap: str
    pid: int
    port: int
    controller_port: int
    log_file: Path
    data_dir: Path
    started_at: str
    kafka_version: str = KAFKA_VERSION
    heap: str = DEFAULT_HEAP

    def to_json(self) -> dict:
        d = asdict(self)
        d["log_file"] = str(self.log_file)
        d["data_dir"] = str(self.data_dir)
        return d

    @classmethod
    def from_json(cls, d: dict) -> BrokerInfo:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["log_file"] = Path(known["log_file"])
        known["data_dir"] = Path(known["data_dir"])
        known["pid"] = int(known["pid"])
        known["port"] = int(known["port"])
        known["controller_port"] = int(known["controller_port"])
        return cls(**known)


LOG4J_PROPERTIES = """\
# written by infra/localkafka.py -- everything goes to stdout (the broker log file)
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.kafka.log.LogCleaner=WARN
"""


def server_properties(port: int, controller_port: int, log_dirs: Path) -> str:
    return f"""\
# written by infra/localkafka.py on every start -- edits are overwritten
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{controller_port}
listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dirs}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# left on (Kafka's default): Faust and the engine create their topics explicitly anyway;
# this only serves ad-hoc tools.
auto.create.topics.enable=true
# a laptop / 2-core CI box
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
"""


def _new_cluster_id() -> str:
    # Kafka's Uuid.randomUuid(): url-safe base64 of 16 random bytes, never starting with '-'
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


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
        if _is_our_broker(info.pid, info.data_dir):
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
    ) -> BrokerInfo:
        """Start the broker detached and wait until it answers metadata requests.

        Serialised per state file (a lock file beside it), so two concurrent starts can't both
        launch a broker: the second one sees the first one running.
        """
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.state_file.with_name(f"{self.state_file.name}.lock")):
            return self._start(port, data_dir=data_dir, heap=heap, timeout=timeout)

    def _start(self, port: int | None, *, data_dir: Path | None, heap: str, timeout: float) -> BrokerInfo:
        running = self.status()
        if running is not None:
            raise AlreadyRunningError(running, self.state_file)
        if not re.fullmatch(r"\d+[kKmMgG]?", heap):
            raise KafkaError(f"invalid heap size {heap!r} (expected e.g. 512m or 1g)")
        data_dir = Path(data_dir or self.default_data_dir).expanduser().resolve()
        # cheap checks first: no download when the port is taken or Java is missing
        port, controller_port = self._choose_ports(port, data_dir)
        java = find_java()
        _check_java_version(java)
        lib_dir = ensure_jars(self.lib_dir, progress=self.progress)

        data_dir.mkdir(parents=True, exist_ok=True)
        log_dirs = data_dir / "kraft-logs"
        props = data_dir / "server.properties"
        log4j = data_dir / "log4j.properties"
        log_file = data_dir / "broker.log"
        props.write_text(server_properties(port, controller_port, log_dirs))
        log4j.write_text(LOG4J_PROPERTIES)
        jvm = [
            java,
            f"-Dlog4j.configuration=file:{log4j}",
            f"-Dkafka.logs.dir={data_dir}",
            "-Djava.awt.headless=true",
        ]
        classpath = ["-cp", f"{lib_dir}/*"]

        if not (log_dirs / "meta.properties").exists():
            fmt = subprocess.run(
                [
                    *jvm,
                    "-Xmx256m",
                    *classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "--ignore-formatted",
                    "-t",
                    _new_cluster_id(),
                    "-c",
                    str(props),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            if fmt.returncode != 0:
                out = "\n".join((fmt.stdout + fmt.stderr).splitlines()[-LOG_TAIL_LINES:])
                raise BrokerStartError(f"formatting Kafka storage in {log_dirs} failed (exit {fmt.returncode}):\n{out}")

        # re-check right before launching: another process may have grabbed it meanwhile
        for p, what in ((port, "port"), (controller_port, "controller port")):
            if not port_is_free(p):
                raise PortInUseError(p, what)

        with log_file.open("ab") as lf:
            offset = lf.tell()
            lf.write(f"\n=== localkafka: starting Kafka {KAFKA_VERSION} at {_now()} ===\n".encode())
        cmd = [
            *jvm,
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            f"-XX:ErrorFile={data_dir}/hs_err_pid%p.log",
            *classpath,
            "kafka.Kafka",
            str(props),
        ]
        pid = _spawn_detached(cmd, log_file)
        _write_ports(data_dir, port, controller_port)
        info = BrokerInfo(
            bootstrap=f"{HOST}:{port}",
            pid=pid,
            port=port,
            controller_port=controller_port,
            log_file=log_file,
            data_dir=data_dir,
            started_at=_now(),
            heap=heap,
        )
        self._write_state(info)
        try:
            self._wait_ready(info, timeout, offset)
        except BaseException:
            self._kill(pid, grace=5.0)
            self._clear_state(pid)
            raise
        return info

    def _choose_ports(self, port: int | None, data_dir: Path) -> tuple[int, int]:
        """(port, controller port): the given port, else the one this data dir's broker used
        last time (``ports.json`` in the data dir) when it is free, else a free one."""
        recorded = _read_ports(data_dir)
        if port is not None:
            if not 0 < port < 65536:
                raise KafkaError(f"invalid port {port}")
            if not port_is_free(port):
                raise PortInUseError(port)
        elif recorded is not None and port_is_free(recorded[0]):
            port = recorded[0]
        else:
            (port,) = _free_ports(1)
            if recorded is not None:
                self._say(
                    f"port {recorded[0]} (the broker's port last time) is taken now; using port {port} instead: "
                    f"clients configured with {HOST}:{recorded[0]} must be pointed at {HOST}:{port}"
                )
        if recorded is not None and recorded[1] != port and port_is_free(recorded[1]):
            controller_port = recorded[1]
        else:
            (controller_port,) = _free_ports(1, exclude={port})
        return port, controller_port

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)
        else:
            log.warning("%s", message)

    def _wait_ready(self, info: BrokerInfo, timeout: float, offset: int) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not pid_alive(info.pid):
                code = _exit_codes.get(info.pid, "?")
                raise BrokerStartError(
                    f"Kafka exited with code {code} while starting (port {info.port})",
                    info.log_file,
                    _tail(info.log_file, start=offset),
                )
            if _port_accepts(info.port) and probe(info.bootstrap):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"Kafka did not answer metadata requests at {info.bootstrap} within {timeout:.0f}s",
                    info.log_file,
                    _tail(info.log_file, start=offset),
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

    def wait(self) -> None:
        """Block until the recorded broker exits (for foreground use)."""
        info = self.status()
        while info is not None and pid_alive(info.pid):
            time.sleep(0.5)


PORTS_FILE = "ports.json"
"""In the data dir: the ports its broker last listened on, reused by the next start when free."""


def _read_ports(data_dir: Path) -> tuple[int, int] | None:
    try:
        d = json.loads((data_dir / PORTS_FILE).read_text())
        port, controller_port = int(d["port"]), int(d["controller_port"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unreadable %s in %s: %s", PORTS_FILE, data_dir, e)
        return None
    if not (0 < port < 65536 and 0 < controller_port < 65536):
        return None
    return port, controller_port


def _write_ports(data_dir: Path, port: int, controller_port: int) -> None:
    tmp = data_dir / f".{PORTS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"port": port, "controller_port": controller_port}) + "\n")
    os.replace(tmp, data_dir / PORTS_FILE)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def discover_bootstrap(state_file: Path | None = None) -> str | None:
    """Bootstrap string of the running broker recorded in ``state_file`` (default: the user's)."""
    info = LocalKafka(state_file).status()
    return info.bootstrap if info else None


__all__ = [
    "KAFKA_VERSION",
    "LOCK_FILE",
    "AlreadyRunningError",
    "BrokerInfo",
    "BrokerStartError",
    "JarVerificationError",
    "JavaNotFoundError",
    "KafkaError",
    "LocalKafka",
    "LockedJar",
    "PortInUseError",
    "cache_root",
    "default_lib_dir",
    "default_state_file",
    "discover_bootstrap",
    "ensure_jars",
    "find_java",
    "pid_alive",
    "port_is_free",
    "probe",
    "read_lock",
    "state_dir",
]
