"""The Kubernetes side of the CLI: `rollout watch-clusters` and the applier's Kubernetes sink.

- `watch-clusters` runs `projections.watcher.ClusterWatcher` against the management
  cluster: Cluster API Clusters and their kubeconfig secrets in the given namespaces (or
  all) become ClusterObserved/ClusterRemoved events on the cluster-observations topic. On
  start it reads that topic to learn what it published before, so that only changes are
  published and Clusters deleted while it was down are removed.
- `make_kubernetes_sink(...)` builds the sink behind `rollout applier --sink kubernetes`:
  `projections.sinks.kubernetes.KubernetesSink` with, when a broker is given, the sync
  status reporter (`projections.status.StatusReporter`) publishing to the sync-status
  topic. Clients are made lazily, inside the applier's event loop.

Both take `--kubeconfig`/`--context` (default: $KUBECONFIG or ~/.kube/config, else the
in-cluster service account) and the usual `--bootstrap-servers`/`--topic-prefix`
(ROLLOUT_BOOTSTRAP_SERVERS / ROLLOUT_TOPIC_PREFIX).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import click
from kubernetes_asyncio.client import ApiClient

from projections.kube import KubeconfigError, RetryPolicy, management_client
from projections.publisher import KafkaPublisher
from projections.render import FluxRenderer
from projections.sinks.kubernetes import KubernetesSink
from projections.status import StatusReporter
from projections.watcher import ClusterWatcher
from rollout.events import ClusterObserved, ClusterRemoved, EventRejected, parse_event
from rollout.manifests import ClusterManifest
from streams.settings import DEFAULT_PREFIX
from streams.topics import TopicNames

__all__ = ["last_observations", "make_kubernetes_sink", "run_watch_clusters", "watch_clusters"]


def make_kubernetes_sink(
    kubeconfig: str | Path | None,
    context: str | None,
    renderer: FluxRenderer,
    *,
    bootstrap: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    resync_interval: float = 300.0,
    not_ready_interval: float = 15.0,
    request_timeout: float = 10.0,
) -> KubernetesSink:
    """The sink for `rollout applier --sink kubernetes`.

    With `bootstrap`, sync status is reported on `<prefix>sync-status`; the applier must
    then not simulate status itself. Call `await sink.close()` when the applier stops.
    """
    reporter = None
    if bootstrap is not None:
        reporter = StatusReporter(
            KafkaPublisher(bootstrap, TopicNames(prefix).status),
            policy=RetryPolicy(request_timeout=request_timeout),
            retry_interval=not_ready_interval,
        )

    async def management() -> ApiClient:
        return await management_client(kubeconfig, context)

    return KubernetesSink(
        renderer,
        management=management,
        reporter=reporter,
        policy=RetryPolicy(request_timeout=request_timeout),
        resync_interval=resync_interval,
        not_ready_interval=not_ready_interval,
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


async def run_watch_clusters(
    *,
    kubeconfig: str | Path | None,
    context: str | None,
    namespaces: tuple[str, ...] | list[str],
    bootstrap: str,
    prefix: str,
    stop: asyncio.Event,
) -> None:
    """Seed from the cluster-observations topic, then watch until `stop` is set."""
    from streams import client

    topic = TopicNames(prefix).clusters
    try:
        seed = last_observations([record.value for record in await client.read_all(bootstrap, topic)])
    except LookupError as error:
        raise click.ClickException(str(error)) from None
    try:
        api = await management_client(kubeconfig, context)
    except KubeconfigError as error:
        raise click.ClickException(str(error)) from None
    publisher = KafkaPublisher(bootstrap, topic)
    watcher = ClusterWatcher(api, publisher, namespaces=namespaces, seed=seed)
    click.echo(f"watch-clusters: Cluster API clusters → {topic} ({len(seed)} known)", err=True)
    task = asyncio.create_task(watcher.run())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopped):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await publisher.close()
        await api.close()
    if not task.cancelled() and task.exception() is not None:
        raise click.ClickException(f"watch-clusters stopped: {task.exception()}")


@click.command(name="watch-clusters")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig of the management cluster.")
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace of Cluster API clusters to watch (repeatable; default: all namespaces).",
)
@click.option(
    "--bootstrap-servers",
    envvar="ROLLOUT_BOOTSTRAP_SERVERS",
    default=None,
    help="Kafka bootstrap servers (env ROLLOUT_BOOTSTRAP_SERVERS; default: the local broker).",
)
@click.option(
    "--topic-prefix",
    envvar="ROLLOUT_TOPIC_PREFIX",
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Prefix of every topic name (env ROLLOUT_TOPIC_PREFIX).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every publication.")
def watch_clusters(
    kubeconfig: str | None,
    context: str | None,
    namespaces: tuple[str, ...],
    bootstrap_servers: str | None,
    topic_prefix: str,
    verbose: bool,
) -> None:
    """Publish Cluster API clusters of the management cluster as fleet clusters, until stopped."""
    from rollout_cli.main import resolve_bootstrap

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    bootstrap = resolve_bootstrap(bootstrap_servers)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_watch_clusters(
            kubeconfig=kubeconfig,
            context=context,
            namespaces=namespaces,
            bootstrap=bootstrap,
            prefix=topic_prefix,
            stop=stop,
        )

    asyncio.run(main())
