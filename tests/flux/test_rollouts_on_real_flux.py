"""Rollouts reconciled by the real source-, kustomize- and helm-controller.

No sync status in these tests is simulated or written by hand: the applier writes Flux
objects into real kube-apiservers, Flux's controllers reconcile them from a Git server, an
OCI registry and a Helm repository on 127.0.0.1, and the applier's status reporter reads
what Flux wrote. The engine is driven through the `rollout` CLI only (`tests/flux/engine.py`).

The Git module is the local fleet's example (`infra/localfleet/example.py`, what
`rollout up --clusters N` applies): three tags — v1.0.0, v1.1.0 (a ConfigMap replaced:
Flux prunes the old one) and v1.2.0 (broken: kustomize cannot build it).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from infra.localfleet import example
from infra.localflux import GitServer, HelmRepository, build_chart
from tests.flux.engine import EngineOnFlux
from tests.flux.fleet import CHART_CONFIGMAP, config_map, get

pytestmark = pytest.mark.integration


def example_repository(git_server: GitServer) -> str:
    """The example's three tags in a repository of this test's own; its clone URL."""
    repository = f"fleet-apps-{uuid.uuid4().hex[:6]}"
    for version, tree in example.repository_trees().items():
        git_server.commit(repository, tree, tag=version)
    return git_server.url(repository)


def assigned(history: list[dict[str, Any]], revision: str) -> list[str]:
    """Clusters the engine assigned `revision` to, in order."""
    return [d["cluster"] for d in history if d["action"] == "assign" and d["revision"] == revision]


async def test_the_example_rolls_out_canary_first_upgrades_with_pruning_and_rolls_back_a_broken_tag(
    engine: EngineOnFlux, git_server: GitServer
) -> None:
    url = example_repository(git_server)
    files = example.manifest_files(url)
    for name, text in files.items():
        (engine.workdir / name).write_text(text)
    c1, c2 = engine.fleet.workloads["c1"], engine.fleet.workloads["c2"]

    # v1.0.0: the BootstrapModule remotely (management cluster → kubeConfig), the Module in-cluster
    engine.apply_file(engine.workdir / "fleet.yaml")
    for module in ("platform", "podinfo"):
        done = engine.wait(module)
        assert done.code == 0, f"{module}: {done.stdout}\n{done.stderr}\n{engine.logs()}"
    history = engine.history("podinfo")
    actions = [(d["action"], d.get("cluster")) for d in history]
    assert actions.index(("assign", "c2")) > actions.index(("succeeded", "c1")), actions  # canary first
    for name, cluster in (("c1", c1), ("c2", c2)):
        settings = await config_map(cluster, "podinfo", "podinfo-settings")  # no namespace in Git: targetNamespace
        assert settings == {"version": "v1.0.0", "cluster": name}
        assert await config_map(cluster, "platform", "fleet-info") == {"managedBy": "rollout", "cluster": name}
    remote = await get(engine.fleet.management, "Kustomization", "fleet", "platform-c1")
    assert remote is not None and remote["spec"]["kubeConfig"]["secretRef"]["name"] == "c1-kubeconfig"

    # v1.1.0: a new tag upgrades, and what it no longer has is pruned
    engine.apply_file(engine.workdir / "podinfo-v1.1.0.yaml")
    assert engine.wait("podinfo").code == 0, engine.logs()
    for cluster in (c1, c2):
        assert (await config_map(cluster, "podinfo", "podinfo-settings") or {}).get("version") == "v1.1.0"
        assert await config_map(cluster, "podinfo", "podinfo-greeting") is None
        assert await config_map(cluster, "podinfo", "podinfo-banner") is not None

    # v1.2.0 is broken: Flux fails it on the canary, the engine rolls the canary back, the wave never sees it
    seen_by_wave: set[str] = set()

    async def watch_wave() -> None:
        while True:
            source = await get(c2, "GitRepository", "flux-system", "podinfo-c2")
            seen_by_wave.add(((source or {}).get("spec") or {}).get("ref", {}).get("tag", ""))
            await asyncio.sleep(0.2)

    watching = asyncio.create_task(watch_wave())
    try:
        engine.apply_file(engine.workdir / "podinfo-v1.2.0.yaml")
        rolled_back = await asyncio.to_thread(engine.wait, "podinfo", "RolledBack")
    finally:
        watching.cancel()
    assert rolled_back.code == 0, f"{rolled_back.stdout}\n{rolled_back.stderr}\n{engine.logs()}"
    status = rolled_back.json()
    assert status["stableRevision"] == "v1.1.0"
    failure = next(d for d in engine.history("podinfo") if d["action"] == "failed")
    assert failure["cluster"] == "c1" and "missing.yaml" in failure["reason"], failure  # Flux's own message
    assert "v1.2.0" not in seen_by_wave and "v1.1.0" in seen_by_wave
    assert assigned(engine.history("podinfo"), "v1.2.0") == ["c1"]

    async def canary_back_on_stable() -> bool:
        kustomization = await get(c1, "Kustomization", "flux-system", "podinfo-c1")
        applied = ((kustomization or {}).get("status") or {}).get("lastAppliedRevision", "")
        return (
            applied.startswith("v1.1.0@")
            and kustomization["metadata"]["annotations"]["rollout.dev/revision"] == "v1.1.0"
        )

    assert await canary_back_on_stable()

    # deleting the module prunes it from every cluster
    deleted = engine.rollout("delete", "module", "podinfo")
    assert deleted.code == 0, deleted.stderr
    for cluster in (c1, c2):
        for _ in range(150):
            if await config_map(cluster, "podinfo", "podinfo-settings") is None:
                break
            await asyncio.sleep(0.2)
        assert await config_map(cluster, "podinfo", "podinfo-settings") is None
        assert await get(cluster, "Kustomization", "flux-system", f"podinfo-{cluster_name(engine, cluster)}") is None


def cluster_name(engine: EngineOnFlux, cluster: Any) -> str:
    return next(name for name, server in engine.fleet.workloads.items() if server is cluster)


BROKEN_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: Not_A_Valid_Name
data: {}
"""


