"""The cluster watcher: Cluster API Clusters and kubeconfig secrets become fleet events."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi, V1ObjectMeta, V1Secret

from infra import client
from infra.topics import TopicNames
from projections.watcher import ClusterWatcher, control_plane_ready, observe
from rollout.events import ClusterObserved, ClusterRemoved, parse_event
from rollout.manifests import ClusterManifest
from rollout_cli.kube import last_observations, run_watch_clusters
from tests.kube.apiserver import KubeAPIServer
from tests.kube.conftest import FAST, NAMESPACE, eventually, put_kubeconfig_secret

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


async def create_cluster(server: KubeAPIServer, obj: dict[str, Any], status: dict[str, Any] | None = None) -> None:
    group, version = obj["apiVersion"].split("/")
    namespace = obj["metadata"]["namespace"]
    async with server.client() as api:
        custom = CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(group, version, namespace, "clusters", obj)
        if status is not None:
            await set_cluster_status(server, obj, status)


async def set_cluster_status(server: KubeAPIServer, obj: dict[str, Any], status: dict[str, Any]) -> None:
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


async def test_cluster_lifecycle_is_published_once_per_change(management: KubeAPIServer) -> None:
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

        management.compact()  # the next watch resumes from a forgotten resourceVersion: 410, list again
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


async def test_a_cluster_that_appears_before_its_secret_becomes_ready_with_it(management: KubeAPIServer) -> None:
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        old = capi_cluster("old", "v1beta1")
        await create_cluster(management, old, {"controlPlaneReady": True})
        await eventually(lambda: captured.summary()[-1:] == [("observed", "old", False)])
        await put_kubeconfig_secret(management, "old", "kubeconfig")
        await eventually(lambda: captured.summary()[-1:] == [("observed", "old", True)])


async def test_an_older_cluster_api_without_v1beta2_is_watched_at_v1beta1(management: KubeAPIServer) -> None:
    management.unserve(CAPI, "v1beta2")
    await create_cluster(management, capi_cluster("old", "v1beta1"), {"controlPlaneReady": True})
    await put_kubeconfig_secret(management, "old", "kubeconfig")
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, policy=FAST)):
        await eventually(lambda: captured.summary() == [("observed", "old", True)])
    assert management.requests_to(r"/apis/cluster.x-k8s.io/v1beta1/clusters")


async def test_only_the_given_namespaces_are_watched(management: KubeAPIServer) -> None:
    await create_cluster(management, capi_cluster("inside"))
    await create_cluster(management, capi_cluster("outside", namespace="elsewhere"))
    captured = Captured()
    async with management.client() as api, running(ClusterWatcher(api, captured, namespaces=[NAMESPACE], policy=FAST)):
        await eventually(lambda: captured.summary() == [("observed", "inside", False)])
        await asyncio.sleep(0.3)
    assert captured.summary() == [("observed", "inside", False)]


async def test_a_restart_publishes_only_what_changed_while_it_was_down(management: KubeAPIServer) -> None:
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
    management: KubeAPIServer, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
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
