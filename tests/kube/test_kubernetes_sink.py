"""The Kubernetes sink against real kube-apiservers: apply, prune, gate, drift, conflicts, isolation.

Faults a real server cannot be made to produce on demand (a 403 on one URL, one injected
500/409/429, a server that hangs mid-request) are in `test_kubernetes_sink_faults.py`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import yaml
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from projections.kube import WorkloadClients
from projections.sinks import SinkResult
from projections.sinks.kubernetes import KubernetesSink
from tests.kube.cluster import KubeCluster
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
SOURCE = ("source.toolkit.fluxcd.io", "v1")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


async def names(server: KubeCluster, plural: str) -> list[str]:
    return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in await server.objects(plural)]


@pytest.fixture
async def slow_resync_sink(management: KubeCluster) -> AsyncIterator[KubernetesSink]:
    """A sink whose resync never comes during a test: only the drift watch can restore objects."""
    sink = make_sink(management, resync_interval=300.0)
    yield sink
    await sink.close()


async def test_remote_sync_is_applied_in_the_cluster_namespace_pointing_at_the_kubeconfig_secret(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
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
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    snap = snapshot(PROXY, "c1", sync("podinfo", "6.7.0", oci=True), sync("pinned", commit=COMMIT))
    result = await sink.write(PROXY, "c1", snap)
    assert result.written == 4

    c1 = servers["c1"]
    assert await names(c1, "ocirepositories") == ["flux-system/podinfo-c1"]
    assert await names(c1, "gitrepositories") == ["flux-system/pinned-c1"]
    assert await names(c1, "kustomizations") == ["flux-system/pinned-c1", "flux-system/podinfo-c1"]
    oci = await c1.object("ocirepositories", "flux-system", "podinfo-c1")
    assert oci is not None and oci["spec"]["url"] == "oci://ghcr.io/example/podinfo"
    pinned = await c1.object("gitrepositories", "flux-system", "pinned-c1")
    assert pinned is not None and pinned["spec"]["ref"] == {"commit": COMMIT}
    kustomization = await c1.object("kustomizations", "flux-system", "pinned-c1")
    assert kustomization is not None and "kubeConfig" not in kustomization["spec"]
    assert kustomization["metadata"]["annotations"]["rollout.dev/revision"] == f"sha1:{COMMIT}"
    # nothing of the proxy sync lands in the management cluster
    assert await management.objects("kustomizations") == await management.objects("ocirepositories") == []


async def test_removed_syncs_are_pruned_by_label_and_nothing_else_is_touched(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
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
    assert await names(management, "kustomizations") == ["fleet/a-c2", "fleet/b-c1", "fleet/hand-made"]
    assert await names(management, "gitrepositories") == ["fleet/a-c2", "fleet/b-c1"]

    result = await sink.write(REMOTE, "c1", None)  # tombstone: everything of c1 goes
    assert result.pruned == 2
    assert await names(management, "kustomizations") == ["fleet/a-c2", "fleet/hand-made"]
    assert not sink.owns(REMOTE, "c1")


async def test_kubeconfig_secrets_never_reach_the_logs_even_at_debug(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink, caplog: pytest.LogCaptureFixture
) -> None:
    servers = await workloads("c1")
    with caplog.at_level(logging.DEBUG):
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
        await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("b")))
    assert await servers["c1"].objects("kustomizations")
    secret = base64.b64encode(servers["c1"].kubeconfig_yaml().encode()).decode()
    for leak in (servers["c1"].token, secret[:40]):
        assert leak not in caplog.text


async def test_objects_deleted_or_edited_out_of_band_in_a_workload_cluster_are_restored_within_5s(
    management: KubeCluster, workloads: Workloads, slow_resync_sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    c1 = servers["c1"]
    await slow_resync_sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    started = time.monotonic()
    async with c1.client() as api:
        custom = CustomObjectsApi(api)
        await custom.delete_namespaced_custom_object(*KS, "flux-system", "kustomizations", "podinfo-c1")
        await custom.patch_namespaced_custom_object(
            *SOURCE,
            "flux-system",
            "gitrepositories",
            "podinfo-c1",
            {"spec": {"url": "https://evil.example.com/x"}},
            field_manager="kubectl-edit",
            _content_type="application/merge-patch+json",
        )
    await eventually(lambda: c1.object("kustomizations", "flux-system", "podinfo-c1"), timeout=5)
    await eventually(
        lambda: _url(c1, "flux-system", "podinfo-c1", "https://example.com/podinfo"),
        timeout=5,
    )
    assert time.monotonic() - started < 5.0


async def test_objects_deleted_or_edited_out_of_band_in_the_management_cluster_are_restored_within_5s(
    management: KubeCluster, workloads: Workloads, slow_resync_sink: KubernetesSink
) -> None:
    await workloads("c1")
    await slow_resync_sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("flux")))
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await custom.patch_namespaced_custom_object(
            *KS,
            NAMESPACE,
            "kustomizations",
            "flux-c1",
            {"spec": {"prune": False}},
            field_manager="kubectl-edit",
            _content_type="application/merge-patch+json",
        )
        await custom.delete_namespaced_custom_object(*SOURCE, NAMESPACE, "gitrepositories", "flux-c1")
    await eventually(lambda: _spec(management, "kustomizations", NAMESPACE, "flux-c1", "prune", True), timeout=5)
    await eventually(lambda: management.object("gitrepositories", NAMESPACE, "flux-c1"), timeout=5)


async def test_conflicting_field_managers_lose_the_fields_the_sink_sets_and_keep_their_own(
    management: KubeCluster, workloads: Workloads, slow_resync_sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    c1 = servers["c1"]
    await slow_resync_sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    other = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "podinfo-c1", "namespace": "flux-system"},
        "spec": {"interval": "1h", "suspend": True},
    }
    async with c1.client() as api:
        custom = CustomObjectsApi(api)
        # another applier, without force: the server refuses to hand over a field the sink owns
        with pytest.raises(ApiException) as conflict:
            await custom.patch_namespaced_custom_object(
                *KS, "flux-system", "kustomizations", "podinfo-c1", other,
                field_manager="platform-team", _content_type="application/apply-patch+yaml",
            )  # fmt: skip
        assert conflict.value.status == 409
        # with force it takes `interval` over, and adds `suspend`, a field the sink does not set
        await custom.patch_namespaced_custom_object(
            *KS, "flux-system", "kustomizations", "podinfo-c1", other,
            field_manager="platform-team", force=True, _content_type="application/apply-patch+yaml",
        )  # fmt: skip
    await eventually(lambda: _spec(c1, "kustomizations", "flux-system", "podinfo-c1", "interval", "10m"), timeout=5)
    live = await c1.object("kustomizations", "flux-system", "podinfo-c1", group=KS[0])
    assert live is not None
    assert live["spec"]["suspend"] is True  # the other manager's own field stays
    owners = {m["manager"]: m["fieldsV1"] for m in live["metadata"]["managedFields"]}
    assert "f:interval" in owners["rollout"]["f:spec"]
    assert "f:interval" not in owners["platform-team"]["f:spec"]
    assert "f:suspend" in owners["platform-team"]["f:spec"]


async def test_cluster_without_kubeconfig_secret_is_skipped_until_the_secret_appears(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1", secret=False)
    c1 = servers["c1"]
    proxy = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    remote = await sink.write(REMOTE, "c1", snapshot(REMOTE, "c1", sync("flux")))
    assert proxy.written == remote.written == 0
    assert sink.outcome(PROXY, "c1").state == sink.outcome(REMOTE, "c1").state == "not-ready"  # type: ignore[union-attr]
    await asyncio.sleep(0.5)  # a few retry periods: still nothing
    assert await c1.objects("kustomizations") == [] and await management.objects("kustomizations") == []

    await put_kubeconfig_secret(management, "c1", c1.kubeconfig_yaml())
    await eventually(lambda: _names_are(c1, "kustomizations", ["flux-system/podinfo-c1"]), timeout=5)
    await eventually(lambda: _names_are(management, "kustomizations", ["fleet/flux-c1"]), timeout=5)

    # a rotated/removed secret makes it not-ready again; objects already applied stay
    await delete_kubeconfig_secret(management, "c1")
    await eventually(lambda: sink.outcome(PROXY, "c1").state == "not-ready", timeout=5)  # type: ignore[union-attr]
    assert await names(c1, "kustomizations") == ["flux-system/podinfo-c1"]


async def test_a_workload_cluster_without_flux_system_fails_until_the_namespace_exists(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("bare")
    bare = servers["bare"]
    await bare.drop_namespace("flux-system")
    result = await sink.write(PROXY, "bare", snapshot(PROXY, "bare", sync("podinfo")))
    assert result.written == 0
    outcome = sink.outcome(PROXY, "bare")
    assert outcome is not None and outcome.state == "failed"
    assert "404" in outcome.reason and "flux-system" in outcome.reason

    await bare.create_namespace("flux-system")  # the next retry (backoff) converges
    await eventually(lambda: _names_are(bare, "kustomizations", ["flux-system/podinfo-bare"]), timeout=5)


@pytest.fixture
def unreachable_server() -> Iterator[str]:
    """An address that accepts TCP connections and never answers (never accept()ed)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


