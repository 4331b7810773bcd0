"""The decision chain: every decision record hashed and linked to the previous one of its
journal partition, so that a record changed, removed, reordered or slipped in afterwards is
found (`rollout history --verify`).

    journal partition p ──► decide ──► decisions  {…the decision…, "id": "p-<offset>-<n>",
                                                   "chain": p, "seq": n, "prev": <hash of seq n-1>,
                                                   "hash": <SHA-256 of all of the above>}

Why per journal partition: one decider owns a journal partition at a time and writes its
decisions in order, so its records form one sequence it can link; the decisions topic is
keyed by module and interleaves the decisions of several journal partitions in each of its
partitions, and no one writer could link those. `chain` names the sequence, `seq` numbers
it without gaps (0, 1, 2, …), `prev` is the previous record's `hash` (`GENESIS` for seq 0).

**The chain head is decider state.** The hash and seq of the last record linked live in the
partition's `PartitionState` (mapping `chain`, key `head`, streams/state.py), changelogged
to `decide-state` in the same transaction as the decisions. So after a SIGKILL, a repair or
a take-over by another worker, the next record links to the last *committed* one — the
decisions of an aborted transaction are never seen by a `read_committed` reader, and the
head they advanced is dropped with them. An event the decider undoes (a dead letter) drops
its head change with its event layer: only decisions actually sent advance the head.
Linking costs two encodings and a SHA-256 per decision: 6 µs measured on the 2-core machine
under load (0.6 µs for the plain document before), against the 70 to 150 µs a status
report costs the decider. `rollout replay` links its refolded decisions the same way
(`DecisionChain` over a plain dict) and gets the same hashes. The engine (rollout/) knows
nothing of this: hashing is a property of the record log, not of a rollout.

**The canonical form** an auditor recomputes, in any language:

    hash = lowercase hex SHA-256 of the record's JSON without its "hash" member,
           keys sorted by code point, no whitespace, strings as UTF-8 (no \\u escapes for
           non-ASCII), numbers as the writer wrote them

The writer stores exactly that encoding with `"hash":"<64 hex>",` inserted in its sorted
place (`id` always follows it), so the stored bytes alone suffice:

    sha256(value.replace(b'"hash":"' + h + b'",', b"", 1)).hexdigest() == h

This module re-encodes the parsed document instead (orjson writes floats in their shortest
round-trip form, so a document it wrote re-encodes to the same bytes): a record that differs
only in whitespace or key order is the same record.

**What verifying finds** (`verify`): a record whose content does not give its hash (it was
changed); a `prev` that is not the hash of the record before it (a record changed *and*
re-hashed, or one removed or inserted between the two); a gap in `seq` (records removed); two
records with one `seq` (one inserted); records whose topic order or id order contradicts
their `seq`; a record without a hash after the chain began; and — given the decider's
committed heads (`decide-state`) — a chain on the topic that goes past its head (a
well-formed record appended by someone who could write the topic but not the decider's
state). What it cannot find: the first record still on the topic has no predecessor left
when retention deleted the older ones, so its `prev` is reported, not checked; and whoever
can write both the decisions topic and `decide-state` can rewrite a chain's tail
consistently (docs/security.md, "Tamper-evident history": anchor the heads outside Kafka).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Literal, Protocol, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, ConfigDict

from rollout.engine.outcome import Decision
from rollout.wire.decision_reasons import DecisionReason
from streams.outputs import exact

GENESIS = "0" * 64
"""The `prev` of a chain's first record (seq 0)."""
CHAIN_MAPPING = "chain"
"""The decider state's mapping that holds the head (key `HEAD_KEY`): `chain:head` on decide-state."""
HEAD_KEY = "head"
CHAIN_FIELDS = ("chain", "seq", "prev", "hash")


class ChainHead(BaseModel):
    """The last record linked in a chain: its hash, and the seq the next record gets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hash: str = GENESIS
    seq: int = 0


def canonical(body: Mapping[str, Any]) -> bytes:
    """The record's canonical encoding (see the module doc); `body` without `hash`."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def record_hash(body: Mapping[str, Any]) -> str:
    """The hash of a decision record: SHA-256 of `canonical(body)`, `hash` left out."""
    return hashlib.sha256(canonical({k: v for k, v in body.items() if k != "hash"})).hexdigest()


