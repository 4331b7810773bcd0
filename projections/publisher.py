"""Publishing events from long-running Kubernetes-side processes (watcher, status reporter).

`KafkaPublisher` keeps one idempotent aiokafka producer open (`acks=all`) and sends one
event at a time, waiting for the broker's acknowledgement, so that a caller can update its
"last published" state only once the event is durable. The producer starts on first use —
inside the running event loop — and failed sends are retried with backoff; after a failure
the producer is closed (bounded) and a new one is started for the next attempt, so a producer
that broke during a broker outage never lingers. Retry warnings are rate-limited.
The `Publish` protocol is what the watcher and the reporter depend on; tests may pass any
coroutine function with the same shape. Security (TLS, SASL) comes from the same
ROLLOUT_KAFKA_* settings as every other client (`infra.settings.kafka_client_options`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from infra.observability import RATE_LIMITED
from infra.settings import kafka_client_options

__all__ = ["KafkaPublisher", "Publish"]

log = logging.getLogger("rollout.publisher")

CLOSE_TIMEOUT = 10.0


class Publish(Protocol):
    """Send one event (key: the cluster name) and return once it is acknowledged."""

    async def __call__(self, key: str, value: bytes) -> None: ...


class KafkaPublisher:
    """Publish events to one topic; see the module docstring."""

    def __init__(self, bootstrap: str, topic: str, *, attempts: int = 5) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.attempts = attempts
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, **kafka_client_options()
                )
                try:
                    await producer.start()
                except BaseException:  # the broker is away: close what start opened, or it leaks
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(producer.stop(), CLOSE_TIMEOUT)
                    raise
                self._producer = producer
            return self._producer

    async def __call__(self, key: str, value: bytes) -> None:
        for attempt in range(1, self.attempts + 1):
            try:
                producer = await self._started()
                await (await producer.send(self.topic, key=key.encode(), value=value))
                return
            except (TimeoutError, KafkaError, OSError) as error:
                await self._discard()
                if attempt == self.attempts:
                    raise
                log.warning("publishing to %s failed (%s); retrying", self.topic, error, extra=RATE_LIMITED)
                await asyncio.sleep(min(5.0, 0.2 * 2**attempt))

    async def _discard(self) -> None:
        """Close the producer after a failure; the next attempt starts a new one."""
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await asyncio.wait_for(producer.stop(), CLOSE_TIMEOUT)
            except Exception as error:  # a broken producer: nothing more to do about it
                log.warning("closing the producer for %s: %s", self.topic, error, extra=RATE_LIMITED)

    async def close(self) -> None:
        async with self._lock:
            if self._producer is not None:
                await self._producer.stop()
                self._producer = None
