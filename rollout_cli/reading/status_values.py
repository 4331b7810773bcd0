"""`rollout status MODULE`'s Helm values: per cluster, what it was sent and what decided it.

    intents topic            the module's last ModuleApplied (its values layers, policies)
    cluster observations     each cluster's labels (stage, bindings)
    proxy/remote assemblages the values each cluster was sent (the engine's output)
    decisions                `values-refused`: what a readOnly path refused (its `path`), and why
        ──► rollout.planning.sent_values.explain_sent ──► a row per cluster: shown as a table
            (views/values.py, `values_renderable`), or `values` in -o json

A cluster on an earlier generation than the module's target has its values as sent,
without layers (those of its spec are gone); refusals are kept for every cluster, latest
per cluster and path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def _refusals(decisions: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The latest `values-refused` reason per cluster and path (the decision's `path`; a
    record written before decisions carried it counts as a path of its own)."""
    from rollout.wire.decision_actions import DecisionAction

    latest: dict[tuple[str, str], str] = {}
    for decision in decisions:
        if decision.get("action") == DecisionAction.VALUES_REFUSED and decision.get("cluster"):
            path = decision.get("path") or decision["reason"]
            latest[(decision["cluster"], path)] = decision["reason"]
    refused: dict[str, list[str]] = {}
    for (cluster, _), reason in sorted(latest.items()):
        refused.setdefault(cluster, []).append(reason)
    return refused


def module_values(
    ctx: Any, module: str, status: ModuleStatus, decisions: list[dict[str, Any]]
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
        row["refused"] = refused.get(cluster, [])
        rows.append(row)
    return rows
