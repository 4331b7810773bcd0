"""A namespace's door commands only its namespace's modules.

A RolloutCommand or RolloutApproval is a namespaced object: RBAC lets its creator create it
in some namespaces only, and the module watcher publishes it with that namespace
(`RolloutCommanded.namespace`). The engine refuses it — a verdict that reads as if there
were no such module in the door's namespace (it names no other namespace: the verdict lands
on the door's object), and a dead letter — when the module it names is of another namespace,
and nothing about the module changes; from the module's own namespace it is decided as before. Commands
without a door namespace (the CLI, the dashboard, events written before the field) are
decided as they always were (docs/security.md, "A namespace's door commands only its
namespace's modules")."""

from __future__ import annotations

import json

import pytest

from rollout.wire.events import EventRejected, RolloutCommanded, parse_event
from tests.rollout.builders import cluster, command, given, module, stage

TEAM_A, TEAM_B = "team-a", "team-b"


def team_b_web() -> list[object]:
    """Module `web` of namespace team-b: a canary, then a wave that needs an approval."""
    return [
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        module("web", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=True), namespace=TEAM_B),
    ]


def through_door(name: str, namespace: str, **fields: str) -> RolloutCommanded:
    return command("web", name, user=f"system:serviceaccount:{namespace}:op", via="crd", namespace=namespace, **fields)


@pytest.mark.parametrize(
    ("name", "fields"),
    [("pause", {}), ("abort", {}), ("rollback", {}), ("resume", {}), ("pin", {"cluster": "c1"})],
)
def test_a_rollout_command_from_another_namespace_is_refused_as_if_there_were_no_such_module_and_changes_nothing(
    name: str, fields: dict[str, str]
) -> None:
    fleet = given(*team_b_web())
    before = fleet.record("web")
    event = through_door(name, TEAM_A, **fields)
    outcome = fleet.send(event)
    [verdict] = outcome.verdicts
    assert (verdict.event, verdict.accepted) == (event.id, False)
    assert verdict.reason == (
        f"{name} web: no module web in namespace team-a; "
        "a RolloutCommand commands only the modules of its own namespace"
    )
    assert "team-b" not in verdict.reason  # the refusal lands in team-a: it tells nothing of team-b
    assert outcome.rejections == [verdict.reason]  # also a dead letter naming the event
    assert outcome.decisions == [] and outcome.assignments == []
    after = fleet.record("web")
    assert after.model_copy(update={"handled_intents": before.handled_intents}) == before
    assert event.id in after.handled_intents  # remembered: redelivered, it is not answered again
    assert fleet.send(event).verdicts == []


def test_an_approval_from_another_namespace_does_not_start_the_stage_and_one_from_the_modules_does() -> None:
    fleet = given(*team_b_web())
    fleet.succeed("web", "c1")
    assert fleet.phase("web") == "AwaitingApproval"
    [verdict] = fleet.send(through_door("approve", TEAM_A, stage="wave")).verdicts
    assert not verdict.accepted and verdict.reason == (
        "approve web: no module web in namespace team-a; "
        "a RolloutApproval commands only the modules of its own namespace"
    )
    assert fleet.phase("web") == "AwaitingApproval" and fleet.revision("web", "w1") is None
    assert fleet.record("web").approvals == [] and fleet.record("web").approvers == {}
    [verdict] = fleet.send(through_door("approve", TEAM_B, stage="wave")).verdicts
    assert verdict.accepted
    assert fleet.revision("web", "w1") == "v1"
    [approved] = fleet.decisions_of("web", "approved")
    assert (approved.user, approved.via) == ("system:serviceaccount:team-b:op", "crd")


def test_a_rollout_command_from_the_modules_own_namespace_is_decided_as_before() -> None:
    fleet = given(*team_b_web())
    [verdict] = fleet.send(through_door("pause", TEAM_B)).verdicts
    assert verdict.accepted and fleet.record("web").paused
    [paused] = fleet.decisions_of("web", "paused")
    assert paused.reason == "paused by system:serviceaccount:team-b:op via crd: no new moves until resume"


