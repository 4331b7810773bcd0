"""The project's Flux infrastructure works with the real controllers (``infra.localflux``).

Each test writes Flux objects into real API servers and waits for the real source-,
kustomize- and helm-controller to reconcile them from a loopback source: a Git server with
basic auth, an OCI registry on plain HTTP, a Helm repository — and a Kustomization in the
management cluster that applies into a workload cluster through its kubeconfig secret.
Nothing is mocked and no test writes a status: Ready comes from the controllers.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from infra.localflux import GitServer, HelmRepository, OCIRegistry, build_chart
from infra.localflux.sources import HELM_CHART
from tests.flux.fleet import FluxFleet, basic_auth_secret, config_map, create, wait_ready
from tests.kube.conftest import eventually

pytestmark = pytest.mark.integration

NS = "fleet"


def configmap(name: str, **data: str) -> str:
    lines = "".join(f"  {key}: {value!r}\n" for key, value in data.items())
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{lines}"


def kustomization(name: str, source: dict[str, str], target: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"interval": "1m", "prune": True, "path": "./deploy", "sourceRef": source, "targetNamespace": target}
        | spec,
    }


def git_repository(name: str, url: str, tag: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"interval": "1m", "url": url, "ref": {"tag": tag}} | spec,
    }


async def test_a_kustomization_from_the_private_git_server_applies_its_configmap(
    flux_fleet: FluxFleet, private_git_server: GitServer
) -> None:
    management = flux_fleet.management
    sha = private_git_server.commit("git-app", {"deploy/cm.yaml": configmap("from-git", colour="blue")}, tag="v1")
    await management.create_namespace("apps-git")
    assert private_git_server.credentials is not None
    await create(management, basic_auth_secret("git-auth", NS, private_git_server.credentials))
    url = private_git_server.url("git-app")
    await create(management, git_repository("git-app", url, "v1", secretRef={"name": "git-auth"}))
    await create(management, kustomization("git-app", {"kind": "GitRepository", "name": "git-app"}, "apps-git"))

    source = await wait_ready(management, "GitRepository", NS, "git-app", fleet=flux_fleet)
    applied = await wait_ready(management, "Kustomization", NS, "git-app", fleet=flux_fleet)

    assert source["status"]["artifact"]["revision"] == f"v1@sha1:{sha}"
    assert applied["status"]["lastAppliedRevision"] == f"v1@sha1:{sha}"
    assert await config_map(management, "apps-git", "from-git") == {"colour": "blue"}


async def test_a_kustomization_from_an_oci_artifact_on_plain_http_applies_its_configmap(
    flux_fleet: FluxFleet, oci_registry: OCIRegistry
) -> None:
    management = flux_fleet.management
    digest = oci_registry.push_artifact("apps/oci-app", "v1", {"deploy/cm.yaml": configmap("from-oci", size="L")})
    await management.create_namespace("apps-oci")
    repository = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": "oci-app", "namespace": NS},
        "spec": {"interval": "1m", "url": f"{oci_registry.url}/apps/oci-app", "ref": {"tag": "v1"}, "insecure": True},
    }
    await create(management, repository)
    await create(management, kustomization("oci-app", {"kind": "OCIRepository", "name": "oci-app"}, "apps-oci"))

    source = await wait_ready(management, "OCIRepository", NS, "oci-app", fleet=flux_fleet)
    await wait_ready(management, "Kustomization", NS, "oci-app", fleet=flux_fleet)

    assert source["status"]["artifact"]["revision"] == f"v1@{digest}"
    assert await config_map(management, "apps-oci", "from-oci") == {"size": "L"}


async def test_a_helm_release_from_the_helm_repository_installs_the_chart(
    flux_fleet: FluxFleet, helm_repository: HelmRepository
) -> None:
    management = flux_fleet.management
    template = configmap("{{ .Release.Name }}-greeting", greeting="{{ .Values.greeting }}")
    helm_repository.add_chart(build_chart("hello", "0.1.0", {"configmap.yaml": template}, {"greeting": "hi"}))
    await management.create_namespace("apps-helm")
    await create(
        management,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "charts", "namespace": NS},
            "spec": {"interval": "1m", "url": helm_repository.url},
        },
    )
    chart = {"spec": {"chart": "hello", "version": "0.1.0", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}
    release = {"interval": "1m", "releaseName": "hello", "targetNamespace": "apps-helm", "chart": chart}
    await create(
        management,
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "hello", "namespace": NS},
            "spec": release | {"values": {"greeting": "hello from helm"}},
        },
    )

    await wait_ready(management, "HelmRelease", NS, "hello", fleet=flux_fleet)

    assert await config_map(management, "apps-helm", "hello-greeting") == {"greeting": "hello from helm"}


async def test_a_remote_kustomization_applies_into_the_workload_cluster_through_its_kubeconfig_secret(
    flux_fleet: FluxFleet, git_server: GitServer
) -> None:
    management, workload = flux_fleet.management, flux_fleet.workloads["workload-1"]
    git_server.commit("remote-app", {"deploy/cm.yaml": configmap("remote", where="workload")}, tag="v1")
    await workload.create_namespace("apps-remote")
    await create(management, git_repository("remote-app", git_server.url("remote-app"), "v1"))
    remote = kustomization(
        "remote-app",
        {"kind": "GitRepository", "name": "remote-app"},
        "apps-remote",
        kubeConfig={"secretRef": {"name": "workload-1-kubeconfig"}},
    )
    await create(management, remote)

    await wait_ready(management, "Kustomization", NS, "remote-app", fleet=flux_fleet)

    assert await config_map(workload, "apps-remote", "remote") == {"where": "workload"}
    assert await config_map(management, "apps-remote", "remote") is None


async def test_a_moved_tag_is_applied_and_the_old_object_pruned(flux_fleet: FluxFleet, git_server: GitServer) -> None:
    management = flux_fleet.management
    git_server.commit("moving", {"deploy/cm.yaml": configmap("first", n="1")}, tag="v1")
    await management.create_namespace("apps-moving")
    await create(management, git_repository("moving", git_server.url("moving"), "v1", interval="1s"))
    await create(management, kustomization("moving", {"kind": "GitRepository", "name": "moving"}, "apps-moving"))
    await wait_ready(management, "Kustomization", NS, "moving", fleet=flux_fleet)
    assert await config_map(management, "apps-moving", "first") == {"n": "1"}

    second = git_server.commit("moving", {"deploy/cm.yaml": configmap("second", n="2")})
    git_server.tag("moving", "v1", second)

    await eventually(lambda: config_map(management, "apps-moving", "second"), timeout=30)
    await eventually(lambda: _gone(management, "apps-moving", "first"), timeout=30)


async def _gone(cluster: Any, namespace: str, name: str) -> bool:
    return await config_map(cluster, namespace, name) is None


async def test_an_oci_repository_over_tls_with_a_private_ca_is_ready(flux_fleet: FluxFleet, tmp_path: Path) -> None:
    management = flux_fleet.management
    registry = OCIRegistry(tmp_path / "oci-tls", tls=True).start()
    try:
        digest = registry.push_artifact("apps/tls", "v1", {"cm.yaml": configmap("over-tls")})
        assert registry.ca is not None
        ca = base64.b64encode(registry.ca.read_bytes()).decode()
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-ca", "namespace": NS}}
        await create(management, secret | {"data": {"ca.crt": ca}})
        spec = {"interval": "1m", "url": f"{registry.url}/apps/tls", "ref": {"tag": "v1"}}
        await create(management, oci_repository("tls", spec | {"certSecretRef": {"name": "registry-ca"}}))

        source = await wait_ready(management, "OCIRepository", NS, "tls", fleet=flux_fleet)
    finally:
        registry.stop()
    assert source["status"]["artifact"]["revision"] == f"v1@{digest}"


async def test_a_helm_release_installs_a_chart_pushed_to_the_oci_registry_through_a_chart_ref(
    flux_fleet: FluxFleet, oci_registry: OCIRegistry
) -> None:
    management = flux_fleet.management
    template = configmap("{{ .Release.Name }}-oci", source="{{ .Values.source }}")
    oci_registry.push_chart("charts/oci-hello", "0.2.0", build_chart("oci-hello", "0.2.0", {"cm.yaml": template}))
    await management.create_namespace("apps-oci-chart")
    layer = {"mediaType": HELM_CHART, "operation": "copy"}
    spec = {"interval": "1m", "url": f"{oci_registry.url}/charts/oci-hello", "ref": {"tag": "0.2.0"}, "insecure": True}
    await create(management, oci_repository("oci-hello", spec | {"layerSelector": layer}))
    release = {
        "interval": "1m",
        "releaseName": "oci-hello",
        "targetNamespace": "apps-oci-chart",
        "chartRef": {"kind": "OCIRepository", "name": "oci-hello"},
        "values": {"source": "oci"},
    }
    await create(
        management,
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "oci-hello", "namespace": NS},
            "spec": release,
        },
    )

    await wait_ready(management, "HelmRelease", NS, "oci-hello", fleet=flux_fleet)

    assert await config_map(management, "apps-oci-chart", "oci-hello-oci") == {"source": "oci"}


def oci_repository(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
