"""The Kubernetes side of the CLI: `rollout watch-clusters` and the applier's Kubernetes sink.

- `watch-clusters` runs `projections.watcher.ClusterWatcher` against the management
  cluster: Cluster API Clusters and their kubeconfig secrets in the given namespaces (or
  all) become ClusterObserved/ClusterRemoved events on the cluster-observations topic. As
  one leader (`rollout_cli.leader_process`: a Lease with --leader-elect), it first fences
  the previous leader (the transactional id `rollout-watch-clusters.<topic prefix>`,
  `projections.fenced_publisher`), then reads that topic to learn what was published
  before, so that only changes are published and Clusters deleted while nobody watched
  are removed.
- `make_kubernetes_sink(...)` builds the sink behind `rollout applier --sink kubernetes`:
  `projections.sinks.kubernetes.KubernetesSink` with, when a broker is given, the sync
  status reporter (`projections.status.StatusReporter`) and the live Helm values reporter
  (`projections.sinks.live_values.LiveValues`) publishing to the sync-status topic.
  Clients are made lazily, inside the applier's event loop.

Both take `--kubeconfig`/`--context` (default: $KUBECONFIG or ~/.kube/config, else the
in-cluster service account) and the usual `--bootstrap-servers`/`--topic-prefix`
(ROLLOUT_BOOTSTRAP_SERVERS / ROLLOUT_TOPIC_PREFIX).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from kubernetes_asyncio.client import ApiClient
from prometheus_client import Counter

from infra.observability import Metrics
from infra.settings import DEFAULT_PREFIX
from infra.topics import TopicNames
from projections.fenced_publisher import FencedPublisher
from projections.kube import RetryPolicy, management_client
from projections.publisher import KafkaPublisher
from projections.render import FluxRenderer
from projections.sinks.kubernetes import KubernetesSink
from projections.sinks.live_values import LiveValues
from projections.status import StatusReporter
from projections.watcher import ClusterWatcher
from rollout.api.manifests import ClusterManifest
from rollout.wire.events import ClusterObserved, ClusterRemoved, EventRejected, parse_event
from rollout_cli.leader_process import LeaderHealth, run_leader_process
from rollout_cli.leadership_options import Leadership
from rollout_cli.sink_options import SinkTimings

__all__ = ["last_observations", "make_kubernetes_sink", "run_watch_clusters"]


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


def last_observations(records: list[bytes | None]) -> list[ClusterManifest]:
    """Fold the cluster-observations topic into the last observation of each present cluster."""
    latest: dict[str, ClusterManifest] = {}
    for value in records:
        try:
            event = parse_event(value)
        except EventRejected:
            continue
        if isinstance(event, ClusterObserved):
            latest[event.cluster.name] = event.cluster
        elif isinstance(event, ClusterRemoved):
            latest.pop(event.name, None)
    return list(latest.values())


@dataclass
class WatcherHealth(LeaderHealth):
    """Ready once the broker answers and, while leading, Clusters and secrets have been listed."""

    unsynced: str = "Clusters and kubeconfig secrets not listed yet"


async def watch_clusters_as_leader(
    api: ApiClient,
    *,
    bootstrap: str,
    prefix: str,
    namespaces: tuple[str, ...] | list[str],
    health: WatcherHealth,
    published: Counter,
) -> None:
    """Fence the last leader, seed from the cluster-observations topic, then watch until
    cancelled. Each event is one transaction of the fenced publisher (`published` counts them)."""
    from infra import client

    topic = TopicNames(prefix).clusters
    await client.require_topics(bootstrap, [topic])
    publisher = FencedPublisher(bootstrap, f"rollout-watch-clusters.{prefix}")
    await publisher.start()
    try:
        seed = last_observations([record.value for record in await client.read_all(bootstrap, topic)])

        async def publish(key: str, value: bytes) -> None:
            await publisher.publish(topic, [(key, value)])
            published.labels("ClusterRemoved" if b'"ClusterRemoved"' in value else "ClusterObserved").inc()

        watcher = ClusterWatcher(api, publish, namespaces=namespaces, seed=seed)
        health.watcher = watcher
        click.echo(f"watch-clusters: Cluster API clusters → {topic} ({len(seed)} known)", err=True)
        await watcher.run()
    finally:
        health.watcher = None
        await publisher.close()


async def run_watch_clusters(
    *,
    kubeconfig: str | Path | None,
    context: str | None,
    namespaces: tuple[str, ...] | list[str],
    bootstrap: str,
    prefix: str,
    stop: asyncio.Event,
    leadership: Leadership | None = None,
    web_port: int = 0,
    web_host: str | None = None,
) -> None:
    """Watch until `stop` is set: as one leader with `leadership` enabled (--leader-elect),
    else at once. With `web_port`, serves /metrics, /healthz and /readyz."""
    metrics = Metrics()
    published = Counter(
        "rollout_cluster_events_published", "Cluster events published", ["type"], registry=metrics.registry
    )
    health = WatcherHealth()

    async def lead(api: ApiClient) -> None:
        await watch_clusters_as_leader(
            api, bootstrap=bootstrap, prefix=prefix, namespaces=namespaces, health=health, published=published
        )

    await run_leader_process(
        name="watch-clusters",
        kubeconfig=kubeconfig,
        context=context,
        leadership=leadership,
        bootstrap=bootstrap,
        health=health,
        lead=lead,
        stop=stop,
        metrics=metrics,
        web_port=web_port,
        web_host=web_host,
    )
