"""The cluster watcher: Cluster API Clusters and kubeconfig secrets become fleet events.

The loop runs against the session's real kube-apiserver (`management`), with the upstream
Cluster API CRD (v1beta2 stored, v1beta1 served, no conversion webhook). One test needs a
management cluster that does not serve v1beta2 at all and uses the fake API server for it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi, V1ObjectMeta, V1Secret

from infra import client
from infra.topics import TopicNames
from projections import watcher as watcher_module
from projections.informer import list_and_watch
from projections.watcher import ClusterWatcher, control_plane_ready, list_secret_metadata, observe
from rollout.api.manifests import ClusterManifest
from rollout.wire.events import ClusterObserved, ClusterRemoved, parse_event
from rollout_cli.processes.watch_clusters import last_observations, run_watch_clusters
from tests.kube.apiserver import KubeAPIServer
from tests.kube.cluster import KubeCluster, KubePool
from tests.kube.conftest import FAST, NAMESPACE, AnyCluster, eventually, put_kubeconfig_secret

NOW = "2026-01-01T00:00:00Z"
CAPI = "cluster.x-k8s.io"


def capi_cluster(name: str, version: str = "v1beta2", *, namespace: str = NAMESPACE, **extra: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": f"{CAPI}/{version}",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "labels": {"env": "prod"}},
        "spec": {"paused": False},
    }
    obj.update(extra)
    return obj


# --- observe: the pure rule --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ready"),
    [
        ({}, False),
        ({"controlPlaneReady": True}, True),  # v1beta1
        ({"controlPlaneReady": False, "infrastructureReady": True}, False),
        ({"initialization": {"controlPlaneInitialized": True}}, True),  # v1beta2
        ({"initialization": {"infrastructureProvisioned": True}}, False),
        ({"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}, True),
        ({"conditions": [{"type": "ControlPlaneInitialized", "status": "False"}]}, False),
        ({"conditions": [{"type": "Available", "status": "True"}]}, False),
        ({"v1beta2": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}}, True),
    ],
)
def test_control_plane_readiness_from_v1beta1_and_v1beta2_fields(status: dict[str, Any], ready: bool) -> None:
    assert control_plane_ready({"status": status}) is ready


def test_a_cluster_is_ready_only_with_its_kubeconfig_secret() -> None:
    obj = capi_cluster("c1", status={"initialization": {"controlPlaneInitialized": True}})
    assert not observe(obj, secret_present=False).status.ready
    manifest = observe(obj, secret_present=True)
    assert manifest.status.ready
    assert manifest.metadata.labels == {"env": "prod"}
    assert manifest.metadata.namespace == NAMESPACE
    assert manifest.metadata.annotations == {"rollout.dev/observed-by": "watch-clusters"}


def test_a_deleting_cluster_is_not_ready_and_bulky_annotations_are_dropped() -> None:
    obj = capi_cluster("c1", status={"controlPlaneReady": True})
    obj["metadata"]["deletionTimestamp"] = NOW
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "region": "eu"}
    manifest = observe(obj, secret_present=True)
    assert not manifest.status.control_plane_ready
    assert manifest.metadata.annotations == {"region": "eu", "rollout.dev/observed-by": "watch-clusters"}


def test_names_the_engine_cannot_use_are_refused() -> None:
    with pytest.raises(ValueError):
        observe(capi_cluster("prod.eu.1"), secret_present=True)


def test_last_observations_fold_the_topic() -> None:
    one = observe(capi_cluster("one"), secret_present=False)
    two = observe(capi_cluster("two"), secret_present=True)
    values = [
        ClusterObserved(cluster=one).to_bytes(),
        b"not json",
        ClusterObserved(cluster=two).to_bytes(),
        ClusterRemoved(name="one").to_bytes(),
        None,
    ]
    assert last_observations(values) == [two]


# --- the loop against an API test server ---------------------------------------------------------


class Captured:
    """A publisher that keeps events in memory."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, key: str, value: bytes) -> None:
        event = parse_event(value)
        assert key == (event.cluster.name if isinstance(event, ClusterObserved) else event.name)
        self.events.append(event)

    def summary(self) -> list[tuple[str, str, bool | None]]:
        out: list[tuple[str, str, bool | None]] = []
        for event in self.events:
            if isinstance(event, ClusterObserved):
                out.append(("observed", event.cluster.name, event.cluster.status.ready))
            else:
                out.append(("removed", event.name, None))
        return out