@pytest.mark.parametrize("via", ["cli", "dashboard"])
def test_commands_of_the_cluster_wide_doors_carry_no_namespace_and_are_decided_as_before(via: str) -> None:
    fleet = given(*team_b_web())
    [verdict] = fleet.send(command("web", "pause", user="alice", via=via)).verdicts
    assert verdict.accepted and fleet.record("web").paused


def test_a_door_command_written_before_the_namespace_existed_reads_and_is_decided_as_before() -> None:
    written_before = {"type": "RolloutCommanded", "id": "k8s-1", "at": "2026-01-01T00:00:00Z", "module": "web"}
    event = parse_event(json.dumps({**written_before, "command": "pause", "user": "bob", "via": "crd"}).encode())
    assert isinstance(event, RolloutCommanded) and event.namespace is None
    fleet = given(*team_b_web())
    [verdict] = fleet.send(event).verdicts
    assert verdict.accepted and fleet.record("web").paused


def test_a_door_namespace_that_is_no_namespace_name_is_a_dead_letter() -> None:
    body = {"type": "RolloutCommanded", "id": "k8s-2", "module": "web", "command": "pause", "namespace": "Team A"}
    with pytest.raises(EventRejected, match="namespace"):
        parse_event(json.dumps(body).encode())


def test_a_release_approval_through_a_door_approves_only_the_members_of_its_namespace() -> None:
    release = ("shop", ["api", "web"])
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        *(
            module(
                name,
                {},
                "v1",
                stage("canary", {"ring": "canary"}),
                stage("wave", {"ring": "wave"}, approval=True),
                namespace=namespace,
                release=release,
            )
            for name, namespace in (("web", TEAM_A), ("api", TEAM_B))
        ),
    )
    approval = command("web", "approve", stage="wave", user="alice", via="crd", namespace=TEAM_A)
    fleet.send(approval.model_copy(update={"release": "shop"}))
    assert fleet.record("web").approvals == ["wave"]  # its own namespace's member
    assert fleet.record("api").approvals == [] and fleet.record("api").approvers == {}
    assert any("approve api: no module api in namespace team-a" in refusal for refusal in fleet.rejections)


def test_a_door_command_reads_the_same_whether_the_module_is_in_another_namespace_or_nowhere() -> None:
    """A user who may create RolloutCommands in team-a only cannot probe, by the verdicts on
    them, which modules other namespaces hold."""
    fleet = given(*team_b_web())
    elsewhere = fleet.send(through_door("pause", TEAM_A)).verdicts
    nowhere = fleet.send(
        through_door("pause", TEAM_A).model_copy(update={"module": "nope", "id": "door-nope"})
    ).verdicts
    assert [v.reason.replace("web", "X") for v in elsewhere] == [v.reason.replace("nope", "X") for v in nowhere]
    assert [v.accepted for v in elsewhere + nowhere] == [False, False]
    # without a door (the CLI, the dashboard) a missing module is simply not found
    assert fleet.send(command("nope", "pause", user="bob")).verdicts[0].reason == "module 'nope' not found"


def test_a_dashboard_command_authorized_in_the_modules_namespace_is_refused_once_the_module_moved_namespaces() -> None:
    """The dashboard asks its SubjectAccessReview in the namespace the module's status names
    and stamps it on the command; a module deleted and applied again in another namespace
    before the command applies is not commanded on the strength of the old grant."""
    fleet = given(*team_b_web())
    pause = command("web", "pause", user="alice", via="dashboard", namespace=TEAM_B)
    [verdict] = fleet.send(pause).verdicts
    assert verdict.accepted and fleet.record("web").paused  # where it was authorized: decided as before
    fleet.delete("web")
    fleet.send(module("web", {}, "v1", stage("canary", {"ring": "canary"}), namespace=TEAM_A))
    [verdict] = fleet.send(command("web", "abort", user="alice", via="dashboard", namespace=TEAM_B)).verdicts
    assert not verdict.accepted
    assert verdict.reason == (
        "abort web: no module web in namespace team-b; the dashboard authorized the command in namespace team-b only"
    )
    assert fleet.phase("web") != "Aborted"
