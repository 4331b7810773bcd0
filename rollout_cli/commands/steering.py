"""The commands that steer a module's rollout: `pause`, `resume`, `abort`, `rollback`,
`approve`, `reject`, `pin`, `unpin` and `promotion hold|resume`. Each publishes a
RolloutCommanded intent and, unless `--no-wait`, reports the engine's verdict on it
(rollout_cli/publishing/verdicts.py).

`rollout promotion hold|resume MODULE` holds a module's auto-promotion or resumes it
(rollout/engine/promotions.py): while held, newer versions the promoter sees are recorded as
available (shown by `rollout status`), not promoted; `resume` promotes the latest available
one (unless the manifest's `autoPromote.hold` still holds it)."""

from __future__ import annotations

from typing import Any

import click

from rollout_cli.options import Context, check_name, current_user, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


def command_verb(verb: str, help_text: str) -> click.Command:
    @click.command(name=verb, help=help_text)
    @click.argument("module")
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, wait: Wait) -> None:
        from rollout.wire.events import RolloutCommanded

        check_name(module)
        event = RolloutCommanded(module=module, command=verb, user=current_user(), via="cli")  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb}")

    return _command


def ask_engine(ctx: Context, wait: Wait, event: Any, key: str, what: str) -> None:
    """Publish intent `event` and report the engine's verdict on it (rollout_cli/publishing/verdicts.py)."""
    from rollout_cli.publishing.verdicts import decide, request

    verdicts = request(ctx, wait, topic=ctx.topics.intents, messages=[(key, event.to_bytes())], ids=[event.id])
    decide(what, verdicts, event.id, wait)


@click.command()
@click.argument("module")
@click.option("--stage", required=True, help="The stage to approve.")
@verdict_options
@kafka_options
def approve(ctx: Context, module: str, stage: str, wait: Wait) -> None:
    """Approve STAGE of MODULE's rollout to start."""
    from rollout.wire.events import RolloutCommanded

    check_name(module)
    event = RolloutCommanded(module=module, command="approve", stage=stage, user=current_user(), via="cli")
    ask_engine(ctx, wait, event, module, f"module/{module}: approve stage {stage}")


@click.command()
@click.argument("module")
@click.option("--stage", required=True, help="The stage whose rollout of the target is rejected.")
@click.option("--reason", required=True, help="Why: recorded in the decision and shown by status.")
@verdict_options
@kafka_options
def reject(ctx: Context, module: str, stage: str, reason: str, wait: Wait) -> None:
    """Reject MODULE's target at STAGE, saying why: it halts or rolls back."""
    from rollout.wire.events import RolloutCommanded

    check_name(module)
    if not reason.strip():
        raise click.BadParameter("say why the rollout is rejected", param_hint="--reason")
    event = RolloutCommanded(
        module=module, command="reject", stage=stage, reason=reason, user=current_user(), via="cli"
    )
    ask_engine(ctx, wait, event, module, f"module/{module}: reject stage {stage}")


def pin_verb(verb: str, help_text: str) -> click.Command:
    @click.command(name=verb, help=help_text)
    @click.argument("module")
    @click.option("--cluster", required=True)
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, cluster: str, wait: Wait) -> None:
        from rollout.wire.events import RolloutCommanded

        check_name(module)
        check_name(cluster)
        event = RolloutCommanded(module=module, command=verb, cluster=cluster, user=current_user(), via="cli")  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb} {cluster}")

    return _command


pause = command_verb("pause", "Stop making new moves in MODULE's rollout until `resume`.")
resume = command_verb("resume", "Resume a paused (or halted) rollout.")
abort = command_verb("abort", "Stop MODULE's rollout where it stands (phase Aborted) until a new revision.")
rollback = command_verb("rollback", "Return every cluster on MODULE's target revision to its stable revision.")
pin = pin_verb("pin", "Hold CLUSTER at its current revision of MODULE, whatever happens.")
unpin = pin_verb("unpin", "Let CLUSTER follow MODULE's rollout again.")


@click.group(name="promotion")
def promotion_group() -> None:
    """Hold MODULE's auto-promotion of new versions (hold), or let it promote again (resume)."""


@promotion_group.command(name="hold")
@click.argument("module")
@click.option("--reason", required=True, help="Why: recorded in the decision and shown by status.")
@verdict_options
@kafka_options
def hold_promotion(ctx: Context, module: str, reason: str, wait: Wait) -> None:
    """Record newer versions of MODULE's source as available instead of promoting them."""
    from rollout.wire.events import RolloutCommanded

    check_name(module)
    if not reason.strip():
        raise click.BadParameter("say why promotion is held", param_hint="--reason")
    event = RolloutCommanded(module=module, command="hold-promotion", reason=reason, user=current_user(), via="cli")
    ask_engine(ctx, wait, event, module, f"module/{module}: hold promotion")


@promotion_group.command(name="resume")
@click.argument("module")
@click.option("--reason", default=None, help="Why (optional): recorded with the command.")
@verdict_options
@kafka_options
def resume_promotion(ctx: Context, module: str, reason: str | None, wait: Wait) -> None:
    """Lift a hold: the latest available version is promoted."""
    from rollout.wire.events import RolloutCommanded

    check_name(module)
    event = RolloutCommanded(
        module=module, command="resume-promotion", reason=reason or None, user=current_user(), via="cli"
    )
    ask_engine(ctx, wait, event, module, f"module/{module}: resume promotion")
