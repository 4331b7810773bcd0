"""HelmReleases on a real kube-apiserver: the Kubernetes sink applies and prunes them with
their HelmRepository; values changed out of band are reported on the real broker
(HelmValuesObserved) and left alone for the grace period, not reverted at once; the status
reporter reads a HelmRelease's readiness (helm-controller v2) like a Kustomization's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi

from infra import client
from infra.topics import TopicNames
from projections.helm_status import release_state
from projections.publisher import KafkaPublisher
from projections.sinks.kubernetes import KubernetesSink
from projections.sinks.live_values import LiveValues
from projections.status import StatusReporter
from rollout.api.manifests import Sync
from rollout.wire.assemblages import AssignedSync
from rollout.wire.events import HelmValuesObserved, SyncStatusReported, parse_event
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import FAST, NAMESPACE, Workloads, eventually, make_sink, snapshot
from tests.kube.test_status import condition

HELM = "helm.toolkit.fluxcd.io"
FLUX_NS = "flux-system"
VALUES = {"replicaCount": 2, "ui": {"color": "blue", "message": "c1"}}


def helm_sync(module: str = "web", values: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    record = Sync.model_validate(
        {
            "source": {
                "helm": {"url": "https://stefanprodan.github.io/podinfo", "chart": "podinfo", "version": "6.7.0"}
            },
            "package": {"helm": {"targetNamespace": "web", "values": VALUES if values is None else values}},
        }
    )
    assigned = AssignedSync(
        module=module, moduleNamespace=NAMESPACE, revision=record.revision, generation=generation, sync=record
    )
    return assigned.model_dump(by_alias=True)


async def release(server: KubeCluster, name: str = "web-c1") -> dict[str, Any] | None:
    return await server.object("helmreleases", FLUX_NS, name, group=HELM, version="v2")


async def edit_values(server: KubeCluster, values: dict[str, Any], name: str = "web-c1") -> None:
    """What a cluster's UI or `kubectl edit` does: an update by another field manager."""
    async with server.client() as api:
        await CustomObjectsApi(api).patch_namespaced_custom_object(
            HELM,
            "v2",
            FLUX_NS,
            "helmreleases",
            name,
            {"spec": {"values": values}},
            field_manager="kubectl-edit",
            _content_type="application/merge-patch+json",
        )


async def set_release_status(server: KubeCluster, status: dict[str, Any], name: str = "web-c1") -> None:
    async with server.client() as api:
        await CustomObjectsApi(api).patch_namespaced_custom_object_status(
            HELM, "v2", FLUX_NS, "helmreleases", name, {"status": status}, _content_type="application/merge-patch+json"
        )


def helm_status(generation: int, *, ready: str = "True", reason: str = "UpgradeSucceeded") -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "lastAttemptedRevision": "6.7.0",
        "conditions": [condition("Ready", ready, reason, f"Helm upgrade {reason}")],
    }


async def observed(bootstrap: str, topic: str) -> list[HelmValuesObserved]:
    events = [parse_event(record.value) for record in await client.read_all(bootstrap, topic)]
    return [e for e in events if isinstance(e, HelmValuesObserved)]


# --- readiness rules (pure) -------------------------------------------------------------------


def _release(generation: int = 2, **status: Any) -> dict[str, Any]:
    return {"kind": "HelmRelease", "metadata": {"generation": generation}, "status": status}


RETRYING_INSTALL = helm_status(-1, ready="False", reason="InstallFailed")


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (_release(**helm_status(2)), "succeeded"),
        (_release(**helm_status(2, reason="InstallSucceeded")), "succeeded"),
        (_release(**helm_status(1)), "updating"),  # new values not seen by helm-controller yet
        (_release(**{**helm_status(2), "lastAttemptedRevision": "6.6.0"}), "updating"),
        (_release(**{**helm_status(2), "lastAttemptedRevision": "6.7.0+0123456789ab"}), "succeeded"),
        (_release(**helm_status(2, ready="False", reason="UpgradeFailed")), "failed"),
        (_release(**helm_status(2, ready="False", reason="Progressing")), "updating"),
        (
            _release(**{**helm_status(2, ready="False", reason="UpgradeFailed"), "lastAttemptedRevision": "6.6.0"}),
            "updating",
        ),
        (
            _release(**{**helm_status(2), "conditions": [condition("Stalled", "True", "RetriesExceeded")]}),
            "failed",
        ),
        (
            _release(
                **{
                    **helm_status(2),
                    "conditions": [*helm_status(2)["conditions"], condition("Reconciling", "True", "Progressing")],
                }
            ),
            "updating",
        ),
        (_release(), "updating"),
        # helm-controller retrying a failed install: observedGeneration stays -1 (measured on v1.6.2)
        (_release(**{**RETRYING_INSTALL, "lastAttemptedGeneration": 2}), "failed"),
        (_release(**{**RETRYING_INSTALL, "lastAttemptedGeneration": 1}), "updating"),
        (_release(**{**helm_status(1), "lastAttemptedGeneration": 2}), "updating"),  # attempted, not yet observed
    ],
)
def test_helm_release_state_rules(obj: dict[str, Any], state: str) -> None:
    assert release_state(obj, "6.7.0") == state


