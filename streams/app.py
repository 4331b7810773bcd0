"""The worker: three stages, a ticker and the health/metrics server in one process (or a
subset of the stages — `Settings.stages` — so that they can be spread over processes and cores).

    inputs ──► route ──► journal ──► decide ──► assignments ──► assemble ──► projections
                 │                      ├──► decisions, module-status, rollout-targets
                 └──► dead-letters ◄────┘

Each stage is its own consumer group (`<prefix><app id>.<stage>`), so the partitions of
each stage spread over however many workers run; `streams/delivery.py` commits every
batch — outputs, state and input position — in one transaction per partition. Workers can
join and leave at any time: a partition's new owner fences the old one, rebuilds the
state from the stage's state topic and resumes at the tracked position.

The ticker writes a `Tick` every `tick_interval` seconds — the only way time reaches
decisions. Exactly one worker ticks: the one whose router owns the ticks partition.

One Python process uses one core. `rollout worker --stages route` next to `rollout worker
--stages decide,assemble` puts the router's parsing and Kafka I/O on another core than the
engine; nothing else changes (the stages only ever talk through topics).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import logging.config
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

from aiokafka import AIOKafkaProducer, TopicPartition
from prometheus_client import Counter

from infra.memory_trace import MemoryTrace
from infra.observability import RATE_LIMITED, BrokerProbe, Health, Metrics, ObservabilityServer, logging_config
from infra.settings import STAGES, Settings, kafka_client_options
from infra.topics import TopicNames
from rollout.engine.state import ModuleRecord
from rollout.wire.events import Tick
from streams.assembler import AssemblePartition
from streams.decider import DecidePartition
from streams.delivery import StageRunner, StageSpec
from streams.heap import Heap, Settled
from streams.router import RoutePartition

log = logging.getLogger("rollout.worker")


def stage_specs(settings: Settings, metrics: Metrics) -> list[StageSpec]:
    """The specs of the stages `settings.stages` names, in pipeline order."""
    unknown = set(settings.stages) - set(STAGES)
    if unknown or not settings.stages:
        raise ValueError(f"stages must be some of {', '.join(STAGES)}, not {', '.join(sorted(unknown)) or 'none'}")
    return [spec for spec in _all_stage_specs(settings, metrics) if spec.name in settings.stages]


def _all_stage_specs(settings: Settings, metrics: Metrics) -> list[StageSpec]:
    topics = TopicNames(settings.topic_prefix)
    partitions = settings.partitions
    group = settings.group_id
    return [
        StageSpec(
            name="route",
            topics=(
                topics.intents,
                topics.clusters,
                topics.status,
                topics.ticks,
                topics.heartbeats,
                topics.dependencies,
            ),
            group_id=f"{group}.route",
            dead_letter_topic=topics.dead_letters,
            new_processor=lambda tp: RoutePartition(tp, topics, partitions),
            process_idle=True,
        ),
        StageSpec(
            name="decide",
            topics=(topics.journal,),
            group_id=f"{group}.decide",
            dead_letter_topic=topics.dead_letters,
            new_processor=lambda tp: DecidePartition(tp, topics, metrics),
            state_topic=topics.name("decide_state"),
        ),
        StageSpec(
            name="assemble",
            topics=(topics.assignments,),
            group_id=f"{group}.assemble",
            dead_letter_topic=topics.dead_letters,
            new_processor=lambda tp: AssemblePartition(tp, topics, metrics),
            state_topic=topics.name("assemble_state"),
        ),
    ]


class Worker:
    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.topics = TopicNames(settings.topic_prefix)
        self.metrics = metrics or Metrics(modules=self.modules_held)
        self.health = Health(requires_recovery=True)
        self.client_options = kafka_client_options()
        duplicates = Counter(
            "rollout_duplicates_dropped",
            "Input records below the tracked position (redelivered), dropped",
            ["stage"],
            registry=self.metrics.registry,
        )
        self.runners = [
            StageRunner(
                spec,
                bootstrap=settings.bootstrap_servers,
                client_options=self.client_options,
                metrics=self.metrics,
                duplicates=duplicates,
                session_timeout=settings.session_timeout,
                instance_id=settings.instance_id,
            )
            for spec in stage_specs(settings, self.metrics)
        ]
        self.ticking = False
        self.heap = Heap(session_timeout=settings.session_timeout, on_settle=self._settled)
        self.stages = {runner.spec.name: runner for runner in self.runners}
        if "route" in self.stages:
            self.stages["route"].on_assignment = self._ticks_owned

    def modules_held(self) -> Iterator[ModuleRecord]:
        """The committed module records of the decide partitions this worker owns now (the
        module gauges read them at scrape time: right after a restart or a rebalance)."""
        decide = self.stages.get("decide")
        for slot in decide.slots.values() if decide is not None else ():
            state = slot.processor.state
            if state is not None:
                yield from state.mappings["modules"].committed.values()

    def _settled(self, settled: Settled) -> None:
        self.metrics.heap_settle_seconds.labels(settled.kind).observe(settled.seconds)
        self.metrics.heap_frozen_objects.set(settled.frozen)

    def _ticks_owned(self, owned: set[TopicPartition]) -> None:
        self.ticking = TopicPartition(self.topics.ticks, 0) in owned

    async def run(self, stop: asyncio.Event) -> None:
        server = ObservabilityServer(
            port=self.settings.web_port, host=self.settings.web_host, metrics=self.metrics, health=self.health
        )
        probe = BrokerProbe(self.settings.bootstrap_servers, self.health, **self.client_options)
        if self.settings.web_port:
            await server.start()
        probe.start()
        tasks: list[asyncio.Task[None]] = []
        self.heap.collect_young_less_often()
        try:
            for runner in self.runners:
                await runner.start()
            tasks = [asyncio.create_task(runner.run(), name=runner.spec.name) for runner in self.runners]
            tasks.append(asyncio.create_task(self._tick(), name="ticker"))
            tasks.append(asyncio.create_task(self._observe(), name="observe"))
            memory_trace = MemoryTrace.from_environment()  # opt-in diagnostic (infra/memory_trace.py)
            if memory_trace is not None:
                tasks.append(asyncio.create_task(memory_trace.run(), name="memory-trace"))
            stopped = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and task.exception() is not None:
                    self.health.crashed = f"{task.get_name()}: {task.exception()}"
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                _, stuck = await asyncio.wait(tasks, timeout=STOP_TASK_TIMEOUT)
                for task in stuck:  # say where, and go on: leaving the groups matters more
                    # (seen: aiokafka's getmany during a rebalance; it ends once the consumer stops)
                    log.warning("stopping: %s did not end on cancel:\n%s", task.get_name(), _stack(task))
                    task.add_done_callback(lambda t: t.cancelled() or t.exception())
            log.info("stopping: leaving the consumer groups")
            await asyncio.gather(*(runner.stop() for runner in self.runners))
            await probe.stop()
            await server.stop()
            self.heap.stop_freezing()
            self.heap.restore_thresholds()
            log.info("worker stopped")

    async def _observe(self) -> None:
        """Keeps readiness current and announces readiness once; settles the heap once the
        state is restored at start and again once the frozen population grew by a quarter,
        within a share of the session timeout (`Heap.settle_if_due`), freezes what is new
        each time it is ready again (after a rebalance, a repair: `Heap.freeze_new`, which
        does not walk the whole heap), and from the first settle on freezes what survives
        each full collection (streams/heap.py)."""
        announced = False
        ready = False
        lagging: set[tuple[str, str]] = set()
        while True:
            self.health.assigned = all(runner.joined.is_set() for runner in self.runners)
            self.health.recovered = all(runner.healthy for runner in self.runners)
            was_ready, ready = ready, self.health.assigned and self.health.recovered
            if ready and not was_ready:
                self.heap.ready()
            else:
                self.heap.settle_if_due()
            if ready and not announced:
                log.info("worker ready: %s joined their groups", ", ".join(self.stages))
                announced = True
            try:
                lagging = self._record_lag(lagging)
            except Exception:  # a gauge must never stop the worker
                log.exception("recording consumer lag failed", extra=RATE_LIMITED)
            await asyncio.sleep(0.5)

    def _record_lag(self, reported: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Lag of every owned partition; a partition no longer owned loses its series (an
        alert on lag must not fire on the last value a revoked partition had)."""
        owned: set[tuple[str, str]] = set()
        for runner in self.runners:
            consumer = runner.consumer
            if consumer is None:
                continue
            assigned = consumer.assignment()  # highwater() asserts the partition is assigned
            for tp, slot in list(runner.slots.items()):
                if tp not in assigned:  # a rebalance under way: no figure now
                    continue
                labels = (tp.topic, str(tp.partition))
                owned.add(labels)
                highwater = consumer.highwater(tp)
                if highwater is not None:  # None right after a rebalance
                    self.metrics.consumer_lag.labels(*labels).set(max(highwater - slot.position, 0))
        for labels in reported - owned:
            self.metrics.consumer_lag.remove(*labels)
        return owned

    async def _tick(self) -> None:
        producer: AIOKafkaProducer | None = None
        try:
            while True:
                await asyncio.sleep(self.settings.tick_interval)
                if not self.ticking:
                    continue
                if producer is None:
                    producer = AIOKafkaProducer(
                        bootstrap_servers=self.settings.bootstrap_servers,
                        acks="all",
                        enable_idempotence=True,
                        **self.client_options,
                    )
                    await producer.start()
                try:
                    await producer.send(self.topics.ticks, key=b"tick", value=Tick(now=time.time()).to_bytes())
                except Exception as error:  # the broker is away: the next tick will tell the time
                    log.warning("could not write a tick: %s", error)
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()


