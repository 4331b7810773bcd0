"""The process around a watcher that acts as one leader (`watch-clusters`, `watch-modules`).

    management client ─► /metrics /healthz /readyz + broker probe
                      ─► run_role: with --leader-elect, `lead(api)` only while holding the
                         Lease (built anew each time it is won); without, `lead(api)` at once
                      ─► stop (SIGTERM): the Lease is released, servers and client closed

`leadership` None is the same as no --leader-elect. `lead` is the watcher's own work —
fence its transactional id, seed from the topic it publishes to, watch — and sets
`health.watcher` while it runs. Readiness: the broker answers and, while leading, the
watcher has listed what it watches; a follower is ready (it waits), so a rolling update
of a two-replica Deployment never stalls on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import click
from kubernetes_asyncio.client import ApiClient

from infra.observability import BrokerProbe, Health, Metrics, ObservabilityServer
from infra.settings import kafka_client_options
from projections.kube import KubeconfigError, management_client
from projections.leadership import run_role
from rollout_cli.leadership_options import Leadership

__all__ = ["LeaderHealth", "Listing", "run_leader_process"]


class Listing(Protocol):
    """A watcher that knows whether it has listed everything it watches once."""

    @property
    def synced(self) -> bool: ...


@dataclass
class LeaderHealth(Health):
    """Ready once the broker answers and, while leading, `watcher` has listed once."""

    watcher: Listing | None = None
    unsynced: str = "the watched objects are not listed yet"

    def ready(self) -> tuple[bool, list[str]]:
        problems = self.process_problems()
        if self.watcher is not None and not self.watcher.synced:
            problems.append(self.unsynced)
        return (not problems, problems)


async def run_leader_process(
    *,
    name: str,
    kubeconfig: str | Path | None,
    context: str | None,
    leadership: Leadership | None,
    bootstrap: str,
    health: LeaderHealth,
    lead: Callable[[ApiClient], Awaitable[None]],
    stop: asyncio.Event,
    metrics: Metrics | None = None,
    web_port: int = 0,
    web_host: str | None = None,
) -> None:
    """Run `lead` as the one holder of the role `name` until `stop`; see the module docstring.
    An error of `lead` ends the process as a ClickException naming `name`."""
    try:
        api = await management_client(kubeconfig, context)
    except KubeconfigError as error:
        raise click.ClickException(str(error)) from None
    probe = BrokerProbe(bootstrap, health, **kafka_client_options())
    metrics = metrics or Metrics()
    server = ObservabilityServer(port=web_port, metrics=metrics, health=health, host=web_host) if web_port else None
    probe.start()
    try:
        if server is not None:
            await server.start()
        lease = leadership.lease() if leadership is not None else None
        if lease is not None:
            candidate = f"{name}: {lease.identity} is a candidate for the Lease {lease.namespace}/{lease.name}"
            click.echo(candidate, err=True)
        await run_role(api, lease, lambda: lead(api), stop)
    except click.ClickException:
        raise
    except Exception as error:
        raise click.ClickException(f"{name} stopped: {error}") from None
    finally:
        await probe.stop()
        if server is not None:
            await server.stop()
        await api.close()