async def test_an_unreachable_workload_cluster_never_delays_applies_to_the_others(
    management: KubeCluster, workloads: Workloads, unreachable_server: str
) -> None:
    servers = await workloads("healthy")
    kubeconfig = servers["healthy"].kubeconfig()
    kubeconfig["clusters"][0]["cluster"]["server"] = unreachable_server
    await put_kubeconfig_secret(management, "gone", yaml.safe_dump(kubeconfig))
    sink = make_sink(management, write_timeout=0.5)
    try:
        started = time.monotonic()
        gone = await sink.write(PROXY, "gone", snapshot(PROXY, "gone", sync("podinfo")))
        assert gone.written == 0
        healthy = await sink.write(PROXY, "healthy", snapshot(PROXY, "healthy", sync("podinfo")))
        assert healthy.written == 2
        assert time.monotonic() - started < 3.0  # 0.5 s waiting for "gone", then "healthy" at full speed
        # drift in the healthy cluster is still undone promptly while "gone" keeps failing
        async with servers["healthy"].client() as api:
            await CustomObjectsApi(api).delete_namespaced_custom_object(
                *KS, "flux-system", "kustomizations", "podinfo-healthy"
            )
        healthy_cluster = servers["healthy"]
        await eventually(lambda: healthy_cluster.object("kustomizations", "flux-system", "podinfo-healthy"), timeout=5)
        outcome = sink.outcome(PROXY, "gone")
        assert outcome is None or outcome.state == "failed"
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
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink, value: str
) -> None:
    servers = await workloads("c1")
    result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", substitute={"VALUE": value})))
    assert result.written == 2
    kustomization = await servers["c1"].object("kustomizations", "flux-system", "podinfo-c1")
    assert kustomization is not None
    assert kustomization["spec"]["postBuild"] == {"substitute": {"VALUE": value}}
    assert kustomization["spec"].pop("force") is False  # the CRD's default, filled in by the server
    assert sorted(kustomization["spec"]) == ["interval", "path", "postBuild", "prune", "sourceRef"]
    assert len(await servers["c1"].objects("kustomizations")) == 1


