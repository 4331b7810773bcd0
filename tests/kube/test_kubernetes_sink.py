"""The Kubernetes sink against API test servers: apply, prune, recreate, gate, retry, isolate."""

from __future__ import annotations

import asyncio
import base64
import logging
import time

import pytest
from kubernetes_asyncio.client import CustomObjectsApi

from projections.sinks import SinkResult
from projections.sinks.kubernetes import KubernetesSink
from tests.kube.apiserver import KubeAPIServer
from tests.kube.conftest import (
    NAMESPACE,
    Workloads,
    delete_kubeconfig_secret,
    eventually,
    get_custom,
    make_sink,
    put_kubeconfig_secret,
    snapshot,
    sync,
)

REMOTE, PROXY = "RemoteAssemblage", "ProxyAssemblage"
KS = ("kustomize.toolkit.fluxcd.io", "v1")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def names(server: KubeAPIServer, plural: str) -> list[str]:
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in server.objects(plural))


async def test_remote_sync_is_applied_in_the_cluster_namespace_pointing_at_the_kubeconfig_secret(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    await workloads("prod-eu-1")
    result = await sink.write(REMOTE, "prod-eu-1", snapshot(REMOTE, "prod-eu-1", sync("flux", "v2.4.0")))
    assert result == SinkResult(kind=REMOTE, cluster="prod-eu-1", version=1, written=2)

    source = await get_custom(management, "gitrepositories", "flux-prod-eu-1", namespace=NAMESPACE)
    kustomization = await get_custom(management, "kustomizations", "flux-prod-eu-1", namespace=NAMESPACE)
    assert source is not None and kustomization is not None
    assert source["spec"]["url"] == "https://example.com/flux"
    assert source["spec"]["ref"] == {"tag": "v2.4.0"}
    assert kustomization["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "flux-prod-eu-1"}
    assert kustomization["spec"]["kubeConfig"] == {"secretRef": {"name": "prod-eu-1-kubeconfig", "key": "value"}}
    assert kustomization["metadata"]["annotations"]["rollout.dev/revision"] == "v2.4.0"
    for obj in (source, kustomization):
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "rollout",
            "rollout.dev/module": "flux",
            "rollout.dev/cluster": "prod-eu-1",
            "rollout.dev/assemblage": "remote",
        }
        assert [m["manager"] for m in obj["metadata"]["managedFields"]] == ["rollout"]
        assert obj["metadata"]["managedFields"][0]["operation"] == "Apply"

    again = await sink.write(REMOTE, "prod-eu-1", snapshot(REMOTE, "prod-eu-1", sync("flux", "v2.4.0"), version=2))
    assert (again.written, again.unchanged) == (0, 2)


async def test_proxy_sync_is_applied_inside_the_workload_cluster_through_its_secret(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    snap = snapshot(PROXY, "c1", sync("podinfo", "6.7.0", oci=True), sync("pinned", commit=COMMIT))
    result = await sink.write(PROXY, "c1", snap)
    assert result.written == 4

    c1 = servers["c1"]
    assert names(c1, "ocirepositories") == ["flux-system/podinfo-c1"]
    assert names(c1, "gitrepositories") == ["flux-system/pinned-c1"]
    assert names(c1, "kustomizations") == ["flux-system/pinned-c1", "flux-system/podinfo-c1"]
    oci = c1.object("ocirepositories", "flux-system", "podinfo-c1")
    assert oci is not None and oci["spec"]["url"] == "oci://ghcr.io/example/podinfo"
    pinned = c1.object("gitrepositories", "flux-system", "pinned-c1")
    assert pinned is not None and pinned["spec"]["ref"] == {"commit": COMMIT}
    kustomization = c1.object("kustomizations", "flux-system", "pinned-c1")
    assert kustomization is not None and "kubeConfig" not in kustomization["spec"]
    assert kustomization["metadata"]["annotations"]["rollout.dev/revision"] == f"sha1:{COMMIT}"
    # nothing of the proxy sync lands in the management cluster
    assert management.objects("kustomizations") == management.objects("ocirepositories") == []


async def test_removed_syncs_are_pruned_by_label_and_nothing_else_is_touched(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    await workloads("c1", "c2")
    await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("a"), sync("b")))
    await sink.write(REMOTE, "c2", snapshot(REMOTE, "c2", sync("a")))
    async with management.client() as api:  # an object someone else manages, in the same namespace
        await CustomObjectsApi(api).create_namespaced_custom_object(
            *KS,
            NAMESPACE,
            "kustomizations",
            {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": "hand-made", "labels": {"rollout.dev/cluster": "c1"}},
                "spec": {"interval": "5m", "prune": False, "sourceRef": {"kind": "GitRepository", "name": "x"}},
            },
        )

    result = await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("b"), version=2))
    assert (result.written, result.unchanged, result.pruned) == (0, 2, 2)
    assert names(management, "kustomizations") == ["fleet/a-c2", "fleet/b-c1", "fleet/hand-made"]
    assert names(management, "gitrepositories") == ["fleet/a-c2", "fleet/b-c1"]

    result = await sink.write(REMOTE, "c1", None)  # tombstone: everything of c1 goes
    assert result.pruned == 2
    assert names(management, "kustomizations") == ["fleet/a-c2", "fleet/hand-made"]
    assert not sink.owns(REMOTE, "c1")


