"""The applier: projection topics → a sink (a directory now, Kubernetes later).

Consumes the compacted RemoteAssemblage and ProxyAssemblage topics in a Kafka consumer
group, so several replicas share the clusters (a cluster's snapshots live in one
partition, so exactly one replica handles a cluster at a time). Each record is a full
snapshot or a tombstone; `Sink.write` makes the target match it. Offsets are committed
after the batch was written: a crash re-applies some snapshots, which sinks ignore by
version or rewrite identically.

The consumer reads with `isolation_level="read_committed"`: the worker writes the
projections in Kafka transactions, and an aborted snapshot must never be applied.

Broker outages: aiokafka reconnects by itself when the broker comes back at the same
address, and the consumer rejoins its group. Around that, a supervision loop keeps the
applier alive whatever happens to its clients: an exception out of the consumer or the
producer (a failed send of a status report, a consumer that gave up), or a consumer stuck
without an assignment for `STUCK_AFTER` seconds while the broker answers, makes it close
them (bounded), forget the clusters it handled (as on a revocation) and create new ones after
a backoff (1 s doubling to 30 s). The new consumer resumes from the committed offsets; the
sinks replay on assignment, so nothing is lost and nothing is applied twice to any effect.
A failed offset commit is only logged: the next batch's commit covers it. Warnings of these
loops are rate-limited (`infra.observability.RATE_LIMITED`).

A snapshot the sink cannot render or validate is logged with the reason and counted; it
never stops the other clusters. With `report` set (a simulator for demos and tests, used by
`rollout up`), every sync written is reported back as `succeeded` on the sync-status topic —
the directory sink cannot observe Flux, so this closes the loop by fiat, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError

from infra import observability
from infra.observability import RATE_LIMITED, Health, Metrics, log_fields
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.heartbeats import Heartbeats
from projections.sinks import Sink, SinkResult
from rollout.assemblages import Assemblage
from rollout.events import SyncStatusReported

log = logging.getLogger("rollout.applier")

RESTART_BACKOFF = 1.0
RESTART_BACKOFF_MAX = 30.0
STUCK_AFTER = 60.0
"""Seconds without a partition assignment, while the broker answers, before the consumer is
replaced (joining a group normally takes a few seconds; a rebalance at most the session timeout)."""
CLOSE_TIMEOUT = 10.0
STOP_GRACE = 10.0
"""On `stop`, how long the current batch may take to finish before it is cancelled."""

CLIENT_FAILURES = (KafkaError, OSError, asyncio.TimeoutError)


class ConsumerStuck(RuntimeError):
    pass


@dataclass
class ApplierStats:
    snapshots: int = 0
    tombstones: int = 0
    written: int = 0
    pruned: int = 0
    stale: int = 0
    errors: int = 0
    clusters: set[str] = field(default_factory=set)


async def run_applier(
    *,
    bootstrap: str,
    prefix: str,
    sink: Sink,
    group_id: str,
    report: bool = False,
    stop: asyncio.Event | None = None,
    on_result: Callable[[SinkResult], None] | None = None,
    metrics: Metrics | None = None,
    health: Health | None = None,
    heartbeats: Heartbeats | None = None,
) -> ApplierStats:
    """Apply snapshots until `stop` is set, through any number of broker outages; with
    `heartbeats`, publish a heartbeat per cluster reached (projections/heartbeats.py)."""
    names = TopicNames(prefix)
    kinds = {names.remote: "RemoteAssemblage", names.proxy: "ProxyAssemblage"}
    metrics = metrics or Metrics()
    health = health or Health()
    stats = ApplierStats()
    stop = stop or asyncio.Event()
    handled: dict[Any, set[tuple[str, str]]] = {}  # TopicPartition -> (kind, cluster) seen there

    def forget(partitions: Any) -> None:
        release = getattr(sink, "forget", None)
        for tp in partitions:
            for kind, cluster in sorted(handled.pop(tp, set())):
                if release is not None:
                    release(kind, cluster)
                if heartbeats is not None:
                    heartbeats.forget(kind, cluster)

    class Assignment(ConsumerRebalanceListener):  # type: ignore[misc]
        """Hands clusters over between replicas: a replica that loses a partition stops
        managing its clusters; one that gains partitions replays them from the start when
        the sink keeps live state per cluster (snapshots are full documents, older versions
        are ignored, so the replay is harmless and closes the crash-after-commit gap)."""

        def __init__(self, consumer: AIOKafkaConsumer) -> None:
            self.consumer = consumer

        async def on_partitions_revoked(self, revoked: Any) -> None:
            health.assigned = False
            forget(revoked)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            health.assigned = True
            # heartbeats name the clusters written: a replay tells them again after a restart
            if assigned and (getattr(sink, "replay_on_assignment", False) or heartbeats is not None):
                await self.consumer.seek_to_beginning(*assigned)

    async def session() -> None:
        """One consumer (and producer) from creation to `stop` or failure."""
        security = kafka_client_options()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            # Range assignment gives partition p of both projection topics to the same replica:
            # a cluster's RemoteAssemblage and ProxyAssemblage share a key, hence a partition,
            # so each cluster is handled by exactly one replica.
            partition_assignment_strategy=(RangePartitionAssignor,),
            **security,
        )
        consumer.subscribe(list(kinds), listener=Assignment(consumer))
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **security) if report else None
        try:
            await consumer.start()
            if producer is not None:
                await producer.start()
            stuck_since: float | None = None
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=500, max_records=500)
                for tp, messages in batch.items():
                    for message in messages:
                        await apply(tp, message, producer)
                if batch:
                    if producer is not None:
                        await producer.flush()
                    try:
                        await consumer.commit()
                    except KafkaError as error:  # the next batch's commit covers these offsets
                        log.warning("cannot commit the applier's offsets: %s", _describe(error), extra=RATE_LIMITED)
                await record_lag(consumer)
                stuck_since = watch_assignment(stuck_since)
        finally:
            await _close(consumer.stop(), "the applier's consumer")
            if producer is not None:
                await _close(producer.stop(), "the applier's status producer")

    def watch_assignment(stuck_since: float | None) -> float | None:
        seen = health.broker_seen
        broker_answers = seen is not None and time.monotonic() - seen <= observability.BROKER_STALE_AFTER
        if health.assigned or not broker_answers:
            return None
        now = time.monotonic()
        if stuck_since is None:
            return now
        if now - stuck_since > STUCK_AFTER:
            raise ConsumerStuck(f"no partition assignment for {now - stuck_since:.0f}s while the broker answers")
        return stuck_since

    async def record_lag(consumer: AIOKafkaConsumer) -> None:
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            try:
                lag = highwater - await consumer.position(tp)
            except KafkaError:  # revoked meanwhile, or no position yet: next round
                continue
            metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(lag, 0))

    async def apply(tp: Any, message: Any, producer: AIOKafkaProducer | None) -> None:
        kind = kinds[tp.topic]
        metrics.events_consumed.labels(tp.topic).inc()
        cluster = message.key.decode() if message.key else ""
        try:
            assemblage = Assemblage.model_validate_json(message.value) if message.value is not None else None
            written = sink.write(kind, cluster, assemblage)  # type: ignore[arg-type]
            result = await written if inspect.isawaitable(written) else written
        except Exception as error:  # one bad snapshot must not stall the others
            if heartbeats is not None:
                heartbeats.failed(kind, cluster)
            stats.errors += 1
            metrics.apply_errors.labels(kind).inc()
            metrics.applies.labels(kind, "error").inc()
            log.error(
                "cannot apply %s %s (offset %d): %s",
                kind,
                cluster,
                message.offset,
                error,
                extra=log_fields(cluster=cluster),
            )
            return
        if heartbeats is not None:
            (heartbeats.written if assemblage is not None else heartbeats.forget)(kind, cluster)
        stats.snapshots += assemblage is not None
        stats.tombstones += assemblage is None
        stats.written += result.written
        stats.pruned += result.pruned
        stats.stale += result.stale
        stats.clusters.add(cluster)
        handled.setdefault(tp, set()).add((kind, cluster))
        outcome = "stale" if result.stale else ("changed" if result.changed else "unchanged")
        metrics.applies.labels(kind, outcome).inc()
        if outcome == "changed":  # a replay that changed nothing says nothing about latency
            metrics.apply_latency.labels(kind).observe(max(time.time() - message.timestamp / 1000, 0.0))
        if on_result is not None:
            on_result(result)
        if producer is not None and assemblage is not None and not result.stale:
            for sync in assemblage.spec.syncs:
                event = SyncStatusReported(
                    cluster=cluster,
                    module=sync.module,
                    revision=sync.revision,
                    state="succeeded",
                    message="simulated: written by the directory sink",
                    generation=sync.generation,  # answers this assignment, not a tag that can repeat
                )
                await producer.send(names.status, key=cluster.encode(), value=event.to_bytes())

    beating = asyncio.create_task(heartbeats.run(stop)) if heartbeats is not None else None
    try:
        backoff = RESTART_BACKOFF
        while not stop.is_set():
            started = time.monotonic()
            task = asyncio.create_task(session())
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not task.done():  # stop: let the current batch finish, within reason
                    await asyncio.wait({task}, timeout=STOP_GRACE)
            finally:
                stopping.cancel()
                if not task.done():
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            error = None if task.cancelled() else task.exception()
            if error is None:
                break
            if not isinstance(error, (*CLIENT_FAILURES, ConsumerStuck)):
                raise error
            health.assigned = False
            forget(list(handled))  # as on a revocation: the new consumer's assignment replays them
            if time.monotonic() - started > 2 * RESTART_BACKOFF_MAX:
                backoff = RESTART_BACKOFF  # it had been working for a while: a fresh failure
            log.warning(
                "the applier's Kafka clients failed (%s); creating new ones in %.0fs",
                _describe(error),
                backoff,
                extra=RATE_LIMITED,
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, RESTART_BACKOFF_MAX)
    finally:
        if beating is not None:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
    return stats


def _describe(error: BaseException) -> str:
    name, text = type(error).__name__, str(error)
    return text if text.startswith(name) else f"{name}: {text}" if text else name


async def _close(closing: Any, what: str) -> None:
    """Stop a client, giving up after `CLOSE_TIMEOUT` (leaving a group needs the broker)."""
    try:
        await asyncio.wait_for(closing, CLOSE_TIMEOUT)
    except Exception as error:  # a broken client: nothing more to do about it
        log.warning("closing %s: %s", what, _describe(error), extra=RATE_LIMITED)
