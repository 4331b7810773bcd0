"""What a started broker leaves behind: the state file record and the config it runs with.

BrokerInfo              the JSON state file (pid, ports, bootstrap, data dir, log, start time)
server_properties(...)  ``server.properties``: KRaft, one combined broker+controller node
LOG4J_PROPERTIES        ``log4j.properties``: everything to the broker log
ports.json              in the data dir: the ports to reuse on the next start
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from infra.localkafka.defaults import DEFAULT_HEAP, HOST, KAFKA_VERSION
from infra.localkafka.security import Scram, listener_properties

log = logging.getLogger("infra.localkafka")


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
    security_protocol: str = "PLAINTEXT"  # SASL_PLAINTEXT: started with users and ACLs

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


def server_properties(port: int, controller_port: int, log_dirs: Path, security: Scram | None = None) -> str:
    """The broker's config; with `security`, SASL/SCRAM and ACLs (infra/localkafka/security.py)."""
    listeners = (
        listener_properties(port, controller_port, security)
        if security is not None
        else f"""\
listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    )
    return f"""\
# written by infra/localkafka.py on every start -- edits are overwritten
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{controller_port}
controller.listener.names=CONTROLLER
{listeners}log.dirs={log_dirs}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# off: a topic is created by `rollout topics create` (or the worker at start) with the
# engine's partitions and retention, never by a typo'd --topic-prefix
auto.create.topics.enable=false
# a laptop / 2-core CI box
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
"""


def new_cluster_id() -> str:
    # Kafka's Uuid.randomUuid(): url-safe base64 of 16 random bytes, never starting with '-'
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


PORTS_FILE = "ports.json"
"""In the data dir: the ports its broker last listened on, reused by the next start when free."""


def read_ports(data_dir: Path) -> tuple[int, int] | None:
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


def write_ports(data_dir: Path, port: int, controller_port: int) -> None:
    tmp = data_dir / f".{PORTS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"port": port, "controller_port": controller_port}) + "\n")
    os.replace(tmp, data_dir / PORTS_FILE)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
