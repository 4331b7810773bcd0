"""`rollout status MODULE`'s Helm values: per cluster, what it was sent and what decided it.

    intents topic            the module's last ModuleApplied (its values layers, policies)
    cluster observations     each cluster's labels (stage, bindings)
    proxy/remote assemblages the values each cluster was sent (the engine's output)
    decisions                `values-refused`: what a readOnly path refused (its reason's `path`), and why
        ──► rollout.planning.sent_values.explain_sent ──► a row per cluster: shown as a table
            (views/values.py, `values_renderable`), or `values` in -o json

A cluster on an earlier generation than the module's target has its values as sent,
without layers (those of its spec are gone); refusals are kept for every cluster, latest
per cluster and path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout.wire.decisions import DecisionDocument
    from rollout.wire.status import ModuleStatus


def _module_manifest(ctx: Any, module: str) -> Any | None:
    """The module as last applied (None: unknown, or it syncs no Helm chart)."""
    from rollout.wire.events import EventRejected, ModuleApplied, parse_event

    applied = None
    for record in ctx.records(ctx.topics.intents):
        if record.key != module or record.value is None:
            continue
        try:
            event = parse_event(record.value)
        except EventRejected:
            continue
        if isinstance(event, ModuleApplied):
            applied = event.module
    return applied if applied is not None and applied.spec.sync.package.helm is not None else None


def _sent(ctx: Any, kind: str, module: str) -> dict[str, tuple[int | None, dict[str, Any]]]:
    """(generation, values) each cluster was sent for `module`, from its assemblage."""
    from rollout.wire.assemblages import ASSEMBLAGE_FOR

    topic = ctx.topics.remote if ASSEMBLAGE_FOR[kind] == "RemoteAssemblage" else ctx.topics.proxy
    sent = {}
    for cluster, snapshot in ctx.latest(topic).items():
        for sync in ((snapshot or {}).get("spec") or {}).get("syncs") or []:
            helm = ((sync.get("sync") or {}).get("package") or {}).get("helm")
            if sync.get("module") == module and helm is not None:
                sent[cluster] = (sync.get("generation"), helm.get("values") or {})
    return sent


def _refusals(decisions: list[DecisionDocument]) -> dict[str, list[DecisionDocument]]:
    """The latest `values-refused` decision per cluster and path, by cluster and path (its
    `refused_path`; a record written before decisions named the path counts as a path of its own)."""
    from rollout.wire.decision_actions import DecisionAction

    latest: dict[tuple[str, str], DecisionDocument] = {}
    for decision in decisions:
        if decision.action == DecisionAction.VALUES_REFUSED and decision.cluster:
            latest[(decision.cluster, decision.refused_path or decision.reason)] = decision
    refused: dict[str, list[DecisionDocument]] = {}
    for (cluster, _), decision in sorted(latest.items()):
        refused.setdefault(cluster, []).append(decision)
    return refused


def module_values(
    ctx: Any, module: str, status: ModuleStatus, decisions: list[DecisionDocument]
) -> list[dict[str, Any]] | None:
    """Per cluster: stage, generation, values sent, decisions by path, refusals (None: no chart)."""
    from rollout.api.manifests import ClusterManifest
    from rollout.engine.state import ModuleRecord
    from rollout.planning.sent_values import explain_sent
    from rollout_cli.reading.known_clusters import clusters_from_records

    manifest = _module_manifest(ctx, module)
    if manifest is None:
        return None
    record = ModuleRecord(name=module, kind=manifest.kind, namespace=manifest.metadata.namespace, spec=manifest.spec)
    clusters = clusters_from_records(ctx.records(ctx.topics.clusters))
    refused = _refusals(decisions)
    rows = []
    for cluster, (generation, values) in sorted(_sent(ctx, manifest.kind, module).items()):
        row: dict[str, Any] = {"cluster": cluster, "generation": generation, "values": values, "decisions": None}
        observed = clusters.get(cluster)
        if observed is not None and generation == status.generation:
            explained = explain_sent(record, ClusterManifest.model_validate(observed.manifest), values)
            if explained is not None:
                row["stage"] = explained.stage
                row["decisions"] = [d.model_dump(exclude={"known"}) for d in explained.decisions]
        row["refused"] = [decision.reason for decision in refused.get(cluster, [])]
        rows.append(row)
    return rows
