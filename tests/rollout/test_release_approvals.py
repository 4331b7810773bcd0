"""A Release's stage approved for every member at once: `rollout approve release/NAME
--stage S` (or the dashboard's button: both to the release's leader; a RolloutApproval with
`spec.release`: to the member it names) is decided once by the member receiving it, naming
who, which tells every member — each counting it by its own approval policy of the
stage (docs/rollout-semantics.md, "Releases", "Approved as a unit"; rollout/engine/intents.py
`_approve_release`, `on_release_stage_approved`). One given/when/then test per rule."""

from __future__ import annotations

from typing import Any

from rollout.wire.decision_reasons import ReleaseApproved
from rollout.wire.events import RolloutCommanded
from tests.rollout.builders import cluster, given, module, next_id, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
SHOP = ("shop", ["web", "api"])  # api leads: the first member by name


def member(name: str, wave: dict[str, Any]) -> Any:
    return module(name, {}, "v1", stage("canary", CANARY), wave, release=SHOP)


def shop(wave: dict[str, Any] | None = None) -> Any:
    """Release shop, its canary done: both members wait for the wave's approval."""
    wave = wave or stage("wave", WAVE, approval=True)
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), member("web", wave), member("api", wave))
    for name in ("web", "api"):
        fleet.succeed(name, "c1")
    assert fleet.phase("web") == "AwaitingApproval" and fleet.phase("api") == "AwaitingApproval"
    return fleet


def release_approval(leader: str, user: str, via: str, groups: list[str] | None = None, release: str = "shop") -> Any:
    return RolloutCommanded(
        id=next_id(),
        module=leader,
        command="approve",
        stage="wave",
        release=release,
        user=user,
        via=via,  # type: ignore[arg-type]
        groups=groups,
    )


def test_approving_a_stage_of_a_release_approves_it_for_every_member_in_one_decision() -> None:
    fleet = shop()
    # when alice approves the wave for the release
    outcome = fleet.send(release_approval("api", "alice", "cli"))
    # then the leader decides it once, naming who and for which members
    [decided] = [d for d in outcome.decisions if d.action == "release-approved"]
    assert decided.module == "api" and isinstance(decided.because, ReleaseApproved)
    assert decided.reason == "stage wave of release shop approved by alice via cli for api, web"
    assert (decided.user, decided.via) == ("alice", "cli")
    # and every member's wave starts: both move to w1 together
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"
    assert [d.module for d in fleet.decisions if d.action == "approved"] == ["api", "web"]


def test_a_release_approval_counts_per_member_under_the_stages_n_of_m_policy() -> None:
    policy = {"required": 2, "groups": ["release-managers"]}
    fleet = shop(stage("wave", WAVE, approval=policy))
    # when bob, a release manager, approves the release's wave on the dashboard
    fleet.send(release_approval("api", "bob", "dashboard", ["release-managers"]))
    # then each member counts one of the two approvals its wave asks for: nothing moves yet
    assert fleet.revision("web", "w1") is None and fleet.revision("api", "w1") is None
    assert [d.reason for d in fleet.decisions if d.action == "approved"] == [
        "stage wave approved by bob via dashboard (1 of 2)",
        "stage wave approved by bob via dashboard (1 of 2)",
    ]
    # and bob again counts once; carol makes the second: both waves start
    fleet.send(release_approval("api", "bob", "dashboard", ["release-managers"]))
    assert fleet.revision("web", "w1") is None
    fleet.send(release_approval("api", "carol", "dashboard", ["release-managers"]))
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"


def test_an_unverified_release_approval_counts_for_nothing_under_an_approval_policy() -> None:
    fleet = shop(stage("wave", WAVE, approval={"required": 1}))
    fleet.send(release_approval("api", "alice", "cli"))
    # the release's decision records the command, each member refuses it as its policy says
    assert fleet.revision("web", "w1") is None and fleet.revision("api", "w1") is None
    refused = [r for r in fleet.rejections if "needs approvals by verified people" in r]
    assert len(refused) == 2


def test_a_release_approval_is_decided_at_whichever_member_receives_it() -> None:
    fleet = shop()
    # a RolloutApproval names any member: web does not lead, and decides it all the same
    outcome = fleet.send(release_approval("web", "alice", "crd"))
    [decided] = [d for d in outcome.decisions if d.action == "release-approved"]
    assert decided.module == "web" and fleet.revision("api", "w1") == "v1" and fleet.revision("web", "w1") == "v1"


def test_a_release_approval_naming_a_release_the_module_is_not_in_is_refused() -> None:
    fleet = shop()
    fleet.send(release_approval("api", "alice", "cli", release="outlet"))
    assert fleet.rejections[-1] == "approve api: api is not a member of release outlet"
    assert fleet.revision("web", "w1") is None
