"""`rollout replay`: refold the logs through the pure core and compare with the topics.

Two folds, each over a log that fixes its own order:

1. the journal, partition by partition, through a fresh `RolloutEngine` per partition
   (state in plain dicts) → the assignments, decisions and module status it emits;
2. the assignments topic, partition by partition, through `rollout.assembly.snapshots`
   → the RemoteAssemblage/ProxyAssemblage snapshots.

Fold 1 is compared with what the worker wrote to the assignments topic from each journal
partition (the assignments topic interleaves several journal partitions, so the
comparison is per source partition), with the module-status topic, and with the decisions
topic record by record — hashes included: the refolded decisions are linked into each
journal partition's chain exactly as the decider links them (streams/chain.py), from the
chain's oldest record still on the topic (its seq and prev: the start of the chain, unless
retention removed older records or they predate the chain); fold 2 with the latest
snapshot per key on the projection topics. Equal means the live projections and the
decision history are exactly what the log implies.

From a snapshot (`--from-snapshot`, streams/snapshots.py): both folds start from the state
the snapshot copied — the decider's per journal partition, the assembler's per assignments
partition — and read only what lies past its positions (`compare_tail` says what is compared
and how). A journal that no longer starts at offset 0 (cut below a snapshot by `rollout
snapshot retain`) is refused a full refold: folded from the middle, every difference would
be wrong.

History written by an earlier release. A decision record without `because` (the structured
reason: written before structured reasons, by v0.26 say) is compared on the fields it has:
with the replayed record minus `because` (and with the values-refused `path` at the top if
the record has one) — the record that release would have written for the same decision,
hash included, so the chain continues through it. Its sentence (`reason`) and every other
field must still be equal: the sentences are rendered exactly as that release wrote them
(tests/upgrade/test_previous_release_decisions.py replays v0.26's recorded history).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from infra import client
from infra.topics import log_start_offsets
from rollout.assembly.snapshots import AssemblageRecord, assemble
from rollout.assembly.snapshots import snapshot as rendered_assemblage
from rollout.engine import stored
from rollout.engine.core import Assignment, RolloutEngine, new_engine
from rollout.engine.migrations import FIRST_VERSION, current_versions
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import DocumentError
from rollout.wire.events import parse_event
from rollout.wire.status import ModuleStatus
from rollout_cli.options import fail
from streams import assembler, decider
from streams.chain import CHAIN_MAPPING, HEAD_KEY, ChainHead, DecisionChain, as_recorded, decision_body
from streams.snapshots import TRACKING_KEY, StateSnapshot
from streams.state import Tracking


@dataclass
class ReplayReport:
    journal_events: int = 0
    assignments: int = 0
    snapshots: int = 0
    differences: list[str] = field(default_factory=list)
    origin: str = ""  # from a snapshot: which, and where the tail starts

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        head = self.origin + (
            f"replayed {self.journal_events} journal events → {self.assignments} assignments → "
            f"{self.snapshots} snapshots"
        )
        if self.identical:
            return head + "\nidentical: the live projections are exactly what the log implies"
        return head + f"\n{len(self.differences)} difference(s):\n" + "\n".join(self.differences[:50])


@dataclass
class Refolded:
    """What folding the journal emits: per journal partition, the assignments and the
    decision records (unlinked: `decision_body`), in order; the final status per module."""

    assignments: dict[int, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    decisions: dict[int, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    module_status: dict[str, Any] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)  # the modules whose status the fold emitted


def refold_journal(records: list[client.Record], engines: dict[int, RolloutEngine] | None = None) -> Refolded:
    """Fold `records` (journal partitions in offset order) through a fresh engine per
    partition, or through `engines` (restored from a snapshot: the records are its tail)."""
    engines = {} if engines is None else engines
    refolded = Refolded()
    for record in records:
        engine = engines.get(record.partition)
        if engine is None:
            engine = new_engine(record.partition)
            engines[record.partition] = engine
        outcome = engine.handle(parse_event(record.value))
        for assignment in outcome.assignments:
            refolded.assignments[record.partition].append(json.loads(assignment.model_dump_json(by_alias=True)))
        for index, decision in enumerate(outcome.decisions):
            refolded.decisions[record.partition].append(decision_body(record.partition, record.offset, index, decision))
        refolded.module_status.update(outcome.module_status)
    refolded.touched = set(refolded.module_status)
    refolded.module_status = {k: v for k, v in refolded.module_status.items() if v is not None}
    return refolded


def compare_decisions(
    replayed: dict[int, list[dict[str, Any]]],
    live: list[client.Record],
    heads: dict[int, ChainHead] | None = None,
) -> list[str]:
    """Differences between the refolded decisions, linked per chain from the chain's oldest
    record on the topic — or from `heads` (a snapshot's chain heads: every refolded record
    must then be on the topic, linked on from there) — and the live decision records (at
    most 3 per chain). A live record is read as the decision document
    (rollout/wire/decisions.py) and compared as stored, key by key; one written before
    structured reasons (no `because`) with the replayed record in the shape its release
    wrote (`streams.chain.as_recorded`)."""
    by_chain: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in live:
        try:
            document = orjson.loads(record.value or b"null")
            decision = DecisionDocument.read(document)
        except (orjson.JSONDecodeError, DocumentError):
            continue  # not a decision document: `rollout history --verify` names it
        by_chain[int(decision.id.split("-")[0])].append(document)
    differences: list[str] = []
    for chain in sorted(set(replayed) | set(by_chain)):
        head = None if heads is None else heads.get(chain, ChainHead())
        differences += _chain_differences(chain, replayed.get(chain, []), by_chain.get(chain, []), head)[:3]
    return differences


def _chain_differences(
    chain: int, bodies: list[dict[str, Any]], live: list[dict[str, Any]], head: ChainHead | None = None
) -> list[str]:
    position = {body["id"]: index for index, body in enumerate(bodies)}
    recorded = {document["id"]: document for document in live}
    expected: dict[str, dict[str, Any]] = {}
    linked = [d for d in live if "hash" in d]
    if head is not None:  # from a snapshot: the chain goes on from its head
        links = DecisionChain(chain, {HEAD_KEY: head})
        for body in bodies:
            shaped = as_recorded(body, recorded[body["id"]]) if body["id"] in recorded else body
            expected[body["id"]] = orjson.loads(links.link(shaped))
    elif linked:
        oldest = min(linked, key=lambda d: d.get("seq", 0))
        start = position.get(oldest["id"])
        if start is None:
            return [f"decisions chain {chain}: live record {oldest['id']} is not in the replay"]
        links = DecisionChain(chain, {HEAD_KEY: ChainHead(hash=oldest.get("prev", ""), seq=oldest.get("seq", 0))})
        for body in bodies[start:]:
            shaped = as_recorded(body, recorded[body["id"]]) if body["id"] in recorded else body
            expected[body["id"]] = orjson.loads(links.link(shaped))
    differences = []
    for document in live:
        if "hash" in document:
            wanted = expected.get(document["id"])
        else:  # older than the chain: its fields only
            found = document["id"] in position
            wanted = as_recorded(bodies[position[document["id"]]], document) if found else None
        if wanted != document:
            differences.append(
                f"decision {document['id']}: replayed {_short(wanted)}, live {_short(document)}"
                if wanted is not None
                else f"decision {document['id']}: on the topic but not in the replay"
            )
    on_topic = {d["id"] for d in linked}  # once: per record it made a replay quadratic (hours at 10,000 clusters)
    missing = [record_id for record_id in expected if record_id not in on_topic]
    if missing:
        differences.append(f"decisions chain {chain}: {len(missing)} replayed but not on the topic, from {missing[0]}")
    return differences


def _short(document: dict[str, Any]) -> str:
    action, reason, seq = document.get("action"), document.get("reason"), document.get("seq")
    return f"{action} {reason!r} seq {seq} {str(document.get('hash'))[:12]}"


def refold_assignments(records: list[client.Record]) -> dict[tuple[str, str], Any]:
    """The latest snapshot per (kind, cluster) that folding the assignments log gives."""
    state: dict[str, AssemblageRecord] = {}
    latest: dict[tuple[str, str], Any] = {}
    for record in records:
        assignment = Assignment.model_validate_json(record.value)  # type: ignore[arg-type]
        updated, publications = assemble(state.get(assignment.cluster), assignment)
        state[assignment.cluster] = updated
        for kind, cluster, snapshot in publications:
            latest[(kind, cluster)] = snapshot.model_dump(mode="json", by_alias=True) if snapshot else None
    return latest


def _by_pair(assignments: Any) -> dict[tuple[str, str], list[str]]:
    """Assignment sequences per (cluster, module); a redelivered duplicate right after
    the original (at-least-once) is not a difference."""
    sequences: dict[tuple[str, str], list[str]] = defaultdict(list)
    for assignment in assignments:
        encoded = json.dumps({k: v for k, v in assignment.items() if k != "reason"}, sort_keys=True)
        sequence = sequences[(assignment["cluster"], assignment["module"])]
        if not sequence or sequence[-1] != encoded:
            sequence.append(encoded)
    return sequences


def status_difference(module: str, replayed: Any, live: Any) -> str | None:
    """How the replayed module-status document differs from the live one, both read with
    the model (rollout/wire/status.py: a live document written before `schemaVersion`
    reads as version 1), `observedAt` aside — None: equal."""
    try:
        ours, theirs = ModuleStatus.read(replayed), ModuleStatus.read(live)
    except DocumentError as error:
        return f"module status {module}: {error}"
    skipped = {"observed_at", "schema_version"}
    mine, other = ours.model_dump(by_alias=True, exclude=skipped), theirs.model_dump(by_alias=True, exclude=skipped)
    if mine == other:
        return None
    fields = sorted(k for k in mine if mine[k] != other.get(k))
    detail = "; ".join(f"{k}: replayed {mine[k]!r}, live {other.get(k)!r}" for k in fields)
    return f"module status {module} differs: {detail}"


def compare(
    *,
    journal: list[client.Record],
    assignments: list[client.Record],
    live_remote: dict[str, Any],
    live_proxy: dict[str, Any],
    live_status: dict[str, Any],
    decisions: list[client.Record] | None = None,
) -> ReplayReport:
    report = ReplayReport(journal_events=len(journal), assignments=len(assignments))
    refolded = refold_journal(journal)
    emitted, module_status = refolded.assignments, refolded.module_status
    # The assignments topic interleaves journal partitions, but the assignments of one
    # (cluster, module) all come from the module's journal partition, in order.
    replayed_seq = _by_pair(a for seq in emitted.values() for a in seq)
    live_seq = _by_pair(json.loads(r.value) for r in assignments if r.value is not None)
    for pair in sorted(set(replayed_seq) | set(live_seq)):
        if replayed_seq.get(pair) != live_seq.get(pair):
            report.differences.append(
                f"assignments of {pair[1]} to {pair[0]}: replayed {len(replayed_seq.get(pair, []))}, "
                f"live {len(live_seq.get(pair, []))} (or different content)"
            )
    for module in sorted(set(module_status) | set(live_status)):
        replayed, live = module_status.get(module), live_status.get(module)
        if replayed is None or live is None:
            report.differences.append(f"module status {module}: only {'live' if replayed is None else 'replayed'}")
        elif (difference := status_difference(module, replayed, live)) is not None:
            report.differences.append(difference)
    if decisions is not None:
        report.differences += compare_decisions(refolded.decisions, decisions)
    snapshots = refold_assignments(assignments)
    report.snapshots = sum(1 for v in snapshots.values() if v is not None)
    for (kind, cluster), snapshot in sorted(snapshots.items()):
        live = (live_remote if kind == "RemoteAssemblage" else live_proxy).get(cluster)
        if snapshot != live:
            report.differences.append(
                f"{kind} {cluster}: replayed version "
                f"{snapshot and snapshot['version']} != live {live and live['version']}"
            )
    for cluster in sorted(set(live_remote) - {c for k, c in snapshots if k == "RemoteAssemblage"}):
        report.differences.append(f"RemoteAssemblage {cluster}: on the topic but not in the replay")
    for cluster in sorted(set(live_proxy) - {c for k, c in snapshots if k == "ProxyAssemblage"}):
        report.differences.append(f"ProxyAssemblage {cluster}: on the topic but not in the replay")
    return report


def replay_and_compare(ctx: Any) -> ReplayReport:
    """The full refold, from the start of the journal — refused on a journal that no longer
    starts at offset 0 (its head deleted below a snapshot): folded from the middle, every
    difference would be wrong."""
    topics = ctx.topics
    for what, topic in (("journal", topics.journal), ("assignments topic", topics.assignments)):
        starts = client.run(log_start_offsets(ctx.bootstrap, topic))
        cut = {partition: start for partition, start in sorted(starts.items()) if start > 0}
        if cut:
            where = ", ".join(f"partition {p} at offset {o}" for p, o in cut.items())
            fail(
                f"the {what} {topic} no longer starts at offset 0 ({where}): the records below were "
                "deleted, below a snapshot (`rollout snapshot retain`), so a refold from its start cannot give "
                "the engine's state. Replay from a snapshot instead: "
                "`rollout replay --check --from-snapshot DIR` (the newest snapshot in DIR, or one file)"
            )
    return compare(
        journal=ctx.records(topics.journal),
        assignments=ctx.records(topics.assignments),
        live_remote=ctx.latest(topics.remote),
        live_proxy=ctx.latest(topics.proxy),
        live_status=ctx.latest(topics.module_status),
        decisions=ctx.records(topics.decisions),
    )


# -- from a snapshot: the journal's tail only ---------------------------------------------

ASSEMBLAGE_KINDS = ("RemoteAssemblage", "ProxyAssemblage")


@dataclass
class Restored:
    """What a snapshot's decider state restores, per journal partition: an engine over its
    tables (`ENGINE_MAPPINGS`: folded on in place) and the head of its decision chain."""

    engines: dict[int, RolloutEngine] = field(default_factory=dict)
    heads: dict[int, ChainHead] = field(default_factory=dict)
    tables: dict[int, dict[str, Any]] = field(default_factory=dict)


def restored_engines(taken: StateSnapshot) -> Restored:
    """The snapshot's decider state, decoded as the decider restores it (streams/state.py)."""
    restored = Restored()
    for partition, part in sorted(taken.decide.partitions.items()):
        state = part.state(decider.state_mappings(), lazy=decider.LAZY_MAPPINGS)
        restored.heads[partition] = state.mappings[CHAIN_MAPPING].committed.get(HEAD_KEY) or ChainHead()
        tables: dict[str, Any] = {name: state.mappings[name].committed for name in ENGINE_MAPPINGS}
        restored.tables[partition] = tables
        restored.engines[partition] = RolloutEngine(**tables, partition=partition)
    return restored


