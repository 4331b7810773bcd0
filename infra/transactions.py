"""Publishing a set of records all or nothing: one Kafka transaction, sizes checked first.

    message_limits(topics)  -> each topic's largest record batch (`max.message.bytes`, as the
                               broker reports it for the topic: its own or the broker default)
    record_size(key, value) -> the size of the batch that carries one record (as aiokafka
                               counts it before sending)
    transaction()           -> a transactional producer: every record sent inside is visible
                               to `read_committed` readers (the engine, the CLI) once the block
                               ends, or — on any error — never

A record over its topic's limit would fail inside the transaction (the broker refuses it)
and abort everything; `rollout apply` checks sizes before it begins, to name the document
and the limit instead. Each transaction has its own `transactional.id`: applies from
several terminals never fence one another.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from infra.denials import explained
from infra.kafka_acls import Operation, PatternType, ResourceType
from infra.settings import kafka_client_options

BROKER_DEFAULT_MESSAGE_BYTES = 1048588  # Kafka's message.max.bytes default
PRODUCER_BATCH_BYTES = 16384  # aiokafka's default max_batch_size


@dataclass(frozen=True)
class MessageLimit:
    topic: str
    max_bytes: int
    setting: str  # where the limit comes from, for messages

    def describe(self) -> str:
        return f"the {megabytes(self.max_bytes)} limit of topic {self.topic} ({self.setting})"


def megabytes(count: int) -> str:
    return f"{count / 1_000_000:.1f} MB" if count >= 100_000 else f"{count / 1000:.1f} kB"


def record_size(key: bytes | None, value: bytes | None) -> int:
    """Bytes of the record batch that carries this one record."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, []))


async def message_limits(bootstrap: str, topics: Iterable[str]) -> dict[str, MessageLimit]:
    """`max.message.bytes` of each topic (the topic's own or the broker's default)."""
    names = sorted(set(topics))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="rollout-cli", **kafka_client_options())
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, configs={"max.message.bytes": None}) for name in names]
        )
    finally:
        await admin.close()
    limits = {name: MessageLimit(name, BROKER_DEFAULT_MESSAGE_BYTES, "broker default") for name in names}
    for response in responses:
        for _error, _message, _type, name, entries in response.resources:
            for entry in entries:
                if entry[0] == "max.message.bytes" and entry[1] is not None and name in limits:
                    limits[name] = MessageLimit(name, int(entry[1]), "max.message.bytes")
    return limits


class Transaction:
    """Sends inside one open transaction; `send_all` waits for the broker's offsets."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def send_all(self, topic: str, messages: Iterable[tuple[str, bytes | None]]) -> list[tuple[int, int]]:
        """Send (key, value) pairs in order; (partition, offset) of each, once acknowledged."""
        futures = [await self.producer.send(topic, key=key.encode(), value=value) for key, value in messages]
        return [((metadata := await future).partition, metadata.offset) for future in futures]


@asynccontextmanager
async def transaction(
    bootstrap: str, *, max_bytes: int = BROKER_DEFAULT_MESSAGE_BYTES, id_prefix: str = ""
) -> AsyncIterator[Transaction]:
    """A committed transaction if the block ends normally; aborted (nothing visible) otherwise.
    `max_bytes`: the largest record batch the producer will send (the topics' limit).
    `id_prefix`: the engine's topic prefix, so that its transactional ids
    (`<prefix>rollout-apply-<random>`) fall under one prefixed ACL (infra/kafka_acls.py).
    A principal that may not use them is `infra.denials.NotAuthorized`, before anything is sent."""
    id_pattern = f"{id_prefix}rollout-apply-"
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"{id_pattern}{uuid.uuid4().hex}",
        acks="all",
        enable_idempotence=True,
        max_request_size=max_bytes,
        max_batch_size=min(PRODUCER_BATCH_BYTES, max_bytes),
        **kafka_client_options(),
    )
    try:
        async with explained(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, id_pattern, bootstrap, pattern=PatternType.PREFIXED
        ):
            await producer.start()
            async with producer.transaction():  # a topic refused inside: named by its error
                yield Transaction(producer)
    finally:
        await producer.stop()
