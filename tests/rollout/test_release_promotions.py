"""A Release auto-promoted as a unit: its members' ranges followed, each new combination the
promoter sees one release generation, held and resumed on the release — one given/when/then
test per rule of docs/rollout-semantics.md, "Releases" ("Auto-promoted as a unit";
rollout/engine/promotions.py, rollout/engine/dependencies.py `on_release_promoted`,
rollout/api/module_releases.py). The harness feeds the events the leader sends the members
back, as the router would, unless a test holds them to deliver them in another order."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.api.loading import ManifestError, load_manifests
from rollout.api.module_releases import expand_releases
from rollout.wire.decision_reasons import Promoted, ReleaseCombinationHeld, ReleaseCombinationPromoted
from rollout.wire.events import ReleasePromoted
from rollout.wire.status import ModuleStatus
from tests.rollout.builders import GIT_URL, Fleet, cluster, command, given, module, release_observed, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
SHOP = ("shop", ["web", "api"])  # api leads: the first member by name


def promotion(hold: bool = False, web: str = "1.0.0", api: str = "2.0.0") -> dict[str, Any]:
    """spec.release.autoPromote as apply gives it: both members follow a range."""
    follow = [
        {"module": "web", "semver": ">=1.0.0 <2.0.0", "kind": "git", "url": GIT_URL, "version": web},
        {"module": "api", "semver": "^2.0.0", "kind": "git", "url": GIT_URL, "version": api},
    ]
    return {"follow": follow, **({"hold": True} if hold else {})}


def member(name: str, tag: str, *, hold: bool = False, web: str = "1.0.0", api: str = "2.0.0") -> Any:
    semver = ">=1.0.0 <2.0.0" if name == "web" else "^2.0.0"
    return module(
        name,
        {},
        tag,
        stage("canary", CANARY),
        stage("wave", WAVE),
        auto_promote={"semver": semver, **({"hold": True} if hold else {})},
        release=SHOP,
        release_promotion=promotion(hold, web, api),
    )


def members(web: str = "1.0.0", api: str = "2.0.0", hold: bool = False) -> tuple[Any, Any]:
    return member("web", web, hold=hold, web=web, api=api), member("api", api, hold=hold, web=web, api=api)


def shop(hold: bool = False) -> Fleet:
    """Release shop (web 1.0.0, api 2.0.0) rolled out on c1 and w1: Complete."""
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), *members(hold=hold))
    for name in ("web", "api"):
        fleet.succeed(name, "c1")
    for name in ("web", "api"):
        fleet.succeed(name, "w1")
    assert fleet.phase("web") == "Complete" and fleet.phase("api") == "Complete"
    return fleet


def observed(promoter: str = "promoter-0", **versions: str) -> Any:
    return release_observed("api", "shop", versions, promoter=promoter)


def target(fleet: Fleet, name: str) -> str:
    record = fleet.record(name)
    return record.revisions[record.target].revision


def test_new_versions_of_members_become_one_release_generation_that_moves_through_the_stages_together() -> None:
    # given release shop, complete, auto-promoted
    fleet = shop()
    # when the promoter sees newer versions of both members in one round
    outcome = fleet.send(observed(promoter="promoter-a", web="1.1.0", api="2.1.0"))
    # then the leader decides one new combination, and each member takes its version
    [decided] = [d for d in outcome.decisions if d.action == "release-promoted"]
    assert decided.module == "api" and isinstance(decided.because, ReleaseCombinationPromoted)
    assert decided.reason == "release shop promoted as one: api 2.0.0 → 2.1.0, web 1.0.0 → 1.1.0, seen by promoter-a"
    for name, version in (("web", "1.1.0"), ("api", "2.1.0")):
        assert fleet.actions(name).count("new-revision") == 1 and target(fleet, name) == version
        [promoted] = [d.because for d in fleet.decisions if d.module == name and d.action == "promoted"]
        assert isinstance(promoted, Promoted) and promoted.release == "shop" and promoted.promoter == "promoter-a"
    # and the members move through the stages together, as a release applied with them would
    assert fleet.revision("web", "c1") == "1.1.0" and fleet.revision("web", "w1") == "1.0.0"
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "awaiting_release" and fleet.revision("web", "w1") == "1.0.0"
    fleet.succeed("api", "c1")
    assert fleet.revision("web", "w1") == "1.1.0" and fleet.revision("api", "w1") == "2.1.0"


def test_a_member_whose_version_the_combination_keeps_gets_no_new_generation() -> None:
    fleet = shop()
    # when only api has a newer version
    fleet.send(observed(api="2.1.0"))
    # then api rolls out 2.1.0; web stays on its generation
    assert target(fleet, "api") == "2.1.0" and fleet.actions("web").count("new-revision") == 0
    assert target(fleet, "web") == "1.0.0" and fleet.revision("web", "c1") == "1.0.0"
    # and web is told the combination too: a cluster is done for it again once api's new
    # version succeeded there, as after a release applied with api's new version alone
    assert fleet.category("web", "c1") == "awaiting_release"
    fleet.succeed("api", "c1")
    assert fleet.category("web", "c1") == "succeeded"


def test_a_new_combination_does_not_count_a_peers_state_from_before_it() -> None:
    fleet = shop()
    fleet.feedback = False  # the leader's events are delivered by hand, in the order the test picks
    outcome = fleet.send(observed(web="1.1.0", api="2.1.0"))
    sent = {event.module: event for event in outcome.dependency_events if isinstance(event, ReleasePromoted)}
    assert sorted(sent) == ["api", "web"] and sent["web"].after == {"api": sent["api"].id}
    # when web folds its part before api has folded its own
    fleet.feedback = True
    web_part = fleet.engine.handle(sent["web"])
    fleet._absorb(web_part)
    # then web awaits api's part: api's success on c1 (of 2.0.0) does not count for web's 1.1.0
    assert fleet.record("web").awaiting == {"api": sent["api"].id}
    assert target(fleet, "web") == "1.1.0" and target(fleet, "api") == "2.0.0"
    fleet.send(*web_part.dependency_events)
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "awaiting_release"
    # and once api folded its part, web counts api's new state
    fleet.send(sent["api"])
    assert fleet.record("web").awaiting == {} and target(fleet, "api") == "2.1.0"
    fleet.succeed("api", "c1")
    assert fleet.category("web", "c1") == "succeeded" and fleet.revision("web", "w1") == "1.1.0"


def test_only_the_releases_leader_decides_its_promotions() -> None:
    fleet = shop()
    # when an observation reaches web, which does not lead shop (api does: first by name)
    outcome = fleet.send(release_observed("web", "shop", {"web": "1.1.0"}))
    # then nothing is promoted
    assert outcome.decisions == [] and target(fleet, "web") == "1.0.0"


def test_the_same_combination_observed_again_is_counted_once() -> None:
    fleet = shop()
    first = observed(web="1.1.0")
    fleet.send(first)
    assert fleet.send(first).decisions == []  # redelivered
    assert fleet.send(observed(promoter="promoter-b", web="1.1.0")).decisions == []  # a second promoter
    assert fleet.actions("api").count("release-promoted") == 1 and fleet.actions("web").count("promoted") == 1


def test_a_release_promotion_is_never_a_downgrade_and_stays_within_each_members_range() -> None:
    fleet = shop()
    # older, out of range, and another source's versions change nothing
    assert fleet.send(observed(web="0.9.0", api="3.0.0")).decisions == []
    assert fleet.send(release_observed("api", "shop", {"web": "1.5.0"}, url="https://other.example/x")).decisions == []
    # and of a mixed observation only the members newer and in range move
    fleet.send(observed(web="1.2.0", api="3.0.0"))
    assert (target(fleet, "web"), target(fleet, "api")) == ("1.2.0", "2.0.0")


def test_a_held_release_records_the_combination_available_and_resume_promotes_it_as_one() -> None:
    fleet = shop()
    # given the release held by a command at its leader
    fleet.send(command("api", "hold-promotion", reason="incident 7", user="alice", via="cli"))
    # when the promoter sees newer versions, one round after another
    fleet.send(observed(web="1.1.0"))
    outcome = fleet.send(observed(web="1.0.5", api="2.2.0"))
    # then each newer combination is recorded as available, held; no member moves
    [held] = outcome.decisions
    assert held.action == "release-promotion-held" and isinstance(held.because, ReleaseCombinationHeld)
    assert held.reason == "release shop: api 2.0.0 → 2.2.0, web 1.0.0 → 1.1.0 available, held (rollout promotion hold)"
    assert (target(fleet, "web"), target(fleet, "api")) == ("1.0.0", "2.0.0")
    view = ModuleStatus.read(fleet.status("api"))
    assert view.release is not None and view.release.auto_promote is not None
    assert view.release.auto_promote.available == {"api": "2.2.0", "web": "1.1.0"}
    assert view.release.auto_promote.held_by is not None and view.release.auto_promote.held_by.user == "alice"
    # when the release is resumed
    fleet.send(command("api", "resume-promotion", user="bob", via="dashboard"))
    # then the combination available is promoted as one, naming who resumed it
    [decided] = [d.because for d in fleet.last.decisions if d.action == "release-promoted"]
    assert isinstance(decided, ReleaseCombinationPromoted) and (decided.user, decided.via) == ("bob", "dashboard")
    assert (target(fleet, "web"), target(fleet, "api")) == ("1.1.0", "2.2.0")


def test_a_release_held_by_its_manifest_holds_every_member_until_applied_without_the_hold() -> None:
    fleet = shop(hold=True)
    fleet.send(observed(web="1.1.0"))
    assert target(fleet, "web") == "1.0.0" and fleet.actions("api").count("release-promotion-held") == 1
    # when the release is applied with hold: false (both members, as apply publishes them)
    fleet.apply(*members())
    # then the available combination is promoted
    assert target(fleet, "web") == "1.1.0" and fleet.actions("api").count("release-promoted") == 1


def test_holding_a_member_that_does_not_lead_the_release_is_refused_naming_the_release() -> None:
    fleet = shop()
    fleet.send(command("web", "hold-promotion", reason="x", user="alice", via="cli"))
    assert fleet.rejections[-1] == (
        "hold-promotion web: web moves with release shop: hold or resume the release "
        "(rollout promotion hold release/shop), whose promotion api keeps"
    )


def test_the_release_applied_again_with_its_older_versions_keeps_the_promoted_combination() -> None:
    fleet = shop()
    fleet.send(observed(web="1.1.0", api="2.1.0"))
    generations = (fleet.record("web").target, fleet.record("api").target)
    # when the release's file is applied again, its versions older than those promoted
    fleet.apply(*members())
    # then the promoted combination stays the target: no new generation
    assert (fleet.record("web").target, fleet.record("api").target) == generations
    assert (target(fleet, "web"), target(fleet, "api")) == ("1.1.0", "2.1.0")
    # and the leader still counts from it: an observation of what is promoted changes nothing
    assert fleet.send(observed(web="1.1.0")).decisions == []


def test_a_failed_promoted_combination_rolls_back_every_member_to_the_previous_combination() -> None:
    fleet = given(
        cluster("c1", CANARY),
        *[
            module(
                name,
                {},
                tag,
                stage("canary", CANARY),
                on_failure="Rollback",
                auto_promote={"semver": semver},
                release=SHOP,
                release_promotion=promotion(),
            )
            for name, tag, semver in (("web", "1.0.0", ">=1.0.0 <2.0.0"), ("api", "2.0.0", "^2.0.0"))
        ],
    )
    fleet.succeed("web", "c1")
    fleet.succeed("api", "c1")
    fleet.send(observed(web="1.1.0", api="2.1.0"))
    # when api's new version succeeds on the canary and web's fails there
    fleet.succeed("api", "c1")
    fleet.fail("web", "c1")
    # then both members return to the combination before it
    assert fleet.phase("web") in ("RollingBack", "RolledBack") and fleet.phase("api") in ("RollingBack", "RolledBack")
    assert fleet.revision("web", "c1") == "1.0.0" and fleet.revision("api", "c1") == "2.0.0"


# --- the manifest: rollout/api/module_releases.py -----------------------------------------

MODULES = """
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: web, namespace: fleet}
spec:
  sync:
    source: {oci: {url: oci://registry.example/web, version: {tag: 1.0.0}}}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: api, namespace: fleet}
spec:
  sync:
    source: {git: {url: https://git.example/api, version: {tag: v1.0.0}}}
"""

RELEASE = """
---
apiVersion: rollout.dev/v1alpha1
kind: Release
metadata: {name: shop, namespace: fleet}
spec:
  selector: {}
  autoPromote: {hold: true}
  modules:
    - {name: web, oci: {tag: 1.2.0}, semver: ">=1.0.0 <2.0.0"}
    - {name: api, git: {tag: v2.0.0}}
"""


def expanded(text: str) -> dict[str, Any]:
    items = expand_releases(load_manifests(text.encode(), file="shop.yaml"))
    return {item.manifest.metadata.name: item.manifest for item in items}


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as error:
        expanded(text)
    return [str(problem) for problem in error.value.problems]


def test_an_auto_promoted_release_gives_its_ranges_to_its_members_and_the_leader() -> None:
    manifests = expanded(MODULES + RELEASE)
    web, api = manifests["web"], manifests["api"]
    auto = web.spec.sync.source.auto_promote
    assert auto is not None and (auto.semver, auto.hold) == (">=1.0.0 <2.0.0", True)
    assert api.spec.sync.source.auto_promote is None  # api keeps its version: it follows no range
    for manifest in (web, api):
        release = manifest.spec.release
        assert release.leader == "api" and release.auto_promote.hold
        [followed] = release.auto_promote.follow
        assert (followed.module, followed.kind, followed.url, followed.version) == (
            "web",
            "oci",
            "oci://registry.example/web",
            "1.2.0",
        )


def test_a_member_range_needs_the_release_to_auto_promote() -> None:
    assert problems(MODULES + RELEASE.replace("  autoPromote: {hold: true}\n", "")) == [
        "shop.yaml: document 3 (Release/shop): spec.modules[0].semver: follows a range only when the release "
        "auto-promotes: give the release spec.autoPromote"
    ]


def test_an_auto_promoted_release_follows_at_least_one_members_range() -> None:
    text = MODULES + RELEASE.replace(', semver: ">=1.0.0 <2.0.0"', "")
    assert problems(text) == [
        "shop.yaml: document 3 (Release/shop): spec.autoPromote: an auto-promoted release follows at least one "
        "member's range: give a member spec.modules[].semver"
    ]


def test_a_member_range_that_is_no_semver_range_is_refused_at_its_field() -> None:
    found = problems(MODULES + RELEASE.replace('semver: ">=1.0.0 <2.0.0"', "semver: banana"))
    assert len(found) == 1 and "spec.modules[0].semver" in found[0] and "is not a semver range" in found[0]