def compare_state(
    tables: dict[int, dict[str, Any]], live: list[client.Record], refolded_through: dict[int, tuple[int, int]]
) -> tuple[list[str], list[int]]:
    """Differences between the refolded decider state and `decide-state` as committed (at
    most 3 per partition), for each partition whose decider has folded exactly the records
    refolded — `refolded_through[p]`: (the first offset past the last record refolded, the
    journal's end offset when it was read); the partitions compared."""
    by_partition: dict[int, dict[str, bytes]] = defaultdict(dict)
    for record in live:
        if record.key is not None:
            if record.value is None:
                by_partition[record.partition].pop(record.key, None)
            else:
                by_partition[record.partition][record.key] = record.value
    versions = current_versions()
    differences: list[str] = []
    compared: list[int] = []
    for partition, mappings in sorted(tables.items()):
        committed = by_partition.get(partition, {})
        tracking = committed.get(TRACKING_KEY)
        position = Tracking.model_validate_json(tracking).offset if tracking else 0
        past_last, end = refolded_through.get(partition, (0, 0))
        if not past_last <= position <= end:
            continue  # the decider is behind the refold, or past it: not the same state
        compared.append(partition)
        replayed = {
            f"{name}:{key}": orjson.loads(stored.encode(value, versions.get(name, FIRST_VERSION)))
            for name, mapping in mappings.items()
            for key, value in mapping.items()
        }
        recorded = {
            key: as_written(key, value, versions)
            for key, value in committed.items()
            if key.partition(":")[0] in ENGINE_MAPPINGS
        }
        wrong = sorted(k for k in set(replayed) | set(recorded) if replayed.get(k) != recorded.get(k))
        differences += [
            f"decider state {partition} {key}: "
            + ("only replayed" if key not in recorded else "only live" if key not in replayed else "differs")
            for key in wrong[:3]
        ]
    return differences, compared


