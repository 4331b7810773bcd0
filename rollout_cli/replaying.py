"""`rollout replay`: refold the logs through the pure core and compare with the topics.

Two folds, each over a log that fixes its own order:

1. the journal, partition by partition, through a fresh `RolloutEngine` per partition
   (state in plain dicts) → the assignments, decisions and module status it emits;
2. the assignments topic, partition by partition, through `rollout.assembly`
   → the RemoteAssemblage/ProxyAssemblage snapshots.

Fold 1 is compared with what the worker wrote to the assignments topic from each journal
partition (the assignments topic interleaves several journal partitions, so the
comparison is per source partition) and with the module-status topic; fold 2 with the
latest snapshot per key on the projection topics. Equal means the live projections are
exactly what the log implies.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from infra import client
from rollout.assembly import AssemblageRecord, assemble
from rollout.engine import Assignment, RolloutEngine, new_engine
from rollout.events import parse_event


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


def refold_journal(records: list[client.Record]) -> tuple[dict[int, list[dict[str, Any]]], dict[str, Any]]:
    """Assignments emitted per journal partition, and the final module status per module."""
    engines: dict[int, RolloutEngine] = {}
    emitted: dict[int, list[dict[str, Any]]] = defaultdict(list)
    module_status: dict[str, Any] = {}
    for record in records:
        engine = engines.get(record.partition)
        if engine is None:
            engine = new_engine(record.partition)
            engines[record.partition] = engine
        outcome = engine.handle(parse_event(record.value))
        for assignment in outcome.assignments:
            emitted[record.partition].append(json.loads(assignment.model_dump_json(by_alias=True)))
        module_status.update(outcome.module_status)
    return emitted, {k: v for k, v in module_status.items() if v is not None}


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


def _strip_time(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != "observedAt"}


def compare(
    *,
    journal: list[client.Record],
    assignments: list[client.Record],
    live_remote: dict[str, Any],
    live_proxy: dict[str, Any],
    live_status: dict[str, Any],
) -> ReplayReport:
    report = ReplayReport(journal_events=len(journal), assignments=len(assignments))
    emitted, module_status = refold_journal(journal)
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
        elif _strip_time(replayed) != _strip_time(live):
            fields = sorted(k for k in replayed if k != "observedAt" and replayed.get(k) != live.get(k))
            detail = "; ".join(f"{k}: replayed {replayed.get(k)!r}, live {live.get(k)!r}" for k in fields)
            report.differences.append(f"module status {module} differs: {detail}")
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
    )
