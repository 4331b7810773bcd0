"""What the Kubernetes sink counts as drift: a field it sets lost its value; nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from projections.sinks.drift import drifted

DESIRED: dict[str, Any] = {
    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
    "kind": "Kustomization",
    "metadata": {"name": "podinfo-c1", "namespace": "flux-system", "labels": {"rollout.dev/cluster": "c1"}},
    "spec": {"interval": "10m", "prune": True, "sourceRef": {"kind": "GitRepository", "name": "podinfo-c1"}},
}


def live(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        **DESIRED,
        "metadata": {**DESIRED["metadata"], "resourceVersion": "42", "managedFields": [{"manager": "rollout"}]},
        "spec": {**DESIRED["spec"], "force": False},  # a CRD default the server filled in
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    obj["spec"].update(changes)
    return obj


def test_server_fields_defaults_and_status_are_not_drift() -> None:
    assert not drifted(DESIRED, live())


def test_another_managers_extra_field_is_not_drift() -> None:
    assert not drifted(DESIRED, live(suspend=True))


@pytest.mark.parametrize(
    "changes",
    [
        {"interval": "1h"},
        {"prune": False},
        {"sourceRef": {"kind": "GitRepository", "name": "elsewhere"}},
        {"sourceRef": None},
    ],
)
def test_an_edited_field_the_sink_sets_is_drift(changes: dict[str, Any]) -> None:
    assert drifted(DESIRED, live(**changes))


def test_a_removed_label_is_drift() -> None:
    obj = live()
    obj["metadata"]["labels"] = {}
    assert drifted(DESIRED, obj)


def test_lists_are_compared_item_by_item() -> None:
    desired = {"spec": {"dependsOn": [{"name": "a"}, {"name": "b"}]}}
    assert not drifted(desired, {"spec": {"dependsOn": [{"name": "a", "namespace": "x"}, {"name": "b"}]}})
    assert drifted(desired, {"spec": {"dependsOn": [{"name": "a"}]}})
    assert drifted(desired, {"spec": {"dependsOn": [{"name": "b"}, {"name": "a"}]}})