PROVENANCE_FIELDS = ("user", "via")
"""Decision fields only a command's decisions carry (rollout/engine/intents.py)."""
SPARSE_FIELDS = PROVENANCE_FIELDS
"""Decision fields few decisions carry, left out of the others' records (not written as
nulls, so records written before a field existed stay what a replay makes of them): the
provenance of a command's decisions."""
REASON_FIELD = "because"
"""The decision's structured reason (rollout/wire/decision_reasons.py), a JSON object in
every record since structured reasons; records written before lack it (and a values-refused
one of the builds just before names its readOnly path at the top, `path`):
`rollout replay` compares such a record on the fields it has (rollout_cli/reading/replaying.py)."""


def _plain(annotation: Any) -> bool:
    """Whether values of `annotation` are JSON as they are: str, int, float, bool, None, a Literal of those."""
    if annotation in (str, int, float, bool, type(None)):
        return True
    origin = get_origin(annotation)
    return origin is Literal or (origin in (Union, UnionType) and all(_plain(a) for a in get_args(annotation)))


PLAIN_REASONS = frozenset(
    model
    for model in get_args(get_args(DecisionReason)[0])
    if all(_plain(field.annotation) and field.exclude_if is None for field in model.model_fields.values())
)
"""The reason models whose __dict__ is their JSON (no nested model, list or dict, no field
left out when unset; the code a StrEnum, a str): written without model_dump, which costs
2 µs a decision."""


def decision_body(chain: int, offset: int, index: int, decision: Decision) -> dict[str, Any]:
    """A decision's record before linking: its id `<journal partition>-<offset>-<n>` (the
    `index`-th decision of the journal record at `offset`) and its fields. A Decision's
    fields but its reason model are plain values: its __dict__ is its model_dump() with
    `because` dumped as JSON, for less (tests/streams/test_decision_documents.py).
    `SPARSE_FIELDS` a decision does not carry are left out rather than written as nulls."""
    body = {"id": f"{chain}-{offset}-{index}", **decision.__dict__}
    because = decision.because
    body[REASON_FIELD] = dict(because.__dict__) if type(because) in PLAIN_REASONS else because.model_dump(mode="json")
    for sparse in SPARSE_FIELDS:
        if body[sparse] is None:
            del body[sparse]
    return body


