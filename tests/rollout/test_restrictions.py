"""Tenants stay in their lane: the ModuleRestriction rules (rollout/api/restrictions.py) and the
engine's handling of them (rollout/engine/restriction_rules.py) — docs/rollout-semantics.md,
"Module restrictions"."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given as hypothesis_given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rollout.api.loading import ManifestError, load_manifest_text
from rollout.api.manifests import LabelSelector, ModuleManifest, ModuleRestrictionManifest
from rollout.api.restrictions import RestrictionViolation, admits, check_module, service_account_of
from rollout.api.selectors import selects
from rollout.wire.events import RestrictionApplied, RestrictionDeleted, parse_event
from tests.rollout.builders import API, GIT_URL, Fleet, cluster, given, module, next_id, restriction, stage


def restricted(manifest: ModuleRestrictionManifest) -> RestrictionApplied:
    return RestrictionApplied(id=next_id(), restriction=manifest)


def with_account(manifest: Any, account: str) -> Any:
    data = manifest.model_dump(by_alias=True)
    data["spec"]["sync"]["package"]["kustomize"]["serviceAccountName"] = account
    return type(manifest).model_validate(data)


def violation(rule: ModuleRestrictionManifest, manifest: Any) -> RestrictionViolation:
    with pytest.raises(RestrictionViolation) as caught:
        check_module(rule, manifest)
    return caught.value


# --- the rules: one pure check ------------------------------------------------------------


def test_a_namespace_without_a_restriction_is_unrestricted() -> None:
    app = module("app", {}, "v1")
    assert check_module(None, app) is app


def test_a_selector_missing_a_required_label_is_refused_naming_the_rule_and_the_selector() -> None:
    refused = violation(restriction(clusters={"matchLabels": {"tenant": "a"}}), module("app", {"env": "prod"}))
    assert (refused.restriction, refused.rule, refused.value) == ("fleet/tenant-lane", "allowedClusters", "{env=prod}")
    assert str(refused).startswith("refused by ModuleRestriction fleet/tenant-lane: allowedClusters:")
    assert "nothing in it requires tenant=a" in str(refused)


def test_an_empty_selector_is_refused_under_allowed_clusters() -> None:
    refused = violation(restriction(clusters={"matchLabels": {"tenant": "a"}}), module("app", {}))
    assert refused.rule == "allowedClusters" and "every cluster" in refused.why


def test_a_selector_at_least_as_narrow_as_allowed_clusters_passes() -> None:
    rule = restriction(
        clusters={
            "matchLabels": {"tenant": "a"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["dev", "prod"]},
                {"key": "tier", "operator": "NotIn", "values": ["shared"]},
                {"key": "region", "operator": "Exists"},
            ],
        }
    )
    narrow = module(
        "app",
        {
            "matchLabels": {"tenant": "a", "env": "prod", "region": "eu"},
            "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}],
        },
    )
    assert check_module(rule, narrow) is narrow
    wider = module("app", {"matchLabels": {"tenant": "a", "region": "eu"}, "matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod", "staging"]},
        {"key": "tier", "operator": "DoesNotExist"},
    ]})  # fmt: skip
    assert "env in (dev, prod)" in violation(rule, wider).why


def test_a_module_without_a_selector_selects_nothing_and_passes() -> None:
    app = module("app", None)
    assert check_module(restriction(clusters={"matchLabels": {"tenant": "a"}}), app) is app


def test_a_source_outside_the_allowed_patterns_is_refused_with_the_url() -> None:
    rule = restriction(sources=[r"https://github\.com/example/.*"])
    assert check_module(rule, module("app", {})).name == "app"  # GIT_URL matches
    other = module("app", {}).model_dump(by_alias=True)
    other["spec"]["sync"]["source"]["git"]["url"] = "https://evil.example.org/github.com/example/app"
    refused = violation(rule, ModuleManifest.model_validate(other))
    assert (refused.rule, refused.value) == ("allowedSourcePatterns", "https://evil.example.org/github.com/example/app")


def test_source_patterns_match_the_whole_url() -> None:
    rule = restriction(sources=[r"https://github\.com/example"])  # no .* : a prefix is not enough
    assert violation(rule, module("app", {})).value == GIT_URL


def test_a_service_account_not_in_the_list_is_refused() -> None:
    refused = violation(restriction(accounts=["tenant-a"]), with_account(module("app", {}), "cluster-admin"))
    assert (refused.rule, refused.value) == ("allowedServiceAccounts", "cluster-admin")


def test_a_missing_service_account_gets_the_default() -> None:
    admitted = check_module(restriction(accounts=["tenant-a"], default="tenant-a"), module("app", {}))
    assert service_account_of(admitted.spec) == "tenant-a"


def test_a_helm_release_gets_the_default_service_account_too() -> None:
    from tests.rollout.test_helm_releases import helm_module

    admitted = check_module(restriction(default="tenant-a"), helm_module())
    assert admitted.spec.sync.package.helm.service_account_name == "tenant-a"  # type: ignore[union-attr]
    refused = violation(restriction(accounts=["tenant-a"]), with_helm_account(helm_module(), "root"))
    assert (refused.rule, refused.value) == ("allowedServiceAccounts", "root")


def with_helm_account(manifest: Any, account: str) -> Any:
    data = manifest.model_dump(by_alias=True)
    data["spec"]["sync"]["package"]["helm"]["serviceAccountName"] = account
    return type(manifest).model_validate(data)


def test_a_missing_service_account_without_a_default_is_refused() -> None:
    refused = violation(restriction(accounts=["tenant-a"]), module("app", {}))
    assert refused.rule == "allowedServiceAccounts" and "names no serviceAccountName" in refused.why


def test_a_target_namespace_outside_the_list_is_refused() -> None:
    refused = violation(restriction(namespaces=["team-a"]), module("app", {}))
    assert (refused.rule, refused.why) == ("allowedTargetNamespaces", "no targetNamespace; it must be one of team-a")


def test_a_restriction_with_a_bad_pattern_or_a_default_outside_its_list_is_refused_at_load() -> None:
    with pytest.raises(ManifestError, match=r"allowedSourcePatterns.*not a regular expression"):
        load_manifest_text(
            f"apiVersion: {API}\nkind: ModuleRestriction\nmetadata: {{name: r, namespace: fleet}}\n"
            "spec: {allowedSourcePatterns: ['(']}\n",
            file="r.yaml",
        )
    with pytest.raises(ValidationError, match="defaultServiceAccount b is not one of allowedServiceAccounts"):
        restriction(accounts=["a"], default="b")


# Every requirement shape a selector can have, over two keys and three values.
_values = st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=3, unique=True)
_requirement = st.one_of(
    st.builds(lambda k, v: {"key": k, "operator": "In", "values": v}, st.sampled_from("ab"), _values),
    st.builds(lambda k, v: {"key": k, "operator": "NotIn", "values": v}, st.sampled_from("ab"), _values),
    st.builds(
        lambda k, o: {"key": k, "operator": o}, st.sampled_from("ab"), st.sampled_from(["Exists", "DoesNotExist"])
    ),
)
_selector = st.builds(
    lambda labels, expressions: LabelSelector.model_validate({"matchLabels": labels, "matchExpressions": expressions}),
    st.dictionaries(st.sampled_from("ab"), st.sampled_from(["x", "y", "z"]), max_size=2),
    st.lists(_requirement, max_size=3),
)
_labels = st.dictionaries(st.sampled_from("ab"), st.sampled_from(["x", "y", "z"]), max_size=2)


@settings(max_examples=300, deadline=None)
@hypothesis_given(allowed=_selector, mine=_selector, labels=_labels)
def test_an_admitted_selector_never_selects_a_cluster_outside_allowed_clusters(
    allowed: LabelSelector, mine: LabelSelector, labels: dict[str, str]
) -> None:
    rule = restriction(clusters=allowed.model_dump(by_alias=True))
    app = module("app", mine.model_dump(by_alias=True))
    try:
        check_module(rule, app)
    except RestrictionViolation:
        return
    if selects(mine, labels):
        assert admits(rule, labels), f"{labels} selected by {mine} but outside {allowed}"


# --- the engine: the third door -----------------------------------------------------------


def lane() -> Fleet:
    return given(
        cluster("a-1", {"tenant": "a"}),
        cluster("b-1", {"tenant": "b"}),
        restricted(restriction(clusters={"matchLabels": {"tenant": "a"}}, accounts=["tenant-a"], default="tenant-a")),
    )


def test_engine_refuses_a_hand_published_module_that_breaks_its_restriction_naming_the_rule() -> None:
    fleet = lane()
    fleet.apply(module("app", {}))
    assert "app" not in fleet.modules
    assert fleet.last.rejections == [
        "Module app: refused by ModuleRestriction fleet/tenant-lane: allowedClusters: selector {} (every cluster) "
        "may select clusters outside {tenant=a}: nothing in it requires tenant=a"
    ]
    [answer] = fleet.last.verdicts
    assert not answer.accepted and "allowedClusters" in answer.reason
    assert fleet.assigned("app") == {}


def test_engine_refusal_leaves_a_running_module_as_it_was() -> None:
    fleet = lane()
    fleet.apply(module("app", {"tenant": "a"}, "v1"))
    fleet.apply(module("app", {}, "v2"))
    assert fleet.record("app").revisions[fleet.record("app").target].revision == "v1"
    assert fleet.assigned("app") == {"a-1": "v1"}


def test_engine_fills_in_the_default_service_account() -> None:
    fleet = lane()
    fleet.apply(module("app", {"tenant": "a"}))
    assert fleet.assemblages[("a-1", "app")].sync.package.kustomize.service_account_name == "tenant-a"


def test_modules_of_other_namespaces_are_not_restricted() -> None:
    fleet = lane()
    fleet.apply(module("app", {}, namespace="platform"))
    assert fleet.assigned("app") == {"a-1": "v1", "b-1": "v1"}


def test_a_restriction_applied_under_a_running_module_halts_it_naming_the_rule() -> None:
    fleet = given(cluster("c1", {"ring": "canary"}), cluster("c2", {"ring": "main"}))
    fleet.apply(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("main")))
    assert fleet.assigned("app") == {"c1": "v1", "c2": None}
    fleet.send(restricted(restriction(sources=[r"oci://registry\.example\.com/.*"])))
    assert fleet.phase("app") == "Halted"
    [halt] = [d for d in fleet.last.decisions if d.action == "halted"]
    assert halt.reason.startswith("halted: refused by ModuleRestriction fleet/tenant-lane: allowedSourcePatterns:")
    assert fleet.status("app")["restricted"] == halt.reason.removeprefix("halted: ")
    fleet.succeed("app", "c1")
    assert fleet.assigned("app") == {"c1": "v1", "c2": None}  # nothing more moves
    out = fleet.resume("app")  # resume cannot lift a restriction: refused, saying why
    assert out.rejections == [f"module app stays halted: {halt.reason.removeprefix('halted: ')}; apply a spec "
                              "that complies, or change the namespace's ModuleRestriction"]  # fmt: skip
    assert [d.action for d in out.decisions] == [] and out.verdicts[0].accepted is False
    assert fleet.phase("app") == "Halted"
    assert fleet.assigned("app") == {"c1": "v1", "c2": None}


def test_a_restricted_module_goes_on_once_the_restriction_is_deleted() -> None:
    fleet = given(cluster("c1"))
    fleet.apply(module("app", {}, "v1", stage("all", concurrency=1)))
    fleet.send(restricted(restriction(accounts=["tenant-a"])))
    assert fleet.phase("app") == "Halted"
    fleet.send(RestrictionDeleted(id=next_id(), namespace="fleet", name="tenant-lane"))
    assert "restriction-met" in fleet.last_actions()
    assert fleet.phase("app") != "Halted"


def test_a_complying_apply_lifts_the_halt() -> None:
    fleet = given(cluster("c1"), cluster("c2"))
    fleet.apply(module("app", {}, "v1", stage("all", concurrency=1)))
    fleet.send(restricted(restriction(accounts=["tenant-a"])))
    fleet.apply(with_account(module("app", {}, "v2", stage("all", concurrency=1)), "tenant-a"))
    assert "restriction-met" in fleet.last_actions()
    assert fleet.phase("app") == "Progressing"
    assert fleet.on("app", "v2") == ["c1"]


def test_a_cluster_relabelled_out_of_allowed_clusters_loses_the_module() -> None:
    fleet = lane()
    fleet.apply(module("app", {"tenant": "a"}))
    assert fleet.assigned("app") == {"a-1": "v1"}
    fleet.apply(cluster("a-1", {"tenant": "b"}))
    assert fleet.assigned("app") == {}


def test_a_restriction_narrowing_allowed_clusters_drops_the_clusters_outside() -> None:
    fleet = given(cluster("eu", {"tenant": "a", "region": "eu"}), cluster("us", {"tenant": "a", "region": "us"}))
    fleet.apply(module("app", {"tenant": "a"}))
    fleet.send(restricted(restriction(clusters={"matchLabels": {"region": "eu"}})))
    assert fleet.assigned("app") == {"eu": "v1"}  # and halted: its selector no longer implies region=eu
    assert fleet.phase("app") == "Halted"


def test_a_redelivered_older_restriction_does_not_come_back() -> None:
    fleet = given(cluster("c1"))
    loose = restricted(restriction(accounts=[]))
    tight = restricted(restriction(accounts=["tenant-a"]))
    fleet.send(loose, tight, loose)
    fleet.apply(module("app", {}))
    assert "allowedServiceAccounts" in fleet.last.rejections[0]


def test_restrictions_survive_a_restart() -> None:
    fleet = lane()
    fleet.restart()
    fleet.apply(module("app", {}))
    assert "allowedClusters" in fleet.last.rejections[0]


def test_restriction_events_round_trip_through_the_wire_format() -> None:
    event = restricted(restriction(clusters={"matchLabels": {"tenant": "a"}}, sources=["https://.*"]))
    assert parse_event(event.to_bytes()) == event
    gone = RestrictionDeleted(id="x", namespace="fleet", name="tenant-lane")
    assert parse_event(gone.to_bytes()) == gone
