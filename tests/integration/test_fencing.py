"""A partition's new owner fences every transactional id the previous owner used for it
(streams/delivery.py: two per partition, used in turn). A zombie owner — alive but no
longer owning the partition — must not be able to commit under either id, and what it had
begun must never become visible."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from streams.delivery import StageRunner, StageSpec
from tests.integration.stack import stage_runner

pytestmark = pytest.mark.integration


class Stateless:
    state = None

    def process(self, records: object, position: int, out: object) -> None:
        pass

    def reset(self) -> None:
        pass


def _runner(bootstrap: str, topic: str) -> StageRunner:
    spec = StageSpec(
        name="fenced",
        topics=(topic,),
        group_id=f"{topic}.group",
        dead_letter_topic=f"{topic}.dead",
        new_processor=lambda tp: Stateless(),
    )
    return stage_runner(bootstrap, spec)


async def test_a_new_owner_fences_every_transactional_id_of_the_partition(kafka_bootstrap: str) -> None:
    topic = f"fencing-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    owner = _runner(kafka_bootstrap, topic)
    tp = TopicPartition(topic, 0)
    ids = owner.transactional_ids(tp)
    assert len(set(ids)) == 2, "two ids per partition, used in turn"

    zombies = [AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid) for tid in ids]
    for zombie in zombies:  # the previous owner, with a transaction under way under each id
        await zombie.start()
        await zombie.begin_transaction()
        await zombie.send_and_wait(topic, b"from the zombie", partition=0)
    await owner.start()
    running = asyncio.create_task(owner.run())
    try:
        await asyncio.wait_for(owner.joined.wait(), timeout=60)  # assigned: taken over, fenced
        assert tp in owner.slots and owner.slots[tp].broken is None
        for zombie in zombies:
            with pytest.raises(KafkaError):
                await zombie.commit_transaction()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await owner.stop()
        for zombie in zombies:
            await zombie.stop()

    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed")
    await reader.start()
    try:
        reader.assign([tp])
        await reader.seek_to_beginning(tp)
        records = (await reader.getmany(tp, timeout_ms=3000)).get(tp, [])
    finally:
        await reader.stop()
    assert [r.value for r in records] == [], "nothing the zombie began is visible"