def as_recorded(body: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """`body` — a decision record as this release writes it, before linking — in the shape
    the writer of `recorded` (the record of the same id on the topic) gave its records. A
    record written before structured reasons has no `because`: the body without it, and with
    the values-refused path at the top (`path`) when the recorded one has one (the builds
    between that field and structured reasons wrote it there). A body in that shape links to
    the hash the old release computed, so a replay compares old records on the fields they
    have and the chain continues through them (rollout_cli/reading/replaying.py)."""
    if REASON_FIELD in recorded:
        return dict(body)
    shaped = {key: value for key, value in body.items() if key != REASON_FIELD}
    because = body.get(REASON_FIELD)
    if "path" in recorded and isinstance(because, Mapping) and "path" in because:
        shaped["path"] = because["path"]
    return shaped


class DecisionChain:
    """Links one journal partition's decision records. `heads` is where the head lives: the
    decider's `chain` state mapping (changelogged, layered with the batch), or a plain dict
    in a replay."""

    def __init__(self, chain: int, heads: MutableMapping[str, Any]) -> None:
        self.chain = chain
        self.heads = heads

    @property
    def head(self) -> ChainHead:
        head = self.heads.get(HEAD_KEY)
        return head if isinstance(head, ChainHead) else ChainHead()

    def link(self, body: Mapping[str, Any]) -> bytes:
        """The stored document of the decision `body` (its id and fields), linked to the
        head; the head moves to it."""
        return self.link_all([body])[0]

    def link_all(self, bodies: Iterable[Mapping[str, Any]]) -> list[bytes]:
        """The stored documents of the decisions `bodies`, in order, each linked to the one
        before it, the first to the head; the head moves to the last — read and written once
        (an event's decisions: a status report makes two, each head a model and a state write)."""
        head = self.head
        seq, prev = head.seq, head.hash
        documents = []
        for body in bodies:
            linked = {**body, "chain": self.chain, "seq": seq, "prev": prev}
            prev = hashlib.sha256(canonical(linked)).hexdigest()
            linked["hash"] = prev
            documents.append(exact(canonical(linked)))  # held until its batch commits: of its own size
            seq += 1
        if documents:
            self.heads[HEAD_KEY] = ChainHead.model_construct(hash=prev, seq=seq)  # valid by construction
        return documents


# -- verifying ---------------------------------------------------------------------------


class StoredRecord(Protocol):
    """A record as read from the decisions topic (infra.client.Record is one)."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...


@dataclass(frozen=True)
class Located:
    """One decision record and where it was read."""

    partition: int
    offset: int
    document: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.document.get("id"))

    @property
    def where(self) -> str:
        return f"decisions[{self.partition}]@{self.offset}"

    @property
    def order(self) -> tuple[int, int]:
        """(journal offset, index) from the id `<chain>-<offset>-<n>`: the order it was decided in."""
        return _id_order(self.id) or (-1, -1)


@dataclass(frozen=True)
class Break:
    """The first record of a chain that does not match, and what does not."""

    chain: int | None  # None: a record that belongs to no chain (not a decision document)
    id: str
    where: str  # decisions[<partition>]@<offset>
    problem: str

    def line(self) -> str:
        chain = "no chain" if self.chain is None else f"chain {self.chain}"
        return f"{chain}: record {self.id} at {self.where}: {self.problem}"


@dataclass
class ChainSummary:
    """One chain as verified: how many records, from which seq, to which head."""

    chain: int
    chained: int = 0  # records with a hash
    unchained: int = 0  # records older than the chain (written before decisions were hashed)
    first_seq: int | None = None
    first_prev: str | None = None
    head_seq: int | None = None
    head_hash: str | None = None
    module_records: int | None = None  # verifying one module: how many of the records are its own
    notes: list[str] = field(default_factory=list)

    @property
    def from_genesis(self) -> bool:
        """Whether the topic still holds the chain from its first record (nothing expired)."""
        return self.first_seq == 0 and self.first_prev == GENESIS


@dataclass
class ChainReport:
    chains: dict[int, ChainSummary] = field(default_factory=dict)
    breaks: list[Break] = field(default_factory=list)  # the first per chain, in chain order
    heads_checked: bool = False  # the chains' tips were compared with the decider's heads

    @property
    def ok(self) -> bool:
        return not self.breaks


def verify(
    records: Iterable[StoredRecord],
    *,
    heads: Mapping[int, ChainHead] | None = None,
    chains: set[int] | None = None,
) -> ChainReport:
    """Check every chain of the decisions topic's `records` (read in offset order per topic
    partition). `heads`: the decider's committed head per chain, read from decide-state
    *after* the records — a chain on the topic must not go past it. `chains`: only these."""
    report = ChainReport(heads_checked=heads is not None)
    grouped: dict[int, list[Located]] = {}
    for record in records:
        located, chain, problem = _locate(record)
        if problem is not None:
            report.breaks.append(Break(chain, located.id if located else "?", _where(record), problem))
            continue
        assert located is not None and chain is not None
        if chains is None or chain in chains:
            grouped.setdefault(chain, []).append(located)
    for chain in sorted(grouped):
        summary, broken = _verify_chain(chain, grouped[chain], None if heads is None else heads.get(chain))
        report.chains[chain] = summary
        if broken is not None:
            report.breaks.append(broken)
    return report


def _where(record: StoredRecord) -> str:
    return f"decisions[{record.partition}]@{record.offset}"


def _id_order(record_id: str) -> tuple[int, int] | None:
    parts = record_id.split("-")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return None
    return int(parts[1]), int(parts[2])


def _locate(record: StoredRecord) -> tuple[Located | None, int | None, str | None]:
    """The record parsed and its chain, or the reason it belongs to none."""
    try:
        document = orjson.loads(record.value) if record.value is not None else None
    except orjson.JSONDecodeError:
        return None, None, "not JSON: not a decision document"
    if not isinstance(document, dict):
        return None, None, "not a JSON object: not a decision document"
    located = Located(record.partition, record.offset, document)
    record_id = document.get("id")
    if not isinstance(record_id, str) or _id_order(record_id) is None:
        return located, None, f"its id {record_id!r} is not <journal partition>-<offset>-<n>"
    from_id = int(record_id.split("-")[0])
    chain = document.get("chain", from_id)
    if chain != from_id:
        return located, from_id, f"its chain {chain!r} is not the journal partition of its id"
    return located, from_id, None


def _verify_chain(chain: int, records: list[Located], head: ChainHead | None) -> tuple[ChainSummary, Break | None]:
    summary = ChainSummary(chain)
    linked = [r for r in records if "hash" in r.document]
    unchained = [r for r in records if "hash" not in r.document]
    summary.chained, summary.unchained = len(linked), len(unchained)
    broken = _check_unchained(chain, unchained, linked) or _check_duplicate_ids(chain, records)
    if broken is not None:
        return summary, broken
    endorsed = _endorsed(linked, head)
    # of two records with one seq, the one the chain goes on from comes first, so the other —
    # the inserted one — is the record named, whichever landed first on the topic
    linked.sort(key=lambda r: (_seq(r), id(r) not in endorsed, r.partition, r.offset))
    previous: Located | None = None
    last_on: dict[int, Located] = {}  # per topic partition: the last record of the chain read there
    for record in linked:
        problem = _check_link(record, previous, last_on.get(record.partition))
        if problem is not None:
            return summary, Break(chain, record.id, record.where, problem)
        if previous is None:
            summary.first_seq, summary.first_prev = _seq(record), str(record.document.get("prev"))
        previous = last_on[record.partition] = record
    if previous is not None:
        summary.head_seq, summary.head_hash = _seq(previous), str(previous.document["hash"])
        if not summary.from_genesis:
            summary.notes.append(
                f"the oldest record on the topic is seq {summary.first_seq} ({linked[0].id}): the "
                f"{summary.first_seq} before it are gone (retention?), its prev is not checked"
            )
    if head is not None:
        return summary, _check_head(chain, linked, head)
    return summary, None


def _endorsed(linked: list[Located], head: ChainHead | None) -> set[int]:
    """The records (by identity) the chain goes on from: some record of the next seq links
    to its hash, or it is the decider's committed head."""
    prevs = {(_seq(r) - 1, r.document.get("prev")) for r in linked}
    return {
        id(r)
        for r in linked
        if (_seq(r), r.document.get("hash")) in prevs
        or (head is not None and _seq(r) == head.seq - 1 and r.document.get("hash") == head.hash)
    }


