"""`rollout delete KIND NAME`: ModuleDeleted / ClusterRemoved (the engine answers), or
RestrictionDeleted for a modulerestriction NAMESPACE/NAME, FreezeCalendarDeleted for a
freezecalendar NAMESPACE/NAME or a clusterfreezecalendar NAME (looked up on the topic first)."""

from __future__ import annotations

from typing import Any

import click

from rollout_cli.options import Context, check_name, fail, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


@click.command()
@click.argument(
    "kind",
    type=click.Choice(
        ["module", "bootstrapmodule", "cluster", "modulerestriction", "freezecalendar", "clusterfreezecalendar"]
    ),
)
@click.argument("name")
@verdict_options
@kafka_options
def delete(ctx: Context, kind: str, name: str, wait: Wait) -> None:
    """Delete a module, bootstrapmodule or cluster (its syncs are pruned everywhere), or a
    modulerestriction NAMESPACE/NAME (the namespace is unrestricted from then on), or a
    freezecalendar NAMESPACE/NAME or clusterfreezecalendar NAME (its freezes end).

    Waits for the engine's verdict: an unknown name is an error (exit 1). A restriction is
    looked up on the cluster-observations topic instead (the engine does not answer it)."""
    from rollout.wire.events import ClusterRemoved, ModuleDeleted
    from rollout_cli.publishing.verdicts import decide, request

    if kind == "modulerestriction":
        delete_restriction(ctx, name)
        return
    if kind in ("freezecalendar", "clusterfreezecalendar"):
        delete_calendar(ctx, kind, name)
        return
    check_name(name)
    if kind == "cluster":
        event: Any = ClusterRemoved(name=name, reply=True if wait.enabled else None)
        topic = ctx.topics.clusters
    else:
        event = ModuleDeleted(kind="Module" if kind == "module" else "BootstrapModule", name=name)
        topic = ctx.topics.intents
    verdicts = request(ctx, wait, topic=topic, messages=[(name, event.to_bytes())], ids=[event.id])
    decide(f"{kind}/{name}: delete", verdicts, event.id, wait)


def delete_restriction(ctx: Context, qualified: str) -> None:
    """Publish RestrictionDeleted for NAMESPACE/NAME, if the topic holds that restriction."""
    from infra import client
    from rollout.wire.events import RestrictionDeleted, restriction_key
    from rollout_cli.publishing.applying import restrictions_from_records

    namespace, _, name = qualified.partition("/")
    if not name:
        fail(f"name a modulerestriction as NAMESPACE/NAME, not {qualified!r}")
    check_name(namespace)
    check_name(name)
    current = restrictions_from_records(ctx.records(ctx.topics.clusters)).get(namespace)
    if current is None or current.metadata.name != name:
        found = f" (its restriction is {current.metadata.name})" if current is not None else ""
        fail(f"modulerestriction {namespace}/{name} not found{found}", code=1)
    event = RestrictionDeleted(namespace=namespace, name=name)
    client.run(client.publish(ctx.bootstrap, ctx.topics.clusters, [(restriction_key(namespace), event.to_bytes())]))
    click.echo(f"modulerestriction/{namespace}/{name} deleted")


def delete_calendar(ctx: Context, kind: str, qualified: str) -> None:
    """Publish FreezeCalendarDeleted for a freezecalendar NAMESPACE/NAME or a
    clusterfreezecalendar NAME, if the topic holds that calendar."""
    from infra import client
    from rollout.api.manifests import CLUSTER_SCOPE
    from rollout.wire.events import FreezeCalendarDeleted, freeze_key
    from rollout_cli.reading.freeze_calendars import calendars_from_records

    if kind == "freezecalendar":
        scope, _, name = qualified.partition("/")
        if not name:
            fail(f"name a freezecalendar as NAMESPACE/NAME, not {qualified!r}")
        check_name(scope)
    else:
        scope, name = CLUSTER_SCOPE, qualified
    check_name(name)
    if (scope, name) not in calendars_from_records(ctx.records(ctx.topics.clusters)):
        fail(f"{kind} {qualified} not found", code=1)
    event = FreezeCalendarDeleted(scope=scope, name=name)
    client.run(client.publish(ctx.bootstrap, ctx.topics.clusters, [(freeze_key(scope, name), event.to_bytes())]))
    click.echo(f"{kind}/{qualified} deleted")
