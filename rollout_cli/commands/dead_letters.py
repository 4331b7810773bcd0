"""`rollout dead-letters [--since]`: the inputs the engine rejected, oldest first."""

from __future__ import annotations

import click

from rollout_cli.options import Context, Duration, kafka_options
from rollout_cli.views.output import emit, output_option


@click.command(name="dead-letters")
@click.option(
    "--since",
    type=Duration(),
    default=None,
    help="Only inputs rejected within this long before now (30s, 15m, 1h30m, 2d).",
)
@output_option
@kafka_options
def dead_letters(ctx: Context, since: float | None, output: str) -> None:
    """Inputs the engine rejected, oldest first: when, the stage that refused, where the input
    was (topic[partition]@offset), its key and size, and the reason."""
    import time

    from rollout_cli.reading.documents import dead_letters_from_records
    from rollout_cli.views.dead_letters import dead_letters_json, print_dead_letters

    cutoff = time.time() - since if since is not None else None
    letters = dead_letters_from_records(ctx.records(ctx.topics.dead_letters), since=cutoff)
    if output != "table":
        emit(dead_letters_json(letters), output)
    elif not letters:
        click.echo("no dead letters" + (" in that time" if since is not None else ""))
    else:
        print_dead_letters(letters)
