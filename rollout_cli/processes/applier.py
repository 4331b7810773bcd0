"""`rollout applier`: assemblage snapshots → Flux objects in a sink, until SIGINT/SIGTERM.

    --sink dir:PATH ──► DirectorySink (YAML files; `--simulate-status` reports them succeeded)
    --sink kubernetes ──► KubernetesSink (kubernetes_sink.py: server-side apply, real status)
        run by projections.applier.run_applier beside /metrics /healthz /readyz, a broker
        probe and the clusters' heartbeats (a lease every `--lease-seconds`)

The Kubernetes client is imported only for `--sink kubernetes`.
"""

from __future__ import annotations

import asyncio
import logging.config
from pathlib import Path

import click

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer, logging_config
from infra.settings import kafka_client_options
from infra.topics import TopicNames
from projections.applier import run_applier
from projections.heartbeats import Heartbeats
from projections.publisher import KafkaPublisher
from projections.render import FluxRenderer
from projections.sinks import Sink, SinkResult
from projections.sinks.directory import DirectorySink
from rollout_cli.processes.signals import stop_on_signals
from rollout_cli.sink_options import SinkTimings


def make_sink(
    sink_spec: str,
    *,
    template_dir: Path | None,
    interval: str,
    bootstrap: str | None = None,
    prefix: str = "rollout.",
    kubeconfig: str | None = None,
    context: str | None = None,
    namespaces: tuple[str, ...] = (),
    timings: SinkTimings | None = None,
) -> Sink:
    kind, _, target = sink_spec.partition(":")
    renderer = FluxRenderer(template_dir, interval=interval)
    if kind == "dir" and target:
        return DirectorySink(Path(target), renderer)
    if kind == "kubernetes" and not target:
        from rollout_cli.processes.kubernetes_sink import make_kubernetes_sink

        return make_kubernetes_sink(
            kubeconfig, context, renderer, bootstrap=bootstrap, prefix=prefix, namespaces=namespaces, timings=timings
        )
    raise click.ClickException(f"--sink {sink_spec!r}: expected dir:PATH or kubernetes")


def run_applier_forever(
    *,
    bootstrap: str,
    prefix: str,
    sink_spec: str,
    template_dir: Path | None,
    interval: str,
    group_id: str,
    report: bool,
    web_port: int = 0,
    web_host: str | None = None,
    log_format: str = "text",
    loglevel: str = "info",
    kubeconfig: str | None = None,
    context: str | None = None,
    namespaces: tuple[str, ...] = (),
    timings: SinkTimings | None = None,
    lease_seconds: float = 60.0,
) -> None:
    logging.config.dictConfig(logging_config(log_format, loglevel))
    if 0 < lease_seconds < 1:
        raise click.ClickException(f"--lease-seconds {lease_seconds}: 0 (no heartbeats) or at least 1 second")
    if sink_spec == "kubernetes" and report:
        raise click.ClickException(
            "--simulate-status is for the directory sink; the Kubernetes sink reports real status"
        )
    try:
        sink = make_sink(
            sink_spec,
            template_dir=template_dir,
            interval=interval,
            bootstrap=bootstrap,
            prefix=prefix,
            kubeconfig=kubeconfig,
            context=context,
            namespaces=namespaces,
            timings=timings,
        )
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    serving = ServedApplier(bootstrap, prefix, sink, sink_spec, group_id, report, lease_seconds)
    asyncio.run(serving.run(web_port, web_host))


class ServedApplier:
    """`rollout applier`: the applier with its observability server, broker probe and
    heartbeats, until SIGINT/SIGTERM."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        sink: Sink,
        sink_spec: str,
        group_id: str,
        report: bool,
        lease_seconds: float,
    ) -> None:
        self.bootstrap, self.prefix, self.sink, self.sink_spec = bootstrap, prefix, sink, sink_spec
        self.group_id, self.report, self.lease_seconds = group_id, report, lease_seconds

    async def run(self, web_port: int, web_host: str | None) -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        metrics, health = Metrics(), Health()
        server = ObservabilityServer(port=web_port, metrics=metrics, health=health, host=web_host)
        probe = BrokerProbe(self.bootstrap, health, **kafka_client_options())
        if web_port:
            await server.start()
        probe.start()
        names = TopicNames(self.prefix)
        click.echo(f"applier: {names.remote}, {names.proxy} → {self.sink_spec}", err=True)
        beats = KafkaPublisher(self.bootstrap, names.heartbeats)
        heartbeats = Heartbeats(beats, lease_seconds=self.lease_seconds) if self.lease_seconds > 0 else None
        stats = await run_applier(
            bootstrap=self.bootstrap,
            prefix=self.prefix,
            sink=self.sink,
            group_id=self.group_id,
            report=self.report,
            stop=stop,
            metrics=metrics,
            health=health,
            heartbeats=heartbeats,
            on_result=_echo_changed,
        )
        close = getattr(self.sink, "close", None)
        if close is not None:
            await close()
        await beats.close()
        await probe.stop()
        await server.stop()
        click.echo(
            f"applier stopped: {stats.snapshots} snapshots, {stats.tombstones} tombstones, {stats.errors} errors",
            err=True,
        )


def _echo_changed(result: SinkResult) -> None:
    if result.changed:
        click.echo(
            f"applier: {result.kind} {result.cluster} v{result.version}: "
            f"{result.written} written, {result.pruned} pruned",
            err=True,
        )
