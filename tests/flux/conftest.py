"""Fixtures for end-to-end tests against real Flux controllers (``infra.localflux``).

Everything is real and on 127.0.0.1: kube-apiservers of the session's ``kube_pool`` (see
``tests/kube/cluster.py``), source-, kustomize- and helm-controller built from the Go module
proxy (cached in ``~/.cache/rollout/flux``; the first build takes minutes), a Git server,
an OCI registry and a Helm repository. Nothing is mocked and no test writes a status.

Fixtures
--------
``flux_binaries`` (session)
    The built controllers (:class:`infra.localflux.FluxBinaries`). A build failure fails
    the test (``pytest.fail``) — an integration test is never silently skipped.
``flux_fleet`` (function)
    A :class:`tests.flux.fleet.FluxFleet`: ``.management`` (API server
    ``flux-management``) and ``.workloads == {"workload-1": ..., "workload-2": ...}`` (API
    servers ``flux-workload-1``/``-2``, apart from tests/kube's clusters), each reconciled by
    its own Flux controllers; ``.kubeconfigs`` (API server name → kubeconfig file) and
    ``.controllers`` (API server name → :class:`infra.localflux.FluxControllers`). In the
    management cluster's ``fleet`` namespace: ``<cluster>-kubeconfig`` secrets as Cluster
    API writes them (type ``cluster.x-k8s.io/secret``, key ``value``, label
    ``cluster.x-k8s.io/cluster-name``), so a remote Kustomization/HelmRelease reaches a
    workload with ``kubeConfig.secretRef.name: workload-1-kubeconfig``. Every cluster has the
    namespaces ``fleet``, ``elsewhere`` and ``flux-system``, the project's CRDs plus the
    HelmChart/Bucket/ExternalArtifact CRDs source-controller needs.
``make_flux_fleet`` (function)
    ``await make_flux_fleet("c1", "c2", "c3")``: the same with other workload names/count.
``engine`` (function)
    :class:`tests.flux.engine.EngineOnFlux` on a fleet of ``c1`` (``ring: canary``) and
    ``c2`` (``ring: wave``): the real worker, Kubernetes-sink applier and watch-clusters,
    driven through the ``rollout`` CLI.

Isolation: controllers start once per API server and keep running for the session (a set
starts in ≈ 2 s; idle, they cost little CPU). Before a test gets a cluster, the fixture
deletes every Flux object an earlier test left and waits until the running controllers
have finalized them (pruning what Kustomizations applied, uninstalling Helm releases —
while the kubeconfig secrets of remote objects still exist), stripping the finalizers of
anything still there after ``SETTLE_TIMEOUT`` so this never hangs; then the cluster is
reset (``KubeCluster.reset``: custom objects and secrets deleted, test namespaces dropped). ConfigMaps and other
objects a Kustomization applied into a *standard* namespace survive a reset: apply into a
namespace of the test's own (``targetNamespace``, created by the test).

``git_server`` / ``private_git_server`` (session)
    :class:`infra.localflux.GitServer`, without and with HTTP basic auth
    (``.credentials``; pair it with ``fleet.basic_auth_secret`` and a ``secretRef``).
    ``server.commit("app", {"deploy/cm.yaml": ...}, tag="v1")``; clone URL
    ``server.url("app")``. Use a repository name of the test's own.
``oci_registry`` (session)
    :class:`infra.localflux.OCIRegistry` on plain HTTP (an OCIRepository needs
    ``insecure: true``); ``push_artifact(repo, tag, files) -> digest``, ``push_chart``; the
    OCIRepository ``url`` is ``f"{oci_registry.url}/<repo>"``.
``helm_repository`` (session)
    :class:`infra.localflux.HelmRepository`; ``add_chart(build_chart(name, version,
    {"configmap.yaml": ...}, values))``; the HelmRepository ``url`` is ``.url``.

``kube_pool`` is the session's pool (tests/conftest.py), shared with tests/kube and the
dashboard's browser tests: one etcd, API servers started only for the names used.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from infra.localfleet.example import cluster_labels
from infra.localflux import (
    FluxBinaries,
    FluxControllers,
    GitServer,
    HelmRepository,
    LocalFluxError,
    OCIRegistry,
    ensure_flux,
    prepare_cluster,
)
from infra.localkube import ETCD, KUBE_APISERVER, LocalKubeError, ensure_binary
from tests.flux.engine import EngineOnFlux
from tests.flux.fleet import KINDS, VERSIONS, FluxFleet
from tests.kube.cluster import KubeCluster, KubePool
from tests.kube.conftest import put_kubeconfig_secret

MANAGEMENT = "flux-management"
SETTLE_TIMEOUT = 20.0

MakeFluxFleet = Callable[..., Awaitable[FluxFleet]]


def _progress(message: str) -> None:
    print(f"\n[localflux] {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def flux_binaries() -> FluxBinaries:
    try:
        return ensure_flux(_progress)
    except LocalFluxError as error:
        pytest.fail(f"cannot build the Flux controllers: {error}", pytrace=False)


@pytest.fixture(scope="session")
def local_fleet_binaries(flux_binaries: FluxBinaries) -> FluxBinaries:
    """Everything a local fleet runs, built before a test times what it does with them: on a
    fresh machine `rollout up --clusters` would otherwise spend its test's wait building."""
    try:
        ensure_binary(ETCD, _progress)
        ensure_binary(KUBE_APISERVER, _progress)
    except LocalKubeError as error:
        pytest.fail(f"cannot build kube-apiserver and etcd: {error}", pytrace=False)
    return flux_binaries


