"""Delivering one webhook's notifications: in order, retried with backoff, dead-lettered at last.

    Notifier ──put──► WebhookDelivery.queue (bounded: `queueSize`) ──► POST (CloudEvents,
        structured mode) ──► 2xx: accepted ─┐
                              408/425/429/5xx/no answer: retried (backoff, full jitter)
                              other answers, or retries exhausted: a dead letter ─┴──► done(offset)

Each webhook has its own queue and its own task, so a slow or dead webhook holds only its
own queue; the others go on until that queue is full, when the notifier stops reading
(notifier.py). Its events are sent one at a time in the order read — the decisions of a
module share a partition, so a receiver sees them in order — and a retry holds the ones
behind it (order kept, never overtaken).

Retries. Before retry n the task waits a random time in [0, min(maxDelay, initialDelay *
2^(n-1))] — exponential backoff with *full* jitter (AWS Architecture Blog, "Exponential
Backoff And Jitter", 2015): of the jitter variants it spreads the retries of many
notifiers (or one notifier's webhooks after a shared outage) the most, at the least total
work. After `attempts` tries in all the event is written to the dead-letters topic for
that webhook (stage `notifier`, the reason naming the webhook and its last answer) and
counted delivered-or-given-up, so the committed offset can move on. A webhook that used up
its retries is `down`: its next events get one try each (no waits) until one is accepted,
so a dead receiver dead-letters its backlog at one timeout per event instead of holding the
other webhooks back for `attempts` * `maxDelay` per event. An answer that retrying cannot
change (400, 401, 403, 404, 3xx, …) is dead-lettered at once; redirects are not followed.

The dead letter is published (acks=all) before the offset counts as done; if the broker is
away it is retried every `DEAD_LETTER_RETRY` seconds, the queue waiting meanwhile.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from enum import StrEnum

import aiohttp

from infra.metrics import Metrics
from infra.observability import RATE_LIMITED, log_fields
from projections.notifier.config import ConfigError, HeaderValue, Retry, Webhook
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.notifications import CONTENT_TYPE, DecisionCloudEvent

log = logging.getLogger("rollout.notifier")

DEAD_LETTER_RETRY = 5.0
PAYLOAD_LIMIT = 4096
ANSWER_LIMIT = 200


@dataclass(frozen=True)
class Notification:
    """One decision record to send: where it was read (partition, offset, in which
    assignment `epoch`), the event, and the record as read (for a dead letter)."""

    tp: Hashable
    offset: int
    epoch: int
    topic: str
    partition: int
    event: DecisionCloudEvent
    body: bytes
    record: bytes


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    RETRY = "retry"
    REFUSED = "refused"


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    detail: str


def judge(status: int) -> Outcome:
    """What an HTTP status means for a notification."""
    if 200 <= status < 300:
        return Outcome.ACCEPTED
    if status in (408, 425, 429) or status >= 500:
        return Outcome.RETRY
    return Outcome.REFUSED


def backoff_delay(retry_number: int, retry: Retry, rng: random.Random) -> float:
    """Seconds to wait before retry `retry_number` (1, 2, …): full jitter."""
    ceiling = min(retry.max_delay, retry.initial_delay * 2 ** min(retry_number - 1, 62))
    return rng.uniform(0.0, ceiling)


def dead_letter(notification: Notification, webhook: str, reason: str) -> bytes:
    """The dead-letter document of a notification `webhook` never accepted."""
    text = notification.record[:PAYLOAD_LIMIT].decode(errors="replace")
    letter = DeadLetter(
        reason=f"webhook {webhook}: {reason}"[:1000],
        stage="notifier",
        topic=notification.topic,
        partition=notification.partition,
        offset=notification.offset,
        key=notification.event.subject,
        size=len(notification.record),
        event=notification.event.id,
        truncated=len(notification.record) > PAYLOAD_LIMIT,
        value=text,
    )
    return json.dumps(letter.as_json(), ensure_ascii=False).encode()


DeadLetterSink = Callable[[str, bytes], Awaitable[None]]
"""Publish a dead letter (key, document) and return once the broker has it."""


class WebhookDelivery:
    """One webhook's queue and the task that empties it (see the module doc)."""

    def __init__(
        self,
        webhook: Webhook,
        retry: Retry,
        *,
        capacity: int,
        dead_letters: DeadLetterSink,
        on_done: Callable[[Notification], None],
        metrics: Metrics,
        rng: random.Random | None = None,
    ) -> None:
        self.webhook = webhook
        self.retry = retry
        self.capacity = capacity
        self.dead_letters = dead_letters
        self.on_done = on_done
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.queue: deque[Notification] = deque()
        self.wake = asyncio.Event()
        self.down = False
        self.header = HeaderValue(webhook.auth_header) if webhook.auth_header is not None else None

    def wants(self, module: str, kind: str) -> bool:
        """Whether the webhook's filters let an event of type `kind` about `module` through."""
        if self.webhook.types and kind not in self.webhook.types:
            return False
        return not self.webhook.modules or any(fnmatch.fnmatchcase(module, p) for p in self.webhook.modules)

    def room(self) -> int:
        return max(self.capacity - len(self.queue), 0)

    def put(self, notification: Notification) -> None:
        self.queue.append(notification)
        self.wake.set()
        self.metrics.notification_queue.labels(self.webhook.name).set(len(self.queue))

    def drop(self, partitions: set[Hashable]) -> None:
        """Forget the queued notifications of `partitions` (revoked: another replica sends them)."""
        self.queue = deque(n for n in self.queue if n.tp not in partitions)
        self.metrics.notification_queue.labels(self.webhook.name).set(len(self.queue))

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Deliver the queue, head first, until cancelled."""
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            head = self.queue[0]
            await self.deliver(session, head)
            if self.queue and self.queue[0] is head:  # not dropped meanwhile
                self.queue.popleft()
            self.metrics.notification_queue.labels(self.webhook.name).set(len(self.queue))
            self.on_done(head)

    async def deliver(self, session: aiohttp.ClientSession, notification: Notification) -> None:
        """Send until accepted; dead-letter it when refused or out of tries."""
        event, name = notification.event, self.webhook.name
        tries = 1 if self.down else self.retry.attempts
        answer = Answer(Outcome.RETRY, "not sent")
        for attempt in range(1, tries + 1):
            answer = await self.post(session, notification)
            if answer.outcome is Outcome.ACCEPTED:
                self.down = False
                self.metrics.notifications.labels(name, event.type, "delivered").inc()
                log.info(
                    "webhook %s accepted %s %s", name, event.type, event.id, extra=log_fields(module=event.subject)
                )
                return
            if answer.outcome is Outcome.REFUSED or attempt == tries:
                break
            delay = backoff_delay(attempt, self.retry, self.rng)
            self.metrics.notification_retries.labels(name).inc()
            log.warning(
                "webhook %s: %s for %s; retry %d of %d in %.1fs",
                name,
                answer.detail,
                event.id,
                attempt,
                tries - 1,
                delay,
                extra=RATE_LIMITED,
            )
            await asyncio.sleep(delay)
        self.down = answer.outcome is Outcome.RETRY
        tried = f"after {tries} attempt{'s' if tries != 1 else ''}" if answer.outcome is Outcome.RETRY else "refused"
        reason = f"{answer.detail} ({tried})"
        await self.publish_dead_letter(notification, reason)
        self.metrics.notifications.labels(name, event.type, "dead-lettered").inc()
        log.error("webhook %s: %s %s dead-lettered: %s", name, event.type, event.id, reason)

    async def post(self, session: aiohttp.ClientSession, notification: Notification) -> Answer:
        headers = {"Content-Type": CONTENT_TYPE}
        try:
            if self.header is not None:
                headers[self.header.header.name] = self.header.current()
        except ConfigError as error:  # the Secret may be mounted later: retried like an outage
            return Answer(Outcome.RETRY, str(error))
        timeout = aiohttp.ClientTimeout(total=self.webhook.timeout)
        try:
            async with session.post(
                self.webhook.url, data=notification.body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                text = (await response.text(errors="replace"))[:ANSWER_LIMIT].strip()
                detail = f"answered {response.status}" + (f": {text}" if text else "")
                return Answer(judge(response.status), detail)
        except (aiohttp.ClientError, TimeoutError) as error:
            return Answer(Outcome.RETRY, f"no answer: {type(error).__name__}: {error}".rstrip(": "))

    async def publish_dead_letter(self, notification: Notification, reason: str) -> None:
        document = dead_letter(notification, self.webhook.name, reason)
        while True:
            try:
                await self.dead_letters(notification.event.subject, document)
                return
            except Exception as error:  # the broker is away: the queue waits, nothing is lost
                log.warning("cannot publish a notifier dead letter: %s", error, extra=RATE_LIMITED)
                await asyncio.sleep(DEAD_LETTER_RETRY)