async def test_stale_snapshots_are_ignored_and_invalid_ones_change_nothing(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "2.0.0"), version=5))
    stale = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "1.0.0"), version=4))
    assert stale.stale
    with pytest.raises(ValueError, match="two syncs for module"):
        await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo", "3.0.0"), sync("podinfo"), version=6))
    with pytest.raises(ValueError, match="key and value disagree"):
        await sink.write(PROXY, "c2", snapshot(PROXY, "c1", sync("podinfo"), version=7))
    source = await servers["c1"].object("gitrepositories", "flux-system", "podinfo-c1")
    assert source is not None and source["spec"]["ref"] == {"tag": "2.0.0"}


async def test_forget_stops_managing_a_cluster_without_deleting_its_objects(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("podinfo")))
    sink.forget(PROXY, "c1")
    assert not sink.owns(PROXY, "c1")
    assert await names(servers["c1"], "kustomizations") == ["flux-system/podinfo-c1"]
    async with servers["c1"].client() as api:  # neither the drift watch nor the resync brings it back
        await CustomObjectsApi(api).delete_namespaced_custom_object(*KS, "flux-system", "kustomizations", "podinfo-c1")
    await asyncio.sleep(1.0)  # three resync periods
    assert await names(servers["c1"], "kustomizations") == []