def as_written(key: str, value: bytes, versions: dict[str, int]) -> Any:
    """A live state record as this release would write it: read and written again, so that
    one written by another release in another form of the same record (a Target in full,
    as v0.26 wrote it: stored.py `encode`) compares equal; as it is if it cannot be read
    (then it differs, and the comparison says so)."""
    name, _, inner = key.partition(":")
    version = versions.get(name, FIRST_VERSION)
    try:
        value = stored.encode(stored.decode(name, inner, ENGINE_MAPPINGS[name], value, current=version), version)
    except stored.StoredStateError:
        pass
    return orjson.loads(value)


def _decision_place(record: client.Record) -> tuple[int, int] | None:
    """(journal partition, offset) of a decision record's event, from its id."""
    try:
        chain, offset, _ = str(orjson.loads(record.value or b"null")["id"]).split("-")
        return int(chain), int(offset)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def compare_tail(
    taken: StateSnapshot,
    *,
    journal: list[client.Record],
    assignments: list[client.Record],
    live_remote: dict[str, Any],
    live_proxy: dict[str, Any],
    live_status: dict[str, Any],
    decisions: list[client.Record],
    live_state: list[client.Record] | None = None,
    journal_ends: dict[int, int] | None = None,
) -> ReplayReport:
    """Refold the journal's records past the snapshot's decide positions from its state, and
    the assignments past its assemble positions from its assemblages; compare:

    * decisions: every record the tail made, on the topic from the snapshot's
      `decisions_from`, linked on from the snapshot's chain head, hashes included — and
      none past the snapshot's positions that the tail did not make (up to the last journal
      record read: a worker still running may have decided on newer ones);
    * assignments: each (cluster, module)'s replayed assignments are the end of what is on
      the topic from the snapshot's `assignments_from` (records before the tail may lead);
    * module status: of every module the tail emitted a status for;
    * projections: every cluster's RemoteAssemblage/ProxyAssemblage, rendered from the
      snapshot's assemblages folded on, against the topics — all of them;
    * the decider's state (`live_state`: decide-state read after the journal, whose end
      offsets were `journal_ends`), record by record, in each partition whose decider has
      folded exactly what was refolded (a stopped or idle worker: `compare_state`).
    """
    decide_from = taken.decide.positions()
    report = ReplayReport(journal_events=len(journal))
    report.origin = (
        f"from the snapshot taken at {datetime.fromtimestamp(taken.taken_at, UTC):%Y-%m-%d %H:%M:%S} UTC "
        f"(journal offsets {', '.join(f'{p}: {o}' for p, o in sorted(decide_from.items()))})\n"
    )
    restored = restored_engines(taken)
    heads = restored.heads
    refolded = refold_journal(journal, restored.engines)
    read_up_to = {r.partition: r.offset for r in journal}  # the last journal record read, per partition

    def in_tail(place: tuple[int, int] | None) -> bool:
        return place is not None and decide_from.get(place[0], 0) <= place[1] <= read_up_to.get(place[0], -1)

    live_decisions = [r for r in decisions if in_tail(_decision_place(r))]
    report.differences += compare_decisions(refolded.decisions, live_decisions, heads)

    replayed_seq = _by_pair(a for seq in refolded.assignments.values() for a in seq)
    after = [r for r in assignments if r.value is not None and r.offset >= taken.assignments_from.get(r.partition, 0)]
    live_seq = _by_pair(json.loads(r.value or b"") for r in after)
    for pair, replayed in sorted(replayed_seq.items()):
        live = live_seq.get(pair, [])
        if live[-len(replayed) :] != replayed:
            report.differences.append(
                f"assignments of {pair[1]} to {pair[0]}: replayed {len(replayed)} since the snapshot, "
                f"the topic's last {min(len(live), len(replayed))} differ (or are missing)"
            )

    for module in sorted(refolded.touched):
        replayed_status, live_status_document = refolded.module_status.get(module), live_status.get(module)
        if replayed_status is None or live_status_document is None:
            if replayed_status is not live_status_document:
                where = "live" if replayed_status is None else "replayed"
                report.differences.append(f"module status {module}: only {where}")
        elif (difference := status_difference(module, replayed_status, live_status_document)) is not None:
            report.differences.append(difference)

    report.differences += _compare_projections(taken, assignments, live_remote, live_proxy, report)
    if live_state is not None and journal_ends is not None:
        through = {p: (read_up_to.get(p, decide_from.get(p, 0) - 1) + 1, end) for p, end in journal_ends.items()}
        differences, compared = compare_state(restored.tables, live_state, through)
        report.differences += differences
        report.origin += f"decider state compared in journal partitions {compared or 'none (the worker moved on)'}\n"
    return report


