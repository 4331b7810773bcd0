"""`rollout watch-clusters`: Cluster API Clusters → the cluster-observations topic, as one leader.

    win the Lease (with --leader-elect; processes/leader.py) ─► FencedPublisher.start()
      (fences the last leader: transactional id `rollout-watch-clusters.<topic prefix>`)
      ─► seed from the cluster-observations topic (what was published before)
      ─► projections.watcher.ClusterWatcher: Clusters and their kubeconfig secrets in the
         given namespaces (or all) ─► ClusterObserved / ClusterRemoved

Seeded, it publishes only changes, and removes the Clusters deleted while nobody watched.
`--kubeconfig`/`--context` default to $KUBECONFIG or ~/.kube/config, else the in-cluster
service account.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import click
from kubernetes_asyncio.client import ApiClient
from prometheus_client import Counter

from infra.observability import Metrics
from infra.topics import TopicNames
from projections.fenced_publisher import FencedPublisher
from projections.watcher import ClusterWatcher
from rollout.api.manifests import ClusterManifest
from rollout.wire.events import ClusterObserved, ClusterRemoved, EventRejected, parse_event
from rollout_cli.leadership_options import Leadership
from rollout_cli.processes.leader import LeaderHealth, run_leader_process

__all__ = ["last_observations", "run_watch_clusters"]


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
