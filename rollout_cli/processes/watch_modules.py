"""`rollout watch-modules`: the Module watcher and the status writer, as one leader.

    win the Lease (with --leader-elect) ─► FencedPublisher.start() (fences the last leader)
      ─► seed from the intents topic (and the ModuleRestrictions it published, from
         cluster-observations) ─► ModuleWatcher (objects → intents, restrictions)
                                      + StatusWriter (module-status, verdicts → status, Events)

Everything after the Lease is built anew each time leadership is won
(`projections.leadership.run_as_leader`; the process around it, shared with
`watch-clusters`, is `rollout_cli.processes.leader`). The transactional id is
`rollout-watch-modules.<topic prefix>`: without --leader-elect two instances still cannot
both publish — the second one's start fences the first.

Serves /metrics, /healthz and /readyz when --web-port is not 0: ready once the broker
answers and, if leading, the five kinds have been listed (a follower is ready: it waits).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import click
from kubernetes_asyncio.client import ApiClient

from infra import client
from infra.topics import TopicNames
from projections.fenced_publisher import FencedPublisher
from projections.module_status import StatusWriter
from projections.module_watcher import ModuleWatcher, ObjectRef, PublishedIntents
from rollout_cli.leadership_options import Leadership
from rollout_cli.processes.leader import LeaderHealth, run_leader_process

__all__ = ["run_watch_modules"]


@dataclass
class ModuleWatcherHealth(LeaderHealth):
    unsynced: str = "rollout.dev objects (modules, approvals, commands, break-glasses, policies) not listed yet"


async def watch_as_leader(
    api: ApiClient, *, bootstrap: str, prefix: str, namespaces: tuple[str, ...] | list[str], health: ModuleWatcherHealth
) -> None:
    """Fence, seed, then watch and write status until cancelled."""
    topics = TopicNames(prefix)
    await client.require_topics(bootstrap, [topics.intents, topics.clusters, topics.module_status, topics.verdicts])
    publisher = FencedPublisher(bootstrap, f"rollout-watch-modules.{prefix}")
    await publisher.start()
    try:
        seed = PublishedIntents.fold(record.value for record in await client.read_all(bootstrap, topics.intents))
        seed.fold_restrictions(record.value for record in await client.read_all(bootstrap, topics.clusters))
        writer: StatusWriter | None = None

        async def publish(records: list[tuple[str, bytes]]) -> None:
            await publisher.publish(topics.intents, records)

        async def publish_restrictions(records: list[tuple[str, bytes]]) -> None:
            await publisher.publish(topics.clusters, records)  # the fleet's policy travels with the fleet

        async def fleet() -> dict[int, int]:
            return {p: o for p, o in sorted((await client.end_offsets(bootstrap, topics.clusters)).items()) if o > 0}

        async def changed(ref: ObjectRef) -> None:
            if writer is not None:
                await writer.refresh(ref)

        watcher = ModuleWatcher(
            api,
            publish,
            fleet,
            namespaces=namespaces,
            seed=seed,
            on_change=changed,
            publish_restrictions=publish_restrictions,
        )
        writer = StatusWriter(api, watcher)
        await writer.seed(bootstrap, topics.module_status)  # before the watcher's first status write
        health.watcher = watcher
        await asyncio.gather(watcher.run(), writer.follow(bootstrap, topics.module_status, topics.verdicts))
    finally:
        health.watcher = None
        await publisher.close()


async def run_watch_modules(
    *,
    kubeconfig: str | Path | None,
    context: str | None,
    namespaces: tuple[str, ...] | list[str],
    bootstrap: str,
    prefix: str,
    leadership: Leadership,
    stop: asyncio.Event,
    web_port: int = 0,
    web_host: str | None = None,
) -> None:
    """Watch until `stop` is set; see the module docstring."""
    health = ModuleWatcherHealth()
    click.echo(f"watch-modules: rollout.dev objects → {TopicNames(prefix).intents}", err=True)

    async def lead(api: ApiClient) -> None:
        await watch_as_leader(api, bootstrap=bootstrap, prefix=prefix, namespaces=namespaces, health=health)

    await run_leader_process(
        name="watch-modules",
        kubeconfig=kubeconfig,
        context=context,
        leadership=leadership,
        bootstrap=bootstrap,
        health=health,
        lead=lead,
        stop=stop,
        web_port=web_port,
        web_host=web_host,
    )
