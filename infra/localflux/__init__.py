"""Real Flux controllers and loopback Flux sources on 127.0.0.1, built from the Go module proxy.

What ``infra.localkube`` is for the Kubernetes API, this is for Flux: the end-to-end tests
write Flux objects with the project's own code and let the *real* source-, kustomize- and
helm-controller reconcile them against real kube-apiservers — no Docker, no release
downloads, nothing mocked, no status written by a test.

Flow
----
1. **Build, once per version** (:mod:`.build`): each controller from a copy of its Go module
   (``go mod download`` → ``go mod edit -dropreplace=<module>/api`` → ``go build``), the
   registry with ``go install``; cached in ``$ROLLOUT_CACHE_DIR/flux/<name>-<version>/``
   (default ``~/.cache/rollout``) under a file lock, valid when its stamp names the pinned
   version. :func:`ensure_flux` → :class:`FluxBinaries`; :func:`ensure_registry`,
   :func:`ensure_sops`, :func:`ensure_age_keygen` → path (the tools in ``<cache>/tools/``).
   3 minutes per controller on two quiet cores (much longer beside other builds), once.
2. **Prepare an API server** (:mod:`.cluster`): :func:`prepare_cluster` creates
   ``flux-system`` and the Flux CRDs the server lacks (source-controller refuses to start
   without HelmChart, Bucket and ExternalArtifact; CRDs already there stay as they are).
3. **Run the controllers** (:mod:`.controllers`): :class:`FluxControllers` — one set of
   three processes per API server, ``KUBECONFIG`` pointing at it, every listener on a free
   127.0.0.1 port, logs in ``<workdir>/<name>-<controller>.log``; healthy 0.3-2 s after start.
4. **Sources** (:mod:`.sources`): :class:`GitServer` (smart HTTP), :class:`OCIRegistry`
   (the distribution registry; Flux artifacts and Helm charts pushed over its HTTP API),
   :class:`HelmRepository` (``index.yaml`` + chart archives built in Python).

Measured (one API server, two cores): a GitRepository is Ready 1.1 s after its creation
and its Kustomization 0.8 s later; an OCIRepository 1.0 s, its Kustomization 0.25 s later;
a HelmRepository 1.0 s, its HelmRelease 0.4 s later (``prepare_cluster`` 0.9 s).

Modules: ``defaults`` (versions, cache paths, timeouts), ``errors``, ``build``,
``processes``, ``cluster``, ``controllers``, ``sources``. Import from ``infra.localflux``.
"""

from __future__ import annotations

from infra.localflux.build import FluxBinaries, ensure_age_keygen, ensure_flux, ensure_registry, ensure_sops
from infra.localflux.cluster import prepare_cluster
from infra.localflux.controllers import FluxControllers
from infra.localflux.errors import BuildError, LocalFluxError
from infra.localflux.sources import GitServer, HelmRepository, OCIRegistry, build_chart, tar_gz

__all__ = [
    "BuildError",
    "FluxBinaries",
    "FluxControllers",
    "GitServer",
    "HelmRepository",
    "LocalFluxError",
    "OCIRegistry",
    "build_chart",
    "ensure_age_keygen",
    "ensure_flux",
    "ensure_registry",
    "ensure_sops",
    "prepare_cluster",
    "tar_gz",
]
