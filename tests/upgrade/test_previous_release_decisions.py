"""The decision history the previous release wrote, read, verified and replayed by this one.

tests/upgrade/fixtures/v0.26/decisions.jsonl holds the records v0.26's decider wrote to the
decisions topic for the fixture's journal (make_fixture.py, run on v0.26's tree): hash-chained,
with `reason` sentences and no structured reason (`because`). The rule for such a record
(rollout_cli/reading/replaying.py, streams/chain.as_recorded): `rollout replay --check`
compares it on the fields it has — the replayed record without `because` (and with a
values-refused `path` at the top when it has one), linked to the hash the old release
computed — so every other field, the sentence included, must still be what v0.26 wrote, and
the chain goes on through it. After an upgrade the chain continues with records that carry
`because`; the mixed history verifies, replays identically and reads with one model.
"""

from __future__ import annotations

import orjson

from infra.client import Record
from rollout.wire.decision_reasons import UnrecognisedReason, render
from rollout.wire.decisions import DecisionDocument
from rollout.wire.events import ClusterHeartbeats, RolloutCommanded, SyncStatusReported, Tick
from rollout_cli.reading.replaying import compare_decisions, refold_journal
from streams.chain import CHAIN_MAPPING, HEAD_KEY, ChainHead, verify
from tests.upgrade.release_fixture import (
    FIXTURES,
    PREVIOUS_RELEASE,
    TOPICS,
    RestoredDecider,
    journal_values,
    state_documents,
)


def recorded() -> list[Record]:
    """The previous release's decision records, as they are on the topic."""
    lines = (FIXTURES / PREVIOUS_RELEASE / "decisions.jsonl").read_bytes().splitlines()
    return [Record(TOPICS.decisions, 0, offset, "k", line) for offset, line in enumerate(lines) if line]


def journal(values: list[bytes]) -> list[Record]:
    return [Record(TOPICS.journal, 0, offset, "k", value) for offset, value in enumerate(values)]


def test_the_previous_releases_records_have_no_structured_reason_and_their_chain_verifies() -> None:
    records = recorded()
    documents = [orjson.loads(r.value or b"") for r in records]
    assert len(records) > 50 and not [d for d in documents if "because" in d]
    assert {d["action"] for d in documents} >= {"created", "assign", "stage-started", "approved", "complete"}
    report = verify(records)
    assert report.ok and report.chains[0].chained == len(records) and report.chains[0].from_genesis


def test_a_replay_by_this_release_gives_the_previous_releases_records_field_for_field() -> None:
    assert compare_decisions(refold_journal(journal(journal_values())).decisions, recorded()) == []


def test_an_old_record_changed_on_the_topic_is_still_a_replay_difference() -> None:
    records = recorded()
    document = orjson.loads(records[5].value or b"")
    records[5] = Record(TOPICS.decisions, 0, 5, "k", orjson.dumps({**document, "reason": document["reason"] + "!"}))
    differences = compare_decisions(refold_journal(journal(journal_values())).decisions, records)
    assert differences and differences[0].startswith(f"decision {document['id']}: replayed")


def continued() -> tuple[list[bytes], list[Record]]:
    """The upgrade: this release takes the partition over — v0.26's state and chain head —
    and finishes the rollout v0.26 left waiting for approval. The journal since, and the
    decision records on the topic: v0.26's, then this release's."""
    old = recorded()
    last = orjson.loads(old[-1].value or b"")
    decider = RestoredDecider(state_documents(), journal_length=len(journal_values()))
    decider.decider.state.mappings[CHAIN_MAPPING][HEAD_KEY] = ChainHead(hash=last["hash"], seq=last["seq"] + 1)
    decider.decider.state.commit_batch()
    events = [
        Tick(now=1_040.0),
        ClusterHeartbeats(clusters=["c1", "c2", "c3", "c4", "c5"], lease_seconds=600.0),
        RolloutCommanded(module="app", command="approve", stage="wave", user="upgrader", via="cli"),
    ]
    events += [
        SyncStatusReported(cluster=c, module="app", revision="v2", state="succeeded", generation=2)
        for c in ("c2", "c3", "c4", "c5")
    ]
    written = list(old)
    for event in events:
        for sent in decider.send(event).all():
            if sent.topic == TOPICS.decisions and sent.value is not None:
                written.append(Record(TOPICS.decisions, 0, len(written), "k", sent.value))
    return [*journal_values(), *(event.to_bytes() for event in events)], written


def test_history_continued_by_this_release_verifies_and_replays_identically() -> None:
    values, written = continued()
    new = [orjson.loads(r.value or b"") for r in written[len(recorded()) :]]
    assert "complete" in [d["action"] for d in new] and all("because" in d for d in new)
    report = verify(written)
    assert report.ok and report.chains[0].chained == len(written) and report.chains[0].from_genesis
    assert compare_decisions(refold_journal(journal(values)).decisions, written) == []


def test_old_and_new_records_read_with_the_one_decision_document() -> None:
    _, written = continued()
    documents = [DecisionDocument.read(r.value or b"") for r in written]
    old, new = documents[: len(recorded())], documents[len(recorded()) :]
    assert all(d.because is None and d.reason for d in old)
    for document in new:
        assert document.because is not None and not isinstance(document.because, UnrecognisedReason)
        assert render(document.because) == document.reason
    (approved,) = [d for d in new if d.action == "approved"]
    assert approved.because is not None and approved.because.model_dump(exclude={"code"}) == {
        "stage": "wave",
        "user": "upgrader",
        "via": "cli",
    }
