"""Fold sync assignments into per-cluster assemblage snapshots (pure).

The decider emits one `Assignment` per (cluster, module) change. `assemble` folds it into
the cluster's `AssemblageRecord` and says which snapshots to publish:

* a changed RemoteAssemblage/ProxyAssemblage → the full snapshot with `version + 1`;
* one that became empty → a tombstone (None), the version counter is kept so the next
  snapshot still has a higher version;
* an assignment that changes nothing (at-least-once redelivery) → nothing at all.

Snapshots list their syncs sorted by module name, so equal content gives equal bytes.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import Assemblage, AssemblageMetadata, AssemblageSpec, AssignedSync


class AssemblageRecord(BaseModel):
    cluster: str
    namespace: str
    syncs: dict[str, dict[str, AssignedSync]] = Field(default_factory=dict)  # kind -> module -> sync
    versions: dict[str, int] = Field(default_factory=dict)  # kind -> last published version


Publication = tuple[str, str, Assemblage | None]  # (kind, cluster, snapshot or tombstone)


def assemble(record: AssemblageRecord | None, assignment: Assignment) -> tuple[AssemblageRecord, list[Publication]]:
    updated, changed = assemble_record(record, assignment)
    return updated, [(kind, assignment.cluster, snapshot(updated, kind)) for kind in changed]


def assemble_record(record: AssemblageRecord | None, assignment: Assignment) -> tuple[AssemblageRecord, list[str]]:
    """`assemble` without building the snapshots: the updated record and the kinds whose
    snapshot changed (the assembler encodes a changed snapshot itself, once a batch, from the
    record: streams/assemblage_encoding.py — building each as a model cost as much again)."""
    kind = assignment.assemblage
    current = record or AssemblageRecord(cluster=assignment.cluster, namespace=assignment.cluster_namespace)
    syncs = dict(current.syncs.get(kind, {}))
    before = syncs.get(assignment.module)
    if assignment.sync is None:
        syncs.pop(assignment.module, None)
    else:
        syncs[assignment.module] = assignment.sync
    namespace_changed = current.namespace != assignment.cluster_namespace
    if before == assignment.sync and not namespace_changed:
        return current, []
    version = current.versions.get(kind, 0) + 1
    updated = current.model_copy(
        update={
            "namespace": assignment.cluster_namespace,
            "syncs": {**current.syncs, kind: syncs},
            "versions": {**current.versions, kind: version},
        }
    )
    return updated, [kind]


def snapshot(record: AssemblageRecord, kind: str) -> Assemblage | None:
    syncs = record.syncs.get(kind, {})
    if not syncs:
        return None
    return Assemblage(
        kind=kind,  # type: ignore[arg-type]
        metadata=AssemblageMetadata(name=record.cluster, namespace=record.namespace),
        version=record.versions.get(kind, 0),
        spec=AssemblageSpec(syncs=[syncs[m] for m in sorted(syncs)]),
    )
