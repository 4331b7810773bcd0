"""`rollout apply -f FILE|DIR`: the flags and what is printed; the checks before the one
transaction are rollout_cli/publishing/applying.py, the verdicts publishing/verdicts.py."""

from __future__ import annotations

import click

from rollout_cli.options import Context, fail, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


@click.command()
@click.option("-f", "--filename", "files", multiple=True, required=True, type=click.Path(exists=True))
@verdict_options
@kafka_options
def apply(ctx: Context, files: tuple[str, ...], wait: Wait) -> None:
    """Publish Module, BootstrapModule, Cluster, ModuleRestriction and freeze calendar
    manifests (files or directories).

    Every document is validated and every event's size checked against its topic's limit
    first, and every module against its namespace's ModuleRestriction (in the files, or the
    one already published); if anything is wrong nothing is published and every problem is
    listed with its file, document and field (a restriction's: the rule and the value).
    Then all events are published in one Kafka transaction (all or nothing), with a warning
    for a module or stage that matches no known cluster, and it waits for the engine's
    verdict on each module: created, configured or unchanged, or refused (exit 1). Clusters,
    restrictions and freeze calendars (FreezeCalendar, ClusterFreezeCalendar) are created,
    configured or unchanged against the topic.
    """
    from infra import client
    from rollout_cli.publishing import applying
    from rollout_cli.publishing.verdicts import awaiting, report_apply

    prepared = applying.prepare(ctx, applying.load(files))
    for warning in prepared.warnings:
        click.echo(f"warning: {warning}", err=True)
    modules = [(i.description, i.event.id) for i in prepared.intents if i.role == "intents"]
    publishing = applying.publish(ctx, prepared)
    try:
        verdicts = client.run(awaiting(ctx, wait, [event_id for _, event_id in modules], publishing))
    except Exception as error:
        publishing.close()  # not awaited if the verdicts topic could not be read first: nothing was sent
        if not prepared.committed:
            fail(f"nothing was applied: {error}")
        fail(f"applied, but cannot read the engine's verdicts at {ctx.bootstrap}: {error}")
    for cluster, change in prepared.cluster_changes.items():
        click.echo(f"{cluster} {change}")
    report_apply(modules, verdicts, wait)
