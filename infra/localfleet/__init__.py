"""A local fleet on real Flux: a management cluster and N workload clusters on 127.0.0.1.

Built on ``infra.localkube`` (kube-apiservers on one etcd) and ``infra.localflux`` (the real
Flux controllers, a loopback Git server). ``rollout up --clusters N`` starts one
(:class:`LocalFleet`), registers its clusters as Cluster API would (``capi``), serves the
example repository and writes the example manifests (``example``); the engine's own
processes then run against it exactly as against a real management cluster.

Modules: ``capi`` (Cluster objects and kubeconfig secrets), ``example`` (the example
repository and manifests, pure), ``fleet`` (:class:`LocalFleet`).
"""

from __future__ import annotations

from infra.localfleet.fleet import LocalFleet, cluster_name

__all__ = ["LocalFleet", "cluster_name"]
