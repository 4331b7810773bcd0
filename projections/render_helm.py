"""The template variables of a Helm sync: its chart source and its release (pure).

`projections/render.py` renders a Helm sync as a source object and a `HelmRelease`:

    source helm: {url: https://...}  → HelmRepository            + HelmRelease spec.chart.spec
    source helm: {url: oci://...}    → HelmRepository type: oci  + HelmRelease spec.chart.spec
    source oci + package helm        → OCIRepository (the chart's layer selected)
                                                                 + HelmRelease spec.chartRef

Variables added for these templates (see render.py for the others):

    source.type              "oci" for an oci:// Helm repository, else None (HelmRepository)
    source.layer_media_type  the Helm chart layer for an OCIRepository holding a chart, else None
    source.secret_ref, source.cert_secret_ref, source.insecure, source.provider,
    source.pass_credentials  how Flux reaches the repository (render.py has the list)
    helm                     {chart, version, release_name, target_namespace,
                             storage_namespace, create_namespace, service_account_name,
                             timeout, max_history, merged_values} or None (not `values`:
                             Jinja would find the dict method); merged_values are the
                             cluster's merged values (rollout/values/layers.py). For a remote
                             release target_namespace and storage_namespace are never None
                             (see `helm_release_context`).
"""

from __future__ import annotations

from typing import Any

from rollout.wire.assemblages import AssignedSync

# the media type of a Helm chart's layer in an OCI artifact (what Flux's chartRef expects)
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


# how Flux reaches and trusts a source: every `source` has these keys (None/False: not set)
NO_SOURCE_ACCESS: dict[str, Any] = {
    "secret_ref": None,
    "cert_secret_ref": None,
    "insecure": False,
    "provider": None,
    "verify": None,
    "pass_credentials": False,
}


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
        **NO_SOURCE_ACCESS,
        "secret_ref": chart.secret_ref.name if chart.secret_ref else None,
        "cert_secret_ref": chart.cert_secret_ref.name if chart.cert_secret_ref else None,
        "insecure": chart.insecure,
        "provider": chart.provider,
        "pass_credentials": chart.pass_credentials,
    }


def helm_release_context(sync: AssignedSync, *, remote: bool, namespace: str) -> dict[str, Any] | None:
    """`helm` for a Helm sync, None for a kustomize one.

    A remote HelmRelease (in `namespace` of the management cluster, reaching the workload
    cluster through `kubeConfig`) installs *into the workload cluster*, where Flux's defaults
    — target and storage namespace = the HelmRelease's namespace — name a namespace that
    need not exist there. So a remote release always gets a target namespace (the user's,
    else the same name as `namespace`), created if missing (`install.createNamespace`), and
    keeps its Helm storage there unless the user names a storage namespace. Keeping the
    HelmRelease's namespace name as the default leaves releases that already worked where
    they are (changing either namespace makes Flux uninstall and reinstall).
    """
    helm = sync.sync.package.helm
    if helm is None:
        return None
    chart = sync.sync.source.helm
    target = helm.target_namespace or (namespace if remote else None)
    storage = helm.storage_namespace or (target if remote else None)
    return {
        "chart": chart.chart if chart is not None else None,
        "version": chart.version if chart is not None else None,
        "release_name": helm.release_name or sync.module,
        "target_namespace": target,
        "storage_namespace": storage,
        "create_namespace": target is not None,
        "service_account_name": helm.service_account_name,
        "timeout": helm.timeout,
        "max_history": helm.max_history,
        "merged_values": dict(helm.values),
    }


def source_reference(package: dict[str, Any]) -> dict[str, Any]:
    """Where a rendered Kustomization or HelmRelease points for its source."""
    spec = package.get("spec") or {}
    if package.get("kind") == "HelmRelease":
        return dict(spec.get("chartRef") or ((spec.get("chart") or {}).get("spec") or {}).get("sourceRef") or {})
    return dict(spec.get("sourceRef") or {})
