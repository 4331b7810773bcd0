"""What the CLI and the appliers do with Kafka directly: publish input events,
read compacted topics to their end, follow a topic.

`read_latest` implements "the current state of a compacted topic": read every partition
from the beginning to the end offset taken at the start, keep the last value per key and
drop keys whose last value is a tombstone. Compaction only makes this cheaper; the result
is the same before and after the log cleaner runs.

Every consumer reads with `isolation_level="read_committed"`: the worker writes projections
in Kafka transactions, so records of aborted (or still open) transactions are never seen,
and the end offsets are the last stable offsets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from aiokafka.protocol.metadata import MetadataRequest

from infra.denials import explained
from infra.kafka_acls import Operation, ResourceType
from infra.settings import kafka_client_options


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    timestamp: float | None = None  # seconds since the epoch (the record's Kafka timestamp)

    def json(self) -> Any:
        return json.loads(self.value) if self.value is not None else None


class MissingTopic(LookupError):
    """A topic the engine needs does not exist; it is never created by accident."""

    def __init__(self, topic: str) -> None:
        super().__init__(
            f"topic {topic} does not exist: create the engine's topics with `rollout topics create` "
            "(with the same --topic-prefix and --partitions as the worker)"
        )


async def require_topic(kafka: AIOKafkaClient, topic: str) -> None:
    """Raise `MissingTopic` unless `topic` exists — asking in a way that never creates it
    (a broker with `auto.create.topics.enable` would otherwise create it with its defaults)."""
    node = kafka.get_random_node()
    if node is None:
        await kafka.bootstrap()
        node = kafka.get_random_node()
    response = await kafka.send(node, MetadataRequest(topics=[topic], allow_auto_topic_creation=False))
    for entry in response.topics:  # (error_code, name, ...) in every version
        if entry[1] == topic and entry[0] == UnknownTopicOrPartitionError.errno:
            raise MissingTopic(topic)
        if entry[1] == topic and entry[0] == TopicAuthorizationFailedError.errno:
            raise TopicAuthorizationFailedError(topic)  # may not even describe it: `explained` names who


async def require_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """`require_topic` for each of `topics`, on a short-lived client."""
    kafka = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="rollout-cli", **kafka_client_options())
    try:
        async with explained(Operation.DESCRIBE, ResourceType.TOPIC, "?", bootstrap):
            await kafka.bootstrap()
            for topic in topics:
                await require_topic(kafka, topic)
    finally:
        await kafka.close()


async def publish(bootstrap: str, topic: str, messages: Iterable[tuple[str, bytes | None]]) -> int:
    """Send (key, value) pairs in order and wait until the broker acknowledged them all.
    A missing topic is `MissingTopic` before anything is sent; a principal that may not
    write `topic` is `infra.denials.NotAuthorized` (nothing appended)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **kafka_client_options()
    )
    sent = 0
    try:
        async with explained(Operation.WRITE, ResourceType.TOPIC, topic, bootstrap):
            await producer.start()
            await require_topic(producer.client, topic)
            futures = []
            for key, value in messages:
                futures.append(await producer.send(topic, key=key.encode(), value=value))
                sent += 1
            await producer.flush()
            for future in futures:
                await future
    finally:
        await producer.stop()
    return sent


