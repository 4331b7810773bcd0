"""The decision chain (streams/chain.py): each decision record hashed over its canonical body
and linked to the previous record of its journal partition — by the decider, with the head
in its changelogged state, and checked by `verify`, which names the first record that does
not match."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from streams.chain import GENESIS, ChainHead, DecisionChain, record_hash, verify
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, module, stage
from tests.streams.test_decider_batches import FailingDecider, reports_in_order, rolled_out

TOPICS = TopicNames("t.")


@dataclass(frozen=True)
class Stored:
    """A record as read from the decisions topic."""

    partition: int
    offset: int
    value: bytes | None


def decision(n: int, module: str = "app") -> dict[str, Any]:
    return {"id": f"0-{n}-0", "module": module, "action": "assign", "reason": f"step {n}", "cluster": f"c{n}"}


def written(count: int, *, chain: int = 0, topic_partitions: int = 1) -> list[Stored]:
    """`count` linked records of `chain`, spread over the topic's partitions as keys would."""
    links = DecisionChain(chain, {})
    offsets = [0] * topic_partitions
    stored = []
    for n in range(count):
        body = {**decision(n), "id": f"{chain}-{n}-0"}
        partition = n % topic_partitions
        stored.append(Stored(partition, offsets[partition], links.link(body)))
        offsets[partition] += 1
    return stored


def doc(record: Stored) -> dict[str, Any]:
    return json.loads(record.value or b"")


def rewritten(record: Stored, **changes: Any) -> Stored:
    return replace(record, value=orjson.dumps({**doc(record), **changes}, option=orjson.OPT_SORT_KEYS))


def rehashed(record: Stored, **changes: Any) -> Stored:
    """`record` changed and its hash recomputed (by someone who knows the algorithm)."""
    document = {k: v for k, v in {**doc(record), **changes}.items() if k != "hash"}
    return rewritten(record, **changes, hash=record_hash(document))


def only_break(records: list[Stored], **kwargs: Any) -> str:
    report = verify(records, **kwargs)
    assert len(report.breaks) == 1, report.breaks
    return report.breaks[0].line()


# -- the hash --------------------------------------------------------------------------


def test_the_hash_is_sha256_of_the_stored_bytes_without_the_hash_member() -> None:
    """What docs/security.md tells an auditor: no JSON library needed to recompute it."""
    value = DecisionChain(3, {}).link({**decision(1), "reason": 'ünïcode "quoted"', "at": 1e-05})
    stored = json.loads(value)
    member = b'"hash":"' + stored["hash"].encode() + b'",'
    assert hashlib.sha256(value.replace(member, b"", 1)).hexdigest() == stored["hash"] == record_hash(stored)
    assert (stored["chain"], stored["seq"], stored["prev"]) == (3, 0, GENESIS)


def test_each_record_links_to_the_hash_of_the_one_before() -> None:
    heads: dict[str, Any] = {}
    links = DecisionChain(0, heads)
    first, second = json.loads(links.link(decision(0))), json.loads(links.link(decision(1)))
    assert (second["seq"], second["prev"]) == (1, first["hash"])
    assert heads["head"] == ChainHead(hash=second["hash"], seq=2)


# -- the decider -------------------------------------------------------------------------


def decisions_sent(out: Outputs) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in out.all() if r.topic == TOPICS.decisions and r.value is not None]


def feed(decider: DecidePartition, events: list[tuple[int, Any]]) -> Outputs:
    out = Outputs(TOPICS.dead_letters)
    records = [
        SimpleNamespace(topic=TOPICS.journal, partition=0, offset=offset, key=b"k", value=event.to_bytes())
        for offset, event in events
    ]
    decider.process(records, events[-1][0] + 1, out)  # type: ignore[arg-type]
    return out


def test_the_decider_links_its_decisions_across_batches_and_a_restored_owner_continues_the_chain() -> None:
    app = module("app", {}, "v1", stage("canary", {"ring": "canary"}, concurrency=1), stage("wave", None))
    first = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    setup = [ClusterObserved(cluster=cluster(c, {"ring": "canary" if c == "c0" else "wave"})) for c in ("c0", "c1")]
    before = decisions_sent(feed(first, [*enumerate(setup), (2, ModuleApplied(module=app))]))
    changelog = first.state.changelog()
    first.state.commit_batch()

    taken_over = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    taken_over.state.restore(changelog)  # what a new owner reads from decide-state
    report = SyncStatusReported(id="r0", cluster="c0", module="app", revision="v1", state="succeeded")
    after = decisions_sent(feed(taken_over, [(3, report)]))

    chain = before + after
    assert before and after
    assert [d["seq"] for d in chain] == list(range(len(chain)))
    assert [d["prev"] for d in chain] == [GENESIS, *(d["hash"] for d in chain[:-1])]
    assert all(d["chain"] == 0 and record_hash(d) == d["hash"] for d in chain)


def test_a_batch_whose_transaction_failed_takes_its_chain_links_with_it() -> None:
    decider = rolled_out(DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))
    head = decider.chain.head
    sent = decisions_sent(feed(decider, reports_in_order()[:2]))
    decider.state.seal_batch()
    assert sent and decider.chain.head.seq == head.seq + len(sent)
    decider.state.drop_sealed()  # the transaction failed: a read_committed reader never sees `sent`
    decider.reset()  # as the runtime does then
    assert decider.chain.head == head
    again = decisions_sent(feed(decider, reports_in_order()[:2]))
    assert again == sent  # redone after the repair: the same records, linked to the last committed one


