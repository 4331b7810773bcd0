"""The notifier: decisions become CloudEvents at configured webhooks, delivered at least once.

    decisions topic (key: module; consumer group <prefix>rollout-notifier, read_committed)
        ──► DecisionDocument ──► cloud_event (rollout/wire/notifications.py: EVENT_TYPES)
        ──► each webhook whose filters match: its queue (delivery.py) ──► POST
        ──► every webhook done with an offset (accepted, or dead-lettered) ──► commit (progress.py)

Why a process of its own and not the engine: the engine is a pure fold of the event log
(no I/O, no clock), and a webhook is I/O that fails, stalls and answers late; the worker's
transactions must not wait on a receiver. The decision log already holds every fact a
notification says, in order, with an id — so a reader beside the appliers, like the gate
runner, can send them, be restarted, and send again.

At least once. The group's committed offset of a partition moves only past records every
configured webhook accepted (2xx) or dead-lettered; nothing is committed before it is
done, so a crash or a SIGKILL anywhere loses nothing — what was not committed is read and
sent again, and receivers deduplicate on the event's `id` (the decision's id, the same on
every redelivery). A first start (the group has no offsets) begins at `start_from`
(`latest`: what is decided from now on — not the whole history; `earliest`: everything
the topic holds) and commits that position at once, so a crash before the first
notification does not skip what was decided meanwhile.

Backpressure. Each webhook holds at most `queueSize` notifications in memory; when one is
full the notifier pauses its partitions (the consumer still polls, so it stays in the
group) until that queue has room — memory stays bounded and a slow webhook holds the
others back only once its queue is full, and only while its retries last (delivery.py).

Several replicas share the partitions (one group); a revoked partition's queued
notifications are dropped and the new owner sends them from the committed offset.
A record that is not a decision document is written to the dead-letters topic (stage
`notifier`) and skipped.

Cost: most decisions are not notified (a cluster's assignment, its report, …); their
action is read from the parsed JSON and the record skipped without building the model —
5 µs a record instead of 17 µs for `DecisionDocument.read` (an `assign` record, measured on
the 2-core machine), so reading a 100,000-cluster rollout's decisions costs seconds, not
tens of them. The work per record does not grow with the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Hashable
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from infra.metrics import Metrics
from infra.observability import RATE_LIMITED, Health
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.notifier.config import NotifierConfig
from projections.notifier.delivery import DeadLetterSink, Notification, WebhookDelivery
from projections.notifier.progress import Progress
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import DocumentError
from rollout.wire.notifications import cloud_event, event_type

log = logging.getLogger("rollout.notifier")

RESTART_BACKOFF = 1.0
RESTART_BACKOFF_MAX = 30.0
CLOSE_TIMEOUT = 10.0
POLL_MS = 500
START_FROM = ("latest", "earliest")


def default_source(prefix: str) -> str:
    """The CloudEvents `source` of an engine: its topic prefix (decision ids are unique per journal)."""
    return "/rollout/" + (prefix.rstrip(".") or "default")


def default_group(prefix: str) -> str:
    return f"{prefix}rollout-notifier"


class Notifier:
    """One notifier replica (see the module doc)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        prefix: str,
        config: NotifierConfig,
        dead_letters: DeadLetterSink,
        group_id: str | None = None,
        start_from: str = "latest",
        metrics: Metrics | None = None,
        health: Health | None = None,
    ) -> None:
        if start_from not in START_FROM:
            raise ValueError(f"start_from {start_from!r}: one of {', '.join(START_FROM)}")
        self.bootstrap = bootstrap
        self.topics = TopicNames(prefix)
        self.topic = self.topics.decisions
        self.group_id = group_id or default_group(prefix)
        self.start_from = start_from
        self.source = config.source or default_source(prefix)
        self.dead_letters = dead_letters
        self.metrics = metrics or Metrics()
        self.health = health or Health()
        self.progress = Progress()
        self.epoch = 0
        self.starting: set[Hashable] = set()
        self.read = 0
        self.webhooks = [
            WebhookDelivery(
                webhook,
                config.retry,
                capacity=config.queue_size,
                dead_letters=dead_letters,
                on_done=self._done,
                metrics=self.metrics,
            )
            for webhook in config.webhooks
        ]

    # -- the supervision loop ---------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Sessions of a consumer until `stop`; a session whose client failed is replaced
        after a backoff (1 s doubling to 30 s), everything not committed read again."""
        async with aiohttp.ClientSession() as session:
            senders = [asyncio.create_task(webhook.run(session)) for webhook in self.webhooks]
            try:
                backoff = RESTART_BACKOFF
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        await self._session(stop)
                    except KafkaError as error:
                        log.warning("the notifier's consumer failed (%s); a new one in %.0fs", error, backoff)
                    self.health.assigned = False
                    self._forget(set(self.progress.partitions) | self.starting)
                    if time.monotonic() - started > 2 * RESTART_BACKOFF_MAX:
                        backoff = RESTART_BACKOFF
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), backoff)
                    backoff = min(backoff * 2, RESTART_BACKOFF_MAX)
            finally:
                for sender in senders:
                    sender.cancel()
                await asyncio.gather(*senders, return_exceptions=True)

    async def _session(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset=self.start_from,
            isolation_level="read_committed",
            **kafka_client_options(),
        )
        consumer.subscribe([self.topic], listener=_Assignment(self, consumer))
        try:
            await consumer.start()
            while not stop.is_set():
                await self._poll(consumer)
                await self._commit(consumer)
        finally:
            with contextlib.suppress(Exception):
                await self._commit(consumer)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), CLOSE_TIMEOUT)

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        """Read what the fullest queue has room for (nothing, partitions paused, when it is full)."""
        room = min(webhook.room() for webhook in self.webhooks)
        assigned = consumer.assignment()
        if room == 0:
            consumer.pause(*assigned)
        else:
            consumer.resume(*assigned)
        batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=max(room, 1))
        # a partition new to this replica starts where its first record is (a first start
        # commits that, not the position past the records just fetched), else where it stands
        for tp, messages in sorted(batch.items(), key=lambda item: item[0].partition):
            if tp not in self.progress.partitions and messages:
                await self._start(consumer, tp, messages[0].offset)
        for tp in sorted(self.starting & consumer.assignment(), key=lambda tp: tp.partition):
            await self._start(consumer, tp, None)
        for tp, messages in sorted(batch.items(), key=lambda item: item[0].partition):
            for message in messages:
                await self._read(tp, message)
        await self._advance(consumer)
        self._record_lag(consumer)

    async def _advance(self, consumer: AIOKafkaConsumer) -> None:
        """Past what was read: the consumer's position, beyond the transaction markers (and
        aborted records) no record is returned for — or the committed offset would stay one
        marker behind the end, and the lag never reach 0."""
        for tp, partition in list(self.progress.partitions.items()):
            try:
                position = await consumer.position(tp)
            except KafkaError:  # IllegalStateError: revoked meanwhile, it starts over
                continue
            partition.advance(position)

    async def _start(self, consumer: AIOKafkaConsumer, tp: Any, first: int | None) -> None:
        """Begin tracking a newly assigned partition at its committed offset — or, for a group
        that never committed one, at where it starts reading, committed at once."""
        self.starting.discard(tp)
        committed = await consumer.committed(tp)
        if committed is not None:
            position = committed
        else:
            position = first if first is not None else await consumer.position(tp)
            await consumer.commit({tp: position})
        self.epoch += 1
        self.progress.start(tp, position, self.epoch)

    async def _read(self, tp: Any, message: Any) -> None:
        """One decision record: queued for every webhook that wants it, or done at once."""
        self.read += 1
        self.metrics.events_consumed.labels(self.topic).inc()
        epoch = self.progress.partitions[tp].epoch
        if message.value is None:
            self.progress.add(tp, message.offset, 0)
            return
        try:
            parsed = orjson.loads(message.value)
            action = parsed.get("action") if isinstance(parsed, dict) else None
            if isinstance(action, str) and event_type(action) is None:
                self.progress.add(tp, message.offset, 0)  # not notified: no model built (see the module doc)
                return
            decision = DecisionDocument.read(parsed if isinstance(parsed, dict) else message.value)
        except (orjson.JSONDecodeError, DocumentError) as error:
            await self._unreadable(message, str(error))
            self.progress.add(tp, message.offset, 0)
            return
        event = cloud_event(decision, self.source)
        wanting = [w for w in self.webhooks if event is not None and w.wants(event.subject, event.type)]
        self.progress.add(tp, message.offset, len(wanting))
        if event is None or not wanting:
            return
        notification = Notification(
            tp=tp,
            offset=message.offset,
            epoch=epoch,
            topic=message.topic,
            partition=message.partition,
            event=event,
            body=event.body(),
            record=message.value,
        )
        for webhook in wanting:
            webhook.put(notification)

    async def _unreadable(self, message: Any, reason: str) -> None:
        key = message.key.decode(errors="replace") if message.key is not None else None
        letter = DeadLetter(
            reason=f"not a decision document: {reason}"[:1000],
            stage="notifier",
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=key,
            size=len(message.value),
            truncated=len(message.value) > 4096,
            value=message.value[:4096].decode(errors="replace"),
        )
        log.error("decision %s[%d]@%d: %s; dead-lettered", message.topic, message.partition, message.offset, reason)
        await self.dead_letters(key or "", json.dumps(letter.as_json(), ensure_ascii=False).encode())

    def _done(self, notification: Notification) -> None:
        self.progress.done(notification.tp, notification.offset, notification.epoch)

    async def _commit(self, consumer: AIOKafkaConsumer) -> None:
        offsets = self.progress.to_commit()
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as error:  # a rebalance meanwhile: the next round commits (or the new owner resends)
            log.warning("cannot commit the notifier's offsets: %s", error, extra=RATE_LIMITED)
            return
        self.progress.mark_committed(offsets)

    def _forget(self, partitions: set[Hashable]) -> None:
        """Stop tracking `partitions` (revoked, or the consumer replaced): their queued
        notifications are dropped, to be read again from the committed offset."""
        for webhook in self.webhooks:
            webhook.drop(partitions)
        for tp in partitions:
            self.progress.drop(tp)
            self.starting.discard(tp)

    def _record_lag(self, consumer: AIOKafkaConsumer) -> None:
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            partition = self.progress.partitions.get(tp)
            if highwater is not None and partition is not None:
                lag = highwater - partition.committable()
                self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(lag, 0))


class _Assignment(ConsumerRebalanceListener):
    """A revoked partition: commit what is done, then forget it. An assigned one: started
    (its committed offset read) before its first records are handled."""

    def __init__(self, notifier: Notifier, consumer: AIOKafkaConsumer) -> None:
        self.notifier = notifier
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        notifier = self.notifier
        notifier.health.assigned = False
        with contextlib.suppress(KafkaError):
            await notifier._commit(self.consumer)
        notifier._forget(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.notifier.health.assigned = True
        self.notifier.starting |= set(assigned)
