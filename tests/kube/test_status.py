"""Sync status: the rules as a pure function, and the reporter end to end on a real broker."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

import pytest
from kubernetes_asyncio.client import CustomObjectsApi

from infra import client
from infra.topics import TopicNames
from projections.publisher import KafkaPublisher
from projections.status import StatusReporter, revision_matches, sync_state
from rollout.wire.events import SyncStatusReported, parse_event
from tests.kube.apiserver import KubeAPIServer
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import (
    FAST,
    NAMESPACE,
    AnyCluster,
    Workloads,
    eventually,
    make_sink,
    put_kubeconfig_secret,
    snapshot,
    sync,
)

SHA1 = "3c5d2b5e0e1a9d1d1b6b1c0f1f2e3d4c5b6a7980"
SHA256 = "a" * 64
NOW = "2026-01-01T00:00:00Z"


def condition(kind: str, status: str, reason: str, message: str = "msg") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": NOW}


def kustomization(
    *,
    generation: int = 1,
    observed: int | None = 1,
    ready: tuple[str, str] | None = ("True", "ReconciliationSucceeded"),
    applied: str | None = f"6.7.0@sha1:{SHA1}",
    attempted: str | None = "same",
    reconciling: bool = False,
    stalled: bool = False,
) -> dict[str, Any]:
    conditions = []
    if ready is not None:
        conditions.append(condition("Ready", ready[0], ready[1]))
    if reconciling:
        conditions.append(condition("Reconciling", "True", "Progressing"))
    if stalled:
        conditions.append(condition("Stalled", "True", "BuildFailed"))
    status: dict[str, Any] = {"conditions": conditions}
    if observed is not None:
        status["observedGeneration"] = observed
    if applied is not None:
        status["lastAppliedRevision"] = applied
    if attempted is not None:
        status["lastAttemptedRevision"] = applied if attempted == "same" else attempted
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("reported", "assigned", "matches"),
    [
        (f"6.7.0@sha1:{SHA1}", "6.7.0", True),
        (f"6.7.0@sha1:{SHA1}", "6.7.1", False),
        (f"6.7.0@sha1:{SHA1}", f"sha1:{SHA1}", True),
        (f"sha1:{SHA1}", f"sha1:{SHA1}", True),
        (f"sha1:{SHA1}", f"sha1:{SHA1[:7]}", True),  # a short commit
        (f"sha1:{SHA1}", f"sha1:{SHA1[:5]}", False),  # too short to mean anything
        (f"sha1:{SHA1}", "6.7.0", False),
        (f"v1.2@sha256:{SHA256}", "v1.2", True),
        (f"v1.2@sha256:{SHA256}", f"sha256:{SHA256}", True),
        (f"sha256:{SHA256}", f"sha256:{SHA256}", True),
        (f"sha256:{SHA256}", f"sha1:{SHA256[:40]}", False),
        (f"release@2024@sha1:{SHA1}", "release@2024", True),  # '@' in a tag: split at the last
        ("", "6.7.0", False),
        (None, "6.7.0", False),
    ],
)
def test_revision_matching(reported: str | None, assigned: str, matches: bool) -> None:
    assert revision_matches(reported, assigned) is matches


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (kustomization(), "succeeded"),
        (kustomization(observed=None), "updating"),  # never reconciled
        (kustomization(generation=2, observed=1), "updating"),  # new spec not seen yet
        (kustomization(applied=f"6.6.0@sha1:{SHA1}"), "updating"),  # still the previous revision
        (kustomization(ready=("Unknown", "Progressing")), "updating"),  # every reconcile passes here
        (kustomization(reconciling=True), "updating"),
        (kustomization(attempted=f"6.8.0@sha1:{SHA1}"), "updating"),  # something newer is attempted
        (kustomization(ready=("True", "SomethingElse")), "updating"),
        (kustomization(ready=None), "updating"),
        (kustomization(ready=("False", "ReconciliationFailed")), "failed"),
        (kustomization(ready=("False", "HealthCheckFailed")), "failed"),
        (kustomization(ready=("False", "BuildFailed")), "failed"),
        (kustomization(ready=("False", "ArtifactFailed")), "failed"),
        (kustomization(ready=("False", "DependencyNotReady")), "updating"),
        (kustomization(ready=("False", "Progressing")), "updating"),
        # failing on the previous revision: the assigned one has not been tried yet
        (
            kustomization(ready=("False", "ReconciliationFailed"), applied=None, attempted=f"6.6.0@sha1:{SHA1}"),
            "updating",
        ),
        (
            kustomization(ready=("False", "ReconciliationFailed"), applied=None, attempted=f"6.7.0@sha1:{SHA1}"),
            "failed",
        ),
        (kustomization(ready=("False", "ReconciliationFailed"), generation=2, observed=1), "updating"),
        (kustomization(ready=("Unknown", "Progressing"), stalled=True), "failed"),
    ],
)
def test_sync_state_rules(obj: dict[str, Any], state: str) -> None:
    assert sync_state(obj, "6.7.0") == state


def test_sync_state_for_commits_and_digests() -> None:
    assert sync_state(kustomization(applied=f"sha1:{SHA1}"), f"sha1:{SHA1}") == "succeeded"
    assert sync_state(kustomization(applied=f"v1@sha256:{SHA256}"), f"sha256:{SHA256}") == "succeeded"
    assert sync_state(kustomization(applied=f"v1@sha256:{SHA256}"), "v2") == "updating"


# --- the reporter, end to end -----------------------------------------------------------------


async def set_status(server: AnyCluster, namespace: str, name: str, status: dict[str, Any]) -> None:
    async with server.client() as api:
        await CustomObjectsApi(api).patch_namespaced_custom_object_status(
            "kustomize.toolkit.fluxcd.io",
            "v1",
            namespace,
            "kustomizations",
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )


def flux_status(
    revision: str, *, ready: str = "True", reason: str = "ReconciliationSucceeded", **extra: Any
) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "lastAppliedRevision": revision if ready == "True" else None,
        "lastAttemptedRevision": revision,
        "conditions": [condition("Ready", ready, reason, f"{reason} at {revision}")],
        **extra,
    }


async def reports(bootstrap: str, topic: str) -> list[tuple[str, str, str, str]]:
    events = [parse_event(record.value) for record in await client.read_all(bootstrap, topic)]
    return [(e.cluster, e.module, e.revision, e.state) for e in events if isinstance(e, SyncStatusReported)]


@pytest.mark.integration
async def test_status_changes_become_exactly_one_sync_status_event_each(
    management: KubeCluster, workloads: Workloads, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = TopicNames(topic_prefix).status
    publisher = KafkaPublisher(kafka_bootstrap, topic)
    reporter = StatusReporter(publisher, policy=FAST, retry_interval=0.2, watch_timeout=2)
    sink = make_sink(management, reporter=reporter)
    servers = await workloads("c1")
    try:
        await sink.write("RemoteAssemblage", "c1", snapshot("RemoteAssemblage", "c1", sync("flux", "v2.4.0")))
        await sink.write("ProxyAssemblage", "c1", snapshot("ProxyAssemblage", "c1", sync("podinfo", "6.7.0")))
        expected = [("c1", "flux", "v2.4.0", "updating"), ("c1", "podinfo", "6.7.0", "updating")]
        await eventually(lambda: _sorted(reports(kafka_bootstrap, topic), expected), timeout=20)

        # remote: Flux in the management cluster reports success
        await set_status(management, NAMESPACE, "flux-c1", flux_status(f"v2.4.0@sha1:{SHA1}"))
        expected.append(("c1", "flux", "v2.4.0", "succeeded"))
        await eventually(lambda: _sorted(reports(kafka_bootstrap, topic), expected), timeout=20)

        # proxy: Flux inside the workload cluster reports a failure of the assigned revision
        workload = servers["c1"]
        await set_status(
            workload,
            "flux-system",
            "podinfo-c1",
            flux_status(f"6.7.0@sha1:{SHA1}", ready="False", reason="HealthCheckFailed"),
        )
        expected.append(("c1", "podinfo", "6.7.0", "failed"))
        await eventually(lambda: _sorted(reports(kafka_bootstrap, topic), expected), timeout=20)

        # no change of state, no event: a new message, a reconcile passing through Progressing
        await set_status(management, NAMESPACE, "flux-c1", {"lastHandledReconcileAt": "2026-01-01T00:10:00Z"})
        progressing = flux_status(f"v2.4.0@sha1:{SHA1}", ready="Unknown", reason="Progressing")
        progressing["lastAppliedRevision"] = f"v2.4.0@sha1:{SHA1}"
        await set_status(management, NAMESPACE, "flux-c1", progressing)
        await set_status(management, NAMESPACE, "flux-c1", flux_status(f"v2.4.0@sha1:{SHA1}"))
        await set_status(
            workload,
            "flux-system",
            "podinfo-c1",
            flux_status(f"6.7.0@sha1:{SHA1}", ready="False", reason="HealthCheckFailed"),
        )
        await asyncio.sleep(1.5)
        assert await _sorted(reports(kafka_bootstrap, topic), expected)

        # recovery is a change again
        await set_status(workload, "flux-system", "podinfo-c1", flux_status(f"6.7.0@sha1:{SHA1}"))
        expected.append(("c1", "podinfo", "6.7.0", "succeeded"))
        await eventually(lambda: _sorted(reports(kafka_bootstrap, topic), expected), timeout=20)
    finally:
        await sink.close()
        await publisher.close()


async def _sorted(found: Any, expected: list[tuple[str, str, str, str]]) -> bool:
    """Same events, exactly once each (order per module is what the topic keeps)."""
    events = await found
    return sorted(events) == sorted(expected)


@pytest.mark.integration
async def test_a_workload_clusters_status_watch_asks_the_api_server_for_that_clusters_objects_only(
    fake_management: KubeAPIServer, kafka_bootstrap: str, topic_prefix: str
) -> None:
    # two clusters behind one API server (LocalKube in benchmarks/appliers.py puts 100 there):
    # each cluster's watches must not receive, and drop, the other's objects and events
    shared = await KubeAPIServer("shared").start()
    reporter = StatusReporter(
        KafkaPublisher(kafka_bootstrap, TopicNames(topic_prefix).status), policy=FAST, retry_interval=0.2
    )
    sink = make_sink(fake_management, reporter=reporter)
    try:
        for cluster in ("c1", "c2"):
            await put_kubeconfig_secret(fake_management, cluster, shared.kubeconfig_yaml())
            await sink.write("ProxyAssemblage", cluster, snapshot("ProxyAssemblage", cluster, sync("podinfo")))
        expected = [("c1", "podinfo", "6.7.0", "updating"), ("c2", "podinfo", "6.7.0", "updating")]
        await eventually(lambda: _sorted(reports(kafka_bootstrap, TopicNames(topic_prefix).status), expected))

        def reads(plural: str) -> list[str]:
            return [unquote(path) for _, path in shared.requests_to(rf"/{plural}\?", method="GET")]

        # per cluster: the converge's listing, the drift watch's and the status watch's list + watch
        await eventually(lambda: len(reads("kustomizations")) >= 10 and len(reads("helmreleases")) >= 8)
        for path in reads("kustomizations") + reads("helmreleases"):
            assert "rollout.dev/cluster=c1" in path or "rollout.dev/cluster=c2" in path, path
    finally:
        await sink.close()
        await shared.stop()
