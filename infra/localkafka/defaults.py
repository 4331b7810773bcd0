"""Versions, addresses, limits and directories of the local Kafka broker.

Everything here is a constant or derived from the environment: ``ROLLOUT_CACHE_DIR`` (the
jar cache) and ``ROLLOUT_STATE_DIR`` (the state file of the user's broker).
"""

from __future__ import annotations

import os
from pathlib import Path

KAFKA_VERSION = "3.9.2"
"""Latest 3.9.x on Maven Central. aiokafka 0.14 speaks the protocol versions 3.9 serves."""

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
LOCK_FILE = Path(__file__).parent.with_name("kafka-jars.lock")
"""``infra/kafka-jars.lock``: the pinned classpath (packaged as ``infra`` package data)."""
HOST = "127.0.0.1"
DEFAULT_HEAP = "512m"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
LOG_TAIL_LINES = 30
MIN_JAVA = 11


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
