"""Live Helm values end to end, on the real broker and a real kube-apiserver: a real
`rollout worker`, a real `rollout applier --sink kubernetes` (its status reporter and live
values reporter) and a workload cluster's API server. The test plays helm-controller (it
marks the HelmRelease Ready) and a cluster's UI (it edits the HelmRelease's values with
another field manager); the applier reports the edit as HelmValuesObserved, the engine
applies the module's values policy — keepCurrent keeps the colour, readOnly keeps the logo
and refuses the module's value with a `values-refused` decision, a path without a policy is
put back — and the HelmRelease ends up with what the engine decided.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from infra import client
from rollout.wire.events import ClusterObserved, HelmValuesObserved, ModuleApplied, parse_event
from tests.integration.stack import Stack, free_port
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import Workloads, eventually
from tests.kube.test_full_loop import manifest
from tests.kube.test_helm_releases import edit_values, helm_status, release, set_release_status

pytestmark = pytest.mark.integration

WEB = {
    "kind": "Module",
    "metadata": {"name": "web", "namespace": "fleet"},
    "spec": {
        "selector": {},
        "sync": {
            "source": {
                "helm": {"url": "https://stefanprodan.github.io/podinfo", "chart": "podinfo", "version": "6.7.0"}
            },
            "package": {
                "helm": {
                    "targetNamespace": "web",
                    "values": {"replicaCount": 2, "ui": {"color": "blue", "logo": "a.png"}},
                    "valuesPolicy": [
                        {"path": "/ui/color", "policy": "keepCurrent"},
                        {"path": "/ui/logo", "policy": "readOnly"},
                    ],
                }
            },
        },
    },
}


async def test_values_edited_on_the_cluster_are_observed_and_decided_by_the_values_policy(
    management: KubeCluster, workloads: Workloads, kafka_bootstrap: str, tmp_path: Path
) -> None:
    workload = (await workloads("c1"))["c1"]
    stack = await asyncio.to_thread(Stack, kafka_bootstrap, tmp_path)
    kubeconfig = tmp_path / "management.kubeconfig"
    kubeconfig.write_text(management.kubeconfig_yaml())
    try:
        await asyncio.to_thread(stack.start_worker)
        stack.applier = stack._spawn(
            "applier",
            "applier",
            *("--sink", "kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", "fleet"),
            *("--values-grace", "4", "--web-port", str(free_port())),
        )
        cluster = ClusterObserved(
            cluster=manifest(
                {
                    "kind": "Cluster",
                    "metadata": {"name": "c1", "namespace": "fleet"},
                    "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
                }
            )
        )
        await client.publish(kafka_bootstrap, stack.topics.clusters, [("c1", cluster.to_bytes())])
        fleet = await client.end_offsets(kafka_bootstrap, stack.topics.clusters)  # as `rollout apply` stamps it
        module = ModuleApplied(module=manifest(WEB), fleet=fleet)
        await client.publish(kafka_bootstrap, stack.topics.intents, [("web", module.to_bytes())])

        applied = await eventually(lambda: release(workload), timeout=90, interval=0.2)
        assert applied["spec"]["values"] == {"replicaCount": 2, "ui": {"color": "blue", "logo": "a.png"}}
        await set_release_status(workload, helm_status(applied["metadata"]["generation"]))
        assert await eventually(lambda: phase(stack, kafka_bootstrap, "Complete"), timeout=60, interval=0.3)

        await edit_values(workload, {"replicaCount": 5, "ui": {"color": "red", "logo": "b.png"}})

        async def decided() -> list[tuple[str, str]]:
            decisions = [r.json() for r in await client.read_all(kafka_bootstrap, stack.topics.decisions)]
            found = [(d["action"], d["reason"]) for d in decisions if d["action"] in ("values", "values-refused")]
            return found if len(found) >= 2 else []

        [(values, why), (refused, reason)] = await eventually(decided, timeout=60, interval=0.3)
        assert (values, refused) == ("values", "values-refused")
        assert "c1: values observed on the cluster changed its merged values" == why
        assert "/ui/logo is readOnly" in reason and "'b.png'" in reason and "'a.png'" in reason
        reported = [parse_event(r.value) for r in await client.read_all(kafka_bootstrap, stack.topics.status)]
        observed = [e for e in reported if isinstance(e, HelmValuesObserved)]
        assert [(e.cluster, e.module, e.values) for e in observed] == [
            ("c1", "web", {"replicaCount": 5, "ui": {"color": "red", "logo": "b.png"}})
        ]

        async def settled() -> dict[str, Any] | None:
            current = await release(workload)
            return current if current and current["spec"]["values"]["replicaCount"] == 2 else None

        final = await eventually(settled, timeout=30, interval=0.2)
        # kept: the colour (keepCurrent) and the logo (readOnly); put back: replicaCount (no policy)
        assert final["spec"]["values"] == {"replicaCount": 2, "ui": {"color": "red", "logo": "b.png"}}
    finally:
        await asyncio.to_thread(stack.stop)


async def phase(stack: Stack, bootstrap: str, wanted: str) -> bool:
    status = (await client.read_latest(bootstrap, stack.topics.module_status)).get("web")
    return bool(status and status["phase"] == wanted)
