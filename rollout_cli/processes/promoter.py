"""`rollout promoter`: the process that watches auto-promoted sources (projections/promoter/).

    module-status ──► Promoter ──► registries, Helm indexes, Git ──► PromotionObserved ──► sync-status

It runs beside the worker and the appliers until `stop`; the engine only ever sees what it
observed as events, and decides. Like them it serves /metrics, /healthz and /readyz (ready:
the broker answers; it has no consumer group to be assigned) on `web_port`, unless that is 0.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.promoter.promoter import Promoter
from projections.publisher import KafkaPublisher


async def run_promoter(
    *,
    bootstrap: str,
    prefix: str,
    interval: float,
    name: str,
    secrets_dir: Path | None,
    web_port: int,
    web_host: str,
    stop: asyncio.Event,
) -> None:
    """List every auto-promoted source each `interval` seconds until `stop`."""
    topics = TopicNames(prefix)
    health = Health(assigned=True)  # no consumer group: ready once the broker answers
    probe = BrokerProbe(bootstrap, health, **kafka_client_options())
    server = ObservabilityServer(port=web_port, metrics=Metrics(), health=health, host=web_host)
    publish = KafkaPublisher(bootstrap, topics.status)
    promoter = Promoter(
        bootstrap=bootstrap, prefix=prefix, publish=publish, name=name, interval=interval, secrets_dir=secrets_dir
    )
    click.echo(f"promoter {name}: {topics.module_status} → sources → {topics.status}", err=True)
    if web_port:
        await server.start()
    probe.start()
    try:
        await promoter.run(stop)
    except Exception as error:
        health.crashed = str(error)
        raise
    finally:
        await publish.close()
        await probe.stop()
        await server.stop()
    click.echo(f"promoter stopped: {promoter.published} version(s) published", err=True)
