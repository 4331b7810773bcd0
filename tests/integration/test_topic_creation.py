"""`infra.topics.ensure_topics`: the topics it creates can be used the moment it returns —
known to a new client, and served by their leaders (no NOT_LEADER retry logged)."""

from __future__ import annotations

import logging
import uuid

import pytest

from infra import client
from infra.topics import TopicNames, delete_topics, ensure_topics

pytestmark = pytest.mark.integration


async def test_created_topics_are_known_and_served_by_their_leaders_when_it_returns(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="aiokafka")
    for _ in range(5):  # the race lost about one time in five before (a fresh client asked too early)
        prefix = f"created-{uuid.uuid4().hex[:8]}."
        assert await ensure_topics(kafka_bootstrap, prefix, 4)
        try:
            # what `rollout apply` does first: the end offsets of the cluster topic (its fleet
            # stamp), from a new client — "topic ... does not exist" if the broker did not know it yet
            ends = await client.end_offsets(kafka_bootstrap, TopicNames(prefix).clusters)
            assert ends == {0: 0, 1: 0, 2: 0, 3: 0}
        finally:
            await delete_topics(kafka_bootstrap, prefix)
    # aiokafka logs each NOT_LEADER_OR_FOLLOWER answer to a ListOffsets as an ERROR and retries
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