@asynccontextmanager
async def running(watcher: ClusterWatcher) -> AsyncIterator[ClusterWatcher]:
    task = asyncio.create_task(watcher.run())
    try:
        await eventually(lambda: watcher.synced or task.done())
        yield watcher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if task.done() and not task.cancelled() and task.exception():
            raise task.exception()  # type: ignore[misc]


async def create_cluster(server: AnyCluster, obj: dict[str, Any], status: dict[str, Any] | None = None) -> None:
    group, version = obj["apiVersion"].split("/")
    namespace = obj["metadata"]["namespace"]
    async with server.client() as api:
        custom = CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(group, version, namespace, "clusters", obj)
        if status is not None:
            await set_cluster_status(server, obj, status)


async def set_cluster_status(server: AnyCluster, obj: dict[str, Any], status: dict[str, Any]) -> None:
    group, version = obj["apiVersion"].split("/")
    async with server.client() as api:
        await CustomObjectsApi(api).patch_namespaced_custom_object_status(
            group,
            version,
            obj["metadata"]["namespace"],
            "clusters",
            obj["metadata"]["name"],
            {"status": status},
            _content_type="application/merge-patch+json",
        )


async def test_cluster_lifecycle_is_published_once_per_change(management: KubeCluster, kube_pool: KubePool) -> None:
    c1 = capi_cluster("c1")
    await create_cluster(management, c1)
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST, watch_timeout=1)):
        await eventually(lambda: captured.summary() == [("observed", "c1", False)])
        assert captured.events[0].cluster.status.control_plane_ready is False

        await set_cluster_status(management, c1, {"initialization": {"controlPlaneInitialized": True}})
        await eventually(lambda: len(captured.events) == 2)
        assert captured.events[1].cluster.status.control_plane_ready is True
        assert not captured.events[1].cluster.status.ready  # the secret is still missing

        await set_cluster_status(management, c1, {"phase": "Provisioned"})  # changes nothing the engine sees
        async with management.client() as client_api:  # nor does an unrelated secret
            await CoreV1Api(client_api).create_namespaced_secret(
                NAMESPACE,
                V1Secret(metadata=V1ObjectMeta(name="c1-ca"), data={"tls.crt": base64.b64encode(b"x").decode()}),
            )
        await put_kubeconfig_secret(management, "c1", "kubeconfig")
        await eventually(lambda: captured.summary()[-1] == ("observed", "c1", True))

        async with management.client() as client_api:
            await CustomObjectsApi(client_api).patch_namespaced_custom_object(
                CAPI,
                "v1beta2",
                NAMESPACE,
                "clusters",
                "c1",
                {"metadata": {"labels": {"ring": "canary"}}},
                _content_type="application/merge-patch+json",
            )
        await eventually(lambda: len(captured.events) == 4)
        assert captured.events[3].cluster.metadata.labels == {"env": "prod", "ring": "canary"}

        kube_pool.compact()  # the next watch resumes from a compacted resourceVersion: 410, list again
        await asyncio.sleep(1.5)
        async with management.client() as client_api:
            await CustomObjectsApi(client_api).delete_namespaced_custom_object(
                CAPI, "v1beta2", NAMESPACE, "clusters", "c1"
            )
        await eventually(lambda: captured.summary()[-1] == ("removed", "c1", None))
        await asyncio.sleep(0.3)
    assert captured.summary() == [
        ("observed", "c1", False),
        ("observed", "c1", False),
        ("observed", "c1", True),
        ("observed", "c1", True),
        ("removed", "c1", None),
    ]


async def test_a_ready_cluster_whose_kubeconfig_secret_appears_late_becomes_ready_with_it(
    management: KubeCluster,
) -> None:
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        c1 = capi_cluster("c1", "v1beta2")
        await create_cluster(management, c1, {"initialization": {"controlPlaneInitialized": True}})
        await eventually(lambda: captured.summary()[-1:] == [("observed", "c1", False)])
        await put_kubeconfig_secret(management, "c1", "kubeconfig")  # the metadata-only secret watch sees it
        await eventually(lambda: captured.summary()[-1:] == [("observed", "c1", True)])


async def test_an_older_cluster_api_without_v1beta2_is_watched_at_v1beta1(fake_management: KubeAPIServer) -> None:
    management = fake_management  # a CRD that does not serve v1beta2: the fake's `unserve`
    management.unserve(CAPI, "v1beta2")
    await create_cluster(management, capi_cluster("old", "v1beta1"), {"controlPlaneReady": True})
    await put_kubeconfig_secret(management, "old", "kubeconfig")
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        await eventually(lambda: captured.summary() == [("observed", "old", True)])
    assert management.requests_to(r"/apis/cluster.x-k8s.io/v1beta1/clusters")


