"""Publishing as the one leader: a transactional producer whose `transactional.id` is the
role's, so that a new leader fences the old one at the broker.

Leader election (a Lease, `projections/leadership.py`) decides who *should* publish; this
makes sure the one who lost cannot, whatever its clock or its network says. Starting a
producer with a `transactional.id` makes the broker abort that id's open transaction and
refuse every later write of an older producer with it (`ProducerFenced`). So a watcher:

    win the Lease ─► start FencedPublisher (fences the previous leader) ─► read the topics it
    publishes to (read_committed: everything the previous leader committed) ─► publish

and never publishes something the previous leader already published, nor races it. Each
`publish` is one transaction (one or more records), visible to `read_committed` readers —
the engine, the CLI — once the broker acknowledged it. A fenced publisher raises
`LostLeadership`; the caller stops acting. A principal whose ACLs refuse the id or the
topic gets `infra.denials.NotAuthorized` naming both and the kafka-acls line (nothing was
written: the transaction never began or was aborted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced

from infra.denials import explained
from infra.kafka_acls import Operation, ResourceType
from infra.settings import kafka_client_options

__all__ = ["FencedPublisher", "LostLeadership"]

log = logging.getLogger("rollout.publisher")


class LostLeadership(Exception):
    """Another instance took over the role: this one must not publish again."""


class FencedPublisher:
    """One transactional producer per role; see the module docstring."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Register the transactional id: from now on, older holders of it are fenced."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=self.transactional_id,
            acks="all",
            enable_idempotence=True,
            **kafka_client_options(),
        )
        try:  # a principal that may not use the id: `NotAuthorized`, naming it and the grant
            async with explained(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, self.transactional_id, self.bootstrap):
                await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer
        log.info("publishing as %s", self.transactional_id)

    async def publish(self, topic: str, records: Sequence[tuple[str, bytes]]) -> None:
        """Write `records` (key, value) to `topic` in one transaction; return once committed."""
        if self._producer is None:
            raise RuntimeError("FencedPublisher.start() must be awaited first")
        async with self._lock:
            try:
                async with (
                    explained(Operation.WRITE, ResourceType.TOPIC, topic, self.bootstrap),
                    self._producer.transaction(),
                ):
                    futures = [await self._producer.send(topic, key=k.encode(), value=v) for k, v in records]
                    for future in futures:
                        await future
            except ProducerFenced as error:
                raise LostLeadership(f"{self.transactional_id} is now held by another instance") from error

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            try:
                await asyncio.wait_for(producer.stop(), 10.0)
            except Exception as error:  # a fenced or broken producer: nothing more to do
                log.debug("closing %s: %s", self.transactional_id, error)
