"""What an API server needs before Flux controllers can reconcile its objects.

The namespace ``flux-system`` (the controllers' ``RUNTIME_NAMESPACE``) and the Flux CRDs. The
controllers watch every kind of their group — source-controller also HelmChart, Bucket and
ExternalArtifact, which the project does not ship in ``projections/crds`` — and exit at
start when one is not served. :func:`prepare_cluster` therefore creates each CRD of the
controllers' modules (``FluxBinaries.crds``) that the server does not have yet: a CRD
already installed (the project's own copies on the test API servers) is left as it is, so
the controllers run against the exact CRDs the project renders for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
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

from infra.localflux.defaults import RUNTIME_NAMESPACE
from infra.localflux.errors import LocalFluxError

DISCOVERY_TIMEOUT = 20.0


def crd_documents(directories: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the ``*.yaml`` files of `directories`."""
    documents = []
    for directory in directories:
        for path in sorted(directory.glob("*.yaml")):
            documents += [
                d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"
            ]
    return documents


async def prepare_cluster(kubeconfig: dict[str, Any], crd_directories: Iterable[Path]) -> None:
    """Create ``flux-system`` and the missing Flux CRDs; wait until discovery serves them."""
    documents = crd_documents(crd_directories)
    api = await new_client_from_config_dict(kubeconfig)
    async with api:
        await _create_namespace(api, RUNTIME_NAMESPACE)
        extensions = ApiextensionsV1Api(api)
        for document in documents:
            body = {key: document[key] for key in ("apiVersion", "kind", "spec")}
            body["metadata"] = {"name": document["metadata"]["name"]}
            try:
                await extensions.create_custom_resource_definition(body)  # type: ignore[arg-type]  # a dict is sent as is
            except ApiException as error:
                if error.status != 409:
                    raise
        for document in documents:
            await _wait_served(api, document["spec"])


async def _create_namespace(api: ApiClient, name: str) -> None:
    try:
        await CoreV1Api(api).create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
    except ApiException as error:
        if error.status != 409:
            raise


async def _wait_served(api: ApiClient, spec: dict[str, Any]) -> None:
    group, plural = spec["group"], spec["names"]["plural"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DISCOVERY_TIMEOUT
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    for version in served:
        while not await _serves(api, group, version, plural):
            if loop.time() > deadline:
                raise LocalFluxError(f"discovery did not serve {group}/{version} {plural} within {DISCOVERY_TIMEOUT}s")
            await asyncio.sleep(0.05)


async def _serves(api: ApiClient, group: str, version: str, plural: str) -> bool:
    try:
        resources = await CustomObjectsApi(api).get_api_resources(group, version)
    except ApiException as error:
        if error.status != 404:
            raise
        return False
    return any(r.name == plural for r in resources.resources)
