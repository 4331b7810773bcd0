"""The Kubernetes sink under injected faults (the fake API server): RBAC gaps, 5xx/409/429, hangs.

These need `tests/kube/apiserver.py`'s fault injection — a 403 on one URL while the rest
is allowed, one 500/409/429/503 on a chosen request, a server that accepts connections and
then hangs — which a real kube-apiserver cannot be made to produce on demand. Everything
else about the sink is tested against the real server in `test_kubernetes_sink.py`.
"""

from __future__ import annotations

import time

from kubernetes_asyncio.client import CustomObjectsApi

from tests.kube.apiserver import KubeAPIServer
from tests.kube.conftest import NAMESPACE, FakeWorkloads, eventually, make_sink, snapshot, sync

PROXY = "ProxyAssemblage"


def names(server: KubeAPIServer, plural: str) -> list[str]:
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in server.objects(plural))


async def test_tombstone_after_a_restart_prunes_the_workload_cluster(
    fake_management: KubeAPIServer, fake_workloads: FakeWorkloads
) -> None:
    servers = await fake_workloads("c1")
    sink = make_sink(fake_management)
    try:
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    finally:
        await sink.close()
    fake_management.inject(r"^/apis/cluster.x-k8s.io/", status=403)  # no Cluster API read access: secrets, then
    fresh = make_sink(fake_management)  # knows nothing of c1: finds its namespace through the secret
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []


async def test_tombstone_after_a_restart_finds_the_namespace_through_the_cluster_api_cluster(
    fake_management: KubeAPIServer, fake_workloads: FakeWorkloads
) -> None:
    servers = await fake_workloads("c1")
    sink = make_sink(fake_management)
    try:
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    finally:
        await sink.close()
    async with fake_management.client() as api:
        await CustomObjectsApi(api).create_namespaced_custom_object(
            "cluster.x-k8s.io",
            "v1beta2",
            NAMESPACE,
            "clusters",
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": "c1"},
                "spec": {"paused": False},
            },
        )
    fake_management.inject(r"^/api/v1/secrets\?", status=403)  # no cluster-wide list of secrets
    fresh = make_sink(fake_management)
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []


async def test_tombstone_after_a_restart_finds_the_secret_by_name_in_the_fleet_namespaces(
    fake_management: KubeAPIServer, fake_workloads: FakeWorkloads
) -> None:
    servers = await fake_workloads("c1")
    sink = make_sink(fake_management)
    try:
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    finally:
        await sink.close()
    fake_management.inject(r"^/api/v1/secrets", status=403)  # no cluster-wide list of secrets (least privilege)
    fresh = make_sink(fake_management, fleet_namespaces=["staging", NAMESPACE])
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []
    assert fake_management.faults[0].hits == 0


async def test_transient_errors_conflicts_and_throttling_are_retried_within_one_write(
    fake_management: KubeAPIServer, fake_workloads: FakeWorkloads
) -> None:
    servers = await fake_workloads("c1")
    c1 = servers["c1"]
    c1.inject(r"/gitrepositories/podinfo-c1", method="PATCH", status=500, times=1)
    c1.inject(r"/kustomizations/podinfo-c1", method="PATCH", status=409, times=1)
    c1.inject(r"/gitrepositories\?", method="GET", status=429, times=1)
    fake_management.inject(r"/secrets/c1-kubeconfig", status=503, times=1)
    sink = make_sink(fake_management, watch_drift=False)
    try:
        result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    finally:
        await sink.close()
    assert result.written == 2
    assert all(fault.hits == 1 for fault in [*c1.faults, *fake_management.faults])


async def test_a_failing_or_hanging_cluster_does_not_stall_the_others(
    fake_management: KubeAPIServer, fake_workloads: FakeWorkloads
) -> None:
    servers = await fake_workloads("broken", "slow", "healthy")
    servers["broken"].inject(r"/kustomizations", status=500)
    servers["slow"].inject(r"/", delay=3.0, status=None)  # longer than the 1s request timeout
    sink = make_sink(fake_management, write_timeout=0.5)
    try:
        started = time.monotonic()
        results = {}
        for cluster in ("broken", "slow", "healthy"):
            results[cluster] = await sink.write(PROXY, cluster, snapshot(PROXY, cluster, sync("podinfo")))
        assert time.monotonic() - started < 3.0
        assert results["healthy"].written == 2
        assert results["broken"].written == results["slow"].written == 0
        assert names(servers["healthy"], "kustomizations") == ["flux-system/podinfo-healthy"]

        # the broken cluster is retried with backoff, and converges once the API recovers
        await eventually(lambda: len(servers["broken"].requests_to(r"/kustomizations")) > 4, timeout=5)
        servers["broken"].clear_faults()
        servers["slow"].clear_faults()
        await eventually(lambda: names(servers["broken"], "kustomizations") == ["flux-system/podinfo-broken"])
        await eventually(lambda: names(servers["slow"], "kustomizations") == ["flux-system/podinfo-slow"])
    finally:
        await sink.close()
