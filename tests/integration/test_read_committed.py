"""The CLI's readers (infra/client.py) see only committed transactional writes: the worker
publishes projections in Kafka transactions, and an aborted snapshot must never show."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra import client

pytestmark = pytest.mark.integration


async def test_aborted_transactions_are_invisible_and_reads_end(kafka_bootstrap: str) -> None:
    topic = f"read-committed-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"tx-{topic}")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(topic, key=b"a", value=b'{"v": 1}')
            await producer.send(topic, key=b"b", value=b'{"v": 1}')
        await producer.begin_transaction()
        await producer.send(topic, key=b"a", value=b'{"v": "aborted"}')
        await producer.send(topic, key=b"c", value=b'{"v": "aborted"}')
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, key=b"b", value=b'{"v": 2}')
    finally:
        await producer.stop()

    # every partition ends in a transaction marker: the reads must still reach their end
    assert await client.read_latest(kafka_bootstrap, topic) == {"a": {"v": 1}, "b": {"v": 2}}
    values = sorted(r.value for r in await client.read_all(kafka_bootstrap, topic))
    assert values == [b'{"v": 1}', b'{"v": 1}', b'{"v": 2}']