def _compare_projections(
    taken: StateSnapshot,
    assignments: list[client.Record],
    live_remote: dict[str, Any],
    live_proxy: dict[str, Any],
    report: ReplayReport,
) -> list[str]:
    records: dict[str, AssemblageRecord] = {}
    for part in taken.assemble.partitions.values():
        records.update(part.state(assembler.state_mappings()).mappings["assemblages"].committed)
    assemble_from = taken.assemble.positions()
    for record in assignments:
        if record.value is None or record.offset < assemble_from.get(record.partition, 0):
            continue
        report.assignments += 1
        assignment = Assignment.model_validate_json(record.value)
        records[assignment.cluster], _ = assemble(records.get(assignment.cluster), assignment)
    differences: list[str] = []
    for kind, live in zip(ASSEMBLAGE_KINDS, (live_remote, live_proxy), strict=True):
        replayed = {}
        for cluster, assemblage in records.items():
            rendered = rendered_assemblage(assemblage, kind)
            if rendered is not None:
                replayed[cluster] = rendered.model_dump(mode="json", by_alias=True)
        report.snapshots += len(replayed)
        for cluster in sorted(set(replayed) | set(live)):
            ours, theirs = replayed.get(cluster), live.get(cluster)
            if ours is None:
                differences.append(f"{kind} {cluster}: on the topic but not in the replay")
            elif ours != theirs:
                differences.append(
                    f"{kind} {cluster}: replayed version {ours['version']} != live {theirs and theirs['version']}"
                )
    return differences


