"""The engine is the third door: a ModuleApplied published by hand — past `rollout apply` and
the module watcher — is refused by the real `rollout worker` when it breaks its namespace's
ModuleRestriction, naming the rule; a restriction applied under a running module halts it,
and `rollout status` says why.

The restriction travels on the cluster-observations topic (as `rollout apply` publishes it),
the module on the intents topic, stamped with the fleet positions (as every publisher does):
so the engine has folded the restriction before it judges the module, on every partition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from rollout.api.manifests import ClusterManifest, ModuleManifest, ModuleRestrictionManifest
from rollout.wire.events import ClusterObserved, ModuleApplied, RestrictionApplied, restriction_key
from rollout_cli.main import cli
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration
API = "rollout.dev/v1alpha1"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("restrictions"))
    stack.start_worker()
    for name, tenant in (("a-1", "a"), ("b-1", "b")):
        cluster = ClusterManifest.model_validate(
            {
                "apiVersion": API,
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": "fleet", "labels": {"tenant": tenant}},
                "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
            }
        )
        stack.send("clusters", name, ClusterObserved(cluster=cluster))
    yield stack
    stack.stop()


def restrict(stack: Stack, namespace: str, **spec: Any) -> None:
    manifest = ModuleRestrictionManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "ModuleRestriction",
            "metadata": {"name": "lane", "namespace": namespace},
            "spec": spec,
        }
    )
    stack.send("clusters", restriction_key(namespace), RestrictionApplied(restriction=manifest))


def module(name: str, namespace: str, selector: dict[str, str], url: str = "https://git.example.com/team-a/app") -> Any:
    return ModuleManifest.model_validate(
        {
            "apiVersion": API,
            "kind": "Module",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": selector},
                "sync": {"source": {"git": {"url": url, "version": {"tag": "v1"}}}},
            },
        }
    )


def verdict(stack: Stack, event_id: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        for record in stack.records("verdicts"):
            document = record.json()
            if document.get("event") == event_id:
                return dict(document)
        return None

    return wait_for(f"the verdict on {event_id}", found, timeout=120)


def test_a_hand_published_module_breaking_its_restriction_is_refused_by_the_engine_naming_the_rule(
    stack: Stack,
) -> None:
    restrict(stack, "team-a", allowedClusters={"matchLabels": {"tenant": "a"}})
    event = ModuleApplied(module=module("grab-all", "team-a", {}))
    stack.send("intents", "grab-all", event)
    answer = verdict(stack, event.id)
    assert answer["verdict"] == "refused"
    assert answer["reason"] == (
        "Module grab-all: refused by ModuleRestriction team-a/lane: allowedClusters: selector {} (every cluster) "
        "may select clusters outside {tenant=a}: nothing in it requires tenant=a"
    )
    letters = wait_for(
        "the dead letter", lambda: [r.json() for r in stack.records("dead_letters") if b"grab-all" in (r.value or b"")]
    )
    assert "allowedClusters" in json.dumps(letters)
    assert "grab-all" not in stack.latest("module_status")


def test_a_module_within_its_lane_reaches_only_the_allowed_clusters(stack: Stack) -> None:
    event = ModuleApplied(module=module("lane-app", "team-a", {"tenant": "a"}))
    stack.send("intents", "lane-app", event)
    assert verdict(stack, event.id)["verdict"] == "accepted"
    status = wait_for("lane-app complete", lambda: stack.latest("module_status").get("lane-app"))
    assert status["namespace"] == "team-a"


def test_a_restriction_applied_under_a_running_module_halts_it_naming_the_rule(stack: Stack) -> None:
    event = ModuleApplied(module=module("legacy", "team-b", {"tenant": "b"}, url="https://github.com/old/app"))
    stack.send("intents", "legacy", event)
    assert verdict(stack, event.id)["verdict"] == "accepted"
    restrict(stack, "team-b", allowedSourcePatterns=[r"https://git\.example\.com/team-b/.*"])

    def halted() -> dict[str, Any] | None:
        status = stack.latest("module_status").get("legacy")
        return status if status and status.get("phase") == "Halted" else None

    status = wait_for("legacy halted", halted)
    assert status["restricted"].startswith(
        "refused by ModuleRestriction team-b/lane: allowedSourcePatterns: source 'https://github.com/old/app'"
    )
    shown = CliRunner().invoke(cli, ["status", "legacy"], env=stack.env, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "Restricted" in shown.output and "allowedSourcePatterns" in shown.output
