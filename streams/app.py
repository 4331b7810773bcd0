"""The Faust worker: thin wiring between Kafka and the pure decision core.

Three agents, each a fold over one log, each writing its outputs *before* its state so
that state that reached the changelog implies outputs that reached their topics
(at-least-once; duplicates are harmless because every consumer is idempotent):

1. `route`   — inputs (intents, cluster observations, sync status, ticks) → `journal`.
   Parses and validates every event (`rollout.events.parse_event`); what fails goes to
   dead letters with the reason and the stream keeps going. Module-scoped events are keyed
   by module; cluster observations and ticks are broadcast to every journal partition,
   because every partition's modules need the fleet and the time.
2. `decide`  — journal → `RolloutEngine.handle` per journal partition, state in the
   `engine` table (changelogged). Outputs: assignments (keyed by cluster), decisions,
   module status, rollout targets, dead letters for inapplicable events.
3. `assemble` — assignments → `rollout.assembly` per cluster, state in the
   `assemblages` table. Outputs: RemoteAssemblage / ProxyAssemblage snapshots.

A leader-only timer writes a `Tick` to the ticks topic every `tick_interval` seconds:
the only way time reaches decisions.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

import faust

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer, logging_config
from infra.settings import Settings, faust_credentials, kafka_client_options
from infra.topics import TopicNames
from rollout.assembly import AssemblageRecord, assemble
from rollout.engine import Outcome, RolloutEngine
from rollout.events import (
    ClusterObserved,
    ClusterRemoved,
    EventRejected,
    ModuleApplied,
    ModuleDeleted,
    RolloutCommanded,
    SyncStatusReported,
    Tick,
    parse_event,
)
from rollout.state import ClusterFacts, ModuleRecord, Target
from streams.tables import FloatView, ModelView

log = logging.getLogger(__name__)

# Which input topic each event type belongs on; anything else is a dead letter.
TOPIC_ROLE = {
    ModuleApplied: "intents",
    ModuleDeleted: "intents",
    RolloutCommanded: "intents",
    ClusterObserved: "clusters",
    ClusterRemoved: "clusters",
    SyncStatusReported: "status",
    Tick: "ticks",
}
BROADCAST = (ClusterObserved, ClusterRemoved, Tick)


def journal_key(event: Any) -> str:
    if isinstance(event, ModuleApplied):
        return event.module.metadata.name
    if isinstance(event, ModuleDeleted):
        return event.name
    if isinstance(event, (RolloutCommanded, SyncStatusReported)):
        return event.module
    if isinstance(event, (ClusterObserved,)):
        return event.cluster.metadata.name
    if isinstance(event, ClusterRemoved):
        return event.name
    return "tick"


def dead_letter(reason: str, message: Any, stage: str) -> bytes:
    value = message.value
    try:
        text = value.decode() if isinstance(value, bytes) else value
        encoded: dict[str, Any] = {"value": text}
    except UnicodeDecodeError:
        encoded = {"valueBase64": base64.b64encode(value).decode()}
    key = message.key.decode(errors="replace") if isinstance(message.key, bytes) else message.key
    return json.dumps(
        {
            "reason": reason,
            "stage": stage,
            "topic": message.topic,
            "partition": message.partition,
            "offset": message.offset,
            "key": key,
            **encoded,
        }
    ).encode()


def broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{server.strip()}" for server in bootstrap.split(",") if server.strip()]


class RolloutApp(faust.App):
    """faust.App that starts the health/metrics server first thing, before the consumer
    joins its group and tables recover — so /readyz can say "not yet" meanwhile."""

    observability: tuple[ObservabilityServer, BrokerProbe] | None = None

    async def on_first_start(self) -> None:
        await super().on_first_start()
        if self.observability is not None:
            server, probe = self.observability
            if server.port:
                await server.start()
            probe.start()

    async def on_shutdown(self) -> None:
        if self.observability is not None:
            server, probe = self.observability
            await probe.stop()
            await server.stop()
        await super().on_shutdown()


def create_app(settings: Settings, *, metrics: Metrics | None = None, health: Health | None = None) -> faust.App:
    names = TopicNames(settings.topic_prefix)
    partitions = settings.partitions
    metrics = metrics or Metrics()
    health = health or Health(requires_recovery=True)
    credentials = faust_credentials()
    app = RolloutApp(
        settings.group_id,
        broker=broker_urls(settings.bootstrap_servers),
        store=settings.store,
        datadir=str(settings.data_dir),
        web_enabled=False,
        topic_partitions=partitions,
        topic_replication_factor=settings.replication_factor,
        consumer_auto_offset_reset="earliest",
        key_serializer="raw",
        value_serializer="raw",
        producer_acks=-1,
        broker_commit_every=500,
        broker_commit_interval=1.0,
        stream_wait_empty=True,
        # A killed worker's partitions move after 15 s rather than Faust's 60 s; heartbeats
        # run on the consumer thread, so slow events do not make a live worker look dead.
        broker_session_timeout=15.0,
        broker_heartbeat_interval=3.0,
        **({"broker_credentials": credentials} if credentials is not None else {}),
    )
    processed: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset handled

    def raw_topic(*topic_names: str, **kwargs: Any) -> Any:
        return app.topic(*topic_names, key_serializer="raw", value_serializer="raw", **kwargs)

    inputs = raw_topic(names.intents, names.clusters, names.status, names.ticks)
    journal = raw_topic(names.journal, partitions=partitions)
    assignments = raw_topic(names.assignments, partitions=partitions)
    outputs = {
        role: raw_topic(names.name(role))
        for role in ("remote", "proxy", "module_status", "targets", "decisions", "dead_letters", "ticks")
    }
    role_of_topic = {names.name(role): role for role in ("intents", "clusters", "status", "ticks")}

    engine_table = app.Table("engine", partitions=partitions, key_type=str, value_type=None)
    assemblage_table = app.Table("assemblages", partitions=partitions, key_type=str, value_type=None)
    engines: dict[int, RolloutEngine] = {}
    views: dict[int, tuple[Any, ...]] = {}

    def engine_for(partition: int) -> RolloutEngine:
        engine = engines.get(partition)
        if engine is None:
            # commit order: targets, modules, clusters, clock — derived state before the facts
            # it derives from, so that a crash mid-commit leaves the facts to be re-applied
            targets = ModelView(engine_table, f"{partition}:target:", Target)
            modules = ModelView(engine_table, f"{partition}:module:", ModuleRecord)
            clusters = ModelView(engine_table, f"{partition}:cluster:", ClusterFacts)
            clock = FloatView(engine_table, f"{partition}:clock:")
            engine = RolloutEngine(
                clusters=clusters, modules=modules, targets=targets, clock=clock, partition=partition
            )
            engines[partition] = engine
            views[partition] = (targets, modules, clusters, clock)
        return engine

    async def settle() -> None:
        """Wait until everything produced so far is acknowledged by the broker.

        Faust's own flush gives up on its buffer after 0.1 s, and it commits offsets right
        after — so without this, a SIGKILL can lose messages of events whose offsets were
        committed. Settling before taking the next event means no committed event has
        unacknowledged outputs or state.
        """
        buffer = app.producer.buffer
        while buffer.size:
            await buffer.flush()
        await app.producer.flush()

    @app.on_partitions_revoked.connect
    async def forget_engines(sender: Any, *args: Any, **kwargs: Any) -> None:
        engines.clear()  # derived indexes and caches are rebuilt from the tables
        views.clear()
        health.recovered = False

    @app.on_partitions_assigned.connect
    async def assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        health.assigned = True

    def consumed(message: Any) -> None:
        metrics.events_consumed.labels(message.topic).inc()
        processed[(message.topic, message.partition)] = message.offset

    async def send_json(role: str, key: str, document: Any) -> None:
        value = None if document is None else json.dumps(document, sort_keys=True).encode()
        await outputs[role].send(key=key.encode(), value=value)

    @app.agent(inputs)
    async def route(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            consumed(message)
            try:
                parsed = parse_event(event.value)
                expected = TOPIC_ROLE[type(parsed)]
                if role_of_topic.get(message.topic) != expected:
                    raise EventRejected(f"{parsed.type} events belong on {names.name(expected)}")
            except EventRejected as rejected:
                log.warning("dead letter from %s@%s: %s", message.topic, message.offset, rejected.reason)
                metrics.dead_letters.labels("router").inc()
                await outputs["dead_letters"].send(
                    key=message.key, value=dead_letter(rejected.reason, message, "router")
                )
                await settle()
                continue
            key = journal_key(parsed).encode()
            if isinstance(parsed, BROADCAST):
                for partition in range(partitions):
                    await journal.send(key=key, value=event.value, partition=partition)
            else:
                await journal.send(key=key, value=event.value)
            await settle()

    @app.agent(journal)
    async def decide(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            consumed(message)
            try:
                parsed = parse_event(event.value)
            except EventRejected as rejected:  # only if someone writes to the journal by hand
                metrics.dead_letters.labels("decider").inc()
                await outputs["dead_letters"].send(
                    key=message.key, value=dead_letter(rejected.reason, message, "decider")
                )
                await settle()
                continue
            outcome = engine_for(message.partition).handle(parsed)
            await publish(outcome, message)
            await settle()  # outputs acknowledged first ...
            for view in views[message.partition]:
                view.commit()  # ... then the state that implies them
            await settle()

    async def publish(outcome: Outcome, message: Any) -> None:
        for assignment in outcome.assignments:
            await assignments.send(
                key=assignment.cluster.encode(),
                value=assignment.model_dump_json(by_alias=True).encode(),
            )
        for index, decision in enumerate(outcome.decisions):
            document = {"id": f"{message.partition}-{message.offset}-{index}", **decision.model_dump()}
            await send_json("decisions", decision.module, document)
            metrics.decisions.labels(decision.action).inc()
        for module, status in sorted(outcome.module_status.items()):
            await send_json("module_status", module, status)
            metrics.module_phase(module, status["phase"] if status is not None else None)
        for key, status in sorted(outcome.target_status.items()):
            await send_json("targets", key, status)
        for reason in outcome.rejections:
            metrics.dead_letters.labels("decider").inc()
            await outputs["dead_letters"].send(key=message.key, value=dead_letter(reason, message, "decider"))

    @app.agent(assignments)
    async def assemble_agent(stream: Any) -> None:
        from rollout.engine import Assignment

        async for event in stream.events():
            consumed(event.message)
            assignment = Assignment.model_validate_json(event.value)
            raw = assemblage_table.get(assignment.cluster)
            record = AssemblageRecord.model_validate(raw) if raw is not None else None
            updated, publications = assemble(record, assignment)
            for kind, cluster, snapshot in publications:
                role = "remote" if kind == "RemoteAssemblage" else "proxy"
                document = snapshot.model_dump(mode="json", by_alias=True) if snapshot is not None else None
                await send_json(role, cluster, document)
                metrics.snapshots.labels(kind, "snapshot" if snapshot is not None else "tombstone").inc()
            if publications:
                await settle()
                assemblage_table[assignment.cluster] = updated.model_dump(mode="json")
                await settle()

    app.observability = (
        ObservabilityServer(port=settings.web_port, metrics=metrics, health=health),
        BrokerProbe(settings.bootstrap_servers, health, **kafka_client_options()),
    )

    @app.task
    async def observe() -> None:
        """Runs once tables recovered: keeps readiness and consumer lag current."""
        while True:
            health.recovered = app.tables.recovery.completed.is_set() and not app.in_recovery and not app.rebalancing
            for tp in app.consumer.assignment():
                if (tp.topic, tp.partition) in processed:
                    lag = app.consumer.highwater(tp) - processed[(tp.topic, tp.partition)] - 1
                    metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(lag, 0))
            await asyncio.sleep(1.0)

    @app.timer(interval=settings.tick_interval, on_leader=True)
    async def tick() -> None:
        await outputs["ticks"].send(key=b"tick", value=Tick(now=time.time()).to_bytes())

    return app


def run_worker(settings: Settings, *, loglevel: str = "info") -> None:
    """Run the worker until SIGINT/SIGTERM (blocks; Faust owns the event loop)."""
    app = create_app(settings)
    worker = faust.Worker(
        app, loglevel=loglevel, quiet=True, logging_config=logging_config(settings.log_format, loglevel)
    )
    worker.execute_from_commandline()
