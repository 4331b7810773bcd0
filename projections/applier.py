"""The applier: projection topics → a sink (a directory now, Kubernetes later).

Consumes the compacted RemoteAssemblage and ProxyAssemblage topics in a Kafka consumer
group, so several replicas share the clusters (a cluster's snapshots live in one
partition, so exactly one replica handles a cluster at a time). Each record is a full
snapshot or a tombstone; `Sink.write` makes the target match it. Offsets are committed
after the batch was written: a crash re-applies some snapshots, which sinks ignore by
version or rewrite identically.

A snapshot the sink cannot render or validate is logged with the reason and counted; it
never stops the other clusters. With `report` set (a simulator for demos and tests, used by
`rollout up`), every sync written is reported back as `succeeded` on the sync-status topic —
the directory sink cannot observe Flux, so this closes the loop by fiat, and says so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from infra.observability import Health, Metrics
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.sinks import Sink, SinkResult
from rollout.assemblages import Assemblage
from rollout.events import SyncStatusReported

log = logging.getLogger("rollout.applier")


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
) -> ApplierStats:
    names = TopicNames(prefix)
    kinds = {names.remote: "RemoteAssemblage", names.proxy: "ProxyAssemblage"}
    metrics = metrics or Metrics()
    health = health or Health()

    handled: dict[Any, set[tuple[str, str]]] = {}  # TopicPartition -> (kind, cluster) seen there

    class Assignment(ConsumerRebalanceListener):  # type: ignore[misc]
        """Hands clusters over between replicas: a replica that loses a partition stops
        managing its clusters; one that gains partitions replays them from the start when
        the sink keeps live state per cluster (snapshots are full documents, older versions
        are ignored, so the replay is harmless and closes the crash-after-commit gap)."""

        async def on_partitions_revoked(self, revoked: Any) -> None:
            health.assigned = False
            forget = getattr(sink, "forget", None)
            for tp in revoked:
                for kind, cluster in sorted(handled.pop(tp, set())):
                    if forget is not None:
                        forget(kind, cluster)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            health.assigned = True
            if assigned and getattr(sink, "replay_on_assignment", False):
                await consumer.seek_to_beginning(*assigned)

    security = kafka_client_options()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        # Range assignment gives partition p of both projection topics to the same replica:
        # a cluster's RemoteAssemblage and ProxyAssemblage share a key, hence a partition,
        # so each cluster is handled by exactly one replica.
        partition_assignment_strategy=(RangePartitionAssignor,),
        **security,
    )
    consumer.subscribe(list(kinds), listener=Assignment())
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **security) if report else None
    stats = ApplierStats()
    stop = stop or asyncio.Event()
    await consumer.start()
    if producer is not None:
        await producer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            for tp, messages in batch.items():
                kind = kinds[tp.topic]
                for message in messages:
                    metrics.events_consumed.labels(tp.topic).inc()
                    cluster = message.key.decode() if message.key else ""
                    try:
                        assemblage = (
                            Assemblage.model_validate_json(message.value) if message.value is not None else None
                        )
                        written = sink.write(kind, cluster, assemblage)  # type: ignore[arg-type]
                        result = await written if inspect.isawaitable(written) else written
                    except Exception as error:  # one bad snapshot must not stall the others
                        stats.errors += 1
                        metrics.apply_errors.labels(kind).inc()
                        metrics.applies.labels(kind, "error").inc()
                        log.error("cannot apply %s %s (offset %d): %s", kind, cluster, message.offset, error)
                        continue
                    stats.snapshots += assemblage is not None
                    stats.tombstones += assemblage is None
                    stats.written += result.written
                    stats.pruned += result.pruned
                    stats.stale += result.stale
                    stats.clusters.add(cluster)
                    handled.setdefault(tp, set()).add((kind, cluster))
                    outcome = "stale" if result.stale else ("changed" if result.changed else "unchanged")
                    metrics.applies.labels(kind, outcome).inc()
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
                            )
                            await producer.send(names.status, key=cluster.encode(), value=event.to_bytes())
            if batch:
                if producer is not None:
                    await producer.flush()
                await consumer.commit()
            for tp in consumer.assignment():
                highwater = consumer.highwater(tp)
                if highwater is not None:
                    lag = highwater - await consumer.position(tp)
                    metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(lag, 0))
    finally:
        await consumer.stop()
        if producer is not None:
            await producer.stop()
    return stats
