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
from typing import Any

import orjson

from infra import client
from rollout.assembly.snapshots import AssemblageRecord, assemble
from rollout.engine.core import Assignment, RolloutEngine, new_engine
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import DocumentError
from rollout.wire.events import parse_event
from rollout.wire.status import ModuleStatus
from streams.chain import HEAD_KEY, ChainHead, DecisionChain, as_recorded, decision_body


@dataclass
class ReplayReport:
    journal_events: int = 0
    assignments: int = 0
    snapshots: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        head = (
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


def refold_journal(records: list[client.Record]) -> Refolded:
    engines: dict[int, RolloutEngine] = {}
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
    refolded.module_status = {k: v for k, v in refolded.module_status.items() if v is not None}
    return refolded


def compare_decisions(replayed: dict[int, list[dict[str, Any]]], live: list[client.Record]) -> list[str]:
    """Differences between the refolded decisions, linked per chain from the chain's oldest
    record on the topic, and the live decision records (at most 3 per chain). A live record
    is read as the decision document (rollout/wire/decisions.py) and compared as stored, key
    by key; one written before structured reasons (no `because`) with the replayed record
    in the shape its release wrote (`streams.chain.as_recorded`)."""
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
        differences += _chain_differences(chain, replayed.get(chain, []), by_chain.get(chain, []))[:3]
    return differences


def _chain_differences(chain: int, bodies: list[dict[str, Any]], live: list[dict[str, Any]]) -> list[str]:
    position = {body["id"]: index for index, body in enumerate(bodies)}
    recorded = {document["id"]: document for document in live}
    expected: dict[str, dict[str, Any]] = {}
    linked = [d for d in live if "hash" in d]
    if linked:
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
    missing = [record_id for record_id in expected if record_id not in {d["id"] for d in linked}]
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
    topics = ctx.topics
    return compare(
        journal=ctx.records(topics.journal),
        assignments=ctx.records(topics.assignments),
        live_remote=ctx.latest(topics.remote),
        live_proxy=ctx.latest(topics.proxy),
        live_status=ctx.latest(topics.module_status),
        decisions=ctx.records(topics.decisions),
    )