async def test_tombstone_after_a_restart_prunes_the_workload_cluster(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    management.inject(r"^/apis/cluster.x-k8s.io/", status=403)  # no Cluster API read access: secrets, then
    fresh = make_sink(management)  # knows nothing of c1: finds its namespace through the secret
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []


async def test_tombstone_after_a_restart_finds_the_namespace_through_the_cluster_api_cluster(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    async with management.client() as api:
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
    management.inject(r"^/api/v1/secrets\?", status=403)  # no cluster-wide list of secrets
    fresh = make_sink(management)
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []


async def test_kubeconfig_secrets_never_reach_the_logs_even_at_debug(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink, caplog: pytest.LogCaptureFixture
) -> None:
    servers = await workloads("c1")
    management.inject(r"/secrets/c1-kubeconfig", status=500, times=1)
    with caplog.at_level(logging.DEBUG):
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
        await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("b")))
    assert servers["c1"].objects("kustomizations")
    secret = base64.b64encode(servers["c1"].kubeconfig_yaml().encode()).decode()
    for leak in (servers["c1"].token, servers["c1"].url, secret[:40]):
        assert leak not in caplog.text


async def test_tombstone_after_a_restart_finds_the_secret_by_name_in_the_fleet_namespaces(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    management.inject(r"^/api/v1/secrets", status=403)  # no cluster-wide list of secrets (least privilege)
    fresh = make_sink(management, fleet_namespaces=["staging", NAMESPACE])
    try:
        result = await fresh.write(PROXY, "c1", None)
    finally:
        await fresh.close()
    assert result.pruned == 2
    assert servers["c1"].objects("kustomizations") == []
    assert management.faults[0].hits == 0


async def test_objects_deleted_or_edited_behind_the_applier_are_restored_by_the_resync(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    c1 = servers["c1"]
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    async with c1.client() as api:
        custom = CustomObjectsApi(api)
        await custom.delete_namespaced_custom_object(*KS, "flux-system", "kustomizations", "podinfo-c1")
        await custom.patch_namespaced_custom_object(
            "source.toolkit.fluxcd.io",
            "v1",
            "flux-system",
            "gitrepositories",
            "podinfo-c1",
            {"spec": {"url": "https://evil.example.com/x"}},
            field_manager="kubectl-edit",
            _content_type="application/merge-patch+json",
        )
    assert c1.object("kustomizations", "flux-system", "podinfo-c1") is None

    await eventually(lambda: c1.object("kustomizations", "flux-system", "podinfo-c1"), timeout=5)
    await eventually(
        lambda: (
            (c1.object("gitrepositories", "flux-system", "podinfo-c1") or {})["spec"]["url"]
            == "https://example.com/podinfo"
        ),
        timeout=5,
    )


async def test_cluster_without_kubeconfig_secret_is_skipped_until_the_secret_appears(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1", secret=False)
    c1 = servers["c1"]
    proxy = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    remote = await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("flux")))
    assert proxy.written == remote.written == 0
    assert sink.outcome(PROXY, "c1").state == sink.outcome(REMOTE, "c1").state == "not-ready"  # type: ignore[union-attr]
    await asyncio.sleep(0.5)  # a few retry periods: still nothing
    assert c1.objects("kustomizations") == [] and management.objects("kustomizations") == []
    assert c1.requests == []  # the workload cluster was never even contacted

    await put_kubeconfig_secret(management, "c1", c1.kubeconfig_yaml())
    await eventually(lambda: names(c1, "kustomizations") == ["flux-system/podinfo-c1"], timeout=5)
    await eventually(lambda: names(management, "kustomizations") == ["fleet/flux-c1"], timeout=5)

    # a rotated/removed secret makes it not-ready again; objects already applied stay
    await delete_kubeconfig_secret(management, "c1")
    await eventually(lambda: sink.outcome(PROXY, "c1").state == "not-ready", timeout=5)  # type: ignore[union-attr]
    assert names(c1, "kustomizations") == ["flux-system/podinfo-c1"]


async def test_transient_errors_conflicts_and_throttling_are_retried_within_one_write(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    c1 = servers["c1"]
    c1.inject(r"/gitrepositories/podinfo-c1", method="PATCH", status=500, times=1)
    c1.inject(r"/kustomizations/podinfo-c1", method="PATCH", status=409, times=1)
    c1.inject(r"/gitrepositories\?", method="GET", status=429, times=1)
    management.inject(r"/secrets/c1-kubeconfig", status=503, times=1)
    result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    assert result.written == 2
    assert all(fault.hits == 1 for fault in [*c1.faults, *management.faults])


async def test_a_failing_or_hanging_cluster_does_not_stall_the_others(
    management: KubeAPIServer, workloads: Workloads
) -> None:
    servers = await workloads("broken", "slow", "healthy")
    servers["broken"].inject(r"/kustomizations", status=500)
    servers["slow"].inject(r"/", delay=3.0, status=None)  # longer than the 1s request timeout
    sink = make_sink(management, write_timeout=0.5)
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


@pytest.mark.parametrize(
    "value",
    [
        "line one\nline two: not a key\n  indented: still text",
        "{{ .Values.evil }} and {% raw %}",
        "key: value",
        "&anchor [1, 2]",
        "*alias",
        "---\napiVersion: v1\nkind: Secret",
        '"}, "spec": {"suspend": true',
        "# not a comment",
    ],
)
async def test_values_with_yaml_syntax_never_change_an_objects_structure(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink, value: str
) -> None:
    servers = await workloads("c1")
    result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", substitute={"VALUE": value})))
    assert result.written == 2
    kustomization = servers["c1"].object("kustomizations", "flux-system", "podinfo-c1")
    assert kustomization is not None
    assert kustomization["spec"]["postBuild"] == {"substitute": {"VALUE": value}}
    assert sorted(kustomization["spec"]) == ["interval", "path", "postBuild", "prune", "sourceRef"]
    assert len(servers["c1"].objects("kustomizations")) == 1


async def test_stale_snapshots_are_ignored_and_invalid_ones_change_nothing(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "2.0.0"), version=5))
    stale = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "1.0.0"), version=4))
    assert stale.stale
    with pytest.raises(ValueError, match="two syncs for module"):
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "3.0.0"), sync("podinfo"), version=6))
    with pytest.raises(ValueError, match="key and value disagree"):
        await sink.write(PROXY, "c2", snapshot(PROXY, "c1", sync("podinfo"), version=7))
    source = servers["c1"].object("gitrepositories", "flux-system", "podinfo-c1")
    assert source is not None and source["spec"]["ref"] == {"tag": "2.0.0"}


async def test_forget_stops_managing_a_cluster_without_deleting_its_objects(
    management: KubeAPIServer, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    sink.forget(PROXY, "c1")
    assert not sink.owns(PROXY, "c1")
    requests = len(servers["c1"].requests)
    await asyncio.sleep(0.6)  # two resync periods
    assert len(servers["c1"].requests) == requests
    assert names(servers["c1"], "kustomizations") == ["flux-system/podinfo-c1"]