async def test_only_the_given_namespaces_are_watched(management: KubeCluster) -> None:
    await create_cluster(management, capi_cluster("inside"))
    await create_cluster(management, capi_cluster("outside", namespace="elsewhere"))
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, namespaces=[NAMESPACE], policy=FAST)):
        await eventually(lambda: captured.summary() == [("observed", "inside", False)])
        await asyncio.sleep(0.3)
    assert captured.summary() == [("observed", "inside", False)]


async def test_a_restart_publishes_only_what_changed_while_it_was_down(management: KubeCluster) -> None:
    same = capi_cluster("same")
    await create_cluster(management, same)
    seed = [
        observe({**same, "metadata": {**same["metadata"]}}, secret_present=False),  # unchanged: nothing to say
        observe(capi_cluster("gone"), secret_present=True),  # deleted while the watcher was down
        ClusterManifest.model_validate(  # applied by hand with `rollout apply`: not the watcher's to remove
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "manual", "namespace": NAMESPACE},
            }
        ),
    ]
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, seed=seed, policy=FAST)):
        await eventually(lambda: captured.summary() == [("removed", "gone", None)])
        await asyncio.sleep(0.3)
    assert captured.summary() == [("removed", "gone", None)]


@pytest.mark.integration
async def test_watch_clusters_publishes_observations_and_removals_to_kafka(
    management: KubeCluster, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(management.kubeconfig()))
    topic = TopicNames(topic_prefix).clusters

    async def published() -> list[tuple[str, str, bool | None]]:
        captured = Captured()
        for record in await client.read_all(kafka_bootstrap, topic):
            await captured(record.key or "", record.value or b"")
        return captured.summary()

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_watch_clusters(
            kubeconfig=str(kubeconfig),
            context=None,
            namespaces=(),
            bootstrap=kafka_bootstrap,
            prefix=topic_prefix,
            stop=stop,
        )
    )
    try:
        await create_cluster(management, capi_cluster("c1"), {"initialization": {"controlPlaneInitialized": True}})
        await put_kubeconfig_secret(management, "c1", "kubeconfig")
        await eventually(lambda: _last(published(), ("observed", "c1", True)), timeout=20)
        async with management.client() as api:
            await CustomObjectsApi(api).delete_namespaced_custom_object(CAPI, "v1beta2", NAMESPACE, "clusters", "c1")
        await eventually(lambda: _last(published(), ("removed", "c1", None)), timeout=20)
    finally:
        stop.set()
        await task
    # a restart publishes nothing new: it learned from the topic what it had said
    before = await published()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_watch_clusters(
            kubeconfig=str(kubeconfig),
            context=None,
            namespaces=(),
            bootstrap=kafka_bootstrap,
            prefix=topic_prefix,
            stop=stop,
        )
    )
    await asyncio.sleep(1.0)
    stop.set()
    await task
    assert await published() == before


async def _last(found: Any, expected: tuple[str, str, bool | None]) -> bool:
    events = await found
    return bool(events) and events[-1] == expected


# --- what the real API server does ---------------------------------------------------------------


async def test_a_metadata_only_secret_watch_stays_open_and_delivers_events(management: KubeCluster) -> None:
    """The watch asks for PartialObjectMetadata; the List form made the server close it at once."""
    async with management.client() as api:
        response = await list_secret_metadata(api, NAMESPACE, watch=True, timeout_seconds=2, _preload_content=False)
        started = asyncio.get_running_loop().time()
        await put_kubeconfig_secret(management, "late", "kubeconfig")
        line = await asyncio.wait_for(response.content.readline(), 5)
        event = yaml.safe_load(line)
        assert event["type"] == "ADDED"
        assert event["object"]["kind"] == "PartialObjectMetadata"
        assert event["object"]["metadata"]["name"] == "late-kubeconfig"
        assert "data" not in event["object"]  # the watcher never receives a kubeconfig
        assert await response.content.read() == b""  # then the stream stays open until its timeout
        assert asyncio.get_running_loop().time() - started >= 1.5
        response.close()


