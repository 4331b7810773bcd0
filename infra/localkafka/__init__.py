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
   auto-creation is **off**: every topic is created explicitly (`rollout topics create`, the
   worker at start) with the engine's partitions and retention, so a typo'd
   `--topic-prefix` is an error naming `rollout topics create`, never a new topic.
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

Modules
-------
``security`` (a secured broker: SASL/SCRAM users, the StandardAuthorizer, ACLs applied with
``kafka.admin.AclCommand``), ``defaults`` (versions, ports' host, directories), ``errors``, ``jars`` (1), ``java``,
``state`` (2, 5: config files, state-file record, ``ports.json``), ``processes`` (4: ports,
the detached JVM, liveness), ``readiness`` (4: :func:`probe`), ``broker`` (:class:`LocalKafka`,
:func:`discover_bootstrap`: 2 to 5 put together). Import from ``infra.localkafka``.
"""

from __future__ import annotations

from infra.localkafka.broker import LocalKafka, discover_bootstrap
from infra.localkafka.defaults import (
    DEFAULT_HEAP,
    HOST,
    KAFKA_VERSION,
    LOCK_FILE,
    LOG_TAIL_LINES,
    MAVEN_CENTRAL,
    MIN_JAVA,
    START_TIMEOUT,
    STOP_TIMEOUT,
    cache_root,
    default_lib_dir,
    default_state_file,
    state_dir,
)
from infra.localkafka.errors import (
    AlreadyRunningError,
    BrokerStartError,
    JarVerificationError,
    JavaNotFoundError,
    KafkaError,
    PortInUseError,
)
from infra.localkafka.jars import LockedJar, ensure_jars, read_lock
from infra.localkafka.java import find_java
from infra.localkafka.processes import pid_alive, port_is_free
from infra.localkafka.readiness import probe
from infra.localkafka.security import Scram
from infra.localkafka.state import LOG4J_PROPERTIES, PORTS_FILE, BrokerInfo, server_properties

# the names of the one-module infra/localkafka.py, now re-exported from the modules above
__all__ = [
    "DEFAULT_HEAP",
    "HOST",
    "KAFKA_VERSION",
    "LOCK_FILE",
    "LOG4J_PROPERTIES",
    "LOG_TAIL_LINES",
    "MAVEN_CENTRAL",
    "MIN_JAVA",
    "PORTS_FILE",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "AlreadyRunningError",
    "BrokerInfo",
    "BrokerStartError",
    "JarVerificationError",
    "JavaNotFoundError",
    "KafkaError",
    "LocalKafka",
    "LockedJar",
    "PortInUseError",
    "Scram",
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
    "server_properties",
    "state_dir",
]