def _seq(record: Located) -> int:
    seq = record.document.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else -1


def _check_unchained(chain: int, unchained: list[Located], linked: list[Located]) -> Break | None:
    """A record without hash is older than the chain, or forged: decided after the chain's
    first record, or read after a chained record in its topic partition → forged."""
    if not linked or not unchained:
        return None
    first = min(linked, key=lambda r: r.order)
    first_offset: dict[int, int] = {}
    for record in linked:
        first_offset[record.partition] = min(first_offset.get(record.partition, record.offset), record.offset)
    for record in unchained:
        after = record.order > first.order or record.offset > first_offset.get(record.partition, record.offset)
        if after:
            return Break(chain, record.id, record.where, "no hash, but it comes after chained records of its chain")
    return None


def _check_duplicate_ids(chain: int, records: list[Located]) -> Break | None:
    seen: dict[str, Located] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        earlier = seen.setdefault(record.id, record)
        if earlier is not record:
            return Break(chain, record.id, record.where, f"a second record with this id (the first at {earlier.where})")
    return None


def _check_link(record: Located, previous: Located | None, last_here: Located | None) -> str | None:
    """What is wrong with `record` given the record before it in the chain, if anything."""
    document, seq = record.document, _seq(record)
    if seq < 0 or not isinstance(document.get("prev"), str) or not isinstance(document.get("hash"), str):
        return "its seq, prev or hash is missing or malformed"
    computed = record_hash(document)
    if computed != document["hash"]:
        return f"its content does not give its hash (stored {document['hash'][:16]}…, computed {computed[:16]}…)"
    if previous is not None:
        expected = _seq(previous) + 1
        if seq < expected:
            return f"a second record with seq {seq} (the first: {previous.id} at {previous.where}): one was inserted"
        if seq > expected:
            missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected} to {seq - 1}"
            return f"{missing} missing before it (after {previous.id}): records were removed"
        if document["prev"] != previous.document["hash"]:
            return (
                f"its prev {document['prev'][:16]}… is not the hash of the record before it "
                f"(seq {seq - 1}: {previous.id} at {previous.where}, {str(previous.document['hash'])[:16]}…): "
                "one of the two was changed"
            )
        if record.order <= previous.order:
            return f"its id is not after the id of the record before it ({previous.id}): reordered"
    if last_here is not None and record.offset < last_here.offset:
        return f"it is on the topic before {last_here.id} ({last_here.where}), which has a lower seq: reordered"
    return None


def _check_head(chain: int, linked: list[Located], head: ChainHead) -> Break | None:
    """The decider's committed head (read after the records): nothing on the topic past it,
    and the record at the head is the one the decider linked."""
    for record in linked:
        if _seq(record) >= head.seq:
            return Break(
                chain,
                record.id,
                record.where,
                f"seq {_seq(record)} is past the decider's committed head (seq {head.seq - 1}, "
                f"{head.hash[:16]}…): the decider never wrote it",
            )
        if _seq(record) == head.seq - 1 and record.document["hash"] != head.hash:
            return Break(
                chain,
                record.id,
                record.where,
                f"its hash is not the decider's committed head ({head.hash[:16]}…): the decider never wrote it",
            )
    return None
