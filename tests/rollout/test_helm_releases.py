"""Helm releases in the engine: merged values per cluster in the assemblage, values observed
on a cluster folded in (docs/rollout-semantics.md, "Helm values")."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.manifests import ModuleManifest
from rollout.wire.events import HelmValuesObserved, parse_event
from tests.rollout.builders import API, AT, cluster, given, module, next_id

CHART_URL = "https://stefanprodan.github.io/podinfo"


def helm_module(
    name: str = "podinfo",
    version: str = "6.7.0",
    *,
    values: dict[str, Any] | None = None,
    stage_values: dict[str, dict[str, Any]] | None = None,
    cluster_values: dict[str, Any] | None = None,
    policies: dict[str, str] | None = None,
    chart_defaults: dict[str, Any] | None = None,
    bindings: bool = True,
) -> ModuleManifest:
    helm: dict[str, Any] = {
        "values": values or {},
        "stageValues": stage_values or {},
        "clusterValues": cluster_values or {},
        "valuesPolicy": [{"path": p, "policy": v} for p, v in (policies or {}).items()],
    }
    if chart_defaults is not None:
        helm["chartDefaults"] = chart_defaults
    return ModuleManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {
                "selector": {},
                "sync": {
                    "source": {"helm": {"url": CHART_URL, "chart": "podinfo", "version": version}},
                    "package": {"helm": helm},
                },
                "bindings": [{"name": "REGION", "fromLabel": "region"}] if bindings else [],
                "rollout": {
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
                        {"name": "rest"},
                    ]
                },
            },
        }
    )


def values_observed(cluster_name: str, values: dict[str, Any] | None = None, **more: Any) -> HelmValuesObserved:
    return HelmValuesObserved(id=next_id(), at=AT, cluster=cluster_name, module="podinfo", values=values, **more)


def released(fleet: Any, cluster_name: str) -> dict[str, Any]:
    helm = fleet.assemblages[(cluster_name, "podinfo")].sync.package.helm
    assert helm is not None
    return dict(helm.values)


def test_each_cluster_gets_module_stage_and_cluster_values_merged() -> None:
    fleet = given(
        cluster("c1", {"ring": "canary", "region": "eu"}),
        cluster("c2", {"region": "us"}),
        cluster("c3"),
        helm_module(
            values={"replicaCount": 2, "ui": {"message": "hello"}},
            stage_values={"canary": {"replicaCount": 1}},
            cluster_values={"ui": {"region": "$(REGION)"}},
        ),
    )
    assert released(fleet, "c1") == {"replicaCount": 1, "ui": {"message": "hello", "region": "eu"}}
    fleet.succeed("podinfo", "c1")  # the canary stage is done: the rest follow
    assert released(fleet, "c2") == {"replicaCount": 2, "ui": {"message": "hello", "region": "us"}}
    # c3 has no region label: the cluster value is left out, not sent as "$(REGION)"
    assert released(fleet, "c3") == {"replicaCount": 2, "ui": {"message": "hello"}}


def test_the_assigned_sync_carries_only_what_the_applier_renders() -> None:
    fleet = given(cluster("c1"), helm_module(values={"a": 1}, policies={"/a": "keepCurrent"}))
    helm = fleet.assemblages[("c1", "podinfo")].sync.package.helm
    assert helm is not None
    assert (helm.values, helm.stage_values, helm.cluster_values, helm.values_policy) == ({"a": 1}, {}, {}, [])
    assert fleet.revision("podinfo", "c1") == "6.7.0"


def test_a_value_observed_on_the_cluster_is_kept_per_keep_current() -> None:
    fleet = given(cluster("c1"), helm_module(values={"ui": {"color": "blue"}}, policies={"/ui/color": "keepCurrent"}))
    fleet.send(values_observed("c1", {"ui": {"color": "red"}}))
    assert fleet.moved() == [("c1", "6.7.0")]
    assert released(fleet, "c1") == {"ui": {"color": "red"}}
    assert fleet.last_actions() == ["values"]


def test_a_value_observed_on_a_path_without_policy_changes_nothing() -> None:
    fleet = given(cluster("c1"), helm_module(values={"ui": {"color": "blue"}}))
    outcome = fleet.send(values_observed("c1", {"ui": {"color": "red"}}))
    assert outcome.assignments == [] and outcome.decisions == []
    assert released(fleet, "c1") == {"ui": {"color": "blue"}}


def test_observing_what_was_applied_moves_nothing() -> None:
    fleet = given(cluster("c1"), helm_module(values={"mem": "256Mi"}, policies={"/mem": "max"}))
    outcome = fleet.send(values_observed("c1", {"mem": "256Mi"}))
    assert outcome.assignments == []


def test_a_redelivered_observation_changes_nothing() -> None:
    fleet = given(cluster("c1"), helm_module(values={"ui": {"color": "blue"}}, policies={"/ui/color": "keepCurrent"}))
    first = values_observed("c1", {"ui": {"color": "red"}})
    fleet.send(first, values_observed("c1", {"ui": {"color": "green"}}))
    outcome = fleet.send(first)
    assert outcome.assignments == [] and outcome.decisions == []
    assert released(fleet, "c1") == {"ui": {"color": "green"}}


def test_read_only_refusal_is_a_decision_naming_the_path() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.send(values_observed("c1", {"seed": "generated-on-cluster"}))
    assert released(fleet, "c1") == {"seed": "generated-on-cluster"}
    refused = [d for d in fleet.last.decisions if d.action == "values-refused"]
    assert len(refused) == 1 and refused[0].cluster == "c1"
    assert "/seed is readOnly" in refused[0].reason and "'abc'" in refused[0].reason


def test_a_new_generation_that_changes_a_read_only_value_is_refused_per_cluster() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.send(values_observed("c1", {"seed": "abc"}))
    fleet.succeed("podinfo", "c1")
    fleet.send(helm_module(version="6.8.0", values={"seed": "xyz"}, policies={"/seed": "readOnly"}))
    assert fleet.revision("podinfo", "c1") == "6.8.0"
    assert released(fleet, "c1") == {"seed": "abc"}
    assert "values-refused" in fleet.actions("podinfo")


def test_a_read_only_value_first_sent_is_refused_a_change_without_a_live_observation() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.succeed("podinfo", "c1")  # installed with seed abc; no applier reported live values
    fleet.send(helm_module(version="6.8.0", values={"seed": "xyz"}, policies={"/seed": "readOnly"}))
    assert fleet.revision("podinfo", "c1") == "6.8.0"
    assert released(fleet, "c1") == {"seed": "abc"}
    refused = [d for d in fleet.last.decisions if d.action == "values-refused"]
    assert len(refused) == 1 and "/seed is readOnly" in refused[0].reason and "'xyz'" in refused[0].reason
    fleet.restart()
    fleet.send(cluster("c1", {"region": "eu"}))  # re-sent (bindings re-expanded): still the first value
    assert released(fleet, "c1") == {"seed": "abc"}


def test_a_cluster_installing_a_later_generation_first_gets_its_read_only_value() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.succeed("podinfo", "c1")
    fleet.send(helm_module(version="6.8.0", values={"seed": "xyz"}, policies={"/seed": "readOnly"}))
    fleet.send(cluster("c2"))  # its first install: the first value it is sent is the module's now
    fleet.succeed("podinfo", "c1")
    assert released(fleet, "c2") == {"seed": "xyz"} and released(fleet, "c1") == {"seed": "abc"}


def test_chart_defaults_observed_for_the_assigned_version_feed_max() -> None:
    fleet = given(
        cluster("c1"),
        helm_module(values={"mem": "256Mi"}, chart_defaults={"mem": "128Mi"}, policies={"/mem": "max"}),
    )
    assert released(fleet, "c1") == {"mem": "256Mi"}
    fleet.send(values_observed("c1", chartDefaults={"mem": "1Gi"}, chartVersion="6.7.0"))
    assert released(fleet, "c1") == {"mem": "1Gi"}
    # defaults observed for another chart version are not this chart's
    fleet.send(values_observed("c1", chartDefaults={"mem": "4Gi"}, chartVersion="9.9.9"))
    assert released(fleet, "c1") == {"mem": "256Mi"}


def test_observation_survives_a_restart_of_the_engine() -> None:
    fleet = given(cluster("c1"), helm_module(values={"ui": {"color": "blue"}}, policies={"/ui/color": "keepCurrent"}))
    fleet.send(values_observed("c1", {"ui": {"color": "red"}}))
    fleet.restart()
    fleet.send(cluster("c1", {"region": "eu"}))  # labels change: the sync is re-expanded
    assert released(fleet, "c1") == {"ui": {"color": "red"}}


def test_a_cluster_relabelled_into_another_stage_gets_that_stages_values_without_bindings() -> None:
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        helm_module(values={"replicaCount": 2}, stage_values={"canary": {"replicaCount": 1}}, bindings=False),
    )
    assert released(fleet, "c1") == {"replicaCount": 1}
    fleet.succeed("podinfo", "c1")
    fleet.send(cluster("c1", {"ring": "main"}))  # now in stage rest: its values, re-sent
    assert released(fleet, "c1") == {"replicaCount": 2}
    assert fleet.moved() == [("c1", "6.7.0")]


def test_a_relabel_that_leaves_a_clusters_values_as_they_were_sends_nothing() -> None:
    fleet = given(cluster("c1", {"ring": "canary"}), helm_module(values={"replicaCount": 2}, bindings=False))
    fleet.succeed("podinfo", "c1")
    outcome = fleet.send(cluster("c1", {"ring": "canary", "team": "web"}))
    assert outcome.assignments == []


def test_values_reported_with_reply_get_a_verdict_naming_the_decision() -> None:
    fleet = given(cluster("c1"), helm_module(values={"ui": {"color": "blue"}}, policies={"/ui/color": "keepCurrent"}))
    outcome = fleet.send(values_observed("c1", {"ui": {"color": "red"}}, reply=True))
    [answer] = outcome.verdicts
    assert answer.accepted and "changed its merged values" in answer.reason
    outcome = fleet.send(values_observed("c1", {"ui": {"color": "red"}}, reply=True))
    [answer] = outcome.verdicts
    assert answer.accepted and "stay as they are" in answer.reason


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ({"cluster": "nowhere", "module": "podinfo"}, "cluster 'nowhere' not found"),
        ({"cluster": "c1", "module": "missing"}, "module 'missing' not found"),
        ({"cluster": "c1", "module": "plain"}, "does not sync a Helm chart"),
    ],
)
def test_values_reported_with_reply_are_refused_naming_why(event: dict[str, Any], why: str) -> None:
    fleet = given(cluster("c1"), helm_module(), module("plain"))
    outcome = fleet.send(HelmValuesObserved(id=next_id(), at=AT, values={"a": 1}, reply=True, **event))
    [answer] = outcome.verdicts
    assert not answer.accepted and why in answer.reason
    assert outcome.assignments == []


def test_helm_values_observed_parses_from_json_and_needs_the_chart_version_with_defaults() -> None:
    raw = b'{"type": "HelmValuesObserved", "id": "x", "cluster": "c1", "module": "podinfo", "values": {"a": 1}}'
    assert parse_event(raw).values == {"a": 1}
    with pytest.raises(ValidationError, match="chartVersion"):
        HelmValuesObserved(cluster="c1", module="podinfo", chartDefaults={"a": 1})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": "^6.7"}, "exact semantic version"),
        ({"policies": {"/a": "max"}, "values": {"a": "big"}}, "quantities"),
        ({"policies": {"/a": "keepCurrent", "/a/b": "readOnly"}}, "lies inside"),
        ({"policies": {"/a": "sometimes"}}, "keepCurrent"),
        ({"stage_values": {"nope": {}}}, "names no stage"),
    ],
)
def test_bad_helm_modules_are_refused_with_the_reason(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        helm_module(**change)


def test_a_helm_source_needs_a_helm_package() -> None:
    document = helm_module().model_dump(by_alias=True)
    document["spec"]["sync"]["package"] = {"kustomize": {"path": "./"}}
    with pytest.raises(ValidationError, match="needs a 'helm' package"):
        ModuleManifest.model_validate(document)


def test_a_read_only_value_first_sent_on_a_relabel_is_refused_a_change_by_a_later_generation() -> None:
    canary = {"canary": {"seed": "abc"}}
    fleet = given(cluster("c1"), helm_module(stage_values=canary, policies={"/seed": "readOnly"}, bindings=False))
    assert released(fleet, "c1") == {}
    fleet.send(cluster("c1", {"ring": "canary"}))  # into the canary stage: its sync re-sent, seed first sent
    assert released(fleet, "c1") == {"seed": "abc"}
    later = {"canary": {"seed": "xyz"}}
    fleet.send(helm_module(version="6.8.0", stage_values=later, policies={"/seed": "readOnly"}, bindings=False))
    assert fleet.revision("podinfo", "c1") == "6.8.0"
    assert released(fleet, "c1") == {"seed": "abc"}
