"""`rollout replay [--check]`: refold the logs and compare (rollout_cli/reading/replaying.py)."""

from __future__ import annotations

import sys

import click

from rollout_cli.options import Context, kafka_options


@click.command()
@click.option("--check", is_flag=True, help="Exit 1 unless the refold equals what is on the topics.")
@kafka_options
def replay(ctx: Context, check: bool) -> None:
    """Refold the journal and the assignments log; compare with the live topics."""
    from rollout_cli.reading.replaying import replay_and_compare

    report = replay_and_compare(ctx)
    click.echo(report.summary())
    if check and not report.identical:
        sys.exit(1)