async def _names_are(server: KubeCluster, plural: str, expected: list[str]) -> bool:
    return await names(server, plural) == expected


async def _spec(server: KubeCluster, plural: str, namespace: str, name: str, key: str, value: object) -> bool:
    obj = await server.object(plural, namespace, name)
    return obj is not None and obj["spec"].get(key) == value


async def _url(server: KubeCluster, namespace: str, name: str, url: str) -> bool:
    return await _spec(server, "gitrepositories", namespace, name, "url", url)


async def test_a_workload_clusters_client_is_reused_and_a_changed_kubeconfig_secret_is_picked_up(
    management: KubeCluster, workloads: Workloads, sink: KubernetesSink
) -> None:
    servers = await workloads("c1", "elsewhere")
    await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a")))
    first = sink.clients.current(NAMESPACE, "c1")
    assert first is not None
    result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a"), sync("b"), version=2))
    assert result.written + result.unchanged == 4
    assert await names(servers["c1"], "kustomizations") == ["flux-system/a-c1", "flux-system/b-c1"]
    # the second converge and the drift watch use the client the first converge made
    assert sink.clients.current(NAMESPACE, "c1") is first
    await eventually(lambda: first.users == 1)  # the drift watch's use; the converges ended theirs

    # the secret now points at another API server: the next converge goes there, on a new client
    await delete_kubeconfig_secret(management, "c1")
    await put_kubeconfig_secret(management, "c1", servers["elsewhere"].kubeconfig_yaml())
    result = await sink.write(PROXY, "c1", snapshot(PROXY, "c1", sync("a"), version=3))
    assert result.written == 2
    assert await names(servers["elsewhere"], "kustomizations") == ["flux-system/a-c1"]
    second = sink.clients.current(NAMESPACE, "c1")
    assert second is not None and second is not first
    await eventually(lambda: first.rest_client.pool_manager.closed)
    # the drift watch reconnected through the new kubeconfig: drift there is undone
    elsewhere = servers["elsewhere"]
    await eventually(lambda: second.users == 1)
    async with elsewhere.client() as api:
        await CustomObjectsApi(api).delete_namespaced_custom_object(*KS, "flux-system", "kustomizations", "a-c1")
    await eventually(lambda: elsewhere.object("kustomizations", "flux-system", "a-c1"), timeout=5)
    assert len(sink.clients) == 1


async def test_workload_clients_beyond_the_bound_are_closed_unless_in_use(
    management: KubeCluster, workloads: Workloads
) -> None:
    await workloads("c1", "c2", "c3")
    clients = WorkloadClients(size=1)
    async with await new_client_from_config_dict(management.kubeconfig()) as api:
        c1 = await clients.acquire(api, namespace=NAMESPACE, cluster="c1")
        assert c1 is not None  # in use: kept, beyond the bound too
        c2 = await clients.acquire(api, namespace=NAMESPACE, cluster="c2")
        assert c2 is not None
        assert clients.current(NAMESPACE, "c1") is c1 and clients.current(NAMESPACE, "c2") is c2
        await c2.release()
        await c1.release()
        c3 = await clients.acquire(api, namespace=NAMESPACE, cluster="c3")
        assert c3 is not None
        assert len(clients) == 1 and clients.current(NAMESPACE, "c3") is c3
        await eventually(lambda: c1.rest_client.pool_manager.closed and c2.rest_client.pool_manager.closed)
        assert not c3.rest_client.pool_manager.closed
        assert await clients.acquire(api, namespace=NAMESPACE, cluster="absent") is None
        await clients.close()
        assert c3.rest_client.pool_manager.closed
