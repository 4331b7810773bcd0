"""Clusters of the test suite: real kube-apiservers (one etcd) shared by the whole session.

`KubePool` owns the session's `infra.localkube.LocalKube` and hands out `KubeCluster`s by
name — the management cluster and workload clusters `workload-1`, `workload-2`, ... — each a
kube-apiserver of its own on the shared etcd (its own `--etcd-prefix`), started on first
use (in a thread: it blocks for a few seconds) and kept for the session. A new
apiserver gets the CRDs of `projections/crds` (the upstream Flux and Cluster API CRDs of
`../shared/crds`, shipped with the project) and the namespaces `fleet`, `elsewhere` and
`flux-system`; the pool waits until discovery serves every CRD's versions.

Isolation between tests: before a test uses a cluster, `KubeCluster.reset()` deletes every
custom object of those CRDs and every secret in its namespaces, drops namespaces a test
created, and re-creates the standard ones. (There is no controller-manager, so a namespace
is removed by finalizing it by hand.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    ApiextensionsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    V1Namespace,
    V1ObjectMeta,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra.localkube import APIServer, LocalKube
from projections import crds

STANDARD_NAMESPACES = ("fleet", "elsewhere", "flux-system")
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


@dataclass(frozen=True)
class Kind:
    group: str
    versions: tuple[str, ...]  # served, storage version first
    plural: str


def installed_kinds() -> list[Kind]:
    kinds = []
    for definition in crds.builtin_catalog().definitions:
        spec = definition["spec"]
        versions = sorted(
            (v["name"] for v in spec["versions"] if v.get("served")),
            key=lambda name: not next(v for v in spec["versions"] if v["name"] == name).get("storage"),
        )
        kinds.append(Kind(spec["group"], tuple(versions), spec["names"]["plural"]))
    return kinds


@dataclass
class KubeCluster:
    """One real API server, addressed the way the appliers address a cluster."""

    server: APIServer

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    def kubeconfig(self) -> dict[str, Any]:
        return self.server.kubeconfig()

    def kubeconfig_yaml(self) -> str:
        return self.server.kubeconfig_yaml()

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[ApiClient]:
        api = await new_client_from_config_dict(self.kubeconfig())
        async with api:
            yield api

    async def object(
        self, plural: str, namespace: str, name: str, *, group: str | None = None, version: str = "v1"
    ) -> dict[str, Any] | None:
        group = group or _flux_group(plural)
        async with self.client() as api:
            try:
                return await CustomObjectsApi(api).get_namespaced_custom_object(group, version, namespace, plural, name)  # type: ignore[no-any-return]
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

    async def objects(self, plural: str, group: str | None = None, version: str = "v1") -> list[dict[str, Any]]:
        group = group or _flux_group(plural)
        async with self.client() as api:
            listing = await CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)
        return sorted(listing["items"], key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    async def create_namespace(self, name: str) -> None:
        async with self.client() as api:
            try:
                await CoreV1Api(api).create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
            except ApiException as error:
                if error.status != 409:
                    raise

    async def drop_namespace(self, name: str) -> None:
        """Delete a namespace now: without a namespace controller, finalize it by hand."""
        async with self.client() as api:
            core = CoreV1Api(api)
            try:
                await core.delete_namespace(name)
                namespace = await core.read_namespace(name)
                namespace.spec.finalizers = []
                await core.replace_namespace_finalize(name, namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
            for _ in range(100):
                try:
                    await core.read_namespace(name)
                except ApiException as error:
                    if error.status == 404:
                        return
                    raise
                await asyncio.sleep(0.05)
        raise AssertionError(f"namespace {name} of {self.name} still exists after being finalized")

    async def reset(self) -> None:
        """Delete what earlier tests left; see the module docstring."""
        async with self.client() as api:
            core, custom = CoreV1Api(api), CustomObjectsApi(api)
            namespaces = [n.metadata.name for n in (await core.list_namespace()).items]
            for namespace in namespaces:
                if namespace in SYSTEM_NAMESPACES:
                    continue
                for kind in installed_kinds():
                    await custom.delete_collection_namespaced_custom_object(
                        kind.group, kind.versions[0], namespace, kind.plural
                    )
                await core.delete_collection_namespaced_secret(namespace)
        for namespace in namespaces:
            if namespace not in SYSTEM_NAMESPACES and namespace not in STANDARD_NAMESPACES:
                await self.drop_namespace(namespace)
        for namespace in STANDARD_NAMESPACES:
            await self.create_namespace(namespace)


class KubePool:
    """The session's API servers by name; see the module docstring."""

    def __init__(self, workdir: Path) -> None:
        self.local = LocalKube(workdir)
        self.clusters: dict[str, KubeCluster] = {}
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self.local.start()

    def stop(self) -> None:
        self.local.stop()

    def compact(self) -> int:
        return self.local.compact()

    async def cluster(self, name: str) -> KubeCluster:
        async with self._lock:
            if name not in self.clusters:
                server = await asyncio.to_thread(self.local.add_apiserver, name)
                cluster = KubeCluster(server)
                await install_crds(cluster)
                self.clusters[name] = cluster
        cluster = self.clusters[name]
        await cluster.reset()
        return cluster


async def install_crds(cluster: KubeCluster) -> None:
    """Create every shipped CRD and wait until discovery serves all their versions."""
    async with cluster.client() as api:
        extensions = ApiextensionsV1Api(api)
        for definition in crds.builtin_catalog().definitions:
            body = {key: definition[key] for key in ("apiVersion", "kind", "metadata", "spec")}
            body["metadata"] = {"name": definition["metadata"]["name"]}
            try:
                await extensions.create_custom_resource_definition(body)
            except ApiException as error:
                if error.status != 409:
                    raise
        custom = CustomObjectsApi(api)
        for kind in installed_kinds():
            for version in kind.versions:
                for _ in range(200):
                    try:
                        resources = await custom.get_api_resources(kind.group, version)
                    except ApiException as error:
                        if error.status != 404:
                            raise
                    else:
                        if any(r.name == kind.plural for r in resources.resources):
                            break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError(f"{cluster.name}: discovery never served {kind.group}/{version} {kind.plural}")


def _flux_group(plural: str) -> str:
    return "kustomize.toolkit.fluxcd.io" if plural == "kustomizations" else "source.toolkit.fluxcd.io"
