"""The dashboard's buttons: the CLI's commands, as the same `RolloutCommanded` intents.

`command_event` turns a button's request into the event (a bad request is a
`CommandRefused` saying what is wrong), signed with the verified identity's user name, its
groups (what a stage's `approval.groups` is checked against: the identity's, never the
request's) and `via="dashboard"` — never a name of the dashboard's own: the engine records
who asked and through which door; `required_permission` names the RBAC resource a user must be allowed to
create for it (server.py asks a SubjectAccessReview); `send_command` publishes it on the intents topic,
keyed by module like `rollout approve|pause|resume|abort|rollback`. The engine judges it
there; the browser then asks for the verdict on the event's id (pages.verdict).

Whether the module or the stage exists is the engine's call, not the dashboard's: the
dashboard's view may lag the log, so it never refuses in the engine's place.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

from infra import client
from infra.topics import TopicNames
from projections.dashboard.kube_access import APPROVALS, BREAK_GLASS
from projections.dashboard.kube_access import COMMANDS as COMMAND_OBJECTS
from rollout.api.manifests import check_dns1123_label, parse_duration
from rollout.wire.events import RolloutCommanded

COMMANDS = (
    "approve",
    "reject",
    "pause",
    "resume",
    "abort",
    "rollback",
    "hold-promotion",
    "resume-promotion",
    "break-glass",
)
STAGE_COMMANDS = ("approve", "reject")
REASONED = ("reject", "hold-promotion", "break-glass")  # a reason required
REASON_ALLOWED = (*REASONED, "resume-promotion")
MAX_BREAK_GLASS_SECONDS = 7 * 24 * 3600.0  # the longest override the dashboard sends: a week


class CommandRefused(ValueError):
    """A request the dashboard cannot turn into a command (it never reaches the engine)."""


def command_event(
    module: str, request: Any, *, user: str, groups: tuple[str, ...] = (), now: float | None = None
) -> RolloutCommanded:
    """The `RolloutCommanded` for a POSTed `{"command": ..., "stage": ..., "reason": ...}` on
    `module` by `user`, a member of `groups` (both from the verified identity). A break-glass
    also takes `"for"` (a duration: it ends that long after `now`, the dashboard's clock)
    and may name the `"calendar"` it overrides."""
    try:
        check_dns1123_label(module)
    except ValueError as error:
        raise CommandRefused(f"module: {error}") from None
    if not isinstance(request, dict):
        raise CommandRefused('expected a JSON object such as {"command": "approve", "stage": "canary"}')
    command = request.get("command")
    if command not in COMMANDS:
        raise CommandRefused(f"command {str(command)[:40]!r}: expected one of {', '.join(COMMANDS)}")
    stage = request.get("stage")
    if command in STAGE_COMMANDS and (not isinstance(stage, str) or not stage):
        raise CommandRefused(f"{command} needs the stage to {command}")
    if command not in STAGE_COMMANDS and stage is not None:
        raise CommandRefused(f"{command} takes no stage")
    reason = request.get("reason")
    if command in REASONED and (not isinstance(reason, str) or not reason.strip()):
        raise CommandRefused(f"{command} needs a reason: say why")
    if command not in REASON_ALLOWED and reason is not None:
        raise CommandRefused(f"{command} takes no reason")
    if command == "resume-promotion" and not (isinstance(reason, str) and reason.strip()):
        reason = None  # optional: an empty box is no reason
    until, calendar = _override(command, request, now)
    release = request.get("release")  # approve only: the stage approved for every member (sent to the leader)
    if release is not None and (command != "approve" or not isinstance(release, str)):
        raise CommandRefused(f"{command} takes no release" if command != "approve" else "release: a Release's name")
    try:
        return RolloutCommanded(
            module=module,
            command=command,
            stage=stage,
            release=release,
            reason=reason,
            until=until,
            calendar=calendar,
            user=user,
            groups=list(groups),
            via="dashboard",
        )
    except ValidationError as error:  # a reason too long, too many groups
        raise CommandRefused("; ".join(str(e["msg"]) for e in error.errors())[:300]) from None


def _override(command: str, request: dict[str, Any], now: float | None) -> tuple[float | None, str | None]:
    """A break-glass's (until, calendar) from its `for` and `calendar`; (None, None) for any other command."""
    duration, calendar = request.get("for"), request.get("calendar")
    if command != "break-glass":
        if duration is not None or calendar is not None:
            raise CommandRefused(f"{command} takes no 'for' or 'calendar'")
        return None, None
    try:
        seconds = parse_duration(duration) if isinstance(duration, str) else 0.0
    except ValueError as error:
        raise CommandRefused(f"for: {error}") from None
    if not 0 < seconds <= MAX_BREAK_GLASS_SECONDS:
        raise CommandRefused("break-glass needs 'for': how long it lasts, such as 2h (at most a week)")
    if calendar is not None and not isinstance(calendar, str):
        raise CommandRefused("calendar: the name of a freeze calendar, such as year-end or team-a/weekends")
    return float(int((time.time() if now is None else now) + seconds)), calendar or None  # whole seconds


def required_permission(event: RolloutCommanded) -> str:
    """The rollout.dev resource whose `create` allows `event` (the CRD that means the same):
    whoever may approve a stage may also reject it; break-glass is its own permission."""
    if event.command == "break-glass":
        return BREAK_GLASS
    return APPROVALS if event.command in STAGE_COMMANDS else COMMAND_OBJECTS


async def send_command(bootstrap: str, topics: TopicNames, event: RolloutCommanded) -> str:
    """Publish `event` on the intents topic (acknowledged by the broker); its id."""
    await client.publish(bootstrap, topics.intents, [(event.module, event.to_bytes())])
    return event.id
