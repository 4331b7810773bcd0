"""The template variables of a Helm sync: its chart source and its release (pure).

`projections/render.py` renders a Helm sync as a source object and a `HelmRelease`:

    source helm: {url: https://...}  → HelmRepository            + HelmRelease spec.chart.spec
    source helm: {url: oci://...}    → HelmRepository type: oci  + HelmRelease spec.chart.spec
    source oci + package helm        → OCIRepository (the chart's layer selected)
                                                                 + HelmRelease spec.chartRef

Variables added for these templates (see render.py for the others):

    source.type              "oci" for an oci:// Helm repository, else None (HelmRepository)
    source.layer_media_type  the Helm chart layer for an OCIRepository holding a chart, else None
    helm                     {chart, version, release_name, target_namespace, merged_values}
                             or None (not `values`: Jinja would find the dict method);
                             the cluster's merged values (rollout/values.py)
"""

from __future__ import annotations

from typing import Any

from rollout.assemblages import AssignedSync

# the media type of a Helm chart's layer in an OCI artifact (what Flux's chartRef expects)
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


def helm_repository_context(sync: AssignedSync) -> dict[str, Any]:
    """`source` for a chart in a Helm repository."""
    chart = sync.sync.source.helm
    assert chart is not None  # the caller checked the source kind
    return {
        "kind": "HelmRepository",
        "url": chart.url,
        "ref": {},
        "type": "oci" if chart.url.startswith("oci://") else None,
        "layer_media_type": None,
    }


def helm_release_context(sync: AssignedSync) -> dict[str, Any] | None:
    """`helm` for a Helm sync, None for a kustomize one."""
    helm = sync.sync.package.helm
    if helm is None:
        return None
    chart = sync.sync.source.helm
    return {
        "chart": chart.chart if chart is not None else None,
        "version": chart.version if chart is not None else None,
        "release_name": helm.release_name or sync.module,
        "target_namespace": helm.target_namespace,
        "merged_values": dict(helm.values),
    }


def source_reference(package: dict[str, Any]) -> dict[str, Any]:
    """Where a rendered Kustomization or HelmRelease points for its source."""
    spec = package.get("spec") or {}
    if package.get("kind") == "HelmRelease":
        return dict(spec.get("chartRef") or ((spec.get("chart") or {}).get("spec") or {}).get("sourceRef") or {})
    return dict(spec.get("sourceRef") or {})
