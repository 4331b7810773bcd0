"""Who asked, and through which door: a command's `user` and `via` reach its decisions.

The dashboard, the CLI and the module watcher each stamp `RolloutCommanded.via`; the engine
copies `user` and `via` onto the decisions the command caused (and not onto the moves that
follow in the same outcome) and says both in the reason. Events and decision records
written before the fields existed still read."""

from __future__ import annotations

import json

import pytest

from projections.dashboard.fleet import FleetView, ProjectionRecord, absorb
from rollout.engine.outcome import Decision
from rollout.wire.decision_reasons import Paused, render
from rollout.wire.events import EventRejected, RolloutCommanded, parse_event
from streams.chain import decision_body
from tests.rollout.builders import cluster, given, module, next_id, stage


def commanded(name: str, *, stage: str | None = None, user: str | None, via: str | None) -> RolloutCommanded:
    return RolloutCommanded(id=next_id(), module="podinfo", command=name, stage=stage, user=user, via=via)  # type: ignore[arg-type]


def staged_podinfo() -> list[object]:
    return [
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        module("podinfo", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave-1", approval=True)),
    ]


@pytest.mark.parametrize(
    ("name", "action", "reason"),
    [
        ("pause", "paused", "paused by alice@example.com via dashboard: no new moves until resume"),
        ("abort", "aborted", "aborted by alice@example.com via dashboard: the rollout stops where it stands"),
    ],
)
def test_a_dashboard_command_is_decided_in_the_verified_users_name_and_says_its_door(
    name: str, action: str, reason: str
) -> None:
    fleet = given(*staged_podinfo())
    outcome = fleet.send(commanded(name, user="alice@example.com", via="dashboard"))
    [decision] = [d for d in outcome.decisions if d.action == action]
    assert (decision.reason, decision.user, decision.via) == (reason, "alice@example.com", "dashboard")


def test_an_approval_through_the_crd_records_the_approver() -> None:
    fleet = given(*staged_podinfo())
    outcome = fleet.send(commanded("approve", stage="wave-1", user="system:serviceaccount:fleet:alice", via="crd"))
    [approved] = [d for d in outcome.decisions if d.action == "approved"]
    assert (approved.reason, approved.user, approved.via) == (
        "stage wave-1 approved by system:serviceaccount:fleet:alice via crd",
        "system:serviceaccount:fleet:alice",
        "crd",
    )


def test_the_moves_that_follow_a_command_are_the_engines_not_the_users() -> None:
    fleet = given(*staged_podinfo())
    fleet.send(commanded("pause", user="alice", via="cli"))
    fleet.send(cluster("c2", {"ring": "canary"}))  # joins while paused: not assigned yet
    outcome = fleet.send(commanded("resume", user="alice", via="cli"))
    assert [(d.action, d.user, d.via) for d in outcome.decisions] == [
        ("resumed", "alice", "cli"),
        ("assign", None, None),
    ]


def test_a_command_from_before_the_door_existed_reads_and_is_decided_as_before() -> None:
    written_before = {"type": "RolloutCommanded", "id": "e-1", "at": "2026-01-01T00:00:00Z", "module": "podinfo"}
    old = json.dumps({**written_before, "command": "rollback", "user": "bob"})
    event = parse_event(old.encode())
    assert isinstance(event, RolloutCommanded) and event.via is None
    fleet = given(*staged_podinfo())
    outcome = fleet.send(event)
    [decision] = [d for d in outcome.decisions if d.action == "rollback"]
    assert decision.reason.startswith("rollback requested by bob: ") and (decision.user, decision.via) == ("bob", None)


def test_a_door_other_than_cli_dashboard_or_crd_is_refused() -> None:
    forged = {
        "type": "RolloutCommanded",
        "id": "e-2",
        "at": 1.0,
        "module": "podinfo",
        "command": "pause",
        "via": "mail",
    }
    with pytest.raises(EventRejected, match="via"):
        parse_event(json.dumps(forged).encode())


def test_decision_records_with_and_without_the_author_are_shown_by_the_dashboard_and_the_cli() -> None:
    from rollout_cli.views.decisions import print_decisions

    because = Paused(user="alice", via="cli")
    signed = decision_body(0, 5, 0, Decision(module="podinfo", action="paused", reason=render(because),
                                             because=because, user="alice", via="cli"))  # fmt: skip
    old = {"id": "0-4-0", "module": "podinfo", "action": "paused", "reason": "paused by dashboard", "at": 1.0}
    view = FleetView()
    for document in (old, signed):
        absorb(view, "decisions", ProjectionRecord("podinfo", json.dumps(document).encode()))
    kept = list(view.decisions["podinfo"])
    assert [(d.user, d.via) for d in kept] == [(None, None), ("alice", "cli")]
    assert [d.because for d in kept] == [None, because]  # the old record: no structured reason either
    print_decisions(kept)  # an old record has none of these fields: no KeyError
