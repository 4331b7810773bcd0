"""Runtime settings with one source of truth: every setting is a CLI flag *and* an
environment variable `ROLLOUT_<NAME>` (flags win). docs/configuration.md has the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_PREFIX = "rollout."


STAGES = ("route", "decide", "assemble")  # the worker's stages, in pipeline order


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str
    topic_prefix: str = DEFAULT_PREFIX
    partitions: int = 4
    replication_factor: int = 1
    tick_interval: float = 10.0
    # How long the broker waits for a stage's consumer heartbeats before it hands the stage's
    # partitions to another worker. The heartbeats run on the worker's event loop, so one long
    # batch — a module fanned out to 100,000 clusters folds for ~10 s — must fit in it:
    # Kafka's own default since 3.0 (KIP-735), not aiokafka's 10 s.
    session_timeout: float = 45.0
    # Kafka static membership (KIP-345): the stages' consumers join with this stable id, so a
    # worker restarted with the same id (a crashed or OOM-killed container in the same pod)
    # gets its partitions back at once instead of waiting for its dead self's session to
    # time out. None: dynamic membership (a graceful stop hands the partitions on at once).
    instance_id: str | None = None
    app_id: str = "rollout-worker"
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    log_format: str = "text"
    # The stages this process runs (`rollout worker --stages`): all three by default; split
    # them over processes to use more than one core (each stage is its own consumer group).
    stages: tuple[str, ...] = STAGES

    @property
    def group_id(self) -> str:
        """The consumer groups' prefix: `<group_id>.route`, `.decide`, `.assemble`."""
        return f"{self.topic_prefix}{self.app_id}"


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"ROLLOUT_{name}", default)


# --- Kafka security: from the environment only (credentials come from Secrets) ------------

SECURITY_ENV = (
    "ROLLOUT_KAFKA_SECURITY_PROTOCOL",  # PLAINTEXT (default) | SSL | SASL_PLAINTEXT | SASL_SSL
    "ROLLOUT_KAFKA_SASL_MECHANISM",  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    "ROLLOUT_KAFKA_SASL_USERNAME",
    "ROLLOUT_KAFKA_SASL_PASSWORD",
    "ROLLOUT_KAFKA_CA_FILE",  # PEM bundle to verify the brokers (SSL, SASL_SSL)
)


def kafka_client_options() -> dict[str, Any]:
    """aiokafka keyword arguments for the configured security protocol."""
    import ssl

    protocol = (env("KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(
            f"ROLLOUT_KAFKA_SECURITY_PROTOCOL={protocol!r}: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
        )
    options: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(cafile=env("KAFKA_CA_FILE"))
    if protocol.startswith("SASL"):
        mechanism = (env("KAFKA_SASL_MECHANISM") or "PLAIN").upper()
        username, password = env("KAFKA_SASL_USERNAME"), env("KAFKA_SASL_PASSWORD")
        if not username or password is None:
            raise ValueError(f"{protocol} needs ROLLOUT_KAFKA_SASL_USERNAME and ROLLOUT_KAFKA_SASL_PASSWORD")
        options.update(sasl_mechanism=mechanism, sasl_plain_username=username, sasl_plain_password=password)
    return options
