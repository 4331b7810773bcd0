"""The decider stage: each journal partition folded through a `RolloutEngine`.

    journal ──► decide ──► assignments (key: cluster), decisions, module-status,
                           rollout-targets, dead letters

The engine's state for the partition lives in memory as the mappings it evolves
(`rollout.state.ENGINE_MAPPINGS`), changelogged to the `decide-state` topic in the same
transaction as the outputs (`streams/state.py`, `streams/delivery.py`). An event the
engine cannot apply, or that makes it fail, is undone alone (its event layer is dropped,
derived indexes rebuilt) and becomes a dead letter; the rest of the batch goes on.

Per batch, module status (encoded once per batch) and rollout-target documents are coalesced (compacted topics:
only the last value per key is sent); assignments and decisions are sent in order. A
decision's id is `<journal partition>-<offset>-<n>`: deterministic, so replaying the
journal gives the same ids.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.engine import Outcome, RolloutEngine
from rollout.events import EventRejected, parse_journal_event
from rollout.state import ENGINE_MAPPINGS
from streams.delivery import Outputs
from streams.state import PartitionState

log = logging.getLogger("rollout.decide")
STAGE = "decide"


def engine_mappings() -> dict[str, type]:
    return dict(ENGINE_MAPPINGS)


def document(value: Any) -> bytes:
    """JSON with sorted keys: equal content, equal bytes. (No NaN or Infinity can reach a
    document — ticks are finite, durations bounded; orjson would write them as null.)"""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


class DecidePartition:
    def __init__(self, tp: TopicPartition, topics: TopicNames, metrics: Metrics) -> None:
        self.partition = tp.partition
        self.topics = topics
        self.metrics = metrics
        self.state = PartitionState(engine_mappings())
        self.engine = self._new_engine()

    def _new_engine(self) -> RolloutEngine:
        mappings = {name: self.state.mappings[name] for name in engine_mappings()}
        return RolloutEngine(**mappings, partition=self.partition)  # type: ignore[arg-type]

    def reset(self) -> None:
        self.engine = self._new_engine()  # derived indexes are per engine: rebuilt lazily

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        module_status: dict[str, dict[str, Any] | None] = {}  # coalesced: encoded once per batch
        decisions: Counter[str] = Counter()
        for record in records:
            try:
                outcome = self.engine.handle(parse_journal_event(record.value))
            except EventRejected as rejected:  # only if someone writes to the journal by hand
                self.state.drop_event()
                out.reject(rejected.reason, record, STAGE)
                continue
            except Exception as error:  # a bug must cost one event, not the stream
                log.exception("journal-%d@%d: the engine failed", self.partition, record.offset)
                self.state.drop_event()
                self.reset()
                out.reject(f"the engine failed on this event: {type(error).__name__}: {error}", record, STAGE)
                continue
            self.state.keep_event()
            self._publish(outcome, record, out)
            module_status.update(outcome.module_status)
            decisions.update(decision.action for decision in outcome.decisions)
        for module, status in sorted(module_status.items()):
            out.send_latest(self.topics.module_status, module.encode(), None if status is None else document(status))
            self.metrics.module_phase(module, status["phase"] if status is not None else None)
        for action, count in decisions.items():
            self.metrics.decisions.labels(action).inc(count)

    def _publish(self, outcome: Outcome, record: ConsumerRecord, out: Outputs) -> None:
        topics = self.topics
        for assignment in outcome.assignments:
            out.send(
                topics.assignments,
                assignment.cluster.encode(),
                assignment.model_dump_json(by_alias=True).encode(),
            )
        for index, decision in enumerate(outcome.decisions):
            body = {"id": f"{self.partition}-{record.offset}-{index}", **decision.model_dump()}
            out.send(topics.decisions, decision.module.encode(), document(body))
        for key, status in sorted(outcome.target_status.items()):
            out.send_latest(topics.targets, key.encode(), None if status is None else document(status))
        for reason in outcome.rejections:
            out.reject(reason, record, STAGE)
