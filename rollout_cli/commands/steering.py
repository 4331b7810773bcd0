"""The commands that steer a module's rollout: `pause`, `resume`, `abort`, `rollback`,
`approve`, `reject`, `pin`, `unpin`, `break-glass` and `promotion hold|resume`. Each publishes a
RolloutCommanded intent and, unless `--no-wait`, reports the engine's verdict on it
(rollout_cli/publishing/verdicts.py).

`rollout promotion hold|resume MODULE` holds a module's auto-promotion or resumes it
(rollout/engine/promotions.py): while held, newer versions the promoter sees are recorded as
available (shown by `rollout status`), not promoted; `resume` promotes the latest available
one (unless the manifest's `autoPromote.hold` still holds it). `release/NAME` holds or resumes
a Release auto-promoted as a unit: the command goes to the release's leader. `rollout approve
release/NAME --stage S` approves the stage for every member of the release, through its leader."""

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
    """Approve STAGE of MODULE's rollout to start. MODULE may be release/NAME: the stage is
    approved for every member of the Release, in one decision of its leader naming who;
    each member counts it by its own approval policy of the stage."""
    from rollout.wire.events import RolloutCommanded

    leader, what = promotion_target(ctx, module)
    release = module.removeprefix("release/") if module.startswith("release/") else None
    event = RolloutCommanded(
        module=leader, command="approve", stage=stage, release=release, user=current_user(), via="cli"
    )
    ask_engine(ctx, wait, event, leader, f"{what}: approve stage {stage}")


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
@click.argument("target")
@click.option("--reason", required=True, help="Why: recorded in the decision and shown by status.")
@verdict_options
@kafka_options
def hold_promotion(ctx: Context, target: str, reason: str, wait: Wait) -> None:
    """Record newer versions of MODULE's source as available instead of promoting them.
    TARGET is a MODULE, or release/NAME: a Release auto-promoted as a unit, held at its leader."""
    from rollout.wire.events import RolloutCommanded

    if not reason.strip():
        raise click.BadParameter("say why promotion is held", param_hint="--reason")
    module, what = promotion_target(ctx, target)
    event = RolloutCommanded(module=module, command="hold-promotion", reason=reason, user=current_user(), via="cli")
    ask_engine(ctx, wait, event, module, f"{what}: hold promotion")


@promotion_group.command(name="resume")
@click.argument("target")
@click.option("--reason", default=None, help="Why (optional): recorded with the command.")
@verdict_options
@kafka_options
def resume_promotion(ctx: Context, target: str, reason: str | None, wait: Wait) -> None:
    """Lift a hold: the latest available version (a release's: combination) is promoted.
    TARGET is a MODULE, or release/NAME."""
    from rollout.wire.events import RolloutCommanded

    module, what = promotion_target(ctx, target)
    event = RolloutCommanded(
        module=module, command="resume-promotion", reason=reason or None, user=current_user(), via="cli"
    )
    ask_engine(ctx, wait, event, module, f"{what}: resume promotion")


def promotion_target(ctx: Context, target: str) -> tuple[str, str]:
    """(the module the command goes to, how the CLI names its target): a module itself, or
    for release/NAME the release's leader — its first member by name, which keeps the
    release's hold (rollout/engine/promotions.py) and approves its stages for every member
    (rollout/engine/intents.py) — found in the module statuses."""
    from rollout_cli.options import fail
    from rollout_cli.reading.documents import module_statuses

    if not target.startswith("release/"):
        check_name(target)
        return target, f"module/{target}"
    name = target.removeprefix("release/")
    check_name(name)
    statuses = module_statuses(ctx.latest(ctx.topics.module_status))
    members = sorted(n for n, s in statuses.items() if s.release is not None and s.release.name == name)
    if not members:
        fail(f"{target} not found (no module of the engine moves with release {name})", code=1)
    return members[0], f"{target} (its leader {members[0]})"


@click.command(name="break-glass")
@click.argument("target")
@click.option("--reason", required=True, help="Why the freeze is overridden: recorded in the decision and status.")
@click.option("--for", "duration", help="How long the override lasts, such as 2h or 30m.")
@click.option("--until", "until_text", help="When the override ends (ISO 8601, such as 2026-12-24T18:00:00Z).")
@verdict_options
@kafka_options
def break_glass(
    ctx: Context, target: str, reason: str, duration: str | None, until_text: str | None, wait: Wait
) -> None:
    """Let a module move despite the freeze calendars holding it, until the override ends.

    TARGET is a MODULE (every calendar governing it is overridden for that module), or
    calendar/NAME (a ClusterFreezeCalendar) or calendar/NAMESPACE/NAME (a FreezeCalendar):
    that calendar is overridden for every module it governs — those applied later too — kept
    by the engine on the calendar's scope. Needs --reason and one of --for or --until;
    recorded as a `break-glass` decision with who asked and why, about the module or about
    `calendar/NAME` (`rollout history calendar/NAME`; rollout/engine/freeze_gate.py)."""
    from rollout.wire.events import CalendarBreakGlass, RolloutCommanded, freeze_key

    if not reason.strip():
        raise click.BadParameter("say why the freeze is overridden", param_hint="--reason")
    until = override_end(duration, until_text)
    if not target.startswith("calendar/"):
        check_name(target)
        event = RolloutCommanded(
            module=target, command="break-glass", reason=reason, until=until, user=current_user(), via="cli"
        )
        ask_engine(ctx, wait, event, target, f"module/{target}: break-glass")
        return
    scope, name = break_glass_calendar(ctx, target)
    glass = CalendarBreakGlass(scope=scope, name=name, reason=reason, until=until, user=current_user(), via="cli")
    ask_engine(ctx, wait, glass, freeze_key(scope, name), f"{target}: break-glass for every module it governs")


def override_end(duration: str | None, until_text: str | None) -> float:
    """When a break-glass ends, in seconds since the epoch: now + `--for`, or `--until`."""
    import time
    from datetime import UTC, datetime

    from rollout.api.formats import parse_duration

    if (duration is None) == (until_text is None):
        raise click.UsageError("give exactly one of --for (such as 2h) or --until (such as 2026-12-24T18:00:00Z)")
    if duration is not None:
        try:
            seconds = parse_duration(duration)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--for") from None
        if seconds <= 0:
            raise click.BadParameter("the override must last longer than 0s", param_hint="--for")
        return float(int(time.time() + seconds))  # whole seconds: said as 2026-12-24T18:00:00Z
    try:
        moment = datetime.fromisoformat(str(until_text).replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{until_text!r} is not an ISO 8601 time", param_hint="--until") from None
    if moment.tzinfo is None:
        raise click.BadParameter("give a time zone (Z or +01:00)", param_hint="--until")
    if moment.timestamp() <= time.time():
        raise click.BadParameter(f"{until_text} has passed", param_hint="--until")
    return moment.astimezone(UTC).timestamp()


def break_glass_calendar(ctx: Context, target: str) -> tuple[str, str]:
    """The (scope, name) of the calendar `target` (calendar/NAME or calendar/NAMESPACE/NAME)
    names — one on the cluster-observations topic, else exit 1 (the engine takes a
    break-glass of a calendar it has not seen yet: the calendars travel on another topic)."""
    from rollout_cli.options import fail
    from rollout_cli.reading.freeze_calendars import calendar_named, calendars_from_records

    named = calendar_named(target)
    if isinstance(named, str):
        fail(named)
        raise AssertionError  # not reached: fail exits
    if named not in calendars_from_records(ctx.records(ctx.topics.clusters)):
        fail(f"{target} not found (no such freeze calendar on the cluster-observations topic)", code=1)
    return named
