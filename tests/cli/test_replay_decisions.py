"""`rollout replay` refolds the journal and links the decisions it gets exactly as the decider
does: a replay from the start of the journal gives the decisions topic's records — hashes
included — and a record that differs is named."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka import TopicPartition

from infra.client import Record
from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from rollout_cli.reading.replaying import compare_decisions, refold_journal
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, module, stage

TOPICS = TopicNames("t.")
APP = module("app", {}, "v1", stage("canary", {"ring": "canary"}, concurrency=1), stage("wave", None))
EVENTS = [
    ClusterObserved(cluster=cluster("c0", {"ring": "canary"})),
    ClusterObserved(cluster=cluster("c1", {"ring": "wave"})),
    ModuleApplied(module=APP),
    SyncStatusReported(id="r0", cluster="c0", module="app", revision="v1", state="succeeded"),
    SyncStatusReported(id="r1", cluster="c1", module="app", revision="v1", state="succeeded"),
]


def journal(partition: int) -> list[Record]:
    return [Record(TOPICS.journal, partition, offset, "k", e.to_bytes()) for offset, e in enumerate(EVENTS)]


def decided_live(partition: int) -> list[Record]:
    """What the decider writes to the decisions topic for EVENTS, two batches."""
    decider = DecidePartition(TopicPartition(TOPICS.journal, partition), TOPICS, Metrics())
    written: list[Record] = []
    for batch in (journal(partition)[:3], journal(partition)[3:]):
        out = Outputs(TOPICS.dead_letters)
        records = [SimpleNamespace(partition=r.partition, offset=r.offset, value=r.value) for r in batch]
        decider.process(records, batch[-1].offset + 1, out)  # type: ignore[arg-type]
        decider.state.commit_batch()
        for sent in out.all():
            if sent.topic == TOPICS.decisions:
                written.append(
                    Record(TOPICS.decisions, 0, len(written), sent.key.decode() if sent.key else None, sent.value)
                )
    return written


def test_a_replay_from_the_start_of_the_journal_gives_the_identical_chain() -> None:
    live = decided_live(0) + decided_live(1)
    refolded = refold_journal(journal(0) + journal(1))
    assert len(live) > 6 and sum(len(bodies) for bodies in refolded.decisions.values()) == len(live)
    assert compare_decisions(refolded.decisions, live) == []


def test_a_replay_from_the_oldest_record_left_on_the_topic_still_matches() -> None:
    live = decided_live(0)
    assert compare_decisions(refold_journal(journal(0)).decisions, live[3:]) == []


def test_a_decision_record_changed_on_the_topic_is_a_replay_difference() -> None:
    live = decided_live(0)
    document: dict[str, Any] = orjson.loads(live[2].value or b"")
    live[2] = Record(TOPICS.decisions, 0, 2, live[2].key, orjson.dumps({**document, "reason": "changed"}))
    differences = compare_decisions(refold_journal(journal(0)).decisions, live)
    assert len(differences) == 1 and differences[0].startswith(f"decision {document['id']}: replayed")
