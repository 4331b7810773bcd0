"""Every metric the long-running processes export: one `Metrics` (one registry) per process.

What an operator alerts on, and where each number comes from:

* counters and lag — moved by the stages (`streams/delivery.py`, `streams/decider.py`,
  `streams/assembler.py`) and the applier (`projections/applier.py`) as they commit;
* histograms — observed once per committed batch or per applied snapshot, never per event
  on the worker's hot path:
  `rollout_decision_latency_seconds{stage}` (route | decide | assemble): from the Kafka
  timestamp of the oldest input record of a batch to the commit of the transaction holding
  its outputs — the worst latency of the batch; `rollout_stage_duration_seconds{stage}`
  (the rollout stage's name): from a stage's start to all its clusters succeeded, in engine
  time (ticks), soak and approval waits excluded; `rollout_apply_latency_seconds{kind}`:
  from a snapshot's Kafka timestamp to the sink having changed the target (snapshots that
  changed nothing — replays after a restart — are not observed);
* `rollout_module_info{module,kind,phase,target,stable}` (value 1) and
  `rollout_modules{phase}` — read at scrape time from the module records the worker
  *holds now* (`ModuleCollector`): the committed state of the decide partitions it owns,
  which it restores from the `decide-state` topic on every assignment. So they are right
  after a restart or a rebalance without waiting for new events, a module moved to another
  worker disappears from this one, and a phase change replaces the label set instead of
  adding one. Every phase is exported for `rollout_modules`, 0 included, so an alert on
  `Halted` sees 0 rather than no data. The phases and the revisions are the values the
  module-status document shows (rollout/wire/status.py `ROLLOUT_PHASES`, `targetRevision`,
  `stableRevision`): a dashboard or `rollout status` and an alert name a module's phase alike;
* `rollout_heap_settle_seconds{kind}` and `rollout_heap_frozen_objects` — the worker's heap
  settles (streams/heap.py), each observed once: how long it held the event loop (`full`
  and `forced` walk the whole heap, `new` and `deferred` only what is not frozen yet; an
  alert on `forced`, or on a `full` near the group session timeout, sees the settle that
  would expel the worker before it does), and the frozen population after it;
* `rollout_notifications{webhook,type,outcome}`, `rollout_notification_retries{webhook}`,
  `rollout_notification_queue{webhook}` — the notifier's deliveries (projections/notifier/):
  an alert on `outcome="dead-lettered"` sees notifications a receiver never got;
* `process_*` (CPU, memory, open files, start time) and `python_info`, from
  prometheus_client's collectors registered on the process's own registry.

`_created` series are disabled (`disable_created_metrics`): counters and histograms export
`_total`/`_bucket`/`_sum`/`_count` only, not a second series per label set.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rollout.engine.state import ModuleRecord
from rollout.wire.status import ROLLOUT_PHASES

disable_created_metrics()

PHASES: tuple[str, ...] = ROLLOUT_PHASES
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 20000)
STAGE_BUCKETS = (1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)

ModuleRecords = Callable[[], Iterable[ModuleRecord]]
"""What a worker holds now: the committed module records of the partitions it owns."""


class ModuleCollector(Collector):
    """`rollout_module_info` and `rollout_modules`, computed at scrape time from `records`."""

    def __init__(self, records: ModuleRecords) -> None:
        self.records = records

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "rollout_module_info",
            "A module this process decides for (value 1): its rollout phase, target and stable revision",
            labels=["module", "kind", "phase", "target", "stable"],
        )
        phases: Tally[str] = Tally()
        for record in self.records():
            target = record.revisions.get(record.target)
            stable = record.revisions.get(record.stable) if record.stable is not None else None
            info.add_metric(
                [
                    record.name,
                    record.kind,
                    record.phase,
                    target.revision if target is not None else "",
                    stable.revision if stable is not None else "",
                ],
                1.0,
            )
            phases[record.phase] += 1
        by_phase = GaugeMetricFamily("rollout_modules", "Modules by rollout phase", labels=["phase"])
        for phase in PHASES:
            by_phase.add_metric([phase], float(phases[phase]))
        yield info
        yield by_phase


class Metrics:
    """Every metric the processes export (one registry per process). `modules` (the
    worker only) is what the module gauges are read from at scrape time."""

    def __init__(self, *, modules: ModuleRecords | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.events_consumed = Counter("rollout_events_consumed", "Events consumed", ["topic"], registry=r)
        self.consumer_lag = Gauge("rollout_consumer_lag", "Messages behind the end", ["topic", "partition"], registry=r)
        self.decisions = Counter("rollout_decisions", "Decisions taken", ["action"], registry=r)
        self.dead_letters = Counter("rollout_dead_letters", "Inputs sent to dead letters", ["stage"], registry=r)
        self.snapshots = Counter("rollout_snapshots_published", "Assemblage snapshots", ["kind", "type"], registry=r)
        self.applies = Counter("rollout_applies", "Snapshots applied by outcome", ["kind", "outcome"], registry=r)
        self.apply_errors = Counter("rollout_apply_errors", "Snapshots that could not be applied", ["kind"], registry=r)
        self.decision_latency = Histogram(
            "rollout_decision_latency_seconds",
            "Seconds from the oldest input record of a batch (its Kafka timestamp) to the commit of its outputs",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # a stage's batches (streams/slots.py): what one transaction folded, how long the fold
        # held the event loop (the worker's stages share it: a long fold delays every other
        # stage's fetches and transaction round trips), and the transaction's begin → commit
        self.batch_records = Histogram(
            "rollout_batch_records",
            "Input records folded into one transaction, by stage",
            ["stage"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.fold_seconds = Histogram(
            "rollout_fold_seconds",
            "Seconds one batch's fold held the event loop, by stage",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.transaction_seconds = Histogram(
            "rollout_transaction_seconds",
            "Seconds from a batch's transaction begun to committed, by stage",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stage_duration = Histogram(
            "rollout_stage_duration_seconds",
            "Engine seconds from a rollout stage's start to all its clusters succeeded",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.apply_latency = Histogram(
            "rollout_apply_latency_seconds",
            "Seconds from a snapshot's Kafka timestamp to the sink having changed the target",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # the worker's heap (streams/heap.py): how long each settle held the event loop
        self.heap_settle_seconds = Histogram(
            "rollout_heap_settle_seconds",
            "Seconds a heap settle held the event loop, by kind (full | forced | new | deferred)",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.heap_frozen_objects = Gauge(
            "rollout_heap_frozen_objects",
            "Objects frozen out of the cyclic collector's scans after the last settle",
            registry=r,
        )
        # the notifier (projections/notifier/): per webhook, what became of each notification
        self.notifications = Counter(
            "rollout_notifications",
            "Notifications by webhook, CloudEvents type and outcome (delivered | dead-lettered)",
            ["webhook", "type", "outcome"],
            registry=r,
        )
        self.notification_retries = Counter(
            "rollout_notification_retries",
            "Deliveries retried after an error or a retryable answer",
            ["webhook"],
            registry=r,
        )
        self.notification_queue = Gauge(
            "rollout_notification_queue",
            "Notifications waiting for their webhook (bounded by queueSize)",
            ["webhook"],
            registry=r,
        )
        if modules is not None:
            r.register(ModuleCollector(modules))

    def render(self) -> bytes:
        return generate_latest(self.registry)
