"""`rollout replay --from-snapshot`: the decider's state copied at a position, folded on
over the journal's tail, links the tail's decisions on from the snapshot's chain head —
exactly the records the decider wrote after it; a record changed, dropped or linked to
another head is a difference (the broker-backed story: tests/integration/test_journal_retention.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka import TopicPartition

from infra.client import Record
from infra.observability import Metrics
from rollout_cli.reading.replaying import compare_decisions, compare_state, refold_journal, restored_engines
from streams.chain import ChainHead
from streams.decider import DecidePartition
from streams.outputs import Outputs
from streams.snapshots import TRACKING_KEY, PartitionSnapshot, StageSnapshot, StateSnapshot
from streams.state import Tracking
from tests.cli.test_replay_decisions import TOPICS, journal

SNAPSHOT_AT = 3  # the journal offset the snapshot covers up to (EVENTS[:3]: clusters and the module)


STATE_TOPIC: list[Record] = []  # decide-state partition 0 as `decided` last wrote it


def decided() -> tuple[StateSnapshot, list[Record]]:
    """The decider over EVENTS in two batches: a snapshot of its state after the first (the
    state topic's records, latest per key) and the decision records of the second."""
    decider = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    state_records: dict[str, str] = {}
    tail: list[Record] = []
    STATE_TOPIC.clear()
    for batch in (journal(0)[:SNAPSHOT_AT], journal(0)[SNAPSHOT_AT:]):
        out = Outputs(TOPICS.dead_letters)
        records = [SimpleNamespace(partition=r.partition, offset=r.offset, value=r.value) for r in batch]
        decider.process(records, batch[-1].offset + 1, out)  # type: ignore[arg-type]
        decider.state.tracking = Tracking(offset=batch[-1].offset + 1, events=batch[-1].offset + 1)
        decider.state.keep_event()
        changelog = decider.state.changelog()
        STATE_TOPIC.extend(Record("decide-state", 0, len(STATE_TOPIC), k.decode(), v) for k, v in changelog)
        if not state_records:
            state_records = {key.decode(): value.decode() for key, value in changelog if value}
        decider.state.commit_batch()
        if batch[0].offset >= SNAPSHOT_AT:
            tail += [
                Record(TOPICS.decisions, 0, len(tail), sent.key.decode() if sent.key else None, sent.value)
                for sent in out.all()
                if sent.topic == TOPICS.decisions
            ]
    part = PartitionSnapshot(position=SNAPSHOT_AT, events=SNAPSHOT_AT, records=state_records)
    taken = StateSnapshot(
        taken_at=0.0,
        decide=StageSnapshot(state_topic="decide-state", input_topic=TOPICS.journal, partitions={0: part}),
        assemble=StageSnapshot(state_topic="assemble-state", input_topic=TOPICS.assignments, partitions={}),
        decisions_from={0: 0},
        assignments_from={0: 0},
    )
    return taken, tail


def refolded_tail(taken: StateSnapshot) -> tuple[dict[int, list[dict[str, Any]]], dict[int, ChainHead]]:
    restored = restored_engines(taken)
    return refold_journal(journal(0)[SNAPSHOT_AT:], restored.engines).decisions, restored.heads


def test_the_tail_refolded_from_a_snapshot_gives_the_decisions_the_decider_wrote_after_it() -> None:
    taken, tail = decided()
    assert TRACKING_KEY in taken.decide.partitions[0].records and len(tail) >= 2
    replayed, heads = refolded_tail(taken)
    assert heads[0].seq > 0, "the snapshot's chain head is the decider's, past genesis"
    assert len(replayed[0]) == len(tail)
    assert compare_decisions(replayed, tail, heads) == []


def test_a_tail_decision_changed_on_the_topic_is_a_difference() -> None:
    taken, tail = decided()
    document = orjson.loads(tail[0].value or b"")
    tail[0] = Record(TOPICS.decisions, 0, 0, tail[0].key, orjson.dumps({**document, "cluster": "elsewhere"}))
    replayed, heads = refolded_tail(taken)
    [difference] = compare_decisions(replayed, tail, heads)
    assert difference.startswith(f"decision {document['id']}: replayed")


def test_a_tail_decision_missing_from_the_topic_is_a_difference() -> None:
    taken, tail = decided()
    replayed, heads = refolded_tail(taken)
    differences = compare_decisions(replayed, tail[:-1], heads)
    assert differences == [f"decisions chain 0: 1 replayed but not on the topic, from {replayed[0][-1]['id']}"]


def test_a_tail_that_does_not_continue_the_snapshots_chain_head_is_a_difference() -> None:
    """Records re-linked from another head (a rewritten history, well-formed in itself) do
    not follow on from what the snapshot recorded."""
    taken, tail = decided()
    replayed, heads = refolded_tail(taken)
    elsewhere = {0: ChainHead(hash="0" * 64, seq=heads[0].seq)}
    assert len(compare_decisions(replayed, tail, elsewhere)) >= 1


def test_the_decider_state_folded_on_from_a_snapshot_is_the_one_the_decider_committed() -> None:
    taken, _ = decided()
    restored = restored_engines(taken)
    refold_journal(journal(0)[SNAPSHOT_AT:], restored.engines)
    end = len(journal(0))
    assert compare_state(restored.tables, STATE_TOPIC, {0: (end, end)}) == ([], [0])
    target = next(r for r in STATE_TOPIC if r.key is not None and r.key.startswith("targets:"))
    document = orjson.loads(target.value or b"")
    changed = [*STATE_TOPIC, Record("decide-state", 0, 99, target.key, orjson.dumps({**document, "revision": "v0"}))]
    assert compare_state(restored.tables, changed, {0: (end, end)}) == ([f"decider state 0 {target.key}: differs"], [0])


def test_a_decider_not_at_the_refolds_end_is_not_compared() -> None:
    taken, _ = decided()
    restored = restored_engines(taken)
    refold_journal(journal(0)[SNAPSHOT_AT:], restored.engines)
    assert compare_state(restored.tables, STATE_TOPIC, {0: (len(journal(0)) + 1, len(journal(0)) + 3)}) == ([], [])
