"""`rollout replay [--check] [--from-snapshot PATH]`: refold the logs and compare
(rollout_cli/reading/replaying.py) — all of the journal, or only its tail past a snapshot
(`rollout snapshot take`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rollout_cli.options import Context, kafka_options


@click.command()
@click.option("--check", is_flag=True, help="Exit 1 unless the refold equals what is on the topics.")
@click.option(
    "--from-snapshot",
    "from_snapshot",
    type=click.Path(exists=True, path_type=Path),
    help="Refold only the journal past this snapshot (a file, or a directory: its newest snapshot).",
)
@kafka_options
def replay(ctx: Context, check: bool, from_snapshot: Path | None) -> None:
    """Refold the journal and the assignments log; compare with the live topics."""
    from rollout_cli.reading.replaying import replay_and_compare, replay_from_snapshot

    if from_snapshot is not None:
        from rollout_cli.reading.retention import load_snapshot

        report = replay_from_snapshot(ctx, load_snapshot(from_snapshot))
    else:
        report = replay_and_compare(ctx)
    click.echo(report.summary())
    if check and not report.identical:
        sys.exit(1)
