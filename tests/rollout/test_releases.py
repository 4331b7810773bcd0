"""Releases: several modules promoted as one unit (docs/rollout-semantics.md, "Releases").
One given/when/then test per rule. The members of a release are modules as `rollout
apply` gives them (`spec.release`, rollout/api/module_releases.py); the harness feeds the
events one member's partition sends its peers back, as the router would."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.api.loading import Loaded, ManifestError, load_manifests
from rollout.api.module_releases import expand_releases
from rollout.wire.events import ModuleApplied
from tests.rollout.builders import cluster, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
SHOP = ("shop", ["web", "api"])


def member(name: str, tag: str = "v1", *, on_failure: str | None = None, failures: int | None = None) -> Any:
    """A member of release shop, as apply gives it: the release's selector and stages."""
    return module(
        name,
        {},
        tag,
        stage("canary", CANARY, failures=failures),
        stage("wave", WAVE, failures=failures),
        on_failure=on_failure,
        release=SHOP,
    )


def shop(**options: Any) -> Any:
    return given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        member("web", **options),
        member("api", **options),
    )


def test_a_cluster_is_done_for_a_release_member_only_when_every_member_succeeded_there() -> None:
    fleet = shop()
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "awaiting_release"  # on its target, waiting for api there
    assert fleet.record("web").stage_index == 0
    assert fleet.target_status["web/c1"]["message"] == (
        "on its target, waiting for release shop: api on their target and succeeded here"
    )
    fleet.succeed("api", "c1")
    assert fleet.category("web", "c1") == "succeeded" and fleet.category("api", "c1") == "succeeded"


def test_release_members_move_through_the_stages_together() -> None:
    fleet = shop()
    fleet.succeed("web", "c1")
    assert fleet.revision("web", "w1") is None and fleet.revision("api", "w1") is None  # the canary is not done
    fleet.succeed("api", "c1")
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"
    fleet.succeed("web", "w1", "w2")
    fleet.succeed("api", "w1")
    assert fleet.phase("web") == "Progressing" and fleet.record("web").stable is None
    fleet.succeed("api", "w2")
    assert fleet.phase("web") == "Complete" and fleet.phase("api") == "Complete"


def test_a_member_waiting_for_its_release_is_started_for_its_wave_and_says_so_in_its_run() -> None:
    # given a release whose stage moves in waves of one, ten minutes apart
    waves = {"size": 1, "seed": 7, "delay": "10m"}
    fleet = given(
        *[cluster(name, WAVE) for name in ("w1", "w2", "w3")],
        module("web", {}, "v1", stage("wave", WAVE, waves=waves), release=SHOP),
        module("api", {}, "v1", stage("wave", WAVE, waves=waves), release=SHOP),
    )
    [first] = [name for name in ("w1", "w2", "w3") if fleet.revision("web", name) == "v1"]
    # when web succeeds on its wave's member, where api still updates
    fleet.succeed("web", first)
    # then web waits there for api — started, so its open wave moves no other member
    assert fleet.category("web", first) == "awaiting_release"
    assert fleet.on("web", "v1") == [first]
    assert fleet.counts("web", "wave")["awaiting_release"] == 1
    state, why = fleet.run_members("web")[first]
    assert state == "AwaitingRelease" and "waiting for release shop: api" in why
    # and the wave's delay runs from when web's own update there ended: then the next wave
    fleet.wait(600)
    assert len(fleet.on("web", "v1")) == 2
    assert fleet.phase("web") == "Progressing"
    fleet.succeed("api", first)
    assert fleet.category("web", first) == "succeeded" and fleet.category("api", first) == "succeeded"


def test_a_member_waiting_for_its_release_takes_no_concurrency_slot_and_keeps_its_stage_open() -> None:
    # given a release moving one cluster at a time in its wave stage
    fleet = given(
        cluster("c1", CANARY),
        cluster("w1", WAVE),
        cluster("w2", WAVE),
        module("web", {}, "v1", stage("canary", CANARY), stage("wave", WAVE, concurrency=1), release=SHOP),
        module("api", {}, "v1", stage("canary", CANARY), stage("wave", WAVE, concurrency=1), release=SHOP),
    )
    fleet.succeed("web", "c1")
    fleet.succeed("api", "c1")
    [first] = [name for name in ("w1", "w2") if fleet.revision("web", name) == "v1"]
    [second] = [name for name in ("w1", "w2") if name != first]
    assert fleet.revision("web", second) is None  # one at a time
    # when web succeeds on the first wave member, where api still updates
    fleet.succeed("web", first)
    # then web's slot is free: it moves on, as it would after a success (its own update ended)
    assert fleet.category("web", first) == "awaiting_release"
    assert fleet.revision("web", second) == "v1"
    # and its stage stays open until api is done there too, whatever else succeeds
    fleet.succeed("web", second)
    assert fleet.category("web", second) == "awaiting_release"
    assert fleet.phase("web") == "Progressing" and fleet.record("web").stable is None
    fleet.succeed("api", first, second)
    assert fleet.phase("web") == "Complete" and fleet.phase("api") == "Complete"


