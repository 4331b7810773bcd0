"""A fleet of real API servers with real Flux controllers, and helpers to drive Flux objects.

:class:`FluxFleet` is what the ``flux_fleet`` fixture returns (see ``conftest.py``): a
management cluster and workload clusters, each a kube-apiserver of the session's
``kube_pool`` with its own running set of Flux controllers. Helpers:

- :func:`create` — create any Flux object (or Secret) from its manifest dict;
- :func:`wait_ready` — poll until an object is Ready for its current generation; on timeout
  the error shows the object's conditions and, if a controller has died, its log tail;
- :func:`basic_auth_secret` — a ``username``/``password`` secret for a source's ``secretRef``.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from infra.localflux import FluxControllers
from tests.kube.cluster import KubeCluster

KINDS: dict[str, tuple[str, str]] = {
    "GitRepository": ("source.toolkit.fluxcd.io", "gitrepositories"),
    "OCIRepository": ("source.toolkit.fluxcd.io", "ocirepositories"),
    "HelmRepository": ("source.toolkit.fluxcd.io", "helmrepositories"),
    "HelmChart": ("source.toolkit.fluxcd.io", "helmcharts"),
    "Kustomization": ("kustomize.toolkit.fluxcd.io", "kustomizations"),
    "HelmRelease": ("helm.toolkit.fluxcd.io", "helmreleases"),
}
"""Flux kind → (group, plural); the version is the one in the manifest's apiVersion."""

CHART_CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  color: {{ .Values.color | quote }}
"""
"""A chart template: one ConfigMap `<release>-settings` with the value `color`."""

VERSIONS = {"source.toolkit.fluxcd.io": "v1", "kustomize.toolkit.fluxcd.io": "v1", "helm.toolkit.fluxcd.io": "v2"}


@dataclass
class FluxFleet:
    """The management cluster and workload clusters, each reconciled by its own Flux controllers."""

    management: KubeCluster
    workloads: dict[str, KubeCluster]
    kubeconfigs: dict[str, Path]
    """API server name (``flux-management``, ``flux-workload-1``, ...) → kubeconfig file."""
    controllers: dict[str, FluxControllers] = field(default_factory=dict)
    """API server name → its running controllers."""

    def check(self) -> None:
        """Raise (with the log tail) if any controller of the fleet has exited."""
        for controllers in self.controllers.values():
            controllers.check()


async def create(cluster: KubeCluster, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create `manifest` (a Flux object or a core v1 Secret) in `cluster`; return what was stored."""
    namespace = manifest["metadata"]["namespace"]
    async with cluster.client() as api:
        if manifest["kind"] == "Secret":
            await CoreV1Api(api).create_namespaced_secret(namespace, manifest)
            return manifest
        group, plural = KINDS[manifest["kind"]]
        version = manifest["apiVersion"].rpartition("/")[2]
        custom = CustomObjectsApi(api)
        created: dict[str, Any] = await custom.create_namespaced_custom_object(
            group, version, namespace, plural, manifest
        )
        return created


async def get(cluster: KubeCluster, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    group, plural = KINDS[kind]
    return await cluster.object(plural, namespace, name, group=group, version=VERSIONS[group])


def is_ready(obj: dict[str, Any] | None) -> bool:
    """Ready=True for the object's current generation."""
    if obj is None:
        return False
    status = obj.get("status", {})
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


async def wait_ready(
    cluster: KubeCluster, kind: str, namespace: str, name: str, *, fleet: FluxFleet | None = None, timeout: float = 30
) -> dict[str, Any]:
    """The object once Ready (see :func:`is_ready`); an AssertionError with its status after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        obj = await get(cluster, kind, namespace, name)
        if is_ready(obj):
            assert obj is not None
            return obj
        if loop.time() > deadline:
            if fleet is not None:
                fleet.check()
            conditions = (obj or {}).get("status", {}).get("conditions")
            raise AssertionError(f"{kind} {namespace}/{name} in {cluster.name} not Ready in {timeout}s: {conditions}")
        await asyncio.sleep(0.1)


async def config_map(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str] | None:
    """The data of a ConfigMap, or None when there is none."""
    async with cluster.client() as api:
        try:
            found = await CoreV1Api(api).read_namespaced_config_map(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
    return dict(found.data or {})


def basic_auth_secret(name: str, namespace: str, credentials: tuple[str, str]) -> dict[str, Any]:
    user, password = credentials
    data = {"username": user, "password": password}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