class ControllerSets:
    """The session's running controller sets, one per API server name, started on first use."""

    def __init__(self, binaries: FluxBinaries, workdir: Path) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.running: dict[str, FluxControllers] = {}

    def ensure(self, cluster: KubeCluster) -> FluxControllers:
        if cluster.name not in self.running:
            kubeconfig = cluster.server.write_kubeconfig(self.workdir / f"{cluster.name}.kubeconfig")
            controllers = FluxControllers(self.binaries, kubeconfig, self.workdir, cluster.name)
            controllers.start()
            self.running[cluster.name] = controllers
        self.running[cluster.name].check()
        return self.running[cluster.name]

    def stop(self) -> None:
        for controllers in self.running.values():
            controllers.stop()


@pytest.fixture(scope="session")
def flux_controller_sets(
    flux_binaries: FluxBinaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerSets]:
    sets = ControllerSets(flux_binaries, tmp_path_factory.mktemp("flux"))
    try:
        yield sets
    finally:
        sets.stop()


async def _flux_cluster(pool: KubePool, sets: ControllerSets, name: str) -> tuple[KubeCluster, FluxControllers]:
    if name in pool.clusters:  # an earlier test's Flux objects go first, while their secrets still exist
        await _delete_flux_objects(pool.clusters[name])
    cluster = await pool.cluster(name)  # reset
    try:
        await prepare_cluster(cluster.kubeconfig(), sets.binaries.crds)
        controllers = await asyncio.to_thread(sets.ensure, cluster)
    except LocalFluxError as error:
        pytest.fail(f"cannot run the Flux controllers of {name}: {error}", pytrace=False)
    await _delete_flux_objects(cluster)
    return cluster, controllers


