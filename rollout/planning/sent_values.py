"""The Helm values a cluster was sent, explained path by path (pure).

    explain_sent(record, cluster, sent) -> ClusterValues (None: the module syncs no chart)

`rollout status` and the dashboard read what a cluster was sent from its assemblage — the
engine's own output, live layer included — and want to say which layer and policy decided
each path. The engine keeps the live observations to itself, so the layers are merged here
without them (`rollout.planning.plan.cluster_values`, what `rollout plan` shows); a path where the
value sent differs from that merge was decided by the cluster's live value (keepCurrent and
readOnly keep it, max/min found it larger/smaller), and so was a policy path only the
cluster has a value for. Everything else is as the declared layers decided.

Valid for a cluster assigned the module's current spec: for one still on an earlier
generation the layers of that spec are gone, and the caller shows the values as sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout.api.manifests import ClusterManifest
from rollout.engine.state import ModuleRecord
from rollout.planning.plan import ClusterValues, cluster_values
from rollout.values.layers import PathDecision, parse_pointer, value_at


def explain_sent(record: ModuleRecord, cluster: ClusterManifest, sent: Mapping[str, Any]) -> ClusterValues | None:
    """`cluster`'s values as sent (`sent`: the HelmRelease's spec.values), with the layer and
    policy of each path; see the module docstring."""
    declared = cluster_values(record, cluster)
    helm = record.spec.sync.package.helm
    if declared is None or helm is None:
        return None
    decisions: list[PathDecision] = []
    for decision in declared.decisions:
        found, value = value_at(sent, parse_pointer(decision.path))
        if decision.emitted and found and value != decision.value:
            decision = decision.model_copy(update={"value": value, "layer": "live"})
        decisions.append(decision)
    decided = {decision.path for decision in decisions}
    for pointer, policy in sorted(helm.policies.items()):
        found, value = value_at(sent, parse_pointer(pointer))
        if pointer not in decided and found:  # a value only the cluster has, kept by its policy
            decisions.append(PathDecision(path=pointer, value=value, layer="live", policy=policy, emitted=True))
    return declared.model_copy(update={"values": dict(sent), "decisions": decisions, "refusals": []})
