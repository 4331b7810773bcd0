"""The local broker with authentication and authorization: SASL/SCRAM users and ACLs.

    LocalKafka(...).start(security=Scram({"admin": pw, "rollout-worker": pw2, ...}))
        server.properties   a SASL_PLAINTEXT listener (SCRAM-SHA-512) for clients and the
                            broker itself, the KRaft StandardAuthorizer, super.users=admin
        storage format      `--add-scram 'SCRAM-SHA-512=[name=…,password=…]'` per user: the
                            credentials are in the cluster's metadata before the first start
    apply_acls(info, commands)
                            each `kafka-acls.sh` argument list (infra/kafka_acls.py renders
                            them) run as `java -cp <jars> kafka.admin.AclCommand …` with the
                            admin's credentials — the same lines an operator runs by hand

The controller listener stays PLAINTEXT, bound to 127.0.0.1: the combined node's broker
registers with its own controller there, unauthenticated, so `User:ANONYMOUS` (what
PLAINTEXT connections are) is a super user too — on that listener only, which serves the
KRaft quorum's requests, not produce or fetch. Nothing else is allowed without an ACL
(`allow.everyone.if.no.acl.found=false`).

Users exist from the first start on: a data dir formatted earlier keeps the users it was
formatted with (`kafka-storage format` runs only on a new dir).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from infra.localkafka.defaults import HOST, LOG_TAIL_LINES
from infra.localkafka.errors import KafkaError

MECHANISM = "SCRAM-SHA-512"
ACL_TIMEOUT = 120.0
ACL_PARALLELISM = 3
"""AclCommands run at once: each is a JVM of ~1.5 s of CPU, on a 2-core machine."""


@dataclass(frozen=True)
class Scram:
    """SCRAM-SHA-512 users of a secured local broker; `admin` is the super user."""

    users: Mapping[str, str]
    admin: str = "admin"
    extra_super_users: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.admin not in self.users:
            raise KafkaError(f"the super user {self.admin!r} needs a password among the SCRAM users")
        for name, password in self.users.items():
            if not name or any(c in name + password for c in ',[]"=\n') or not password:
                raise KafkaError(f'SCRAM user {name!r}: names and passwords must be non-empty, without , [ ] " =')

    def client_options(self, user: str | None = None) -> dict[str, object]:
        """aiokafka keyword arguments to connect as `user` (default: the admin)."""
        user = user or self.admin
        return {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.users[user],
        }

    def environment(self, user: str) -> dict[str, str]:
        """The ROLLOUT_KAFKA_* variables a `rollout` process connects as `user` with."""
        return {
            "ROLLOUT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "ROLLOUT_KAFKA_SASL_MECHANISM": MECHANISM,
            "ROLLOUT_KAFKA_SASL_USERNAME": user,
            "ROLLOUT_KAFKA_SASL_PASSWORD": self.users[user],
        }


def listener_properties(port: int, controller_port: int, security: Scram) -> str:
    """The lines of server.properties that differ from the PLAINTEXT broker's."""
    supers = ";".join(f"User:{name}" for name in (security.admin, "ANONYMOUS", *security.extra_super_users))
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{security.admin}" password="{security.users[security.admin]}";'
    )
    return f"""\
listeners=SASL_PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}
advertised.listeners=SASL_PLAINTEXT://{HOST}:{port}
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms={MECHANISM}
sasl.mechanism.inter.broker.protocol={MECHANISM}
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={jaas}
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# the controller listener is PLAINTEXT (ANONYMOUS): the broker registers with its controller there
super.users={supers}
"""


def format_arguments(security: Scram) -> list[str]:
    """`kafka-storage format` arguments that create every SCRAM user."""
    arguments: list[str] = []
    for name, password in security.users.items():
        arguments += ["--add-scram", f'{MECHANISM}=[name={name},password="{password}"]']
    return arguments


def command_config(data_dir: Path, security: Scram, user: str | None = None) -> Path:
    """A client properties file (`--command-config`) to connect as `user` (default: admin)."""
    user = user or security.admin
    path = data_dir / f"client-{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{security.users[user]}";\n'
    )
    os.chmod(path, 0o600)
    return path


def run_acl_commands(java: str, lib_dir: Path, commands: Sequence[Sequence[str]], log_file: Path) -> None:
    """Run each `kafka-acls.sh` argument list through `kafka.admin.AclCommand` (a few at
    once); the first failure raises with its output."""
    base = [java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f"{lib_dir}/*"]
    base += [f"-Dlog4j.configuration=file:{log_file}", "kafka.admin.AclCommand"]

    def run(arguments: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *arguments], capture_output=True, text=True, timeout=ACL_TIMEOUT, stdin=subprocess.DEVNULL
        )

    with ThreadPoolExecutor(ACL_PARALLELISM) as pool:
        for arguments, result in zip(commands, pool.map(run, commands), strict=True):
            if result.returncode != 0 or "Error" in result.stderr:
                output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
                raise KafkaError(f"kafka-acls {' '.join(arguments)} failed (exit {result.returncode}):\n{output}")