def test_a_failure_of_one_member_fails_the_release_on_that_cluster_for_every_member() -> None:
    fleet = shop()
    fleet.succeed("web", "c1")
    fleet.fail("api", "c1")
    assert fleet.category("web", "c1") == "failed"
    assert fleet.target_status["web/c1"]["message"] == "release shop failed here: another member failed on its target"
    assert fleet.phase("web") == "Halted" and fleet.phase("api") == "Halted"


def test_a_failed_release_rolls_back_every_member_together() -> None:
    fleet = shop(on_failure="Rollback")
    fleet.succeed("web", "c1")
    fleet.succeed("api", "c1")
    fleet.succeed("web", "w1", "w2")
    fleet.succeed("api", "w1", "w2")
    assert fleet.phase("web") == "Complete"
    fleet.apply(member("web", "v2", on_failure="Rollback"), member("api", "v2", on_failure="Rollback"))
    fleet.succeed("web", "c1")
    fleet.fail("api", "c1")
    assert fleet.record("web").mode == "rollback" and fleet.record("api").mode == "rollback"
    assert fleet.revision("web", "c1") == "v1" and fleet.revision("api", "c1") == "v1"


def test_a_failure_within_the_budget_lets_the_release_go_on() -> None:
    fleet = shop(failures=1)
    fleet.fail("api", "c1")
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "failed" and fleet.phase("web") != "Halted"
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"


def test_a_member_that_succeeds_after_failing_clears_the_release_failure() -> None:
    fleet = shop()
    fleet.succeed("web", "c1")
    fleet.fail("api", "c1")
    fleet.succeed("api", "c1")  # Flux retried; only succeeded clears a failure
    assert fleet.category("web", "c1") == "succeeded" and fleet.category("api", "c1") == "succeeded"


def test_a_new_release_does_not_count_a_peers_previous_state() -> None:
    fleet = shop()
    fleet.succeed("web", "c1")
    fleet.succeed("api", "c1")
    fleet.feedback = False  # api's partition has not folded the new release yet
    after = {"api": "apply-api-v2"}
    fleet.send(ModuleApplied(id="apply-web-v2", module=member("web", "v2"), after=after))
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "awaiting_release"  # api's success was about v1
    assert fleet.status("web")["awaiting"] == ["api"]


def test_a_cluster_pinned_in_one_member_is_not_waited_for_by_the_others() -> None:
    fleet = shop()
    fleet.pin("api", "c1")  # held where it is (nothing): web does not wait for it there
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "succeeded"
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"
    fleet.unpin("api", "c1")
    assert fleet.category("web", "c1") == "awaiting_release"  # api follows again: web waits for it there


def test_a_cluster_its_owner_holds_is_not_waited_for_by_the_members() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), member("web"))
    fleet.succeed("web", "c1")
    assert fleet.category("web", "c1") == "awaiting_release"  # api does not exist yet: web waits for it
    fleet.send(cluster("c1", CANARY, annotations={"rollout.dev/hold": "true"}))
    fleet.apply(member("api"))
    assert fleet.category("api", "c1") == "held" and fleet.category("web", "c1") == "succeeded"
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"


def test_a_member_its_run_skips_offline_on_a_cluster_is_not_waited_for_there() -> None:
    # given web on its target on the canary, and the canary gone offline before api moved there
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), member("web"))
    fleet.succeed("web", "c1")
    fleet.send(cluster("c1", CANARY, ready=False))
    # when api arrives: its run skips the canary (not ready, never moved there)
    fleet.apply(member("api"))
    assert fleet.category("api", "c1") == "not_ready"
    # then web does not wait for it there: the canary passes, as it does for api
    assert fleet.category("web", "c1") == "succeeded"
    assert fleet.revision("web", "w1") == "v1" and fleet.revision("api", "w1") == "v1"
    # and once the canary is back, api moves there and web waits for it again
    fleet.send(cluster("c1", CANARY))
    assert fleet.revision("api", "c1") == "v1" and fleet.category("web", "c1") == "awaiting_release"
    fleet.succeed("api", "c1")
    assert fleet.category("web", "c1") == "succeeded"


