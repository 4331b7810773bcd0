"""`rollout history --verify` re-checks a record past the decider's head against records and
heads *both* read again: the decider may have written the forgery's seq (and more) between
the first read and the re-check, and heads alone read again would let the forgery pass.

The reads are scripted — the interleaving (a forgery landing, then the decider committing
two decisions inside the re-check's second) is a race the real broker does not reproduce
on demand; tests/integration/test_history_chain.py runs the same check against it."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest

from infra import client
from infra.topics import TopicNames
from rollout_cli.options import Context
from rollout_cli.reading import verifying
from streams.chain import ChainHead, ChainReport, DecisionChain, record_hash


def chained(count: int) -> list[dict[str, Any]]:
    """The decider's first `count` decisions of chain 0."""
    links = DecisionChain(0, {})
    bodies = ({"id": f"0-{n}-0", "module": "app", "action": "assign", "reason": f"step {n}"} for n in range(count))
    return [orjson.loads(links.link(body)) for body in bodies]


def forged_after(document: dict[str, Any]) -> dict[str, Any]:
    """The best forgery: `document`'s successor, prev and hash right, approved by mallory."""
    body = {k: v for k, v in document.items() if k != "hash"}
    body.update(id="0-9-0", seq=document["seq"] + 1, prev=document["hash"], reason="approved by mallory")
    return {**body, "hash": record_hash(body)}


def topic(documents: list[dict[str, Any]]) -> list[client.Record]:
    values = [orjson.dumps(d, option=orjson.OPT_SORT_KEYS) for d in documents]
    return [client.Record("t.decisions", 0, offset, "app", value) for offset, value in enumerate(values)]


class Scripted:
    """A CLI context whose decisions topic gives the scripted reads in turn (the last one
    from then on)."""

    def __init__(self, *reads: list[client.Record]) -> None:
        self.topics, self.bootstrap, self.reads = TopicNames("t."), "127.0.0.1:1", list(reads)

    def records(self, topic: str) -> list[client.Record]:
        assert topic == self.topics.decisions
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]


def verify_history(*reads: list[client.Record]) -> ChainReport:
    return verifying.verify_history(cast(Context, Scripted(*reads)), "app")


def scripted_heads(monkeypatch: pytest.MonkeyPatch, *heads: ChainHead) -> None:
    """decide-state's chain-0 head, read in turn; the re-check's second passes at once."""
    reads = [{0: head} for head in heads]
    monkeypatch.setattr(verifying, "_committed_heads", lambda ctx: reads.pop(0))
    monkeypatch.setattr(verifying.time, "sleep", lambda seconds: None)


def test_a_forgery_whose_seq_the_decider_writes_during_the_recheck_is_still_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    genuine = chained(6)
    forged = forged_after(genuine[3])  # seq 4, on the topic before the decider writes its seq 4 and 5
    scripted_heads(monkeypatch, ChainHead(seq=4, hash=genuine[3]["hash"]), ChainHead(seq=6, hash=genuine[5]["hash"]))

    report = verify_history(topic([*genuine[:4], forged]), topic([*genuine[:4], forged, *genuine[4:]]))

    assert [(b.id, b.where) for b in report.breaks] == [("0-9-0", "decisions[0]@4")], report.breaks
    assert "a second record with seq 4" in report.breaks[0].problem


def test_a_genuine_record_whose_commit_reached_the_heads_late_passes_the_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    genuine = chained(5)
    scripted_heads(monkeypatch, ChainHead(seq=4, hash=genuine[3]["hash"]), ChainHead(seq=5, hash=genuine[4]["hash"]))

    report = verify_history(topic(genuine))

    assert report.ok, report.breaks
    assert report.chains[0].head_seq == 4


def test_a_forgery_past_the_head_at_the_recheck_too_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    genuine = chained(4)
    forged = forged_after(genuine[3])
    scripted_heads(monkeypatch, *[ChainHead(seq=4, hash=genuine[3]["hash"])] * 2)

    report = verify_history(topic([*genuine, forged]))

    assert [b.id for b in report.breaks] == ["0-9-0"] and "past the decider's committed head" in report.breaks[
        0
    ].problem
