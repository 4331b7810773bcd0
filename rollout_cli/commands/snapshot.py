"""`rollout snapshot take|list|retain`: snapshots of the engine's state, and the journal's
retention tied to them (rollout_cli/reading/retention.py, streams/snapshots.py).

    take    decide-state + assemble-state (read_committed, with the positions they cover)
            ──► DIR/snapshot-<time>.json.gz
    retain  keep the snapshots of the last KEEP (and the newest before) ──► delete the journal (and the
            assignments) below the oldest kept one's positions (never past the decider's, the
            assembler's committed position), and the sync-status and ticks topics below what
            the router had routed when it was taken

`rollout replay --check --from-snapshot DIR` refolds only the journal past a snapshot.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from rollout_cli.options import Context, Duration, kafka_options

DIRECTORY = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ROLLOUT_SNAPSHOT_DIR",
    default="snapshots",
    show_default=True,
    help="Where the snapshots are kept [env ROLLOUT_SNAPSHOT_DIR].",
)


@click.group()
def snapshot() -> None:
    """Snapshots of the engine's state; the journal's retention, tied to them."""


@snapshot.command("take")
@DIRECTORY
@kafka_options
def snapshot_take(ctx: Context, directory: Path) -> None:
    """Copy the decider's and the assembler's committed state, with the positions they cover."""
    from rollout_cli.reading.retention import take_snapshot

    path, taken = take_snapshot(ctx, directory)
    positions = ", ".join(f"{p}: {o}" for p, o in sorted(taken.decide.positions().items()))
    click.echo(f"{path}: the decider's state up to journal offsets {{{positions}}}")


@snapshot.command("list")
@DIRECTORY
def snapshot_list(directory: Path) -> None:
    """The snapshots in DIR, oldest first, with the journal offsets each covers."""
    from rollout_cli.reading.retention import load_snapshot
    from streams.snapshots import listed

    paths = listed(directory)
    for path in paths:
        taken = load_snapshot(path)
        positions = ", ".join(f"{p}: {o}" for p, o in sorted(taken.decide.positions().items()))
        stamp = datetime.fromtimestamp(taken.taken_at, UTC)
        click.echo(f"{path.name}  {stamp:%Y-%m-%d %H:%M:%S} UTC  journal {{{positions}}}")
    if not paths:
        click.echo(f"no snapshot in {directory}")


@snapshot.command("retain")
@DIRECTORY
@click.option(
    "--keep",
    type=Duration(),
    default="7d",
    show_default=True,
    help="Keep the snapshots (and the journal) of this long; the newest snapshot older than it is kept too.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@kafka_options
def snapshot_retain(ctx: Context, directory: Path, keep: float, dry_run: bool) -> None:
    """Delete older snapshots; the journal, assignments, sync-status and ticks below the oldest one kept."""
    from rollout_cli.reading.retention import apply_retention

    retention = apply_retention(ctx, directory, keep, dry_run=dry_run)
    if not retention.kept:
        click.echo(f"no snapshot in {directory}: nothing is deleted (take one with `rollout snapshot take`)")
        return
    verb = "would delete" if dry_run else "deleted"
    for path in retention.dropped:
        click.echo(f"{verb} {path.name}")
    click.echo(f"oldest kept: {retention.kept[0].name}")
    for cut in retention.cuts:
        if cut.below > cut.log_start:
            capped = " (the decider's committed position)" if cut.below < cut.covered else ""
            new_start = retention.deleted.get(cut.partition, cut.below)
            click.echo(f"journal partition {cut.partition}: {verb} offsets {cut.log_start}..{cut.below - 1}{capped}")
            if not dry_run:
                click.echo(f"  now starts at {new_start}")
        else:
            click.echo(f"journal partition {cut.partition}: starts at {cut.log_start}, nothing to delete")
    for cut in retention.assignment_cuts:
        if cut.below > cut.log_start:
            click.echo(f"assignments partition {cut.partition}: {verb} offsets {cut.log_start}..{cut.below - 1}")
    for role, cuts in retention.input_cuts.items():
        topic = ctx.topics.name(role)
        for cut in cuts:
            if cut.below > cut.log_start:
                capped = " (what the router has routed)" if cut.below < cut.covered else ""
                deleted = f"{verb} offsets {cut.log_start}..{cut.below - 1}{capped}"
                click.echo(f"{topic} partition {cut.partition}: {deleted}")