def replay_from_snapshot(ctx: Any, taken: StateSnapshot) -> ReplayReport:
    """Read the tails the snapshot does not cover and compare (`compare_tail`). A journal
    that starts past the snapshot's positions (the snapshot older than the retention kept)
    is refused: its tail is gone."""
    topics = ctx.topics
    if taken.decide.input_topic != topics.journal:
        fail(f"the snapshot is of {taken.decide.input_topic}, not of {topics.journal} (--topic-prefix?)")
    decide_from = taken.decide.positions()
    starts = client.run(log_start_offsets(ctx.bootstrap, topics.journal))
    for partition, start in sorted(starts.items()):
        if start > decide_from.get(partition, 0):
            fail(
                f"the journal {topics.journal} partition {partition} starts at offset {start}, past this snapshot's "
                f"position {decide_from.get(partition, 0)}: the records between were deleted. "
                "Replay from a newer snapshot (`rollout snapshot list`)"
            )
    assemble_from = taken.assemble.positions()
    assignments_from = {
        p: min(taken.assignments_from.get(p, 0), assemble_from.get(p, 0))
        for p in set(taken.assignments_from) | set(assemble_from)
    }
    read = _read_from(ctx)
    journal_ends = client.run(client.end_offsets(ctx.bootstrap, topics.journal))
    journal = read(topics.journal, decide_from)
    return compare_tail(
        taken,
        journal=journal,
        assignments=read(topics.assignments, assignments_from),
        live_remote=ctx.latest(topics.remote),
        live_proxy=ctx.latest(topics.proxy),
        live_status=ctx.latest(topics.module_status),
        decisions=read(topics.decisions, taken.decisions_from),
        live_state=read(taken.decide.state_topic, {}),
        journal_ends=journal_ends,
    )


def _read_from(ctx: Any) -> Any:
    def read(topic: str, start: dict[int, int]) -> list[client.Record]:
        try:
            records: list[client.Record] = client.run(client.read_from(ctx.bootstrap, topic, start))
        except Exception as error:
            fail(f"cannot read {topic} at {ctx.bootstrap}: {error}")
        return records

    return read
