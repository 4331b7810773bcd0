"""`infra.topics.delete_topics`: a benchmark or chaos round removes its own topics from a
long-lived broker, and only those."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from infra.topics import TopicNames, delete_topics, ensure_topics

pytestmark = pytest.mark.integration


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_deleting_a_prefix_removes_its_topics_and_no_other(kafka_bootstrap: str) -> None:
    mine, other = f"cleanup-{uuid.uuid4().hex[:8]}.", f"cleanup-{uuid.uuid4().hex[:8]}."
    created = await ensure_topics(kafka_bootstrap, mine, 1)
    await ensure_topics(kafka_bootstrap, other, 1)
    assert created

    deleted = await delete_topics(kafka_bootstrap, mine)

    assert deleted == sorted(created)
    for _ in range(100):  # deletion completes shortly after the broker answers
        left = await _topics(kafka_bootstrap)
        if not any(t.startswith(mine) for t in left):
            break
        await asyncio.sleep(0.1)
    assert not {t for t in left if t.startswith(mine)}
    assert TopicNames(other).journal in left
    await delete_topics(kafka_bootstrap, other)
