"""`rollout snapshot take|list|retain`: the decider's and the assembler's state copied out
at their positions, and the journal cut below what the kept snapshots cover
(streams/snapshots.py has the why; `rollout replay --from-snapshot` reads them back)."""

from __future__ import annotations

import time
from pathlib import Path

from infra import client
from infra.settings import Settings
from rollout_cli.options import Context, fail
from streams import snapshots
from streams.snapshots import Retention, StateSnapshot


def take_snapshot(ctx: Context, directory: Path) -> tuple[Path, StateSnapshot]:
    try:
        taken: StateSnapshot = client.run(snapshots.capture(ctx.bootstrap, ctx.topics))
    except Exception as error:
        fail(f"cannot read the state topics at {ctx.bootstrap}: {error}")
    return snapshots.save(taken, directory), taken


def load_snapshot(path: Path) -> StateSnapshot:
    try:
        return snapshots.load(path)
    except (OSError, ValueError) as error:
        fail(f"cannot read a snapshot from {path}: {error}")


def apply_retention(ctx: Context, directory: Path, keep: float, *, dry_run: bool) -> Retention:
    try:
        retention: Retention = client.run(
            snapshots.retain(
                ctx.bootstrap,
                ctx.topics,
                directory,
                keep=keep,
                now=time.time(),
                dry_run=dry_run,
                router_group=f"{Settings(ctx.bootstrap, topic_prefix=ctx.prefix).group_id}.route",
            )
        )
    except (OSError, ValueError) as error:  # a snapshot of another journal, or unreadable
        fail(str(error))
    except Exception as error:
        fail(f"retention stopped: {type(error).__name__}: {error} (run it again: it deletes only what is covered)")
    return retention
