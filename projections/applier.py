"""The applier: projection topics → a sink (a directory now, Kubernetes later).

Consumes the compacted RemoteAssemblage and ProxyAssemblage topics in a Kafka consumer
group, so several replicas share the clusters (a cluster's snapshots live in one
partition, so exactly one replica handles a cluster at a time). Each record is a full
snapshot or a tombstone; `Sink.write` makes the target match it. Offsets are committed
after the batch was written: a crash re-applies some snapshots, which sinks ignore by
version or rewrite identically.

Superseded snapshots are not applied. The topics are compacted — only a cluster's latest
snapshot matters — and a consumer batch that holds several records of one (kind, cluster)
applies only what applying them all in order would end with: its newest snapshot, after its
last tombstone if it has one (projections/coalescing.py: the rules, and what happens when
the one applied fails). The others are counted `superseded`
(`rollout_applies_total{outcome="superseded"}`); their offsets are committed with the batch,
as an applied one's are.
Snapshots are decoded by a `SnapshotDecoder` (projections/snapshot_decoder.py): each distinct
sync is validated once, not again in every snapshot of every cluster that carries it.

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
`rollout up`), every sync a snapshot adds or changes is reported back as `succeeded` on the sync-status topic —
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
from infra.denials import refused_by_acls
from infra.observability import RATE_LIMITED, Health, Metrics, log_fields
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.coalescing import Apply, coalesce
from projections.heartbeats import Heartbeats
from projections.sinks import Sink, SinkResult
from projections.snapshot_decoder import SnapshotDecoder
from rollout.wire.assemblages import Assemblage, AssignedSync
from rollout.wire.events import SyncStatusReported

log = logging.getLogger("rollout.applier")

RESTART_BACKOFF = 1.0
RESTART_BACKOFF_MAX = 30.0
STUCK_AFTER = 60.0
"""Seconds without a partition assignment, while the broker answers, before the consumer is
replaced (joining a group normally takes a few seconds; a rebalance at most the session timeout)."""
HOLD_LOOP_AT_MOST = 0.2
"""Seconds a synchronous sink's writes may hold the event loop before the applier lets it
run (the consumer's heartbeats: every 3 s, a 10 s session timeout); see `_apply_batch`."""
APPLY_CONCURRENCY = 32
"""Clusters of one batch an asynchronous sink is given at once (see `Applier._apply_batch`);
the Kubernetes sink converges at most its `max_parallel` (16) of them at a time anyway."""
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
    superseded: int = 0  # not applied: a later snapshot of the same (kind, cluster) was in the batch
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
    applier = Applier(
        bootstrap=bootstrap,
        names=TopicNames(prefix),
        sink=sink,
        group_id=group_id,
        report=report,
        on_result=on_result,
        metrics=metrics or Metrics(),
        health=health or Health(),
        heartbeats=heartbeats,
    )
    return await applier.run(stop or asyncio.Event())


class Applier:
    """One applier replica: a supervision loop around sessions of Kafka clients (see the
    module doc); what it applied is counted in `stats`."""

    def __init__(
        self,
        *,
        bootstrap: str,
        names: TopicNames,
        sink: Sink,
        group_id: str,
        report: bool,
        on_result: Callable[[SinkResult], None] | None,
        metrics: Metrics,
        health: Health,
        heartbeats: Heartbeats | None,
    ) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.kinds = {names.remote: "RemoteAssemblage", names.proxy: "ProxyAssemblage"}
        self.sink = sink
        self.group_id = group_id
        self.report = report
        self.on_result = on_result
        self.metrics = metrics
        self.health = health
        self.heartbeats = heartbeats
        self.stats = ApplierStats()
        self.decoder = SnapshotDecoder()
        self.handled: dict[Any, set[tuple[str, str]]] = {}  # TopicPartition -> (kind, cluster) seen there
        # with `report`: per (kind, cluster), module -> (generation, revision) reported
        self.reported: dict[tuple[str, str], dict[str, tuple[int | None, str]]] = {}

    async def run(self, stop: asyncio.Event) -> ApplierStats:
        """Sessions until `stop` is set; a session whose clients failed is replaced after a
        backoff (1 s doubling to 30 s; back to 1 s once one had been working for a while)."""
        heartbeats = self.heartbeats
        beating = asyncio.create_task(heartbeats.run(stop)) if heartbeats is not None else None
        try:
            backoff = RESTART_BACKOFF
            while not stop.is_set():
                started = time.monotonic()
                error = await self._supervised_session(stop)
                if error is None:
                    break
                self.health.assigned = False
                self.forget(list(self.handled))  # as on a revocation: the new consumer's assignment replays them
                if time.monotonic() - started > 2 * RESTART_BACKOFF_MAX:
                    backoff = RESTART_BACKOFF  # it had been working for a while: a fresh failure
                refused = refused_by_acls(error, "applier", self.names.prefix)
                if refused is not None:  # an error, not a blip: it lasts until an admin acts
                    log.error("%s (in %.0fs)", refused, backoff, extra=RATE_LIMITED)
                else:
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
        return self.stats

    async def _supervised_session(self, stop: asyncio.Event) -> BaseException | None:
        """Run one session until `stop` (the current batch may finish, within `STOP_GRACE`)
        or until its clients fail: that failure, None on a stop. Anything but a client
        failure is a bug, and raised."""
        task = asyncio.create_task(self._session(stop))
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
        if error is not None and not isinstance(error, (*CLIENT_FAILURES, ConsumerStuck)):
            raise error
        return error

    def forget(self, partitions: Any) -> None:
        """Stop managing the clusters seen on `partitions` (revoked, or clients replaced)."""
        release = getattr(self.sink, "forget", None)
        for tp in partitions:
            for kind, cluster in sorted(self.handled.pop(tp, set())):
                if release is not None:
                    release(kind, cluster)
                if self.heartbeats is not None:
                    self.heartbeats.forget(kind, cluster)
                self.reported.pop((kind, cluster), None)

    async def _session(self, stop: asyncio.Event) -> None:
        """One consumer (and producer) from creation to `stop` or failure."""
        security = kafka_client_options()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            # Range assignment gives partition p of both projection topics to the same replica:
            # a cluster's RemoteAssemblage and ProxyAssemblage share a key, hence a partition,
            # so each cluster is handled by exactly one replica.
            partition_assignment_strategy=(RangePartitionAssignor,),
            **security,
        )
        consumer.subscribe(list(self.kinds), listener=_Assignment(self, consumer))
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **security) if self.report else None
        try:
            await consumer.start()
            if producer is not None:
                await producer.start()
            stuck_since: float | None = None
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=500, max_records=500)
                if batch:
                    await self._apply_batch(batch, producer)
                    try:
                        await consumer.commit()
                    except KafkaError as error:  # the next batch's commit covers these offsets
                        log.warning("cannot commit the applier's offsets: %s", _describe(error), extra=RATE_LIMITED)
                await self._record_lag(consumer)
                stuck_since = self._watch_assignment(stuck_since)
        finally:
            await _close(consumer.stop(), "the applier's consumer")
            if producer is not None:
                await _close(producer.stop(), "the applier's status producer")

    def _watch_assignment(self, stuck_since: float | None) -> float | None:
        """When the consumer has had no assignment since (None: it has one, or the broker is
        away); `ConsumerStuck` after `STUCK_AFTER` seconds of that while the broker answers."""
        seen = self.health.broker_seen
        broker_answers = seen is not None and time.monotonic() - seen <= observability.BROKER_STALE_AFTER
        if self.health.assigned or not broker_answers:
            return None
        now = time.monotonic()
        if stuck_since is None:
            return now
        if now - stuck_since > STUCK_AFTER:
            raise ConsumerStuck(f"no partition assignment for {now - stuck_since:.0f}s while the broker answers")
        return stuck_since

    async def _record_lag(self, consumer: AIOKafkaConsumer) -> None:
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            try:
                lag = highwater - await consumer.position(tp)
            except KafkaError:  # revoked meanwhile, or no position yet: next round
                continue
            self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(lag, 0))

    async def _apply_batch(self, batch: dict[Any, list[Any]], producer: AIOKafkaProducer | None) -> None:
        """Write a batch's snapshots — of each cluster's, the ones `coalesce` keeps (the module
        doc) — inside the sink's `batch()` when it has one (the directory sink then writes its
        state file once); then send the batch's simulated status reports, in the order of
        the snapshots written, and wait until they are delivered.

        A synchronous sink (directory) writes them one after the other, cluster after cluster
        in the order of each one's last record in the batch, the event loop run in between
        once `HOLD_LOOP_AT_MOST` seconds have passed: a write holds the loop, and the
        consumer's group heartbeats are sent from it — 500 snapshots at 25 ms each (the sink
        before its state file was written per batch) held it 12 s, past the 10 s session
        timeout, and the group rebalanced again and again,
        every replica replaying its partitions from the start. (Run after every snapshot, the
        loop cost ~0.5 ms of CPU each, the aiokafka tasks waking each time: the 10,000-cluster
        rollout took 48 s instead of 25.) An asynchronous one (Kubernetes: a write waits for
        the cluster's converge, a dozen API round trips) writes up to `APPLY_CONCURRENCY`
        clusters at once: one after the other, a replica applied one cluster per converge
        latency, whatever the sink's own `max_parallel`."""
        reports: list[SyncStatusReported] = []
        batching = getattr(self.sink, "batch", None)
        with batching() if batching is not None else contextlib.nullcontext():
            if inspect.iscoroutinefunction(self.sink.write):
                await self._apply_clusters_concurrently(batch, reports if producer is not None else None)
            else:
                held_since = time.monotonic()
                for tp, messages in batch.items():
                    for records in coalesce(messages):
                        await self._apply_cluster(tp, records, reports if producer is not None else None)
                        if time.monotonic() - held_since >= HOLD_LOOP_AT_MOST:
                            await asyncio.sleep(0)  # let the consumer's heartbeat out (see above)
                            held_since = time.monotonic()
        if producer is not None:
            for event in reports:
                await producer.send(self.names.status, key=event.cluster.encode(), value=event.to_bytes())
            await producer.flush()

    async def _apply_clusters_concurrently(
        self, batch: dict[Any, list[Any]], reports: list[SyncStatusReported] | None
    ) -> None:
        """Each (topic, cluster)'s records to apply, in order; up to `APPLY_CONCURRENCY`
        clusters at once."""
        clusters = [(tp, records) for tp, messages in batch.items() for records in coalesce(messages)]
        slots = asyncio.Semaphore(APPLY_CONCURRENCY)
        reported: list[list[SyncStatusReported]] = [[] for _ in clusters]

        async def apply_in_order(tp: Any, records: list[Apply], into: list[SyncStatusReported]) -> None:
            async with slots:
                await self._apply_cluster(tp, records, into if reports is not None else None)

        async with asyncio.TaskGroup() as group:
            for (tp, records), into in zip(clusters, reported, strict=True):
                group.create_task(apply_in_order(tp, records, into))
        if reports is not None:
            reports.extend(event for events in reported for event in events)

    async def _apply_cluster(self, tp: Any, records: list[Apply], reports: list[SyncStatusReported] | None) -> None:
        """Apply a cluster's records of the batch (`coalesce`); the ones a record supersedes are
        counted if it applies, applied in order if it fails (see projections/coalescing.py)."""
        kind = self.kinds[tp.topic]
        for apply in records:
            if await self._apply(tp, apply.record, reports):
                for _ in apply.supersedes:
                    self.metrics.events_consumed.labels(tp.topic).inc()
                    self.metrics.applies.labels(kind, "superseded").inc()
                self.stats.superseded += len(apply.supersedes)
                continue
            for message in apply.supersedes:
                await self._apply(tp, message, reports)

    async def _apply(self, tp: Any, message: Any, reports: list[SyncStatusReported] | None) -> bool:
        """Write one snapshot (or tombstone) to the sink; one that fails is logged and counted
        (False). With `reports`, the status reports to simulate for it are added there."""
        kind = self.kinds[tp.topic]
        self.metrics.events_consumed.labels(tp.topic).inc()
        cluster = message.key.decode() if message.key else ""
        try:
            assemblage = self.decoder.decode(message.value) if message.value is not None else None
            written = self.sink.write(kind, cluster, assemblage)  # type: ignore[arg-type]
            result = await written if inspect.isawaitable(written) else written
        except Exception as error:  # one bad snapshot must not stall the others
            self._failed(kind, cluster, message.offset, error)
            return False
        if self.heartbeats is not None:
            # a tombstone written is a cluster served with nothing assigned: it is still
            # reached and keeps its lease, so a module assigned to it later finds it ready
            self.heartbeats.written(kind, cluster)
        self._count(tp, kind, cluster, assemblage, result, message.timestamp)
        if self.on_result is not None:
            self.on_result(result)
        if reports is not None and not result.stale:
            reports.extend(self._unreported(kind, cluster, assemblage))
        return True

    def _unreported(self, kind: str, cluster: str, assemblage: Assemblage | None) -> list[SyncStatusReported]:
        """The simulated reports of the syncs this snapshot changed: a snapshot carries every
        module of its cluster, and reporting all of them again on each move of one made a
        cluster with 100 modules answer every move with 100 reports."""
        if assemblage is None:
            self.reported.pop((kind, cluster), None)
            return []
        before = self.reported.get((kind, cluster), {})
        now = {sync.module: (sync.generation, sync.revision) for sync in assemblage.spec.syncs}
        self.reported[(kind, cluster)] = now
        return simulated_reports(
            cluster,
            assemblage,
            only=[sync for sync in assemblage.spec.syncs if before.get(sync.module) != now[sync.module]],
        )

    def _failed(self, kind: str, cluster: str, offset: int, error: Exception) -> None:
        if self.heartbeats is not None:
            self.heartbeats.failed(kind, cluster)
        self.stats.errors += 1
        self.metrics.apply_errors.labels(kind).inc()
        self.metrics.applies.labels(kind, "error").inc()
        log.error("cannot apply %s %s (offset %d): %s", kind, cluster, offset, error, extra=log_fields(cluster=cluster))

    def _count(
        self, tp: Any, kind: str, cluster: str, assemblage: Assemblage | None, result: SinkResult, timestamp: int
    ) -> None:
        stats = self.stats
        stats.snapshots += assemblage is not None
        stats.tombstones += assemblage is None
        stats.written += result.written
        stats.pruned += result.pruned
        stats.stale += result.stale
        stats.clusters.add(cluster)
        self.handled.setdefault(tp, set()).add((kind, cluster))
        outcome = "stale" if result.stale else ("changed" if result.changed else "unchanged")
        self.metrics.applies.labels(kind, outcome).inc()
        if outcome == "changed":  # a replay that changed nothing says nothing about latency
            self.metrics.apply_latency.labels(kind).observe(max(time.time() - timestamp / 1000, 0.0))