def test_an_event_undone_as_a_dead_letter_does_not_advance_the_chain() -> None:
    failing = rolled_out(FailingDecider(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics()))
    start = failing.chain.head
    out = feed(failing, reports_in_order())
    sent = decisions_sent(out)

    assert any(r.topic == TOPICS.dead_letters for r in out.all())
    assert [d["seq"] for d in sent] == list(range(start.seq, start.seq + len(sent)))
    assert sent[0]["prev"] == start.hash
    assert [d["prev"] for d in sent[1:]] == [d["hash"] for d in sent[:-1]]
    assert failing.chain.head == ChainHead(hash=sent[-1]["hash"], seq=start.seq + len(sent))


# -- verifying ---------------------------------------------------------------------------


def test_an_untouched_chain_verifies_across_topic_partitions() -> None:
    report = verify(written(12, topic_partitions=3), heads={0: ChainHead(hash=doc(written(12)[-1])["hash"], seq=12)})
    assert report.ok, report.breaks
    summary = report.chains[0]
    assert (summary.chained, summary.first_seq, summary.head_seq, summary.from_genesis) == (12, 0, 11, True)


def test_a_changed_body_is_named_by_its_hash() -> None:
    records = written(6)
    records[3] = rewritten(records[3], reason="approved by alice")
    assert "0-3-0 at decisions[0]@3: its content does not give its hash" in only_break(records)


def test_a_changed_and_rehashed_record_is_found_by_its_successors_prev() -> None:
    records = written(6)
    records[3] = rehashed(records[3], reason="approved by alice")
    line = only_break(records)
    assert "record 0-4-0" in line and "is not the hash of the record before it (seq 3: 0-3-0" in line


def test_a_removed_record_leaves_a_gap() -> None:
    records = written(6)
    del records[2]
    assert "record 0-3-0 at decisions[0]@3: seq 2 missing before it" in only_break(records)


def test_an_inserted_record_shares_a_seq_with_the_real_one() -> None:
    records = written(6)
    forged = rehashed(records[4], id="0-4-1", reason="forged", prev=doc(records[3])["hash"])
    records.append(Stored(0, 6, forged.value))  # appended to the topic with the next free offset
    assert "record 0-4-1 at decisions[0]@6: a second record with seq 4" in only_break(records)


def test_an_inserted_record_that_landed_before_the_real_one_is_the_one_named() -> None:
    """The forger appended the next seq before the decider wrote it: the decider's record is
    the one its successor (or its committed head) links to, so the forgery is named."""
    records = written(6)
    forged = rehashed(records[4], id="0-9-0", reason="forged", prev=doc(records[3])["hash"])
    topic = [*records[:4], Stored(0, 4, forged.value), replace(records[4], offset=5), replace(records[5], offset=6)]
    assert "record 0-9-0 at decisions[0]@4: a second record with seq 4" in only_break(topic)
    head = ChainHead(hash=doc(records[4])["hash"], seq=5)  # the decider's seq 4 is its head
    assert "record 0-9-0 at decisions[0]@4: a second record with seq 4" in only_break(topic[:6], heads={0: head})


def test_records_reordered_on_the_topic_are_found() -> None:
    records = written(6)
    swapped = [*records[:2], replace(records[3], offset=2), replace(records[2], offset=3), *records[4:]]
    line = only_break(swapped)
    assert "record 0-3-0 at decisions[0]@2: it is on the topic before 0-2-0 (decisions[0]@3)" in line


def test_a_well_formed_record_past_the_deciders_head_is_found() -> None:
    records = written(4)
    last = doc(records[-1])
    head = ChainHead(hash=last["hash"], seq=4)
    forged = rehashed(records[-1], id="0-9-0", seq=4, prev=last["hash"], reason="forged")
    assert verify(records, heads={0: head}).ok
    line = only_break([*records, Stored(0, 4, forged.value)], heads={0: head})
    assert "record 0-9-0 at decisions[0]@4: seq 4 is past the decider's committed head" in line


def test_records_older_than_the_chain_are_reported_unchained_but_one_after_it_fails() -> None:
    old = [Stored(0, n, orjson.dumps(decision(n))) for n in range(3)]
    links = DecisionChain(0, {})
    new = [Stored(0, 3 + n, links.link(decision(3 + n))) for n in range(3)]
    report = verify([*old, *new])
    assert report.ok and (report.chains[0].unchained, report.chains[0].chained) == (3, 3)

    late = Stored(0, 6, orjson.dumps(decision(9)))
    assert "record 0-9-0 at decisions[0]@6: no hash, but it comes after chained records" in only_break(
        [*old, *new, late]
    )


def test_a_chain_whose_oldest_records_expired_is_reported_not_failed() -> None:
    report = verify(written(8)[3:])
    assert report.ok
    assert report.chains[0].first_seq == 3 and not report.chains[0].from_genesis
    assert "the 3 before it are gone" in report.chains[0].notes[0]


def test_chains_are_verified_apart() -> None:
    other = written(4, chain=1)
    broken = [*written(4), *[replace(r, partition=1) for r in other]]
    broken[-1] = rewritten(broken[-1], reason="changed")
    report = verify(broken)
    assert [b.chain for b in report.breaks] == [1] and report.chains[0].chained == 4
