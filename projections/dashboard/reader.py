"""Follow the projection topics and fold them into the dashboard's `FleetView`.

One `read_committed` consumer without a group is assigned every partition of the topics
the dashboard shows, from the beginning (compacted topics are the state; the decisions and
dead letters are history), and keeps following them. Records of open or aborted worker
transactions are never seen (infra/client.py explains why every reader does this).

Each batch is folded with `fleet.absorb`; what it changed is handed to every subscriber (a
server-sent events stream). A subscriber that is slow to take its changes gets them merged
into one, never queued without bound. The reader is `caught_up` once it has read to the end
offsets taken at start: before that, pages show the fleet as far as it has been read.

A missing topic is an error naming `rollout topics create`, as everywhere; the engine's
verdicts and cluster-heartbeats topics, if the topic set has them, are read when they exist
and skipped otherwise (no refusals beyond the dead letters; no leases shown).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra import client
from infra.settings import kafka_client_options
from infra.topics import TOPICS, TopicNames
from projections.dashboard.fleet import ROLES, Changes, FleetView, ProjectionRecord, absorb

log = logging.getLogger(__name__)
OPTIONAL_ROLES = frozenset({"verdicts", "heartbeats"})
BATCH_RECORDS = 20_000


@dataclass(eq=False)  # hashed by identity: a set of live streams
class Subscription:
    """The changes one SSE stream has not sent yet, merged."""

    pending: Changes = field(default_factory=Changes)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, changes: Changes) -> None:
        self.pending.merge(changes)
        self.ready.set()

    async def take(self) -> Changes:
        await self.ready.wait()
        self.ready.clear()
        taken, self.pending = self.pending, Changes()
        return taken


class ProjectionReader:
    def __init__(self, bootstrap: str, topics: TopicNames, view: FleetView | None = None) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.view = view if view is not None else FleetView()
        self.subscriptions: set[Subscription] = set()
        self.caught_up = asyncio.Event()
        self.records_read = 0
        self._roles: dict[str, str] = {}  # topic name → role
        self._consumer: AIOKafkaConsumer | None = None
        self._ends: dict[TopicPartition, int] = {}

    async def _roles_to_read(self) -> dict[str, str]:
        known = {spec.role for spec in TOPICS}
        wanted = {self.topics.name(role): role for role in ROLES if role in known}
        await client.require_topics(self.bootstrap, [t for t, r in wanted.items() if r not in OPTIONAL_ROLES])
        for topic, role in list(wanted.items()):
            if role in OPTIONAL_ROLES:
                try:
                    await client.require_topics(self.bootstrap, [topic])
                except client.MissingTopic:
                    log.info("no %s topic (%s): the dashboard shows the fleet without it", role, topic)
                    del wanted[topic]
        return wanted

    async def start(self) -> None:
        """Check the topics and assign the consumer; raises `client.MissingTopic`."""
        self._roles = await self._roles_to_read()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            group_id=None,
            isolation_level="read_committed",
            client_id="rollout-dashboard",
            **kafka_client_options(),
        )
        await consumer.start()
        try:
            partitions = []
            for topic in self._roles:
                numbers = consumer.partitions_for_topic(topic)
                if not numbers:
                    await consumer._client.force_metadata_update()
                    numbers = consumer.partitions_for_topic(topic) or set()
                partitions += [TopicPartition(topic, p) for p in sorted(numbers)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            self._ends = {tp: end for tp, end in (await consumer.end_offsets(partitions)).items() if end > 0}
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        if not self._ends:
            self.caught_up.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Fold records until `stop` is set; `start` first."""
        consumer = self._consumer
        assert consumer is not None, "ProjectionReader.start() first"
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=300, max_records=BATCH_RECORDS)
                changes = Changes()
                for tp, messages in batch.items():
                    role = self._roles[tp.topic]
                    for message in messages:
                        key = message.key.decode(errors="replace") if message.key is not None else None
                        stamp = message.timestamp / 1000 if isinstance(message.timestamp, int) else None
                        changes.merge(absorb(self.view, role, ProjectionRecord(key, message.value, stamp)))
                    self.records_read += len(messages)
                if not self.caught_up.is_set():
                    await self._check_caught_up(consumer)
                if changes:
                    for subscription in self.subscriptions:
                        subscription.offer(changes)
        finally:
            await consumer.stop()

    async def _check_caught_up(self, consumer: AIOKafkaConsumer) -> None:
        for tp, end in list(self._ends.items()):
            if await consumer.position(tp) >= end:
                del self._ends[tp]
        if not self._ends:
            log.info("dashboard caught up: %d records read", self.records_read)
            self.caught_up.set()

    def subscribe(self) -> Subscription:
        subscription = Subscription()
        self.subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)
