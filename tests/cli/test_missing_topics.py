"""A typo'd --topic-prefix is an error naming `rollout topics create` — nothing is
published and no topic is created, on the local broker (auto-creation off) and on any
broker (the check asks for metadata without allowing creation)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from click.testing import CliRunner

from rollout_cli.main import cli

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def topics_with(bootstrap: str, prefix: str) -> list[str]:
    async def listing() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return [t for t in await admin.list_topics() if t.startswith(prefix)]
        finally:
            await admin.close()

    return asyncio.run(listing())


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "-f", str(EXAMPLES)],
        ["pause", "podinfo"],
        ["report-status", "--cluster", "c", "--module", "m", "--revision", "1", "--state", "succeeded"],
    ],
    ids=["apply", "pause", "report-status"],
)
def test_publishing_to_a_prefix_without_topics_is_an_error_and_creates_nothing(
    kafka_bootstrap: str, args: list[str]
) -> None:
    prefix = f"typo-{uuid.uuid4().hex[:8]}."
    env = {"ROLLOUT_BOOTSTRAP_SERVERS": kafka_bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code != 0, result.output
    assert "rollout topics create" in result.output, result.output
    assert "applied" not in result.output.replace("nothing was applied", "")
    assert topics_with(kafka_bootstrap, prefix) == []
