"""`rollout replay` refolds the journal and links the decisions it gets exactly as the decider
does: a replay from the start of the journal gives the decisions topic's records — hashes
included — and a record that differs is named. A record written before structured reasons
(no `because`) is compared on the fields it has (tests/upgrade/test_previous_release_decisions.py
replays v0.26's own)."""

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
from streams.chain import DecisionChain
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, given, module, stage
from tests.rollout.test_helm_releases import helm_module, values_observed

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


def written_before_structured_reasons(body: dict[str, Any]) -> dict[str, Any]:
    """A decision record as the builds before structured reasons wrote it: no `because`; a
    values-refused one names its readOnly path at the top."""
    old = {key: value for key, value in body.items() if key != "because"}
    if body["action"] == "values-refused":
        old["path"] = body["because"]["path"]
    return old


def history(bodies: list[dict[str, Any]], old: int) -> list[Record]:
    """The chain of `bodies` as the topic holds it after an upgrade: the first `old` written
    by the release before structured reasons, the rest by this one."""
    chain = DecisionChain(0, {})
    return [
        Record(TOPICS.decisions, 0, n, "web", chain.link(written_before_structured_reasons(b) if n < old else b))
        for n, b in enumerate(bodies)
    ]


def test_a_history_written_before_structured_reasons_replays_on_the_fields_it_has() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.send(values_observed("c1", {"seed": "generated-on-cluster"}))
    records = [Record(TOPICS.journal, 0, n, "k", e.to_bytes()) for n, e in enumerate(fleet.journal)]
    bodies = refold_journal(records).decisions[0]
    refused = [n for n, body in enumerate(bodies) if body["action"] == "values-refused"]
    assert refused and refused[-1] == len(bodies) - 1
    for old in (len(bodies), refused[-1], 1):  # all old; old until the refusal; only the first
        assert compare_decisions({0: bodies}, history(bodies, old)) == [], old
    live = history(bodies, len(bodies))
    document = orjson.loads(live[refused[-1]].value or b"")
    assert "because" not in document and document["path"] == "/seed"
    forged = {**document, "path": "/other"}
    live[refused[-1]] = Record(TOPICS.decisions, 0, refused[-1], "web", orjson.dumps(forged))
    (difference,) = compare_decisions({0: bodies}, live)
    assert difference.startswith(f"decision {document['id']}: replayed")