def run_worker(settings: Settings, *, loglevel: str = "info") -> None:
    """Run the worker until SIGINT/SIGTERM."""
    logging.config.dictConfig(logging_config(settings.log_format, loglevel))
    if loglevel.lower() != "debug":  # its INFO is one line per coordinator lookup and rebalance step
        logging.getLogger("aiokafka").setLevel(logging.WARNING)

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: every thread's stack, to stderr

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping() -> None:
            log.info("stopping (signal received)")
            stop.set()
            _shutdown_watchdog(SHUTDOWN_DEADLINE)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping)
        await Worker(settings).run(stop)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        leftover = asyncio.all_tasks(loop)  # a library's own tasks, normally none
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.wait(leftover, timeout=STOP_TASK_TIMEOUT))
    finally:
        loop.close()


SHUTDOWN_DEADLINE = 45.0
STOP_TASK_TIMEOUT = 5.0


def _stack(task: asyncio.Task[object]) -> str:
    frames = task.get_stack(limit=15)
    return "".join(f"  {f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}\n" for f in frames)


def _shutdown_watchdog(deadline: float) -> None:
    """A stop must end: if it has not within `deadline` seconds (a callback stuck on a
    broker, a loop blocked), print every stack and exit 1. Nothing is lost by that — what was
    not committed is redone by the partition's next owner, as after a SIGKILL."""

    loop = asyncio.get_running_loop()

    def expire() -> None:
        log.error("shutdown did not finish within %.0fs; stacks follow, exiting", deadline)
        faulthandler.dump_traceback(all_threads=True)
        for task in list(asyncio.all_tasks(loop)):  # racy from another thread; we exit anyway
            with contextlib.suppress(Exception):
                task.print_stack(limit=12, file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(deadline, expire)
    timer.daemon = True
    timer.start()
