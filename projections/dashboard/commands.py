"""The dashboard's buttons: the CLI's commands, as the same `RolloutCommanded` intents.

`command_event` turns a button's request into the event (a bad request is a
`CommandRefused` saying what is wrong), signed with the verified identity's user name and
`via="dashboard"` — never a name of the dashboard's own: the engine records who asked and
through which door; `required_permission` names the RBAC resource a user must be allowed to
create for it (server.py asks a SubjectAccessReview); `send_command` publishes it on the intents topic,
keyed by module like `rollout approve|pause|resume|abort|rollback`. The engine judges it
there; the browser then asks for the verdict on the event's id (pages.verdict).

Whether the module or the stage exists is the engine's call, not the dashboard's: the
dashboard's view may lag the log, so it never refuses in the engine's place.
"""

from __future__ import annotations

from typing import Any

from infra import client
from infra.topics import TopicNames
from projections.dashboard.kube_access import APPROVALS
from projections.dashboard.kube_access import COMMANDS as COMMAND_OBJECTS
from rollout.api.manifests import check_dns1123_label
from rollout.wire.events import RolloutCommanded

COMMANDS = ("approve", "pause", "resume", "abort", "rollback")


class CommandRefused(ValueError):
    """A request the dashboard cannot turn into a command (it never reaches the engine)."""


def command_event(module: str, request: Any, *, user: str) -> RolloutCommanded:
    """The `RolloutCommanded` for a POSTed `{"command": ..., "stage": ...}` on `module` by `user`."""
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
    if command == "approve" and (not isinstance(stage, str) or not stage):
        raise CommandRefused("approve needs the stage to approve")
    if command != "approve" and stage is not None:
        raise CommandRefused(f"{command} takes no stage")
    return RolloutCommanded(module=module, command=command, stage=stage, user=user, via="dashboard")


def required_permission(event: RolloutCommanded) -> str:
    """The rollout.dev resource whose `create` allows `event` (the CRD that means the same)."""
    return APPROVALS if event.command == "approve" else COMMAND_OBJECTS


async def send_command(bootstrap: str, topics: TopicNames, event: RolloutCommanded) -> str:
    """Publish `event` on the intents topic (acknowledged by the broker); its id."""
    await client.publish(bootstrap, topics.intents, [(event.module, event.to_bytes())])
    return event.id
