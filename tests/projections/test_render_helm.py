"""Rendering Helm syncs: HelmRepository / OCIRepository + HelmRelease, validated against the
real Flux CRDs (projections/crds/, copied from ../shared/crds/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from projections.crds import SchemaError
from projections.render import FluxRenderer, TemplateError
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync
from tests.projections.test_render import HOSTILE

VALUES = {"replicaCount": 2, "ui": {"color": "red"}, "resources": {"limits": {"memory": "1Gi"}}}


def helm_sync(
    *, url: str = "https://stefanprodan.github.io/podinfo", values: dict[str, Any] | None = None, **helm: Any
) -> AssignedSync:
    sync = Sync.model_validate(
        {
            "source": {"helm": {"url": url, "chart": "podinfo", "version": "6.7.0"}},
            "package": {"helm": {"values": VALUES if values is None else values, **helm}},
        }
    )
    return AssignedSync(module="podinfo", module_namespace="fleet", revision="6.7.0", generation=3, sync=sync)


def oci_chart_sync() -> AssignedSync:
    sync = Sync.model_validate(
        {
            "source": {"oci": {"url": "oci://ghcr.io/stefanprodan/charts/podinfo", "version": {"tag": "6.7.0"}}},
            "package": {"helm": {"values": VALUES}},
        }
    )
    return AssignedSync(module="podinfo", module_namespace="fleet", revision="6.7.0", sync=sync)


def render(sync: AssignedSync, kind: str = "ProxyAssemblage", renderer: FluxRenderer | None = None) -> list[dict]:
    assemblage = Assemblage.model_validate(
        {"kind": kind, "metadata": {"name": "prod-eu-1", "namespace": "fleet"}, "version": 1, "spec": {"syncs": [sync]}}
    )
    return (renderer or FluxRenderer()).render(assemblage, sync)


def test_helm_repository_chart_renders_helmrepository_and_helmrelease_with_the_merged_values() -> None:
    source, release = render(helm_sync(releaseName="web", targetNamespace="podinfo"))
    assert (source["kind"], source["apiVersion"]) == ("HelmRepository", "source.toolkit.fluxcd.io/v1")
    assert source["spec"] == {"interval": "10m", "url": "https://stefanprodan.github.io/podinfo"}
    assert (release["kind"], release["apiVersion"]) == ("HelmRelease", "helm.toolkit.fluxcd.io/v2")
    assert release["spec"]["chart"]["spec"] == {
        "chart": "podinfo",
        "version": "6.7.0",
        "sourceRef": {"kind": "HelmRepository", "name": "podinfo-prod-eu-1"},
    }
    assert release["spec"]["values"] == VALUES
    assert (release["spec"]["releaseName"], release["spec"]["targetNamespace"]) == ("web", "podinfo")
    assert release["spec"]["install"] == {"createNamespace": True}
    assert release["metadata"]["annotations"] == {"rollout.dev/revision": "6.7.0", "rollout.dev/generation": "3"}


def test_release_name_defaults_to_the_module() -> None:
    _, release = render(helm_sync())
    assert release["spec"]["releaseName"] == "podinfo"
    assert "targetNamespace" not in release["spec"]


def test_oci_helm_repository_has_type_oci() -> None:
    source, release = render(helm_sync(url="oci://ghcr.io/stefanprodan/charts"))
    assert source["spec"]["type"] == "oci"
    assert release["spec"]["chart"]["spec"]["sourceRef"]["kind"] == "HelmRepository"


def test_oci_artifact_chart_renders_ocirepository_with_the_chart_layer_and_chart_ref() -> None:
    source, release = render(oci_chart_sync())
    assert source["kind"] == "OCIRepository"
    assert source["spec"]["layerSelector"] == {
        "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
        "operation": "copy",
    }
    assert release["spec"]["chartRef"] == {"kind": "OCIRepository", "name": "podinfo-prod-eu-1"}
    assert "chart" not in release["spec"]


def test_remote_helm_release_reaches_the_cluster_through_its_kubeconfig() -> None:
    source, release = render(helm_sync(), kind="RemoteAssemblage")
    assert source["metadata"]["namespace"] == release["metadata"]["namespace"] == "fleet"
    assert release["spec"]["kubeConfig"] == {"secretRef": {"name": "prod-eu-1-kubeconfig", "key": "value"}}


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_data(value: str) -> None:
    values = {"text": value, value or "empty": [value, {"nested": value}]}
    _, release = render(helm_sync(values=values))
    assert release["spec"]["values"] == values


def test_a_release_the_crd_refuses_is_named(tmp_path: Path) -> None:
    (tmp_path / "helmrelease.yaml.j2").write_text(
        '{% extends "builtin/helmrelease.yaml.j2" %}{% block extra_spec %}  maxHistory: "many"\n{% endblock %}'
    )
    with pytest.raises(SchemaError, match="maxHistory"):
        render(helm_sync(), renderer=FluxRenderer(tmp_path))


def test_a_release_pointing_elsewhere_is_refused(tmp_path: Path) -> None:
    template = (Path(__file__).parents[2] / "projections/templates/helmrelease.yaml.j2").read_text()
    (tmp_path / "helmrelease.yaml.j2").write_text(template.replace("name: {{ source.name }}", 'name: "other"'))
    with pytest.raises(TemplateError, match="source reference"):
        render(helm_sync(), renderer=FluxRenderer(tmp_path))
