"""Registering a workload cluster the way Cluster API does, in a management API server.

For a local fleet there is no infrastructure provider: the workload "clusters" are
kube-apiservers that are already up. What Cluster API would leave behind for each of them
is written here, so that the product path downstream is the real one — `rollout
watch-clusters` observes the Cluster objects, the Kubernetes sink reads the kubeconfig
secrets, and remote Flux objects reach the clusters through them:

- a `cluster.x-k8s.io/v1beta2` `Cluster` with the fleet's labels, whose status says
  `initialization.controlPlaneInitialized: true` — what CAPI's cluster controller writes
  once the control plane answers. No CAPI controller runs here, so nothing else owns that
  status; it is true (the API server answers `/readyz` before this runs);
- the kubeconfig secret `<cluster>-kubeconfig` (type `cluster.x-k8s.io/secret`, key `value`,
  label `cluster.x-k8s.io/cluster-name`), in the Cluster's namespace.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi, V1Namespace, V1ObjectMeta, V1Secret
from kubernetes_asyncio.client.exceptions import ApiException

CAPI_GROUP, CAPI_VERSION = "cluster.x-k8s.io", "v1beta2"
SECRET_TYPE = "cluster.x-k8s.io/secret"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"


def kubeconfig_secret(name: str, namespace: str, kubeconfig_yaml: str) -> V1Secret:
    """The secret Cluster API writes for cluster `name` (key `value`)."""
    return V1Secret(
        metadata=V1ObjectMeta(name=f"{name}-kubeconfig", namespace=namespace, labels={CLUSTER_NAME_LABEL: name}),
        type=SECRET_TYPE,
        data={"value": base64.b64encode(kubeconfig_yaml.encode()).decode()},
    )


def cluster_object(name: str, namespace: str, labels: dict[str, str], kubeconfig_yaml: str) -> dict[str, Any]:
    """The `Cluster`, its `controlPlaneEndpoint` the API server the kubeconfig points at."""
    server = urlsplit(yaml.safe_load(kubeconfig_yaml)["clusters"][0]["cluster"]["server"])
    return {
        "apiVersion": f"{CAPI_GROUP}/{CAPI_VERSION}",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"controlPlaneEndpoint": {"host": server.hostname, "port": server.port or 443}},
    }


async def ensure_namespace(api: ApiClient, name: str) -> None:
    try:
        await CoreV1Api(api).create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
    except ApiException as error:
        if error.status != 409:
            raise


async def register_cluster(
    management: ApiClient, name: str, namespace: str, labels: dict[str, str], kubeconfig_yaml: str
) -> None:
    """Kubeconfig secret, Cluster object and its initialized control plane (idempotent)."""
    core, custom = CoreV1Api(management), CustomObjectsApi(management)
    secret = kubeconfig_secret(name, namespace, kubeconfig_yaml)
    try:
        await core.create_namespaced_secret(namespace, secret)
    except ApiException as error:
        if error.status != 409:
            raise
        await core.replace_namespaced_secret(secret.metadata.name, namespace, secret)
    try:
        await custom.create_namespaced_custom_object(
            CAPI_GROUP, CAPI_VERSION, namespace, "clusters", cluster_object(name, namespace, labels, kubeconfig_yaml)
        )
    except ApiException as error:
        if error.status != 409:
            raise
    await custom.patch_namespaced_custom_object_status(
        CAPI_GROUP,
        CAPI_VERSION,
        namespace,
        "clusters",
        name,
        {"status": {"initialization": {"controlPlaneInitialized": True}}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]  # accepted; the stub omits it
    )
