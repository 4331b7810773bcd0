"""`rollout gate-runner`: the process that evaluates health gates (projections/gate_runner.py).

    module-status ──► GateRunner ──► Prometheus / webhooks ──► GateEvaluated ──► sync-status

It runs beside the worker and the appliers until `stop`; the engine only ever sees its
results as events. Like them it serves /metrics, /healthz and /readyz (ready: the broker
answers; it has no consumer group to be assigned) on `web_port`, unless that is 0.
"""

from __future__ import annotations

import asyncio

import click

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.gate_runner import GateRunner
from projections.publisher import KafkaPublisher


async def run_gate_runner(
    *, bootstrap: str, prefix: str, interval: float, web_port: int, web_host: str, stop: asyncio.Event
) -> None:
    """Evaluate the gates of every soaking stage each `interval` seconds until `stop`."""
    topics = TopicNames(prefix)
    health = Health(assigned=True)  # no consumer group: ready once the broker answers
    probe = BrokerProbe(bootstrap, health, **kafka_client_options())
    server = ObservabilityServer(port=web_port, metrics=Metrics(), health=health, host=web_host)
    publish = KafkaPublisher(bootstrap, topics.status)
    runner = GateRunner(bootstrap=bootstrap, prefix=prefix, publish=publish, interval=interval)
    click.echo(f"gate-runner: {topics.module_status} → gates → {topics.status}", err=True)
    if web_port:
        await server.start()
    probe.start()
    try:
        await runner.run(stop)
    except Exception as error:
        health.crashed = str(error)
        raise
    finally:
        await publish.close()
        await probe.stop()
        await server.stop()
    click.echo(f"gate-runner stopped: {runner.published} result(s) published", err=True)
