"""The decider folds a batch in one go — a module record copied by one status report is
changed in place by the next ones of the batch — and that must decide exactly what folding
each event on its own copies decides. When an event fails midway (after it changed records
the batch shares), the whole pass is dropped and the batch folded again event by event:
the failing event alone is undone and dead-lettered."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.engine.core import RolloutEngine
from rollout.engine.outcome import Outcome
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, module, stage

TOPICS = TopicNames("t.")
CLUSTERS = [f"c{i}" for i in range(8)]
POISON = "report-c3"


class FailsAfterChanging(RolloutEngine):
    """Fault injection: the report `POISON` fails after the engine has folded it."""

    def __init__(self, **mappings: Any) -> None:
        super().__init__(**mappings)
        fold = self.reports.fold_sync_status

        def fold_then_fail(event: SyncStatusReported, ids: list[str], out: Outcome, *, count: bool = True) -> None:
            fold(event, ids, out, count=count)
            if event.id == POISON:
                raise RuntimeError("injected after the report changed the module")

        self.reports.fold_sync_status = fold_then_fail  # type: ignore[method-assign]


class FailingDecider(DecidePartition):
    engine_type = FailsAfterChanging


def records(events: list[tuple[int, Any]]) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(topic=TOPICS.journal, partition=0, offset=offset, key=b"k", value=event.to_bytes())
        for offset, event in events
    ]


APP = module("app", {}, "v1", stage("canary", {"ring": "canary"}, concurrency=2), stage("wave", None, concurrency=3))
SETUP = [
    *(ClusterObserved(cluster=cluster(c, {"ring": "canary" if c < "c4" else "wave"})) for c in CLUSTERS),
    ModuleApplied(module=APP),
]


def rolled_out(decider: DecidePartition) -> DecidePartition:
    """Eight clusters, a two-stage module (canary: 2 at a time, then the rest); committed."""
    batch(decider, list(enumerate(SETUP)))
    decider.state.commit_batch()  # as the runtime does once the batch's transaction committed
    return decider


def batch(decider: DecidePartition, events: list[tuple[int, Any]]) -> Outputs:
    out = Outputs(TOPICS.dead_letters)
    decider.process(records(events), events[-1][0] + 1, out)  # type: ignore[arg-type]
    return out


def report(name: str) -> SyncStatusReported:
    return SyncStatusReported(id=f"report-{name}", cluster=name, module="app", revision="v1", state="succeeded")


def sent(out: Outputs) -> list[tuple[str, bytes | None, Any]]:
    return [(r.topic, r.key, None if r.value is None else json.loads(r.value)) for r in out.all()]


def in_order(records: list[tuple[str, bytes | None, Any]]) -> list[tuple[str, bytes | None, Any]]:
    """The records of the topics whose every record counts (not the compacted ones)."""
    return [r for r in records if r[0] not in (TOPICS.targets, TOPICS.module_status)]


def latest(records: list[tuple[str, bytes | None, Any]]) -> dict[tuple[str, bytes | None], Any]:
    """The last value per key of the compacted topics (what a reader of them ends up with)."""
    return {(r[0], r[1]): r[2] for r in records if r[0] in (TOPICS.targets, TOPICS.module_status)}


def reports_in_order() -> list[tuple[int, Any]]:
    """Every cluster's report, in the order the stages let clusters in, from offset 100."""
    return [(100 + i, report(name)) for i, name in enumerate(["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"])]


def test_a_batch_folded_in_one_go_decides_what_its_events_folded_one_by_one_decide() -> None:
    together = rolled_out(DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))
    alone = rolled_out(DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))

    out = sent(batch(together, reports_in_order()))
    one_by_one: list[tuple[str, bytes | None, Any]] = []
    for offset, event in reports_in_order():
        one_by_one += sent(batch(alone, [(offset, event)]))
        alone.state.commit_batch()
    together.state.commit_batch()

    assert in_order(out) == in_order(one_by_one)
    assert len([r for r in out if r[0] == TOPICS.decisions and r[2]["action"] == "assign"]) == 6
    assert latest(out) == latest(one_by_one)
    assert latest(out)[(TOPICS.module_status, b"app")]["phase"] == "Complete"
    committed = {name: dict(m.committed) for name, m in together.state.mappings.items()}
    assert committed == {name: dict(m.committed) for name, m in alone.state.mappings.items()}


def test_an_event_that_fails_after_changing_shared_records_is_undone_alone() -> None:
    failing = rolled_out(FailingDecider(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))
    reference = rolled_out(DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))
    events = reports_in_order()

    out = batch(failing, events)
    expected = batch(reference, [(offset, event) for offset, event in events if event.id != POISON])

    letters = [r for r in sent(out) if r[0] == TOPICS.dead_letters]
    assert len(letters) == 1 and "injected after the report changed the module" in letters[0][2]["reason"]
    assert [r for r in sent(out) if r[0] != TOPICS.dead_letters] == sent(expected)
    assert failing.state.changelog() == reference.state.changelog()
    # c3's report was undone: c3 is still updating, so the canary stage has not passed
    assert latest(sent(out))[(TOPICS.targets, b"app/c3")]["status"] == "updating"
    assert latest(sent(out))[(TOPICS.module_status, b"app")]["currentStage"] == "canary"