def helm_module(kind: str, name: str, repository: HelmRepository, version: str, **package: Any) -> dict[str, Any]:
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}]
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"env": "local"}},
            "sync": {
                "source": {"helm": {"url": repository.url, "chart": "settings", "version": version}},
                "package": {"helm": {"values": {"color": "blue"}, **package}},
            },
            "rollout": {"stages": stages},
        },
    }


async def test_helm_releases_install_remotely_and_in_cluster_with_no_extra_settings(
    engine: EngineOnFlux, helm_repository: HelmRepository
) -> None:
    helm_repository.add_chart(build_chart("settings", "0.1.0", {"configmap.yaml": CHART_CONFIGMAP}, {"color": "red"}))
    for cluster in engine.fleet.workloads.values():
        await cluster.drop_namespace("fleet")  # as in a real workload cluster: only the management cluster has it
    engine.apply(
        helm_module("BootstrapModule", "settings-boot", helm_repository, "0.1.0"),
        helm_module("Module", "settings-app", helm_repository, "0.1.0", targetNamespace="apps"),
    )
    for module in ("settings-boot", "settings-app"):
        done = engine.wait(module)
        assert done.code == 0, f"{module}: {done.stdout}\n{done.stderr}\n{engine.logs()}"
    for cluster in engine.fleet.workloads.values():
        # the remote release: its namespace ('fleet', the HelmRelease's) is created in the cluster for it
        assert await config_map(cluster, "fleet", "settings-boot-settings") == {"color": "blue"}
        assert await config_map(cluster, "apps", "settings-app-settings") == {"color": "blue"}


async def test_helm_installs_that_fail_in_flux_halt_the_canary(
    engine: EngineOnFlux, helm_repository: HelmRepository
) -> None:
    """Two ways an install fails: a chart whose object the API server refuses, and a release
    whose Helm storage namespace does not exist in the cluster — helm-controller then retries
    with `observedGeneration: -1` (only `lastAttemptedGeneration` names the generation)."""
    helm_repository.add_chart(build_chart("settings", "0.2.0", {"configmap.yaml": BROKEN_TEMPLATE}, {}))
    helm_repository.add_chart(build_chart("settings", "0.3.0", {"configmap.yaml": CHART_CONFIGMAP}, {}))
    engine.apply(
        helm_module("Module", "broken-chart", helm_repository, "0.2.0", targetNamespace="broken"),
        helm_module("Module", "no-storage", helm_repository, "0.3.0", targetNamespace="apps", storageNamespace="gone"),
    )
    for module, revision, message in (("broken-chart", "0.2.0", "Not_A_Valid_Name"), ("no-storage", "0.3.0", "gone")):
        halted = engine.wait(module, "Halted")
        assert halted.code == 0, f"{module}: {halted.stdout}\n{halted.stderr}\n{engine.logs()}"
        history = engine.history(module)
        failure = next(d for d in history if d["action"] == "failed")
        assert failure["cluster"] == "c1" and message in failure["reason"], failure
        assert assigned(history, revision) == ["c1"]  # the wave never got it
