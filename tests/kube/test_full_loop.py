"""The whole loop on the real broker and over real HTTP: a two-stage Module, a real
`rollout worker`, a real `rollout applier --sink kubernetes` (with its status reporter)
against real kube-apiservers (the session's pool, `tests/kube/cluster.py`) — one
management cluster holding the kubeconfig secrets, one apiserver per workload cluster.
The test plays Flux: it flips Kustomization statuses in the workload clusters, and checks
that the second stage reaches the clusters only after the first stage's cluster reported
success, and that the rollout completes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from infra import client
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from tests.integration.stack import Stack, free_port
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import Workloads, eventually
from tests.kube.test_status import SHA1, flux_status, set_status

pytestmark = pytest.mark.integration
CLUSTERS = ("c1", "c2", "c3", "c4")


@pytest.fixture
async def fleet(management: KubeCluster, workloads: Workloads) -> tuple[KubeCluster, dict[str, KubeCluster]]:
    return management, await workloads(*CLUSTERS)


def manifest(document: dict[str, Any]) -> Any:
    return MANIFEST_ADAPTER.validate_python({"apiVersion": "rollout.dev/v1alpha1", **document})


async def test_second_stage_starts_only_after_the_first_succeeded_in_flux(
    fleet: tuple[KubeCluster, dict[str, KubeCluster]], kafka_bootstrap: str, tmp_path: Path
) -> None:
    management, workloads = fleet
    stack = await asyncio.to_thread(Stack, kafka_bootstrap, tmp_path)
    kubeconfig = tmp_path / "management.kubeconfig"
    kubeconfig.write_text(management.kubeconfig_yaml())
    try:
        await asyncio.to_thread(stack.start_worker)
        stack.applier = stack._spawn(
            "applier",
            "applier",
            "--sink",
            "kubernetes",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            "fleet",
            "--web-port",
            str(free_port()),
        )
        clusters = [
            ClusterObserved(
                cluster=manifest(
                    {
                        "kind": "Cluster",
                        "metadata": {
                            "name": name,
                            "namespace": "fleet",
                            "labels": {"ring": "canary" if i == 0 else "wave"},
                        },
                        "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
                    }
                )
            )
            for i, name in enumerate(CLUSTERS)
        ]
        await client.publish(kafka_bootstrap, stack.topics.clusters, [(c.cluster.name, c.to_bytes()) for c in clusters])
        # as every publisher does (`rollout apply`, the Module watcher): stamped with the fleet
        # published before it, or the module may overtake its clusters and find no canary yet
        module = ModuleApplied(
            fleet=await client.end_offsets(kafka_bootstrap, stack.topics.clusters),
            module=manifest(
                {
                    "kind": "Module",
                    "metadata": {"name": "podinfo", "namespace": "fleet"},
                    "spec": {
                        "selector": {},
                        "sync": {
                            "source": {
                                "git": {"url": "https://github.com/stefanprodan/podinfo", "version": {"tag": "6.7.0"}}
                            },
                            "package": {
                                "kustomize": {"path": "./kustomize", "substitute": {"CLUSTER": "$(CLUSTER_NAME)"}}
                            },
                        },
                        "rollout": {
                            "stages": [
                                {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
                                {"name": "wave", "maxConcurrency": 2},
                            ]
                        },
                    },
                }
            ),
        )
        await client.publish(kafka_bootstrap, stack.topics.intents, [("podinfo", module.to_bytes())])

        async def kustomization(name: str) -> dict[str, Any] | None:
            return await workloads[name].object("kustomizations", "flux-system", f"podinfo-{name}")

        canary = await eventually(lambda: kustomization("c1"), timeout=90, interval=0.2)
        assert canary["spec"]["postBuild"]["substitute"] == {"CLUSTER": "c1"}
        source = await workloads["c1"].object("gitrepositories", "flux-system", "podinfo-c1")
        assert source is not None and source["spec"]["ref"] == {"tag": "6.7.0"}
        await asyncio.sleep(3)
        assert [await kustomization(n) for n in ("c2", "c3", "c4")] == [None, None, None], "wave started early"

        await set_status(workloads["c1"], "flux-system", "podinfo-c1", flux_status(f"6.7.0@sha1:{SHA1}"))

        # the wave moves two at a time (maxConcurrency 2): c4 waits for one of c2, c3
        async def both() -> bool:
            return bool(await kustomization("c2") and await kustomization("c3"))

        await eventually(both, timeout=90, interval=0.2)
        await asyncio.sleep(2)
        assert await kustomization("c4") is None, "more than maxConcurrency clusters updating"
        await set_status(workloads["c2"], "flux-system", "podinfo-c2", flux_status(f"6.7.0@sha1:{SHA1}"))
        await eventually(lambda: kustomization("c4"), timeout=90, interval=0.2)

        for name in ("c3", "c4"):
            await set_status(workloads[name], "flux-system", f"podinfo-{name}", flux_status(f"6.7.0@sha1:{SHA1}"))

        async def phase() -> str | None:
            status = (await client.read_latest(kafka_bootstrap, stack.topics.module_status)).get("podinfo")
            return status["phase"] if status and status["phase"] == "Complete" else None

        assert await eventually(phase, timeout=90, interval=0.5) == "Complete"
        decisions = [r.json() for r in await client.read_all(kafka_bootstrap, stack.topics.decisions)]
        order = [(d["action"], d.get("cluster")) for d in decisions if d["action"] in ("assign", "succeeded")]
        assert order[:2] == [("assign", "c1"), ("succeeded", "c1")]
        # nothing reached the management cluster: proxy syncs live inside the workload clusters
        assert await management.objects("kustomizations") == []
    finally:
        await asyncio.to_thread(stack.stop)
