"""One watcher at a time: two `rollout watch-modules --leader-elect` (or `watch-clusters
--leader-elect`) processes against the real kube-apiserver and the real broker. One holds
the Lease and publishes; killed with SIGKILL (no release), the other takes the Lease within
the lease duration (plus one retry period), fences it, seeds from the topic it publishes to
(intents, cluster-observations), and publishes only what is new: nothing twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kubernetes_asyncio.client import CoordinationV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from infra import client
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved, ClusterRemoved, ModuleApplied, parse_event
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import NAMESPACE, eventually, put_kubeconfig_secret
from tests.kube.rollout_objects import create, install_rollout_crds, module_object
from tests.kube.test_watcher import CAPI, capi_cluster, create_cluster

pytestmark = pytest.mark.integration
LEASE, DURATION, RETRY = "watch-modules-test", 4, 1
CLUSTERS_LEASE = "watch-clusters-test"
READY = {"initialization": {"controlPlaneInitialized": True}}


def start_watcher(
    identity: str,
    kubeconfig: Path,
    bootstrap: str,
    prefix: str,
    log: Path,
    *,
    command_name: str = "watch-modules",
    lease: str = LEASE,
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "rollout_cli.main", command_name, "--kubeconfig", str(kubeconfig),
        "--leader-elect", "--lease-name", lease, "--lease-namespace", "fleet", "--identity", identity,
        "--lease-duration", str(DURATION), "--renew-deadline", "3", "--retry-period", str(RETRY),
        "--web-port", "0", "--bootstrap-servers", bootstrap, "--topic-prefix", prefix,
    ]  # fmt: skip
    with open(log, "wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


async def holder(cluster: KubeCluster, name: str = LEASE) -> str | None:
    async with cluster.client() as api:
        try:
            lease = await CoordinationV1Api(api).read_namespaced_lease(name, "fleet")
        except ApiException as error:
            if error.status == 404:
                return None
            raise
    return lease.spec.holder_identity if lease.spec else None


async def published(bootstrap: str, prefix: str) -> list[ModuleApplied]:
    records = await client.read_all(bootstrap, TopicNames(prefix).intents)
    return [e for e in map(parse_event, (r.value for r in records)) if isinstance(e, ModuleApplied)]


async def test_killing_the_leader_hands_over_within_the_lease_and_nothing_is_published_twice(
    management: KubeCluster, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    await install_rollout_crds(management)
    kubeconfig = management.server.write_kubeconfig(tmp_path / "kubeconfig")
    await delete_lease(management, LEASE)
    first = start_watcher("first", kubeconfig, kafka_bootstrap, topic_prefix, tmp_path / "first.log")
    processes = [first]
    try:
        await eventually(lambda: _is(holder(management), "first"), timeout=60, interval=0.2)
        processes.append(start_watcher("second", kubeconfig, kafka_bootstrap, topic_prefix, tmp_path / "second.log"))
        await create(management, "modules", module_object("before"))
        await eventually(lambda: _count(published(kafka_bootstrap, topic_prefix), 1), timeout=30)
        await asyncio.sleep(2 * RETRY)  # the second is a follower by now

        os.killpg(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        await eventually(lambda: _is(holder(management), "second"), timeout=3 * DURATION, interval=0.1)
        handover = time.monotonic() - killed
        print(f"handover after SIGKILL of the leader: {handover:.1f}s (lease {DURATION}s, retry {RETRY}s)")
        assert handover <= DURATION + 2 * RETRY

        await create(management, "modules", module_object("after"))
        events = await eventually(lambda: _count(published(kafka_bootstrap, topic_prefix), 2), timeout=30)
        await asyncio.sleep(2.0)
        events = await published(kafka_bootstrap, topic_prefix)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(timeout=20)
    assert Counter(e.module.name for e in events) == {"before": 1, "after": 1}, (tmp_path / "second.log").read_text()


async def delete_lease(cluster: KubeCluster, name: str) -> None:
    async with cluster.client() as api:
        try:
            await CoordinationV1Api(api).delete_namespaced_lease(name, "fleet")
        except ApiException as error:
            if error.status != 404:
                raise


async def _is(value: object, expected: str) -> bool:
    return await value == expected  # type: ignore[misc]


async def _count(listing: object, count: int) -> list[ModuleApplied] | None:
    items = await listing  # type: ignore[misc]
    return items if len(items) >= count else None


# --- watch-clusters -----------------------------------------------------------------------------


async def observations(bootstrap: str, prefix: str) -> dict[str, list[object]]:
    """What the cluster-observations topic holds, per cluster: manifests, or "removed"."""
    found: dict[str, list[object]] = {}
    for record in await client.read_all(bootstrap, TopicNames(prefix).clusters):
        event = parse_event(record.value)
        if isinstance(event, ClusterObserved):
            found.setdefault(event.cluster.name, []).append(event.cluster)
        elif isinstance(event, ClusterRemoved):
            found.setdefault(event.name, []).append("removed")
    return found


async def test_killing_the_cluster_watcher_leader_hands_over_and_nothing_is_published_twice(
    management: KubeCluster, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    kubeconfig = management.server.write_kubeconfig(tmp_path / "kubeconfig")
    await delete_lease(management, CLUSTERS_LEASE)

    def start(identity: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{identity}.log"
        lease = CLUSTERS_LEASE
        return start_watcher(
            identity, kubeconfig, kafka_bootstrap, topic_prefix, log, command_name="watch-clusters", lease=lease
        )

    async def last_is(name: str, expected: str) -> bool:
        seen = (await observations(kafka_bootstrap, topic_prefix)).get(name, [])
        if not seen:
            return False
        last = seen[-1]
        return last == "removed" if expected == "removed" else getattr(getattr(last, "status", None), "ready", False)

    first = start("first")
    processes = [first]
    try:
        await eventually(lambda: _is(holder(management, CLUSTERS_LEASE), "first"), timeout=60, interval=0.2)
        processes.append(start("second"))
        await create_cluster(management, capi_cluster("before"), READY)
        await put_kubeconfig_secret(management, "before", "kubeconfig")
        await eventually(lambda: last_is("before", "ready"), timeout=30)
        await asyncio.sleep(2 * RETRY)  # the second is a follower by now
        assert await holder(management, CLUSTERS_LEASE) == "first"

        os.killpg(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        await eventually(lambda: _is(holder(management, CLUSTERS_LEASE), "second"), timeout=3 * DURATION, interval=0.1)
        handover = time.monotonic() - killed
        print(f"watch-clusters handover after SIGKILL of the leader: {handover:.1f}s (lease {DURATION}s)")
        assert handover <= DURATION + 2 * RETRY

        await create_cluster(management, capi_cluster("after"), READY)
        await put_kubeconfig_secret(management, "after", "kubeconfig")
        async with management.client() as api:
            custom = CustomObjectsApi(api)
            await custom.delete_namespaced_custom_object(CAPI, "v1beta2", NAMESPACE, "clusters", "before")
        await eventually(lambda: last_is("after", "ready"), timeout=30)
        await eventually(lambda: last_is("before", "removed"), timeout=30)
        await asyncio.sleep(2.0)
        found = await observations(kafka_bootstrap, topic_prefix)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(timeout=20)
    second_log = (tmp_path / "second.log").read_text()
    assert set(found) == {"before", "after"}, second_log
    for name, seen in found.items():
        # every observation differs from every other one of the same cluster: the new leader
        # seeded from the topic and did not say again what the old one had said
        assert all(a != b for i, a in enumerate(seen) for b in seen[i + 1 :]), (name, seen, second_log)
    assert found["before"][-1] == "removed"
    assert found["after"][-1].status.ready  # type: ignore[union-attr]
