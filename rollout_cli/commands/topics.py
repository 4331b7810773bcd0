"""`rollout topics create`: every topic of the engine, with its retention and compaction
(infra/topics.py)."""

from __future__ import annotations

import click

from rollout_cli.options import Context, fail, kafka_options, partitions_option, replication_option


@click.group()
def topics() -> None:
    """Manage the engine's topics."""


@topics.command("create")
@partitions_option
@replication_option
@kafka_options
def topics_create(ctx: Context, partitions: int, replication_factor: int) -> None:
    """Create every topic with its retention/compaction settings (idempotent)."""
    from infra.topics import ensure_topics_sync

    try:
        created = ensure_topics_sync(ctx.bootstrap, ctx.prefix, partitions, replication=replication_factor)
    except Exception as error:
        fail(str(error))
    for name in created:
        click.echo(f"created {name}")
    click.echo(f"{len(created)} topic(s) created")
