"""Runtime settings with one source of truth: every setting is a CLI flag *and* an
environment variable `ROLLOUT_<NAME>` (flags win). docs/configuration.md has the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PREFIX = "rollout."


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str
    topic_prefix: str = DEFAULT_PREFIX
    partitions: int = 4
    data_dir: Path = Path(".rollout/worker")
    store: str = "memory://"
    tick_interval: float = 10.0
    app_id: str = "rollout-worker"

    @property
    def group_id(self) -> str:
        """Faust's app id: the consumer group and the changelog topics' prefix."""
        return f"{self.topic_prefix}{self.app_id}"


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"ROLLOUT_{name}", default)
