"""Explaining the values a cluster was sent: which layer and policy decided each path."""

from __future__ import annotations

from typing import Any

from rollout.api.manifests import ClusterManifest
from rollout.engine.state import ModuleRecord
from rollout.planning.sent_values import explain_sent
from tests.rollout.builders import cluster
from tests.rollout.test_helm_releases import helm_module

POLICIES = {"/ui/color": "keepCurrent", "/seed": "readOnly", "/mem": "max"}


def record(**helm: Any) -> ModuleRecord:
    manifest = helm_module(**helm)
    return ModuleRecord(name=manifest.metadata.name, kind=manifest.kind, namespace="fleet", spec=manifest.spec)


def explained(sent: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, tuple[Any, str, str | None]]:
    module = record(
        values={"replicaCount": 2, "ui": {"color": "blue"}, "mem": "256Mi"},
        stage_values={"canary": {"replicaCount": 1}},
        policies=POLICIES,
    )
    observed: ClusterManifest = cluster("c1", labels or {})
    result = explain_sent(module, observed, sent)
    assert result is not None
    return {d.path: (d.value, d.layer, d.policy) for d in result.decisions}


def test_values_sent_as_declared_are_explained_by_their_layers() -> None:
    decisions = explained({"replicaCount": 1, "ui": {"color": "blue"}, "mem": "256Mi"}, {"ring": "canary"})
    assert decisions == {
        "/replicaCount": (1, "stage", None),
        "/ui/color": ("blue", "module", "keepCurrent"),
        "/mem": ("256Mi", "module", "max"),
    }


def test_a_value_the_cluster_kept_is_explained_as_live_with_its_policy() -> None:
    decisions = explained({"replicaCount": 2, "ui": {"color": "red"}, "mem": "1Gi", "seed": "abc"})
    assert decisions["/ui/color"] == ("red", "live", "keepCurrent")
    assert decisions["/mem"] == ("1Gi", "live", "max")
    assert decisions["/seed"] == ("abc", "live", "readOnly")  # only the cluster has it
    assert decisions["/replicaCount"] == (2, "module", None)


def test_a_module_without_a_chart_has_no_values_to_explain() -> None:
    from tests.rollout.builders import module

    manifest = module("plain")
    plain = ModuleRecord(name="plain", kind="Module", namespace="fleet", spec=manifest.spec)
    assert explain_sent(plain, cluster("c1"), {}) is None