async def _delete_flux_objects(cluster: KubeCluster) -> None:
    """Delete every Flux object and wait until the controllers have finalized them all.

    Stragglers lose their finalizers after ``SETTLE_TIMEOUT``, so this never hangs.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT
    async with cluster.client() as api:
        custom = CustomObjectsApi(api)
        for group, plural, namespace, name in await _flux_objects(custom):
            await _delete(custom, group, plural, namespace, name)
        while leftovers := await _flux_objects(custom):
            if loop.time() > deadline:
                for group, plural, namespace, name in leftovers:
                    await _delete(custom, group, plural, namespace, name, strip=True)
            await asyncio.sleep(0.1)


async def _flux_objects(custom: CustomObjectsApi) -> list[tuple[str, str, str, str]]:
    found = []
    for group, plural in KINDS.values():
        listing = await custom.list_cluster_custom_object(group, VERSIONS[group], plural)
        for item in listing["items"]:
            found.append((group, plural, item["metadata"]["namespace"], item["metadata"]["name"]))
    return found


async def _delete(
    custom: CustomObjectsApi, group: str, plural: str, namespace: str, name: str, *, strip: bool = False
) -> None:
    version = VERSIONS[group]
    try:
        if strip:
            patch = {"metadata": {"finalizers": None}}
            merge = "application/merge-patch+json"
            await custom.patch_namespaced_custom_object(
                group, version, namespace, plural, name, patch, _content_type=merge
            )
        await custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
    except ApiException as error:
        if error.status != 404:  # gone already is fine
            raise


@pytest.fixture(scope="module")
async def make_flux_fleet(kube_pool: KubePool, flux_controller_sets: ControllerSets) -> MakeFluxFleet:
    async def make(*clusters: str) -> FluxFleet:
        names = [MANAGEMENT, *(f"flux-workload-{index}" for index in range(1, len(clusters) + 1))]
        # the API servers are independent: emptied (and their Flux settled) at once
        prepared = await asyncio.gather(*(_flux_cluster(kube_pool, flux_controller_sets, name) for name in names))
        (management, controllers), workloads = prepared[0], prepared[1:]
        fleet = FluxFleet(management, {}, {}, {MANAGEMENT: controllers})
        for cluster, (workload, controllers) in zip(clusters, workloads, strict=True):
            await put_kubeconfig_secret(management, cluster, workload.kubeconfig_yaml())
            fleet.workloads[cluster] = workload
            fleet.controllers[workload.name] = controllers
        fleet.kubeconfigs = {name: c.kubeconfig for name, c in fleet.controllers.items()}
        return fleet

    return make


@pytest.fixture
async def flux_fleet(make_flux_fleet: MakeFluxFleet) -> FluxFleet:
    return await make_flux_fleet("workload-1", "workload-2")


# --- sources ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    server = GitServer(tmp_path_factory.mktemp("git-public")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def private_git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    server = GitServer(tmp_path_factory.mktemp("git-private"), ("rollout", secrets.token_hex(8))).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OCIRegistry]:
    registry = OCIRegistry(tmp_path_factory.mktemp("oci"))
    try:
        registry.start(_progress)
    except LocalFluxError as error:
        pytest.fail(f"cannot start the OCI registry: {error}", pytrace=False)
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def helm_repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HelmRepository]:
    repository = HelmRepository(tmp_path_factory.mktemp("helm")).start()
    yield repository
    repository.stop()


# --- the engine on a fleet -------------------------------------------------------------------

ENGINE_CLUSTERS = {"c1": cluster_labels(1), "c2": cluster_labels(2)}


@pytest.fixture(scope="module")
async def engine(
    make_flux_fleet: MakeFluxFleet, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EngineOnFlux]:
    """The engine's processes (tests/flux/engine.py) on a fleet of two clusters: `c1` labelled
    `ring: canary`, `c2` `ring: wave`, both `env: local` (the local fleet example's labels).

    One per test module: starting the fleet and the processes takes 15-25 s, so the tests of
    a module share them and keep apart by using modules (and namespaces) of their own."""
    fleet = await make_flux_fleet(*ENGINE_CLUSTERS)
    workdir = tmp_path_factory.mktemp("engine")
    running = await EngineOnFlux.start(kafka_bootstrap, fleet, workdir, ENGINE_CLUSTERS)
    try:
        yield running
    finally:
        running.stop()
