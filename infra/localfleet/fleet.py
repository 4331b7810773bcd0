"""A management cluster and N workload clusters on this machine, each reconciled by real Flux.

:class:`LocalFleet` is what `rollout up --clusters N` and `benchmarks/flux_rollout.py` run:

1. **API servers** (:class:`infra.localkube.LocalKube`): one etcd, a kube-apiserver
   `management` and `cluster-1` … `cluster-N`, each its own Kubernetes API.
2. **CRDs and namespaces**: the project's CRDs (Flux, Cluster API; `projections/crds`, which
   the caller passes as `crds`: infra sits below projections) and the other CRDs the Flux
   controllers watch (`infra.localflux.prepare_cluster`); the
   namespaces `flux-system` everywhere and `fleet` in the management cluster.
3. **Flux** (:class:`infra.localflux.FluxControllers`): source-, kustomize- and
   helm-controller per API server — the management cluster's set reconciles the remote
   objects of BootstrapModules (reaching the clusters through their kubeconfig secrets),
   each cluster's own set the proxy objects of Modules.
4. **Clusters registered as Cluster API would** (`infra.localfleet.capi`): a `Cluster`
   object and a `<cluster>-kubeconfig` secret per workload cluster in `fleet`.
5. **A Git server** (:class:`infra.localflux.GitServer`, smart HTTP on 127.0.0.1) holding the
   example repository (`infra.localfleet.example`), and its manifests written to
   `<workdir>/manifests/`.

Nothing of the engine runs here: the caller starts `rollout watch-clusters`, `rollout
applier --sink kubernetes` and the worker against :attr:`LocalFleet.management_kubeconfig`,
then applies the manifests. Measured on 2 cores with the binaries cached: a fleet of 3 is
up in ~25 s (four API servers ~3 s each, twelve controllers ~2 s a set); every kube-apiserver
takes 220-320 MiB and every controller 80-130 MiB, so N is bounded by memory (~0.6 GiB per
cluster) and, more, by the two cores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes_asyncio.config import new_client_from_config_dict

from infra.localfleet import example
from infra.localfleet.capi import ensure_namespace, register_cluster
from infra.localflux import FluxBinaries, FluxControllers, GitServer, ensure_flux, prepare_cluster
from infra.localkube import APIServer, LocalKube

Progress = Callable[[str], None]
MANAGEMENT = "management"


def cluster_name(index: int) -> str:
    return f"cluster-{index}"


@dataclass
class LocalFleet:
    """See the module docstring. `start()` then `stop()`; not re-entrant."""

    workdir: Path
    clusters: int
    crds: Path  # the project's CRDs (`projections.crds.CRD_DIRECTORY`), installed before Flux's own
    progress: Progress | None = None
    kube: LocalKube | None = None
    servers: dict[str, APIServer] = field(default_factory=dict)
    flux: dict[str, FluxControllers] = field(default_factory=dict)
    git: GitServer | None = None

    @property
    def management_kubeconfig(self) -> Path:
        return self.workdir / "management.kubeconfig"

    @property
    def cluster_names(self) -> list[str]:
        return [cluster_name(i) for i in range(1, self.clusters + 1)]

    @property
    def manifests(self) -> Path:
        return self.workdir / "manifests"

    def start(self) -> None:
        """Build what is missing (minutes, once), then start everything; see the module docstring."""
        if self.clusters < 1:
            raise ValueError("a local fleet needs at least one workload cluster")
        self.workdir = self.workdir.resolve()  # processes and git run in other directories
        self.workdir.mkdir(parents=True, exist_ok=True)
        binaries = ensure_flux(self.progress)
        self.kube = LocalKube(self.workdir / "kube", progress=self.progress)
        self.kube.start()
        names = [MANAGEMENT, *self.cluster_names]
        for name in names:
            self._say(f"starting kube-apiserver {name}")
            self.servers[name] = self.kube.add_apiserver(name)
        self.servers[MANAGEMENT].write_kubeconfig(self.management_kubeconfig)
        asyncio.run(self._prepare(binaries))
        for name in names:
            self._say(f"starting the Flux controllers of {name}")
            kubeconfig = self.servers[name].write_kubeconfig(self.workdir / f"{name}.kubeconfig")
            self.flux[name] = FluxControllers(binaries, kubeconfig, self.workdir / "flux", name)
            self.flux[name].start()
        self._start_git()

    def stop(self) -> None:
        for controllers in self.flux.values():
            controllers.stop()
        self.flux.clear()
        if self.git is not None:
            self.git.stop()
            self.git = None
        if self.kube is not None:
            self.kube.stop()
            self.kube = None

    def check(self) -> None:
        """Raise (with the log tail) when a Flux controller has exited."""
        for controllers in self.flux.values():
            controllers.check()

    # -- steps -----------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    async def _prepare(self, binaries: FluxBinaries) -> None:
        directories = [self.crds, *binaries.crds]  # the project's copies first: those it renders for
        await asyncio.gather(*(prepare_cluster(s.kubeconfig(), directories) for s in self.servers.values()))
        api = await new_client_from_config_dict(self.servers[MANAGEMENT].kubeconfig())
        async with api:
            await ensure_namespace(api, example.NAMESPACE)
            for index in range(1, self.clusters + 1):
                name = cluster_name(index)
                labels = example.cluster_labels(index)
                await register_cluster(api, name, example.NAMESPACE, labels, self.servers[name].kubeconfig_yaml())

    def _start_git(self) -> None:
        self.git = GitServer(self.workdir / "git").start()
        for version, tree in example.repository_trees().items():
            self.git.commit(example.REPOSITORY, tree, tag=version, message=f"fleet-apps {version}")
        self.manifests.mkdir(parents=True, exist_ok=True)
        for name, text in example.manifest_files(self.git.url(example.REPOSITORY)).items():
            (self.manifests / name).write_text(text)
