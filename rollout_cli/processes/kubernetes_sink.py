"""The sink behind `rollout applier --sink kubernetes` (imports the Kubernetes client).

    assemblage snapshots ──► projections.sinks.kubernetes.KubernetesSink: server-side apply in
    the management cluster (RemoteAssemblage) and, through each cluster's kubeconfig secret,
    inside the workload clusters (ProxyAssemblage)
    given a broker ──► projections.status.StatusReporter (sync status) and
                       projections.sinks.live_values.LiveValues (live Helm values) ──► sync-status

`--kubeconfig`/`--context` default to $KUBECONFIG or ~/.kube/config, else the in-cluster
service account; clients are made lazily, inside the applier's event loop. The timings are
the `rollout applier` flags (rollout_cli/sink_options.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kubernetes_asyncio.client import ApiClient

from infra.settings import DEFAULT_PREFIX
from infra.topics import TopicNames
from projections.kube import RetryPolicy, management_client
from projections.publisher import KafkaPublisher
from projections.render import FluxRenderer
from projections.sinks.kubernetes import KubernetesSink
from projections.sinks.live_values import LiveValues
from projections.status import StatusReporter
from rollout_cli.sink_options import SinkTimings

__all__ = ["make_kubernetes_sink"]


def make_kubernetes_sink(
    kubeconfig: str | Path | None,
    context: str | None,
    renderer: FluxRenderer,
    *,
    bootstrap: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    namespaces: Sequence[str] = (),
    timings: SinkTimings | None = None,
) -> KubernetesSink:
    """The sink for `rollout applier --sink kubernetes`.

    With `bootstrap`, sync status and live Helm values are reported on `<prefix>sync-status`;
    the applier must then not simulate status itself. `namespaces`: the fleet namespaces, where kubeconfig
    secrets are looked up by name when a cluster's namespace is unknown (otherwise secrets
    are listed cluster-wide for that). `timings`: the `rollout applier` flags (defaults
    otherwise). Call `await sink.close()` when the applier stops.
    """
    timings = timings or SinkTimings()
    policy = RetryPolicy(request_timeout=timings.request_timeout)
    reporter = live_values = None
    if bootstrap is not None:
        publisher = KafkaPublisher(bootstrap, TopicNames(prefix).status)
        reporter = StatusReporter(publisher, policy=policy, retry_interval=timings.not_ready_interval)
        live_values = LiveValues(publisher, grace=timings.values_grace)

    async def management() -> ApiClient:
        return await management_client(kubeconfig, context)

    return KubernetesSink(
        renderer,
        management=management,
        reporter=reporter,
        policy=policy,
        resync_interval=timings.resync_interval,
        not_ready_interval=timings.not_ready_interval,
        write_timeout=timings.write_timeout,
        max_backoff=timings.max_backoff,
        watch_drift=timings.watch_drift,
        fleet_namespaces=namespaces,
        live_values=live_values,
    )
