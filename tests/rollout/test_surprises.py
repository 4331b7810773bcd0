"""Warnings before a surprise: a module or a stage that would move no known cluster."""

from __future__ import annotations

from rollout.planning.plan import plan_rollout
from rollout.planning.surprises import surprises
from tests.rollout.builders import cluster, module, stage

FLEET = [cluster("c1", {"ring": "canary"}), cluster("w1", {"ring": "wave"}), cluster("w2", {"ring": "wave"})]


def warnings_for(manifest: object) -> list[str]:
    return surprises(manifest, plan_rollout(manifest, FLEET))  # type: ignore[arg-type]


def test_a_module_matching_clusters_in_every_stage_gives_no_warning() -> None:
    assert warnings_for(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("rest"))) == []


def test_a_selector_matching_no_known_cluster_is_a_warning() -> None:
    assert warnings_for(module("app", {"env": "nowhere"}, "v1")) == [
        "module/app: its selector matches none of the 3 known cluster(s); "
        "it completes at once, deploying nothing, until a matching cluster appears"
    ]


def test_a_module_without_selector_is_a_warning() -> None:
    [warning] = warnings_for(module("app", None, "v1"))
    assert warning.startswith("module/app has no selector: it selects no cluster")


def test_a_stage_matching_none_of_the_module_clusters_is_a_warning() -> None:
    manifest = module("app", {}, "v1", stage("canary", {"ring": "typo"}), stage("rest"))
    assert warnings_for(manifest) == [
        "module/app: stage canary gets none of the module's 3 cluster(s); it will pass with nothing to do"
    ]


def test_a_stage_emptied_by_an_earlier_one_is_a_warning() -> None:
    manifest = module("app", {"ring": "wave"}, "v1", stage("all"), stage("wave", {"ring": "wave"}))
    assert warnings_for(manifest) == [
        "module/app: stage wave gets none of the module's 2 cluster(s); it will pass with nothing to do"
    ]
