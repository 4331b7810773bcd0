"""A real kube-apiserver and etcd on 127.0.0.1, built from the Go module proxy.

Used by the test suite's session fixture (``tests/kube/conftest.py``) the way
``infra.localkafka`` is used for Kafka: ``make test`` on a fresh machine needs only Go and
openssl, no Docker and no release downloads.

Flow
----
1. **Build, once per version** (:mod:`infra.localkube.build`). kube-apiserver comes from a
   scratch Go module (``gomod/kube-apiserver``) whose ``main`` calls
   ``app.NewAPIServerCommand()`` of ``k8s.io/kubernetes`` (KUBE_VERSION) used as a library,
   every ``k8s.io/<staging>`` module replaced by its published STAGING_VERSION and two stub
   modules for the staging modules the proxy lacks. etcd comes from ``gomod/etcd``, calling
   ``go.etcd.io/etcd/server/v3/etcdmain.Main``. Binaries are cached in
   ``$ROLLOUT_CACHE_DIR/kube/<name>-<version>/`` (default ``~/.cache/rollout``) under a
   file lock, so parallel sessions build once.
2. **Credentials** (:mod:`infra.localkube.credentials`): CA, serving certificate,
   service-account keys and an admin token, made with openssl.
3. **Processes** (:mod:`infra.localkube.server`): :class:`LocalKube` starts etcd, then any
   number of kube-apiservers on it, each with its own ``--etcd-prefix`` (one per cluster:
   management and workloads), on free ports; waits for ``/readyz``; hands out kubeconfigs;
   :meth:`LocalKube.compact` compacts etcd (old resourceVersions then answer 410).

Modules: ``defaults`` (versions, cache paths), ``errors``, ``build``, ``credentials``,
``server``. Import from ``infra.localkube``.
"""

from __future__ import annotations

from infra.localkube.build import ETCD, KUBE_APISERVER, GoBinary, ensure_binary
from infra.localkube.defaults import ETCD_VERSION, KUBE_VERSION, kube_cache
from infra.localkube.errors import BuildError, LocalKubeError
from infra.localkube.server import APIServer, LocalKube

__all__ = [
    "ETCD",
    "ETCD_VERSION",
    "KUBE_APISERVER",
    "KUBE_VERSION",
    "APIServer",
    "BuildError",
    "GoBinary",
    "LocalKube",
    "LocalKubeError",
    "ensure_binary",
    "kube_cache",
]