def test_helm_release_from_an_oci_artifact_matches_its_digest() -> None:
    digest = "sha256:" + "b" * 64
    obj = _release(**{**helm_status(2), "lastAttemptedRevisionDigest": digest})
    assert release_state(obj, digest) == "succeeded"
    assert release_state(obj, "sha256:" + "c" * 64) == "updating"


# --- the sink and the reporter on the real API server ------------------------------------------


async def test_the_sink_applies_helm_releases_and_prunes_them_with_their_repositories(
    sink: KubernetesSink, workloads: Workloads
) -> None:
    workload = (await workloads("c1"))["c1"]
    await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync()))
    applied = await eventually(lambda: release(workload))
    assert applied["spec"]["values"] == VALUES
    assert applied["spec"]["chart"]["spec"]["sourceRef"] == {"kind": "HelmRepository", "name": "web-c1"}
    repository = await workload.object("helmrepositories", FLUX_NS, "web-c1", group="source.toolkit.fluxcd.io")
    assert repository is not None and repository["spec"]["url"] == "https://stefanprodan.github.io/podinfo"

    await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", version=2))
    assert await eventually(lambda: _gone(workload))


async def _gone(workload: KubeCluster) -> bool:
    repository = await workload.object("helmrepositories", FLUX_NS, "web-c1", group="source.toolkit.fluxcd.io")
    return await release(workload) is None and repository is None


@pytest.mark.integration
async def test_values_changed_on_the_cluster_are_reported_once_and_not_reverted_during_the_grace(
    management: KubeCluster, workloads: Workloads, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = TopicNames(topic_prefix).status
    publisher = KafkaPublisher(kafka_bootstrap, topic)
    sink = make_sink(management, live_values=LiveValues(publisher, grace=3.0))
    workload = (await workloads("c1"))["c1"]
    try:
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync()))
        await eventually(lambda: release(workload))
        assert await observed(kafka_bootstrap, topic) == []  # what the sink applied is not news

        edited = {"replicaCount": 5, "ui": {"color": "red", "message": "c1"}}
        await edit_values(workload, edited)
        [event] = await eventually(lambda: observed(kafka_bootstrap, topic), timeout=10)
        assert (event.cluster, event.module, event.values) == ("c1", "web", edited)
        # resyncs (every 0.3 s) and the drift watch run meanwhile: the edit stays for the grace
        await asyncio.sleep(2.0)
        kept = await release(workload)
        assert kept is not None and kept["spec"]["values"] == edited

        async def reverted() -> bool:
            current = await release(workload)
            return current is not None and current["spec"]["values"] == VALUES

        assert await eventually(reverted, timeout=10)  # no new snapshot came: the declared values
        assert len(await observed(kafka_bootstrap, topic)) == 1

        # the engine keeps a value (keepCurrent): the snapshot carrying it is applied as is
        await edit_values(workload, {"ui": {"color": "green", "message": "c1"}, "replicaCount": 2})
        await eventually(lambda: _count(observed(kafka_bootstrap, topic), 2), timeout=10)
        keep = {"replicaCount": 2, "ui": {"color": "green", "message": "c1"}}
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync(values=keep), version=2))
        await asyncio.sleep(4.0)  # past the grace
        current = await release(workload)
        assert current is not None and current["spec"]["values"] == keep
        assert len(await observed(kafka_bootstrap, topic)) == 2
    finally:
        await sink.close()
        await publisher.close()