def test_a_member_that_went_offline_while_updating_is_still_waited_for() -> None:
    # given web on its target on the canary, api updating there
    fleet = shop()
    fleet.succeed("web", "c1")
    # when the canary goes offline before api's report
    fleet.send(cluster("c1", CANARY, ready=False))
    # then web still waits for api there: api's report counts (a run waits for it too)
    assert fleet.category("api", "c1") == "updating" and fleet.category("web", "c1") == "awaiting_release"
    assert fleet.revision("web", "w1") is None
    fleet.succeed("api", "c1")
    assert fleet.category("web", "c1") == "succeeded" and fleet.revision("web", "w1") == "v1"


def test_deleting_a_release_member_is_not_held_by_its_peers() -> None:
    fleet = shop()
    fleet.delete("web")
    assert "web" not in fleet.modules
    assert fleet.category("api", "c1") == "updating"


def test_status_names_the_release_and_its_members() -> None:
    fleet = shop()
    assert fleet.status("web")["release"] == {"name": "shop", "members": ["web", "api"]}


# --- the Release manifest (rollout/api/module_releases.py) ------------------------------

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
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: cache, namespace: fleet}
spec:
  sync:
    source: {helm: {url: https://charts.example, chart: redis, version: 18.0.0}}
    package: {helm: {values: {replicas: 1}}}
"""

RELEASE = """
---
apiVersion: rollout.dev/v1alpha1
kind: Release
metadata: {name: shop, namespace: fleet}
spec:
  selector: {matchLabels: {env: prod}}
  rollout:
    stages: [{name: canary, selector: {matchLabels: {ring: canary}}}, {name: rest}]
    onFailure: Rollback
  modules:
    - {name: web, oci: {digest: "sha256:%s"}}
    - {name: api, git: {tag: v2.0.0}}
    - {name: cache, chart: {version: 18.1.0}, values: {replicas: 3}}
""" % ("a" * 64)


def expanded(text: str) -> list[Loaded]:
    return expand_releases(load_manifests(text.encode(), file="shop.yaml"))


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as error:
        expanded(text)
    return [str(problem) for problem in error.value.problems]


def test_a_release_gives_each_member_its_revision_selector_and_stages() -> None:
    members = {item.manifest.metadata.name: item.manifest for item in expanded(MODULES + RELEASE)}
    assert sorted(members) == ["api", "cache", "web"]  # the Release itself is not published
    web, api, cache = members["web"], members["api"], members["cache"]
    assert web.spec.sync.revision == "sha256:" + "a" * 64
    assert api.spec.sync.revision == "v2.0.0"
    assert cache.spec.sync.source.helm.version == "18.1.0" and cache.spec.sync.package.helm.values == {"replicas": 3}
    assert [s.name for s in web.spec.rollout.stages] == ["canary", "rest"] and web.spec.rollout.on_failure == "Rollback"
    assert api.spec.selector.match_labels == {"env": "prod"}
    assert cache.spec.release.name == "shop" and cache.spec.release.members == ["web", "api", "cache"]


def test_a_release_naming_a_module_not_in_the_files_is_refused_naming_the_field() -> None:
    text = MODULES + RELEASE.replace("{name: api, git", "{name: payments, git")
    assert problems(text) == [
        "shop.yaml: document 4 (Release/shop): spec.modules[1].name: no Module or BootstrapModule payments in "
        "these files; apply a release with its modules"
    ]


def test_a_module_in_two_releases_is_refused() -> None:
    other = RELEASE.replace("name: shop", "name: outlet")
    found = problems(MODULES + RELEASE + other)
    assert found[0] == (
        "shop.yaml: document 5 (Release/outlet): spec.modules[0].name: web is already a member of "
        "shop.yaml: document 4 (Release/shop); a module moves with one release"
    )
    assert len(found) == 3


def test_a_member_leaves_its_selector_and_stages_to_the_release() -> None:
    text = MODULES.replace(
        "metadata: {name: api, namespace: fleet}\nspec:\n",
        "metadata: {name: api, namespace: fleet}\nspec:\n  selector: {}\n",
    )
    assert problems(text + RELEASE) == [
        "shop.yaml: document 2 (Module/api): spec.selector: is decided by shop.yaml: document 4 (Release/shop) "
        "(its spec.selector); remove it here"
    ]


def test_a_member_is_not_auto_promoted_on_its_own() -> None:
    text = MODULES.replace(
        "source: {git: {url: https://git.example/api, version: {tag: v1.0.0}}}",
        "source: {git: {url: https://git.example/api, version: {tag: v1.0.0}}, autoPromote: {semver: '^1.0'}}",
    )
    assert problems(text + RELEASE) == [
        "shop.yaml: document 2 (Module/api): spec.sync.source.autoPromote: a member of shop.yaml: document 4 "
        "(Release/shop) moves with its release, never promoted alone (that would break the combination); "
        "remove autoPromote here and give the release its new versions"
    ]


def test_a_release_member_ignores_a_promotion_of_its_source() -> None:
    from tests.rollout.builders import promotion

    # given release members whose spec carries autoPromote (only a hand-made apply can)
    fleet = given(cluster("c1", CANARY))
    auto = {"semver": "^1.0"}
    web = module("web", {}, "v1.0.0", stage("canary", CANARY), release=SHOP, auto_promote=auto)
    api = module("api", {}, "v1.0.0", stage("canary", CANARY), release=SHOP, auto_promote=auto)
    fleet.apply(web, api)
    # when the promoter sees a newer version in web's range
    outcome = fleet.send(promotion("web", "1.1.0"))
    # then web stays on its release's revision: no promotion, no new target
    assert outcome.decisions == [] and fleet.record("web").target == 1
    assert fleet.revision("web", "c1") == "v1.0.0"


def test_a_release_version_must_match_the_members_source() -> None:
    text = MODULES + RELEASE.replace("{name: api, git: {tag: v2.0.0}}", "{name: api, oci: {tag: v2.0.0}}")
    assert problems(text) == ["shop.yaml: document 4 (Release/shop): spec.modules[1].oci: api's source is not oci: git"]


def test_release_values_need_a_helm_package() -> None:
    text = MODULES + RELEASE.replace("{name: api, git: {tag: v2.0.0}}", "{name: api, values: {a: 1}}")
    assert problems(text) == [
        "shop.yaml: document 4 (Release/shop): spec.modules[1].values: api has no Helm package to give values to"
    ]


def test_a_module_cannot_claim_a_release_by_hand() -> None:
    sync = "  sync:\n    source: {oci"
    text = MODULES.replace(sync, "  release: {name: shop, members: [web, api]}\n" + sync, 1)
    assert problems(text) == [
        "shop.yaml: document 1 (Module/web): spec.release: is set by rollout apply from a Release; list the module "
        "in a Release's spec.modules"
    ]


def test_a_release_promotes_at_least_two_modules() -> None:
    text = MODULES + RELEASE.replace(
        "    - {name: api, git: {tag: v2.0.0}}\n    - {name: cache, chart: {version: 18.1.0}, values: {replicas: 3}}\n",
        "",
    )
    assert problems(text) == [
        "shop.yaml: document 4 (Release/shop): spec.modules: a release promotes at least two modules together"
    ]


# --- what `rollout status` and the dashboard show (rollout/wire/status.py) ---------------


def test_a_release_shows_its_worst_members_phase_and_which_clusters_are_done() -> None:
    from rollout.wire.status import ModuleRelease, ModuleStatus, ReleaseStatus, TargetStatus

    fleet = shop()
    fleet.succeed("web", "c1")
    statuses = {name: ModuleStatus.read(fleet.module_status[name]) for name in ("web", "api")}
    targets = [TargetStatus.read(document) for document in fleet.target_status.values() if document is not None]
    shown = ReleaseStatus.of(ModuleRelease(name="shop", members=["web", "api"]), statuses, targets)
    assert shown.phase == "Progressing" and [m.phase for m in shown.members] == ["Progressing", "Progressing"]
    c1 = next(place for place in shown.clusters if place.cluster == "c1")
    assert (c1.members["web"].state, c1.members["api"].state, c1.done) == ("awaiting_release", "updating", False)
    fleet.fail("api", "c1")
    statuses = {name: ModuleStatus.read(fleet.module_status[name]) for name in ("web", "api")}
    assert ReleaseStatus.of(ModuleRelease(name="shop", members=["web", "api"]), statuses, targets).phase == "Halted"