async def _consumer(
    bootstrap: str, topic: str, start: dict[int, int] | None = None
) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    """A read_committed consumer assigned every partition of `topic`, at its beginning or
    (`start`) at the offset given for it."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level="read_committed",
        **kafka_client_options(),
    )
    try:
        async with explained(Operation.READ, ResourceType.TOPIC, topic, bootstrap):
            await consumer.start()
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                await require_topic(consumer._client, topic)  # refused, or missing: says which
    except BaseException:
        await consumer.stop()
        raise
    if not partitions:
        await consumer.stop()
        raise LookupError(f"topic {topic} does not exist (is the worker set up with the same --topic-prefix?)")
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    for tp in tps:
        if start is not None and start.get(tp.partition, 0) > 0:
            consumer.seek(tp, start[tp.partition])
    return consumer, tps


async def read_all(bootstrap: str, topic: str) -> list[Record]:
    """Every record currently in the topic, partition by partition, in offset order."""
    consumer, tps = await _consumer(bootstrap, topic)
    try:
        async with explained(Operation.READ, ResourceType.TOPIC, topic, bootstrap):
            return await _read_to_end(consumer, topic, tps)
    finally:
        await consumer.stop()


class RecordsDeleted(LookupError):
    """A partition no longer holds the offset a reader must start from."""


async def read_from(bootstrap: str, topic: str, start: dict[int, int]) -> list[Record]:
    """The records of `topic` from `start` (partition → offset; the beginning where absent)
    to the end offsets taken now, partition by partition, in offset order. A partition that
    starts past its offset (records deleted) is `RecordsDeleted` — never a silent jump."""
    consumer, tps = await _consumer(bootstrap, topic, start)
    try:
        async with explained(Operation.READ, ResourceType.TOPIC, topic, bootstrap):
            first = await consumer.beginning_offsets(tps)
            for tp in tps:
                if start.get(tp.partition, first[tp]) < first[tp]:
                    raise RecordsDeleted(
                        f"{topic} partition {tp.partition} starts at offset {first[tp]}, past offset "
                        f"{start[tp.partition]} where this read must begin: the records between were deleted"
                    )
            return await _read_to_end(consumer, topic, tps)
    finally:
        await consumer.stop()


async def _read_to_end(consumer: AIOKafkaConsumer, topic: str, tps: list[TopicPartition]) -> list[Record]:
    """The records of `tps` below their end offsets taken now, partition by partition."""
    end = await consumer.end_offsets(tps)
    records: list[Record] = []
    remaining = {tp for tp in tps if end[tp] > 0}
    for tp in tps:
        if end[tp] > 0 and await consumer.position(tp) >= end[tp]:
            remaining.discard(tp)
    while remaining:
        batch = await consumer.getmany(*remaining, timeout_ms=1000)
        for tp, messages in batch.items():
            for message in messages:
                if message.offset < end[tp]:
                    key = message.key.decode(errors="replace") if message.key is not None else None
                    records.append(Record(topic, tp.partition, message.offset, key, message.value, _seconds(message)))
        # every partition, not only those with records: the tail of one may be an aborted
        # transaction (skipped, no records) whose position still moves to the end
        for tp in list(remaining):
            if await consumer.position(tp) >= end[tp]:
                remaining.discard(tp)
    return records


def _seconds(message: Any) -> float | None:
    timestamp = getattr(message, "timestamp", None)
    return timestamp / 1000 if isinstance(timestamp, int) and timestamp >= 0 else None


async def read_latest(bootstrap: str, topic: str) -> dict[str, Any]:
    """The latest JSON document per key of a compacted topic; tombstoned keys are absent."""
    latest: dict[str, Any] = {}
    for record in await read_all(bootstrap, topic):
        if record.key is None:
            continue
        if record.value is None:
            latest.pop(record.key, None)
        else:
            latest[record.key] = record.json()
    return dict(sorted(latest.items()))


class LatestReader:
    """`read_latest` for a process that asks again and again (the gate runner, every
    interval): one consumer, kept between calls, reads only what was added since the last
    call — instead of a consumer started, assigned (aiokafka logs "Updating subscribed
    topics" at INFO each time) and the whole topic read again for every call. After an
    error the consumer is dropped and the next call starts over from the beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[TopicPartition] = []
        self._latest: dict[str, Any] = {}

    async def latest(self) -> dict[str, Any]:
        """The latest JSON document per key; tombstoned keys are absent."""
        try:
            if self._consumer is None:
                self._consumer, self._tps = await _consumer(self.bootstrap, self.topic)
                self._latest = {}
            async with explained(Operation.READ, ResourceType.TOPIC, self.topic, self.bootstrap):
                records = await _read_to_end(self._consumer, self.topic, self._tps)
        except BaseException:
            await self.close()
            raise
        for record in records:
            if record.key is None:
                continue
            if record.value is None:
                self._latest.pop(record.key, None)
            else:
                self._latest[record.key] = record.json()
        return dict(sorted(self._latest.items()))

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()


async def follow(bootstrap: str, topic: str, *, from_beginning: bool = True) -> AsyncIterator[Record]:
    consumer, tps = await _consumer(bootstrap, topic)
    try:
        if not from_beginning:
            await consumer.seek_to_end(*tps)
        while True:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, messages in sorted(batch.items(), key=lambda item: item[0].partition):
                for message in messages:
                    key = message.key.decode(errors="replace") if message.key is not None else None
                    yield Record(topic, tp.partition, message.offset, key, message.value, _seconds(message))
    finally:
        await consumer.stop()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def offsets_at(bootstrap: str, topic: str, when: float) -> dict[int, int]:
    """Partition → the first offset of `topic` whose record is timestamped at or after
    `when` (seconds since the epoch); the end offset where every record is older."""
    consumer, tps = await _consumer(bootstrap, topic)
    try:
        found = await consumer.offsets_for_times({tp: int(when * 1000) for tp in tps})
        ends = await consumer.end_offsets(tps)
        return {tp.partition: found[tp].offset if found.get(tp) is not None else ends[tp] for tp in tps}
    finally:
        await consumer.stop()


async def committed_offsets(
    bootstrap: str, group: str, partitions: list[TopicPartition] | None = None
) -> dict[TopicPartition, int]:
    """What consumer group `group` has committed, per partition (nothing: an empty dict);
    only of `partitions` when given — asking for named partitions needs Describe on their
    topics alone (the group's other topics may be ones the caller may not see)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="rollout-retention", **kafka_client_options())
    try:
        async with explained(Operation.DESCRIBE, ResourceType.GROUP, group, bootstrap):
            await admin.start()
            offsets = await admin.list_consumer_group_offsets(group, partitions=partitions)
        return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition → end offset of `topic` as a `read_committed` reader sees it (the last
    stable offset): everything committed so far lies below it."""
    consumer, tps = await _consumer(bootstrap, topic)
    try:
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()