class EditedWhileConverging(LiveValues):
    """Lands an edit of the values on the cluster between the sink's listing and its apply
    (once, on the first judgement of a live HelmRelease): the race a resync can lose."""

    def __init__(self, workload: KubeCluster, edited: dict[str, Any], publish: Any) -> None:
        super().__init__(publish, grace=60.0)
        self.workload = workload
        self.edited = edited
        self.armed = False
        self.judged: list[Any] = []

    async def hold(self, desired: Any, live: Any) -> bool:
        if self.armed and live is not None:
            self.armed = False
            await edit_values(self.workload, self.edited)  # after the listing `live` came from
        self.judged.append((live or {}).get("spec", {}).get("values"))
        return await super().hold(desired, live)


@pytest.mark.integration
async def test_an_edit_landing_between_the_listing_and_the_apply_is_reported_not_reverted(
    management: KubeCluster, workloads: Workloads
) -> None:
    published: list[HelmValuesObserved] = []

    async def publish(key: str, value: bytes) -> None:
        event = parse_event(value)
        assert isinstance(event, HelmValuesObserved)
        published.append(event)

    workload = (await workloads("c1"))["c1"]
    edited = {"replicaCount": 7, "ui": {"color": "red", "message": "c1"}}
    live_values = EditedWhileConverging(workload, edited, publish)
    sink = make_sink(management, live_values=live_values)
    try:
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync()))
        await eventually(lambda: release(workload))
        live_values.armed = True  # the next converge (a resync) reads, then the edit lands
        await eventually(lambda: published, timeout=10)
        assert [(e.cluster, e.module, e.values) for e in published] == [("c1", "web", edited)]
        assert VALUES in live_values.judged and edited in live_values.judged  # judged stale, then again
        await asyncio.sleep(1.0)  # resyncs meanwhile (every 0.3 s): held, not reverted
        kept = await release(workload)
        assert kept is not None and kept["spec"]["values"] == edited
        assert len(published) == 1
    finally:
        await sink.close()


async def _count(found: Any, count: int) -> bool:
    return len(await found) == count


@pytest.mark.integration
async def test_helm_release_readiness_is_reported_as_sync_status(
    management: KubeCluster, workloads: Workloads, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = TopicNames(topic_prefix).status
    publisher = KafkaPublisher(kafka_bootstrap, topic)
    sink = make_sink(management, reporter=StatusReporter(publisher, policy=FAST, retry_interval=0.2, watch_timeout=2))
    workload = (await workloads("c1"))["c1"]

    async def states() -> list[tuple[str, str, str, int | None]]:
        events = [parse_event(r.value) for r in await client.read_all(kafka_bootstrap, topic)]
        return [(e.module, e.revision, e.state, e.generation) for e in events if isinstance(e, SyncStatusReported)]

    try:
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync(generation=3)))
        applied = await eventually(lambda: release(workload))
        await eventually(lambda: _equal(states(), [("web", "6.7.0", "updating", 3)]), timeout=20)
        generation = applied["metadata"]["generation"]
        await set_release_status(workload, helm_status(generation, ready="False", reason="UpgradeFailed"))
        failed = [("web", "6.7.0", "updating", 3), ("web", "6.7.0", "failed", 3)]
        await eventually(lambda: _equal(states(), failed), timeout=20)
        await set_release_status(workload, helm_status(generation))
        await eventually(lambda: _equal(states(), [*failed, ("web", "6.7.0", "succeeded", 3)]), timeout=20)
    finally:
        await sink.close()


async def _equal(found: Any, expected: list[Any]) -> bool:
    return bool(await found == expected)


async def test_a_deleted_helm_release_is_put_back_by_the_drift_watch(
    management: KubeCluster, workloads: Workloads
) -> None:
    sink = make_sink(management, resync_interval=300.0)  # no resync in time: only the watch can
    workload = (await workloads("c1"))["c1"]
    try:
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", helm_sync()))
        first = await eventually(lambda: release(workload))
        await asyncio.sleep(0.5)  # the drift watch has listed
        async with workload.client() as api:
            await CustomObjectsApi(api).delete_namespaced_custom_object(HELM, "v2", FLUX_NS, "helmreleases", "web-c1")

        async def recreated() -> dict[str, Any] | None:
            current = await release(workload)
            return current if current and current["metadata"]["uid"] != first["metadata"]["uid"] else None

        assert (await eventually(recreated, timeout=10))["spec"]["values"] == VALUES
    finally:
        await sink.close()
