"""The decider stage: each journal partition folded through a `RolloutEngine`.

    journal ──► decide ──► assignments (key: cluster), decisions, module-status,
                           rollout-targets, verdicts (key: event id), dead letters,
                           dependencies (key: the receiving module; rollout/engine/dependencies.py)

The engine's state for the partition lives in memory as the mappings it evolves
(`rollout.engine.state.ENGINE_MAPPINGS`), changelogged to the `decide-state` topic in the same
transaction as the outputs (`streams/state.py`, `streams/delivery.py`). An event the
engine cannot apply, or that makes it fail, is undone alone (its event layer is dropped,
derived indexes rebuilt) and becomes a dead letter; the rest of the batch goes on.

Per batch, module status (encoded once per batch) and rollout-target documents are coalesced (compacted topics:
only the last value per key is sent); assignments and decisions are sent in order. A
decision's id is `<journal partition>-<offset>-<n>`: deterministic, so replaying the
journal gives the same ids. Each decision record is linked into its journal partition's hash
chain (`chain`, `seq`, `prev`, `hash`: streams/chain.py); the chain's head is a mapping of
this stage's state (`state_mappings`), so it commits and rolls back with the decisions.
The engine's verdicts (an answer to each module intent, and to each status report with
`reply`) go to the verdicts topic (streams/verdicts.py); a
refusal's dead letter carries the refused event's id.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.observability import Metrics, log_fields
from infra.topics import TopicNames
from rollout.engine.core import Outcome, RolloutEngine, intent_module
from rollout.engine.outcome import DEFERRED, Decision
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.events import (
    EventRejected,
    ModuleApplied,
    ModuleDeleted,
    RolloutCommanded,
    SyncStatusReported,
    parse_journal_event,
)
from streams.assignment_encoding import AssignmentEncoder
from streams.chain import CHAIN_MAPPING, ChainHead, DecisionChain, decision_body
from streams.outputs import Outputs, exact
from streams.router import journal_key
from streams.state import PartitionState
from streams.verdicts import refusal_document, verdict_document

log = logging.getLogger("rollout.decide")
STAGE = "decide"
NOTED_ACTIONS = frozenset(
    {
        DecisionAction.STAGE_STARTED,
        DecisionAction.STAGE_SKIPPED,
        DecisionAction.STAGE_SUCCEEDED,
        DecisionAction.AWAITING_APPROVAL,
        DecisionAction.HALTED,
        DecisionAction.ROLLBACK,
        DecisionAction.COMPLETE,
    }
)
"""Decisions logged at INFO (with module, stage and event id as fields): a module's phase
moving. Per-cluster decisions (assign, failed) are counted, not logged."""


def engine_mappings() -> dict[str, type]:
    return dict(ENGINE_MAPPINGS)


# fleet-sized tables: restored without decoding (a record is decoded when first read), and
# the fleet's facts and the holders claiming each cluster — equal in every journal partition
# (broadcast) — held once per worker process: a wave-2 start of 90,000 clusters reached by the
# appliers wrote a ClusterClaims per cluster in each of 4 partitions, ~1.8 KiB decoded apiece
# (benchmarks/fleet_pipeline.py)
LAZY_MAPPINGS = ("targets", "clusters", "claims")
SHARED_MAPPINGS = ("clusters", "claims")
# targets held decoded per partition, the most recently used; the rest as their bytes
# (~0.5 KB each against ~2 KB): a stage being rolled out is far smaller than this
HOT_RECORDS = {"targets": 50_000}


def state_mappings() -> dict[str, type]:
    """The decider's state: the engine's mappings and the head of its decision chain."""
    return {**ENGINE_MAPPINGS, CHAIN_MAPPING: ChainHead}


def document(value: Any) -> bytes:
    """JSON with sorted keys: equal content, equal bytes. (No NaN or Infinity can reach a
    document — ticks are finite, durations bounded; orjson would write them as null.)"""
    return exact(orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))


WARM_UP_CLUSTERS_PER_STEP = 5_000
"""Clusters of the fleet a warm-up step looks up for one module (each a target decoded, when
the cluster is a member): ~10-50 ms of the event loop, load permitting."""

BATCH_WRITES = 20_000
"""The most records (outputs and state changes) one batch of a journal partition writes,
give or take the last event's: the batch stops folding there and the rest of what was fetched
is the next transaction's (streams/slots.py). A fetch is bounded in bytes, but what its
events write is not: an applier's claims reaching 84,000 clusters at once — a wave-2 start
at 100,000 — fit in one fetch and wrote 168,000 state records (35 MiB encoded, with every
record decoded beside it) in each of the 4 partitions' batches, the worker's RSS +1.3 GiB
(benchmarks/fleet_pipeline.py). A continuation slice (2,000 moves) writes ~8,000."""


BATCH_BYTES = 8 * 1024 * 1024
"""... and the most bytes of outputs (keys and values) one batch holds, give or take the last
event's: the records bound counts records whatever their size, and a batch's outputs stay in
memory — with their copies in the producer's record batches — until its transaction commits,
two batches a partition (streams/slots.py). A status report's outputs are ~1 KB (a decision,
a target document), so the records bound is the one that binds in a rollout; this one holds
when records are large (decisions and status documents of modules with many stages, dead
letters carrying their input)."""


class DecidePartition:
    engine_type: type[RolloutEngine] = RolloutEngine
    batch_writes = BATCH_WRITES  # lowered by tests
    batch_bytes = BATCH_BYTES  # lowered by tests

    def __init__(self, tp: TopicPartition, topics: TopicNames, metrics: Metrics) -> None:
        self.partition = tp.partition
        self.topics = topics
        self.metrics = metrics
        self.state = PartitionState(state_mappings(), lazy=LAZY_MAPPINGS, shared=SHARED_MAPPINGS, hot=HOT_RECORDS)
        self.chain = DecisionChain(self.partition, self.state.mappings[CHAIN_MAPPING])
        self.assignments = AssignmentEncoder()
        self.engine = self._new_engine()
        self.cold = True  # the engine's indexes are not built (`warm_up`)

    def _new_engine(self) -> RolloutEngine:
        mappings = {name: self.state.mappings[name] for name in engine_mappings()}
        engine = self.engine_type(**mappings, partition=self.partition)
        engine.defer_views = True  # module status: rendered once per batch, below
        return engine

    def reset(self) -> None:
        """A new engine: derived indexes are per engine, rebuilt lazily from the mappings. The
        old engine's are dropped now — the engine is held in reference cycles, and the worker
        freezes what survives a full collection (streams/heap.py), so without this the indexes
        of every reset engine (a fleet's pending queues per module) stayed until the next
        settle, minutes later."""
        old, self.engine = self.engine, self._new_engine()
        old.reset_indexes()
        self.cold = True

    def warm_up(self) -> Iterator[str]:
        """Build a new engine's fleet-sized indexes before its first fold, one step at a time:
        the fleet's names in order, then each module's members and queues,
        WARM_UP_CLUSTERS_PER_STEP clusters of the fleet looked up a step (the module's name
        yielded after each). The stage yields to the event loop between steps
        (streams/slots.py `warm_up`); built lazily inside a fold, all of a partition's modules
        were one step — at 100,000 x 20 longer than the session timeout — and then one module
        a step still held the loop 3-14 s at 100,000 clusters, so that a restarted worker
        answered /readyz only that long after its take-overs (issue 22). The indexes are the
        ones the fold would build on first use, from the same mappings: nothing a decision
        sees changes."""
        if not self.cold:
            return
        self.cold = False  # a warm-up cut short (a stop, a reset) leaves the rest to be built lazily
        engine = self.engine
        engine.book.fleet_after("", 0)
        yield "fleet"
        for module in sorted(self.state.mappings["modules"]):
            for _ in engine.book.index_steps(module, WARM_UP_CLUSTERS_PER_STEP):
                if self.engine is not engine:  # reset meanwhile: the next fold warms the new one up
                    return
                yield module

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> int:
        """Fold the batch in one go: a module record copied by one event of the batch is
        changed in place by the next (`private_records`, keyed by module name:
        rollout/engine/tables.py). If any event fails, that pass is
        dropped whole and the batch folded again event by event, each on its own copies, so
        that the failing event alone is undone and dead-lettered. (The runtime calls this with
        nothing uncommitted in the state, so dropping the batch drops only that pass.)"""
        folded = Outputs(out.dead_letter_topic)
        self.engine.private_records = {}
        try:
            count, notes = self._fold(records, folded, isolate=False)
        except Exception:
            self.state.drop_batch()
            self.reset()
            folded = Outputs(out.dead_letter_topic)
            count, notes = self._fold(records, folded, isolate=True)
        finally:
            self.engine.private_records = None
        out.extend(folded)
        decisions: Counter[str] = Counter()
        for decision, event_id in notes:
            decisions[decision.action] += 1
            if decision.action in NOTED_ACTIONS:
                self._note(decision, event_id)
        for action, made in decisions.items():
            self.metrics.decisions.labels(action).inc(made)
        return count

    def _fold(
        self, records: Sequence[ConsumerRecord], out: Outputs, *, isolate: bool
    ) -> tuple[int, list[tuple[Decision, str]]]:
        """The batch's outputs into `out`: how many records were folded — all, or as many as
        fit in `batch_writes` records and `batch_bytes` of outputs (one at least) — and the
        decisions made, with the id of their event. `isolate`: an event that fails is undone
        alone and becomes a dead letter; otherwise its exception ends the pass."""
        module_status: dict[str, dict[str, Any] | None] = {}  # coalesced: encoded once per batch
        notes: list[tuple[Decision, str]] = []
        count = 0
        for record in records:
            if count and (self._written(out) >= self.batch_writes or out.size >= self.batch_bytes):
                break
            count += 1
            event = None
            try:
                event = parse_journal_event(record.value)
                outcome = self.engine.handle(event)
            except EventRejected as rejected:  # only if someone writes to the journal by hand
                if not isolate:
                    raise
                self.state.drop_event()
                out.reject(rejected.reason, record, STAGE)
                continue
            except Exception as error:  # a bug must cost one event, not the stream
                if not isolate:
                    raise
                log.exception("journal-%d@%d: the engine failed", self.partition, record.offset)
                self.state.drop_event()
                self.reset()
                self._refuse(event, f"the engine failed on this event: {type(error).__name__}: {error}", record, out)
                continue
            self._publish(outcome, record, out)
            self.state.keep_event()  # after publishing: linking its decisions moved the chain head
            module_status.update(outcome.module_status)
            notes.extend((decision, event.id) for decision in outcome.decisions)
        for module, status in sorted(module_status.items()):
            if status is DEFERRED:
                status = self.engine.status_of(module)
            out.send_latest(self.topics.module_status, module.encode(), None if status is None else document(status))
        return count, notes

    def _written(self, out: Outputs) -> int:
        """Records the batch writes so far: its outputs and its state changes."""
        return len(out.records) + len(out.latest) + self.state.batch_writes()

    def _publish(self, outcome: Outcome, record: ConsumerRecord, out: Outputs) -> None:
        topics = self.topics
        for assignment in outcome.assignments:  # its sync encoded once a wave (streams/assignment_encoding.py)
            out.send(topics.assignments, assignment.cluster.encode(), self.assignments.encode(assignment))
        if outcome.decisions:
            partition, offset = self.partition, record.offset
            bodies = [
                decision_body(partition, offset, index, decision) for index, decision in enumerate(outcome.decisions)
            ]
            decisions = topics.decisions
            for decision, linked in zip(outcome.decisions, self.chain.link_all(bodies), strict=True):
                out.send(decisions, decision.module.encode(), linked)
        for event in outcome.dependency_events:  # to another module's partition, via the router
            out.send(topics.dependencies, journal_key(event).encode(), event.to_bytes())
        for key, status in sorted(outcome.target_status.items()):
            out.send_latest(topics.targets, key.encode(), None if status is None else document(status))
        if outcome.verdicts:
            self._answer(outcome, record, out)
            return
        for reason in outcome.rejections:
            out.reject(reason, record, STAGE)

    def _answer(self, outcome: Outcome, record: ConsumerRecord, out: Outputs) -> None:
        """Verdicts to the verdicts topic; a rejection that refuses an event names its id."""
        refused = {verdict.reason: verdict.event for verdict in outcome.verdicts if not verdict.accepted}
        for reason in outcome.rejections:
            out.reject(reason, record, STAGE, event=refused.get(reason))
        prefix = f"{self.partition}-{record.offset}-"
        for verdict in outcome.verdicts:
            body = verdict_document(verdict, outcome.decisions, prefix)
            out.send(self.topics.verdicts, verdict.event.encode(), body)

    def _refuse(self, event: Any, reason: str, record: ConsumerRecord, out: Outputs) -> None:
        """Dead-letter an event the engine failed on; answer it if it asked for an answer."""
        asks = isinstance(event, ModuleApplied | ModuleDeleted | RolloutCommanded) or (
            isinstance(event, SyncStatusReported) and event.reply
        )
        out.reject(reason, record, STAGE, event=event.id if asks else None)
        if asks:
            module = intent_module(event) if not isinstance(event, SyncStatusReported) else event.module
            out.send(self.topics.verdicts, event.id.encode(), refusal_document(event.id, module, reason))

    def _note(self, decision: Decision, event_id: str) -> None:
        """A module's phase moved: log it with its fields; a passed stage's time observed."""
        if decision.stage is not None and decision.stage_seconds is not None:
            self.metrics.stage_duration.labels(decision.stage).observe(decision.stage_seconds)
        fields = log_fields(module=decision.module, cluster=decision.cluster, stage=decision.stage, event_id=event_id)
        log.info("%s: %s", decision.module, decision.reason, extra=fields)
