"""Helpers for tests of the `rollout.dev` kinds on a real API server: the generated CRDs
installed (and served) on a pool cluster, its rollout objects removed between tests, and
small create/read helpers."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiextensionsV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from projections.crd_schema import GROUP, VERSION, crd_documents
from tests.kube.cluster import KubeCluster

PLURALS = (
    "modules",
    "bootstrapmodules",
    "rolloutapprovals",
    "rolloutcommands",
    "rolloutbreakglasses",
    "modulerestrictions",
    "freezecalendars",
)
CLUSTER_PLURALS = ("clusterfreezecalendars",)
NAMESPACE = "fleet"


async def install_rollout_crds(cluster: KubeCluster) -> None:
    """Create (or update) the generated CRDs, wait until served, delete leftover objects."""
    async with cluster.client() as api:
        extensions = ApiextensionsV1Api(api)
        for definition in crd_documents():
            try:
                await extensions.create_custom_resource_definition(definition)
            except ApiException as error:
                if error.status != 409:
                    raise
                current = await extensions.read_custom_resource_definition(definition["metadata"]["name"])
                body = {
                    **definition,
                    "metadata": {**definition["metadata"], "resourceVersion": current.metadata.resource_version},
                }
                await extensions.replace_custom_resource_definition(definition["metadata"]["name"], body)
        custom = CustomObjectsApi(api)
        for _ in range(200):
            try:
                served = {r.name for r in (await custom.get_api_resources(GROUP, VERSION)).resources}
            except ApiException as error:
                if error.status != 404:
                    raise
                served = set()
            if {*PLURALS, *CLUSTER_PLURALS} <= served:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"{cluster.name}: {GROUP}/{VERSION} never served {PLURALS}")
        for plural in PLURALS:
            for namespace in ("fleet", "elsewhere"):
                await custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        for plural in CLUSTER_PLURALS:
            await custom.delete_collection_cluster_custom_object(GROUP, VERSION, plural)


def module_object(
    name: str, *, tag: str = "6.7.0", stages: list[dict[str, Any]] | None = None, kind: str = "Module"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"env": "prod"}},
        "sync": {"source": {"git": {"url": f"https://example.com/{name}", "version": {"tag": tag}}}},
    }
    if stages is not None:
        spec["rollout"] = {"stages": stages}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


async def create(
    cluster: KubeCluster, plural: str, body: dict[str, Any], *, namespace: str = NAMESPACE
) -> dict[str, Any]:
    async with cluster.client() as api:
        return await CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)  # type: ignore[no-any-return]


async def read(cluster: KubeCluster, plural: str, name: str, *, namespace: str = NAMESPACE) -> dict[str, Any] | None:
    return await cluster.object(plural, namespace, name, group=GROUP, version=VERSION)
