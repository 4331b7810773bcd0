"""`rollout notifier`: the process that sends decisions as CloudEvents (projections/notifier/).

    decisions ──► Notifier ──► webhooks (CloudEvents, HTTP, structured mode)
                          └──► dead-letters (what a webhook never accepted)

It runs beside the worker and the appliers until `stop`; the engine never sends anything.
Like them it serves /metrics, /healthz and /readyz (ready: the broker answers and the
consumer group assigned it partitions) on `web_port`, unless that is 0.
"""

from __future__ import annotations

import asyncio

import click

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.notifier.config import NotifierConfig
from projections.notifier.notifier import Notifier
from projections.publisher import KafkaPublisher


async def run_notifier(
    *,
    bootstrap: str,
    prefix: str,
    config: NotifierConfig,
    start_from: str,
    web_port: int,
    web_host: str,
    stop: asyncio.Event,
) -> None:
    """Notify until `stop`."""
    topics = TopicNames(prefix)
    health = Health()
    metrics = Metrics()
    probe = BrokerProbe(bootstrap, health, **kafka_client_options())
    server = ObservabilityServer(port=web_port, metrics=metrics, health=health, host=web_host)
    dead_letters = KafkaPublisher(bootstrap, topics.dead_letters)
    notifier = Notifier(
        bootstrap=bootstrap,
        prefix=prefix,
        config=config,
        dead_letters=dead_letters,
        start_from=start_from,
        metrics=metrics,
        health=health,
    )
    names = ", ".join(f"{w.name} ({w.url})" for w in config.webhooks)
    click.echo(f"notifier: {topics.decisions} → {names} as source {notifier.source}", err=True)
    if web_port:
        await server.start()
    probe.start()
    try:
        await notifier.run(stop)
    except Exception as error:
        health.crashed = str(error)
        raise
    finally:
        await dead_letters.close()
        await probe.stop()
        await server.stop()
    click.echo(f"notifier stopped: {notifier.read} decision(s) read", err=True)