def simulated_reports(
    cluster: str, assemblage: Assemblage, only: list[AssignedSync] | None = None
) -> list[SyncStatusReported]:
    """`report`: every sync written (or those of `only`) is reported `succeeded` (see the module doc)."""
    return [
        SyncStatusReported(
            cluster=cluster,
            module=sync.module,
            revision=sync.revision,
            state="succeeded",
            message="simulated: written by the directory sink",
            generation=sync.generation,  # answers this assignment, not a tag that can repeat
        )
        for sync in (assemblage.spec.syncs if only is None else only)
    ]


class _Assignment(ConsumerRebalanceListener):
    """Hands clusters over between replicas: a replica that loses a partition stops managing
    its clusters; one that gains partitions replays them from the start when the sink keeps
    live state per cluster (snapshots are full documents, older versions are ignored, so the
    replay is harmless and closes the crash-after-commit gap)."""

    def __init__(self, applier: Applier, consumer: AIOKafkaConsumer) -> None:
        self.applier = applier
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.applier.health.assigned = False
        self.applier.forget(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        applier = self.applier
        applier.health.assigned = True
        # heartbeats name the clusters written: a replay tells them again after a restart
        if assigned and (getattr(applier.sink, "replay_on_assignment", False) or applier.heartbeats is not None):
            await self.consumer.seek_to_beginning(*assigned)


def _describe(error: BaseException) -> str:
    name, text = type(error).__name__, str(error)
    return text if text.startswith(name) else f"{name}: {text}" if text else name


async def _close(closing: Any, what: str) -> None:
    """Stop a client, giving up after `CLOSE_TIMEOUT` (leaving a group needs the broker)."""
    try:
        await asyncio.wait_for(closing, CLOSE_TIMEOUT)
    except Exception as error:  # a broken client: nothing more to do about it
        log.warning("closing %s: %s", what, _describe(error), extra=RATE_LIMITED)
