"""One cluster's Helm release: its values layers, merged, in the sync it is assigned (pure).

    release_layers(helm, revision, stage, bindings, observed) -> ValuesLayers
    release_sync(sync, stage, bindings, observed)            -> (Sync for the assemblage, MergedValues)

The engine (`TargetBook._assigned_sync`) and `rollout plan` both call `release_sync`, so the
plan shows exactly the values a cluster gets. Where each layer comes from:

* chart   — chart defaults observed for this chart version (`HelmValuesObserved`), else the
            module's `chartDefaults`, else unknown;
* module  — `package.helm.values`;
* stage   — `package.helm.stageValues[<the cluster's stage>]`;
* cluster — `package.helm.clusterValues`, strings expanded with the cluster's bindings; a
            string naming a binding the cluster lacks is left out of the layer;
* live    — the values last observed on the cluster (`HelmValuesObserved`), if any; and at
            a readOnly path none was observed at, the value the cluster's release was first
            sent (`Target.read_only_values`, `first_sent`): the cluster holds it since its
            install, whether or not an applier ever reported it — so a later generation
            that changes it is refused as if it had been observed.

The sync put in the assemblage carries the helm package reduced to what appliers need:
release name, target namespace and the merged `values` — the layers and policies stay in
the module, so a record in an assemblage never grows with the number of stages.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.api.helm import HelmPackage
from rollout.api.manifests import Package, Sync
from rollout.values.bindings import expand, unresolved_references
from rollout.values.layers import MergedValues, Policy, Values, ValuesLayers, merge_values, parse_pointer, value_at

_UNRESOLVED = object()


class ObservedValues(BaseModel):
    """What an applier last saw of one (module, cluster) release (`HelmValuesObserved`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    values: dict[str, Any] | None = None  # the release's live values
    chart_defaults: dict[str, Any] | None = Field(default=None, alias="chartDefaults")
    chart_version: str | None = Field(default=None, alias="chartVersion")  # whose defaults those are


def cluster_layer(cluster_values: Mapping[str, Any], bindings: Mapping[str, str]) -> dict[str, Any]:
    """`clusterValues` with `$(NAME)` expanded; strings with an unbound name are left out."""
    expanded = _expand(dict(cluster_values), bindings)
    return expanded if isinstance(expanded, dict) else {}


def _expand(value: Any, bindings: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _UNRESOLVED if unresolved_references(value, bindings) else expand(value, bindings)
    if isinstance(value, dict):
        items = {key: _expand(item, bindings) for key, item in value.items()}
        return {key: item for key, item in items.items() if item is not _UNRESOLVED}
    if isinstance(value, list):
        items_list = [_expand(item, bindings) for item in value]
        return _UNRESOLVED if any(item is _UNRESOLVED for item in items_list) else items_list
    return value


def release_layers(
    helm: HelmPackage,
    *,
    revision: str,
    stage: str | None,
    bindings: Mapping[str, str],
    observed: ObservedValues | None,
    first_sent: Mapping[str, Any] | None = None,
) -> ValuesLayers:
    chart = helm.chart_defaults
    if observed is not None and observed.chart_defaults is not None and observed.chart_version == revision:
        chart = observed.chart_defaults
    return ValuesLayers(
        chart=chart,
        module=helm.values,
        stage=helm.stage_values.get(stage) if stage is not None else None,
        cluster=cluster_layer(helm.cluster_values, bindings),
        live=_live(observed.values if observed is not None else None, first_sent or {}),
    )


def _live(observed: Values | None, first_sent: Mapping[str, Any]) -> Values | None:
    """The observed live values, with each first-sent readOnly value where none was observed."""
    if not first_sent:
        return observed
    live: Values = copy.deepcopy(observed) if observed is not None else {}
    for pointer, value in sorted(first_sent.items()):
        path = parse_pointer(pointer)
        if value_at(live, path)[0]:
            continue  # observed: what the cluster has now stays what counts
        node = live
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                break  # a scalar was observed above the path: the path is gone on the cluster
        else:
            node[path[-1]] = copy.deepcopy(value)
    return live


def read_only_values(policies: Mapping[str, Policy], merged: MergedValues, before: Mapping[str, Any]) -> dict[str, Any]:
    """`before` and, at each readOnly path it does not hold, the value the release holds
    there once `merged` is sent (where known): the value that path is first sent with."""
    first = dict(before)
    for pointer, policy in sorted(policies.items()):
        if policy == "readOnly" and pointer not in first:
            found, value = value_at(merged.effective, parse_pointer(pointer))
            if found:
                first[pointer] = value
    return first


def release_sync(
    sync: Sync,
    *,
    stage: str | None,
    bindings: Mapping[str, str],
    observed: ObservedValues | None,
    first_sent: Mapping[str, Any] | None = None,
) -> tuple[Sync, MergedValues | None]:
    """The sync one cluster is assigned, with its merged values (None: not a Helm sync).
    `first_sent`: readOnly path → the value the cluster's release was first sent."""
    helm = sync.package.helm
    if helm is None:
        return sync, None
    layers = release_layers(
        helm, revision=sync.revision, stage=stage, bindings=bindings, observed=observed, first_sent=first_sent
    )
    merged = merge_values(layers, helm.policies)
    # the release's options stay; the layers and policies become the merged values
    assigned = helm.model_copy(
        update={
            "chart_defaults": None,
            "values": merged.values,
            "stage_values": {},
            "cluster_values": {},
            "values_policy": [],
        }
    )
    return sync.model_copy(update={"package": Package(helm=assigned)}), merged
