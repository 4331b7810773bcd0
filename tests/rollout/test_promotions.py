"""Auto-promotion: a source's `autoPromote` range followed by the promoter's observations,
held by the manifest or a command — one given/when/then test per rule of
docs/rollout-semantics.md, "Auto-promotion" (rollout/engine/promotions.py,
rollout/api/promotion.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.promotion import in_range, newest_in_range
from rollout.wire.decision_reasons import Promoted, PromotionHeld
from rollout.wire.status import ModuleStatus
from tests.rollout.builders import Fleet, cluster, command, given, module, promotion, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
RANGE = ">=1.0.0 <2.0.0"


def app(tag: str = "1.0.0", semver: str = RANGE, hold: bool = False, **kwargs: Any) -> Any:
    auto: dict[str, Any] = {"semver": semver, **({"hold": True} if hold else {})}
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE), auto_promote=auto, **kwargs)


def rolled_out(tag: str = "1.0.0", **kwargs: Any) -> Fleet:
    """app at `tag` on canary-1 and wave-1, Complete."""
    fleet = given(cluster("canary-1", CANARY), cluster("wave-1", WAVE), app(tag, **kwargs))
    fleet.succeed("app", "canary-1")
    fleet.succeed("app", "wave-1")
    assert fleet.phase("app") == "Complete"
    return fleet


def status(fleet: Fleet) -> ModuleStatus:
    return ModuleStatus.read(fleet.status("app"))


def hold(**kwargs: Any) -> Any:
    return command("app", "hold-promotion", reason="incident 42", user="alice", via="cli", **kwargs)


def test_a_newer_version_in_range_becomes_the_target_and_rolls_out_from_the_first_stage() -> None:
    fleet = rolled_out()
    outcome = fleet.send(promotion("app", "1.4.0", promoter="promoter-a"))
    assert [d.action for d in outcome.decisions][:2] == ["promoted", "new-revision"]
    promoted = outcome.decisions[0].because
    assert isinstance(promoted, Promoted)
    assert (promoted.version, promoted.previous, promoted.promoter) == ("1.4.0", "1.0.0", "promoter-a")
    assert promoted.source == "git https://github.com/example/app"
    assert fleet.revision("app", "canary-1") == "1.4.0" and fleet.revision("app", "wave-1") == "1.0.0"
    fleet.succeed("app", "canary-1")
    assert fleet.revision("app", "wave-1") == "1.4.0"
    view = status(fleet)
    assert view.target_revision == "1.4.0" and view.promotion is not None and view.promotion.promoted == "1.4.0"


def test_a_promoted_version_keeps_the_rest_of_the_manifest() -> None:
    fleet = rolled_out(substitute={"LEVEL": "debug"})
    fleet.send(promotion("app", "1.4.0"))
    sync = fleet.record("app").revisions[fleet.record("app").target].sync
    assert sync.source.git is not None and sync.source.git.version.tag == "1.4.0"
    assert sync.package.kustomize.substitute == {"LEVEL": "debug"} and sync.source.auto_promote is None


def test_an_observed_version_below_the_target_is_never_a_downgrade() -> None:
    fleet = rolled_out("1.5.0")
    outcome = fleet.send(promotion("app", "1.4.0"))
    assert outcome.decisions == [] and outcome.rejections == []
    assert status(fleet).target_revision == "1.5.0"


def test_the_same_version_observed_again_is_counted_once() -> None:
    fleet = rolled_out()
    first = promotion("app", "1.4.0")
    fleet.send(first)
    generation = fleet.record("app").target
    assert fleet.send(first).decisions == []  # redelivered
    assert fleet.send(promotion("app", "1.4.0", promoter="promoter-b")).decisions == []  # a second promoter
    assert fleet.record("app").target == generation and fleet.actions("app").count("promoted") == 1


def test_a_version_outside_the_range_is_ignored() -> None:
    fleet = rolled_out()
    assert fleet.send(promotion("app", "2.0.0")).decisions == []
    assert status(fleet).target_revision == "1.0.0"


def test_pre_releases_are_ignored_unless_the_range_names_one() -> None:
    fleet = rolled_out()
    assert fleet.send(promotion("app", "1.5.0-rc.1")).decisions == []
    prerelease_range = rolled_out(semver=">=1.0.0-0 <2.0.0")
    prerelease_range.send(promotion("app", "1.5.0-rc.1"))
    assert status(prerelease_range).target_revision == "1.5.0-rc.1"


def test_an_observation_of_another_source_is_ignored() -> None:
    fleet = rolled_out()
    assert fleet.send(promotion("app", "1.4.0", url="https://github.com/example/other")).decisions == []
    assert fleet.send(promotion("app", "1.4.0", kind="oci", url="oci://registry/app")).decisions == []
    assert status(fleet).target_revision == "1.0.0"


def test_a_module_without_auto_promote_ignores_observations() -> None:
    fleet = given(cluster("canary-1", CANARY), module("app", {}, "1.0.0", stage("canary", CANARY)))
    assert fleet.send(promotion("app", "1.4.0")).decisions == []
    assert status(fleet).promotion is None


def test_a_manifest_hold_records_the_version_as_available_held() -> None:
    fleet = rolled_out(hold=True)
    outcome = fleet.send(promotion("app", "1.4.0", promoter="promoter-a"))
    [held] = outcome.decisions
    assert held.action == "promotion-held" and isinstance(held.because, PromotionHeld) and held.because.by == "manifest"
    assert held.reason == "1.4.0 available, held (autoPromote.hold); the target stays 1.0.0"
    view = status(fleet)
    assert view.target_revision == "1.0.0" and view.promotion is not None
    assert (view.promotion.available, view.promotion.available_from, view.promotion.hold) == (
        "1.4.0",
        "promoter-a",
        True,
    )
    fleet.send(promotion("app", "1.5.0"))
    assert status(fleet).promotion.available == "1.5.0"  # type: ignore[union-attr]
    assert fleet.send(promotion("app", "1.3.0")).decisions == []  # older than the available one
    assert status(fleet).promotion.available == "1.5.0"  # type: ignore[union-attr]


def test_lifting_the_manifest_hold_promotes_the_latest_available() -> None:
    fleet = rolled_out(hold=True)
    fleet.send(promotion("app", "1.4.0"), promotion("app", "1.5.0"))
    outcome = fleet.apply(app())  # hold: false
    assert "promoted" in [d.action for d in outcome.decisions]
    view = status(fleet)
    assert view.target_revision == "1.5.0" and view.promotion.available is None  # type: ignore[union-attr]
    assert fleet.revision("app", "canary-1") == "1.5.0"


def test_toggling_the_hold_alone_is_no_new_generation() -> None:
    fleet = rolled_out()
    generation = fleet.record("app").target
    outcome = fleet.apply(app(hold=True))
    assert "new-revision" not in [d.action for d in outcome.decisions]
    assert fleet.record("app").target == generation and fleet.phase("app") == "Complete"


def test_a_command_hold_records_versions_and_resume_promotes_the_latest_available() -> None:
    fleet = rolled_out()
    [held] = fleet.send(hold()).decisions
    assert held.action == "promotion-hold" and held.reason == "promotion held by alice via cli: incident 42"
    assert held.user == "alice" and held.via == "cli"
    fleet.send(promotion("app", "1.4.0"), promotion("app", "1.6.0"))
    view = status(fleet)
    assert view.target_revision == "1.0.0" and view.promotion is not None and view.promotion.available == "1.6.0"
    assert view.promotion.held_by is not None and view.promotion.held_by.reason == "incident 42"
    outcome = fleet.send(command("app", "resume-promotion", user="bob", via="dashboard"))
    assert [d.action for d in outcome.decisions][:3] == ["promotion-resumed", "promoted", "new-revision"]
    assert outcome.decisions[1].reason == (
        "promoted 1.0.0 → 1.6.0 from git https://github.com/example/app, seen by promoter-0, "
        "resumed by bob via dashboard"
    )
    assert status(fleet).target_revision == "1.6.0"


def test_resume_with_the_manifest_still_holding_promotes_nothing() -> None:
    fleet = rolled_out(hold=True)
    fleet.send(hold(), promotion("app", "1.4.0"))
    outcome = fleet.send(command("app", "resume-promotion", user="bob", via="cli"))
    assert [d.action for d in outcome.decisions] == ["promotion-resumed"]
    assert status(fleet).target_revision == "1.0.0" and status(fleet).promotion.available == "1.4.0"  # type: ignore[union-attr]


def test_holding_a_module_that_does_not_auto_promote_is_refused() -> None:
    fleet = given(cluster("canary-1", CANARY), module("app", {}, "1.0.0", stage("canary", CANARY)))
    outcome = fleet.send(hold())
    assert outcome.rejections == ["hold-promotion app: module app does not auto-promote: its source has no autoPromote"]


def test_a_hold_without_a_reason_is_not_a_valid_command() -> None:
    with pytest.raises(ValidationError, match="hold-promotion needs a reason"):
        command("app", "hold-promotion", user="alice", via="cli")


def test_a_manual_apply_of_a_newer_version_wins_and_the_promoter_does_not_go_back() -> None:
    fleet = rolled_out()
    fleet.send(promotion("app", "1.4.0"))
    fleet.apply(app("1.7.0"))
    assert status(fleet).target_revision == "1.7.0"
    assert fleet.send(promotion("app", "1.4.0")).decisions == []
    assert fleet.send(promotion("app", "1.6.0")).decisions == []
    assert status(fleet).target_revision == "1.7.0"


def test_a_manual_apply_of_a_newer_version_forgets_an_older_available_one() -> None:
    fleet = rolled_out(hold=True)
    fleet.send(promotion("app", "1.4.0"))
    fleet.apply(app("1.7.0", hold=True))
    view = status(fleet)
    assert view.target_revision == "1.7.0" and view.promotion.available is None  # type: ignore[union-attr]


def test_the_manifest_applied_again_with_its_older_version_keeps_the_promoted_one() -> None:
    fleet = rolled_out()
    fleet.send(promotion("app", "1.4.0"))
    generation = fleet.record("app").target
    outcome = fleet.apply(app("1.0.0"))  # the same file, applied again
    assert "new-revision" not in [d.action for d in outcome.decisions]
    assert status(fleet).target_revision == "1.4.0" and fleet.record("app").target == generation


def test_an_older_version_applied_while_held_is_the_target() -> None:
    fleet = rolled_out()
    fleet.send(promotion("app", "1.4.0"))
    fleet.send(hold())
    fleet.apply(app("1.0.0"))  # going back on purpose: hold first
    assert status(fleet).target_revision == "1.0.0"


def test_status_shows_where_the_promoter_looks() -> None:
    fleet = rolled_out()
    view = status(fleet)
    assert view.promotion is not None
    assert view.promotion.semver == RANGE and view.promotion.source.kind == "git"
    assert view.promotion.source.url == "https://github.com/example/app" and not view.promotion.held


def test_a_range_flux_takes_is_accepted_and_anything_else_is_refused_naming_the_field() -> None:
    for good in (">=1.0.0 <2.0.0", ">= 1.2, < 3.0", "~1.4", "^1.4", "1.x", "*", "1.2 - 1.4.5", "<1.0.0 || >=3.0.0"):
        app(semver=good)
    with pytest.raises(ValidationError, match="semver 'latest!' is not a semver range"):
        app(semver="latest!")


def test_auto_promote_needs_a_semver_tag_to_start_from() -> None:
    with pytest.raises(ValidationError, match="'main' is not a semantic version"):
        app("main")


def test_the_highest_version_in_range_is_picked_and_tags_that_are_no_version_are_ignored() -> None:
    tags = ["1.0.0", "v1.5.0", "1.4.9", "2.0.0", "1.6.0-rc.1", "latest", "1.7", "sha-abc"]
    assert newest_in_range(tags, RANGE) == "v1.5.0"
    assert newest_in_range(tags, ">=1.0.0-0 <2.0.0") == "1.6.0-rc.1"
    assert newest_in_range(tags, ">=3.0.0") is None
    assert in_range("2.0.0-rc.2", ">=2.0.0-rc.1") and not in_range("2.0.0-rc.2", ">=1.0.0")