async def test_an_expired_resource_version_makes_the_informer_list_again(
    management: KubeCluster, kube_pool: KubePool, caplog: pytest.LogCaptureFixture
) -> None:
    listings: list[list[str]] = []
    events: list[tuple[str, str]] = []

    async def on_list(items: list[dict[str, Any]]) -> None:
        listings.append(sorted(i["metadata"]["name"] for i in items))

    async def on_event(kind: str, obj: dict[str, Any]) -> None:
        events.append((kind, obj["metadata"]["name"]))

    await put_kubeconfig_secret(management, "before", "kubeconfig")
    async with management.client() as api:
        informer = asyncio.create_task(
            list_and_watch(
                partial(list_secret_metadata, api, NAMESPACE),
                on_list=on_list,
                on_event=on_event,
                what="secrets",
                policy=FAST,
                watch_timeout=1,
            )
        )
        try:
            await eventually(lambda: listings == [["before-kubeconfig"]])
            await put_kubeconfig_secret(management, "elsewhere", "kubeconfig", namespace="elsewhere")
            kube_pool.compact()  # the fleet watch's resourceVersion is now older than etcd's history
            with caplog.at_level(logging.INFO, logger="rollout.kube"):
                await eventually(lambda: len(listings) == 2, timeout=5)
            assert "410 Gone" in caplog.text
            await put_kubeconfig_secret(management, "after", "kubeconfig")
            await eventually(lambda: ("ADDED", "after-kubeconfig") in events)
        finally:
            informer.cancel()
            await asyncio.gather(informer, return_exceptions=True)


async def test_a_v1beta2_cluster_becomes_ready_late_through_its_initialization_status(
    management: KubeCluster,
) -> None:
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        c1 = capi_cluster("late", "v1beta2")
        await create_cluster(management, c1)
        await put_kubeconfig_secret(management, "late", "kubeconfig")
        await eventually(lambda: captured.summary()[-1:] == [("observed", "late", False)])
        await set_cluster_status(
            management,
            c1,
            {
                "initialization": {"controlPlaneInitialized": True},
                "conditions": [
                    {
                        "type": "ControlPlaneInitialized",
                        "status": "True",
                        "reason": "Initialized",
                        "message": "",
                        "lastTransitionTime": NOW,
                    }
                ],
            },
        )
        await eventually(lambda: captured.summary()[-1:] == [("observed", "late", True)])


async def test_a_v1beta1_only_status_is_dropped_by_the_real_server_and_the_cluster_stays_not_ready(
    management: KubeCluster,
) -> None:
    """Upstream CRD: v1beta2 stored, no conversion webhook. `controlPlaneReady` does not survive."""
    old = capi_cluster("old", "v1beta1")
    await create_cluster(management, old, {"controlPlaneReady": True})
    await put_kubeconfig_secret(management, "old", "kubeconfig")
    async with management.client() as api:
        stored = await CustomObjectsApi(api).get_namespaced_custom_object(CAPI, "v1beta1", NAMESPACE, "clusters", "old")
    assert "controlPlaneReady" not in (stored.get("status") or {})
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        await eventually(lambda: captured.summary() == [("observed", "old", False)])
        # what a v1beta2-era provider writes is read, whichever version wrote it
        initialized = {"initialization": {"controlPlaneInitialized": True}}
        await set_cluster_status(management, capi_cluster("old", "v1beta2"), initialized)
        await eventually(lambda: captured.summary()[-1:] == [("observed", "old", True)])


async def test_watches_the_server_closes_at_once_back_off_instead_of_spinning(
    management: KubeCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The old bug, reproduced on the real server: a watch asking for the List form ends (200, no
    event) at the first event, and at once from then on — it resumes from the same old
    resourceVersion. The informer must back off (and relist now and then), not re-watch at once."""
    monkeypatch.setattr(watcher_module, "_METADATA_OBJECT", watcher_module._METADATA_LIST)
    watches: list[float] = []

    async def counted(api: Any, namespace: str, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            watches.append(asyncio.get_running_loop().time())
        return await list_secret_metadata(api, namespace, **kwargs)

    async def ignore(*_: Any) -> None:
        return None

    async with management.client() as api:
        informer = asyncio.create_task(
            list_and_watch(
                partial(counted, api, NAMESPACE),
                on_list=ignore,
                on_event=ignore,
                what="secrets",
                policy=FAST,
                watch_timeout=30,
                relist_backoff=1.0,
            )
        )
        with caplog.at_level(logging.WARNING, logger="rollout.kube"):
            await asyncio.sleep(0.3)
            await put_kubeconfig_secret(management, "trigger", "kubeconfig")  # an event it cannot encode
            await asyncio.sleep(3.0)
        informer.cancel()
        await asyncio.gather(informer, return_exceptions=True)
    assert len(watches) >= 3  # the server did close them at once (a healthy watch lasts 30 s)
    assert len(watches) < 30  # ~6,000 in 150 s before: no backoff at all
    assert "closed at once without an event" in caplog.text
