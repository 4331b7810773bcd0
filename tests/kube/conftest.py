"""Fixtures for the Kubernetes side: real API servers, kubeconfig secrets, snapshots, a sink.

`kube_pool` (session, in tests/conftest.py: the dashboard's browser tests share it) starts
one etcd and real kube-apiservers on it (see
`tests/kube/cluster.py` and `infra.localkube`): the binaries are built once from the Go
module proxy and cached under `~/.cache/rollout/kube`. `management` is the pool's
management cluster, emptied of what earlier tests left; `workloads("c1", ...)` maps each
workload cluster name to one of the pool's workload apiservers (in order: `workload-1`,
`workload-2`, ...) and writes its kubeconfig secret (`<cluster>-kubeconfig`, key `value`)
into the management cluster, as Cluster API does. `sink` is a KubernetesSink with short
intervals (tests cannot wait five minutes for a resync) pointed at `management`.

`fake_management` is the project's fake API server (`tests/kube/apiserver.py`), for the
few tests that need faults a real server cannot be made to produce.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi, V1ObjectMeta, V1Secret
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra.topics import ensure_topics
from projections.kube import RetryPolicy
from projections.render import FluxRenderer
from projections.sinks.kubernetes import KubernetesSink
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync
from tests.kube.apiserver import KubeAPIServer
from tests.kube.cluster import KubeCluster, KubePool

NAMESPACE = "fleet"
FAST = RetryPolicy(attempts=3, initial=0.05, maximum=0.2, request_timeout=1.0)


# --- snapshots ----------------------------------------------------------------------------


def sync(
    module: str,
    tag: str = "6.7.0",
    *,
    substitute: dict[str, str] | None = None,
    oci: bool = False,
    commit: str | None = None,
) -> dict[str, Any]:
    if oci:
        source = {"oci": {"url": f"oci://ghcr.io/example/{module}", "version": {"tag": tag}}}
    elif commit:
        source = {"git": {"url": f"https://example.com/{module}", "version": {"revision": commit}}}
    else:
        source = {"git": {"url": f"https://example.com/{module}", "version": {"tag": tag}}}
    record = Sync.model_validate(
        {"source": source, "package": {"kustomize": {"path": "./deploy", "substitute": substitute or {}}}}
    )
    return AssignedSync(module=module, module_namespace=NAMESPACE, revision=record.revision, sync=record).model_dump(
        by_alias=True
    )


def snapshot(
    kind: str, cluster: str, *syncs: dict[str, Any], version: int = 1, namespace: str = NAMESPACE
) -> Assemblage:
    return Assemblage.model_validate(
        {
            "kind": kind,
            "metadata": {"name": cluster, "namespace": namespace},
            "version": version,
            "spec": {"syncs": list(syncs)},
        }
    )


# --- waiting ------------------------------------------------------------------------------


async def eventually(check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; fail after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check}")
        await asyncio.sleep(interval)


# --- servers -----------------------------------------------------------------------------


@pytest.fixture
async def management(kube_pool: KubePool) -> KubeCluster:
    return await kube_pool.cluster("management")


@pytest.fixture
async def fake_management() -> AsyncIterator[KubeAPIServer]:
    server = await KubeAPIServer("management").start()
    yield server
    await server.stop()


FakeWorkloads = Callable[..., Awaitable[dict[str, KubeAPIServer]]]


@pytest.fixture
async def fake_workloads(fake_management: KubeAPIServer) -> AsyncIterator[FakeWorkloads]:
    """`await fake_workloads("c1", ...)`: a fake API server per workload cluster (fault injection)."""
    started: list[KubeAPIServer] = []

    async def start(*clusters: str, secret: bool = True) -> dict[str, KubeAPIServer]:
        servers = {}
        for cluster in clusters:
            server = await KubeAPIServer(cluster).start()
            started.append(server)
            servers[cluster] = server
            if secret:
                await put_kubeconfig_secret(fake_management, cluster, server.kubeconfig_yaml())
        return servers

    yield start
    for server in started:
        await server.stop()


AnyCluster = KubeCluster | KubeAPIServer


async def put_kubeconfig_secret(
    management: AnyCluster, cluster: str, kubeconfig: str, *, namespace: str = NAMESPACE
) -> None:
    async with management.client() as api:
        await CoreV1Api(api).create_namespaced_secret(
            namespace,
            V1Secret(
                metadata=V1ObjectMeta(
                    name=f"{cluster}-kubeconfig",
                    namespace=namespace,
                    labels={"cluster.x-k8s.io/cluster-name": cluster},
                ),
                type="cluster.x-k8s.io/secret",
                data={"value": base64.b64encode(kubeconfig.encode()).decode()},
            ),
        )


async def delete_kubeconfig_secret(management: AnyCluster, cluster: str, *, namespace: str = NAMESPACE) -> None:
    async with management.client() as api:
        await CoreV1Api(api).delete_namespaced_secret(f"{cluster}-kubeconfig", namespace)


Workloads = Callable[..., Awaitable[dict[str, KubeCluster]]]


@pytest.fixture
async def workloads(kube_pool: KubePool, management: KubeCluster) -> Workloads:
    """`await workloads("c1", "c2", secret=True)`: a real API server per workload cluster."""
    taken: list[str] = []

    async def start(*clusters: str, secret: bool = True) -> dict[str, KubeCluster]:
        servers = {}
        for cluster in clusters:
            taken.append(cluster)
            servers[cluster] = await kube_pool.cluster(f"workload-{len(taken)}")
            if secret:
                await put_kubeconfig_secret(management, cluster, servers[cluster].kubeconfig_yaml())
        return servers

    return start


# --- the sink -----------------------------------------------------------------------------


def make_sink(management: AnyCluster, **kwargs: Any) -> KubernetesSink:
    async def connect() -> ApiClient:
        return await new_client_from_config_dict(management.kubeconfig())

    options: dict[str, Any] = {
        "policy": FAST,
        "resync_interval": 0.3,
        "not_ready_interval": 0.2,
        "max_backoff": 0.3,
        "write_timeout": 3.0,
    }
    options.update(kwargs)
    return KubernetesSink(FluxRenderer(), management=connect, **options)


@pytest.fixture
async def sink(management: KubeCluster) -> AsyncIterator[KubernetesSink]:
    sink = make_sink(management)
    yield sink
    await sink.close()


# --- reading objects back over HTTP ---------------------------------------------------------


async def get_custom(
    server: AnyCluster, plural: str, name: str, *, namespace: str, group: str | None = None
) -> dict[str, Any] | None:
    group = group or ("kustomize.toolkit.fluxcd.io" if plural == "kustomizations" else "source.toolkit.fluxcd.io")
    async with server.client() as api:
        try:
            return await CustomObjectsApi(api).get_namespaced_custom_object(group, "v1", namespace, plural, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise


# --- Kafka ---------------------------------------------------------------------------------


@pytest.fixture
async def topic_prefix(kafka_bootstrap: str) -> str:
    prefix = f"test-kube-{uuid.uuid4().hex[:8]}."
    await ensure_topics(kafka_bootstrap, prefix, 1)
    return prefix
