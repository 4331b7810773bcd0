"""`rollout apply` and `rollout plan` against ModuleRestrictions, on the session's real broker:
a module breaking its namespace's restriction — applied in the same files, or already on the
cluster-observations topic — is refused naming the rule, and nothing is published.

No worker runs (`--no-wait`): these are facts about what reaches the topics. The engine's own
refusal of a hand-published module is tests/integration/test_restrictions.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from infra.topics import TopicNames
from rollout_cli.main import cli
from tests.cli.test_apply import API, a_cluster, a_module, apply, committed, topics, write

__all__ = ["topics"]  # the fixture, shared with test_apply.py

pytestmark = pytest.mark.integration


def a_restriction(namespace: str = "fleet", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModuleRestriction",
        "metadata": {"name": "tenant-lane", "namespace": namespace},
        "spec": spec,
    }


def plan(bootstrap: str, topics: TopicNames, path: Path) -> Result:
    args = ["plan", "-f", str(path), "--bootstrap-servers", bootstrap, "--topic-prefix", topics.prefix]
    return CliRunner().invoke(cli, args)


def test_a_module_breaking_a_restriction_in_the_same_files_is_refused_and_nothing_is_published(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(
        tmp_path / "tenant.yaml",
        a_restriction(allowedClusters={"matchLabels": {"tenant": "a"}}),
        a_cluster("c1", "canary"),
        a_module("app", selector={"ring": "canary"}),
    )
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {path}: document 3 (Module/app): refused by ModuleRestriction fleet/tenant-lane: "
        "allowedClusters: selector {ring=canary} may select clusters outside {tenant=a}: "
        "nothing in it requires tenant=a"
    )
    assert committed(kafka_bootstrap, topics.clusters) == []
    assert committed(kafka_bootstrap, topics.intents) == []


def test_a_restriction_already_on_the_topic_refuses_a_later_apply_naming_the_rule(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    restriction = a_restriction(allowedSourcePatterns=[r"https://git\.example\.com/team-a/.*"])
    first = apply(kafka_bootstrap, topics, write(tmp_path / "policy.yaml", restriction))
    assert first.exit_code == 0, first.output
    assert "modulerestriction/fleet/tenant-lane created" in first.output
    [published] = committed(kafka_bootstrap, topics.clusters)
    assert published["type"] == "RestrictionApplied"
    assert published["restriction"]["spec"]["allowedSourcePatterns"] == restriction["spec"]["allowedSourcePatterns"]

    path = write(tmp_path / "app.yaml", a_module("app", selector={"ring": "canary"}))
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert (
        "refused by ModuleRestriction fleet/tenant-lane: allowedSourcePatterns: source "
        r"'https://github.com/example/app' matches none of https://git\.example\.com/team-a/.*"
    ) in result.stderr
    assert committed(kafka_bootstrap, topics.intents) == []

    elsewhere = a_module("app", selector={"ring": "canary"})
    elsewhere["metadata"]["namespace"] = "platform"  # another namespace: unrestricted
    assert apply(kafka_bootstrap, topics, write(tmp_path / "other.yaml", elsewhere)).exit_code == 0
    assert [event["module"]["metadata"]["namespace"] for event in committed(kafka_bootstrap, topics.intents)] == [
        "platform"
    ]


def test_two_restrictions_for_one_namespace_are_an_error(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    second = a_restriction()
    second["metadata"]["name"] = "another"
    path = write(tmp_path / "policy.yaml", a_restriction(), second)
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert "is the restriction of namespace fleet; one per namespace" in result.stderr
    assert json.dumps(committed(kafka_bootstrap, topics.clusters)) == "[]"


def test_plan_shows_a_violation_as_an_error(kafka_bootstrap: str, topics: TopicNames, tmp_path: Path) -> None:
    path = write(
        tmp_path / "tenant.yaml",
        a_restriction(allowedServiceAccounts=["tenant-a"]),
        a_module("app", selector={"ring": "canary"}),
    )
    result = plan(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert (
        "error: " + f"{path}: document 2 (Module/app): refused by ModuleRestriction fleet/tenant-lane: "
        "allowedServiceAccounts: the sync names no serviceAccountName; set one of tenant-a"
    ) in result.stderr.splitlines()


def test_delete_modulerestriction_lifts_it_and_an_unknown_one_is_an_error(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    assert apply(kafka_bootstrap, topics, write(tmp_path / "policy.yaml", a_restriction())).exit_code == 0
    options = ["--bootstrap-servers", kafka_bootstrap, "--topic-prefix", topics.prefix]
    unknown = CliRunner().invoke(cli, ["delete", "modulerestriction", "fleet/other", *options])
    assert (unknown.exit_code, unknown.stderr) == (
        1,
        "error: modulerestriction fleet/other not found (its restriction is tenant-lane)\n",
    )
    deleted = CliRunner().invoke(cli, ["delete", "modulerestriction", "fleet/tenant-lane", *options])
    assert (deleted.exit_code, deleted.output) == (0, "modulerestriction/fleet/tenant-lane deleted\n")
    assert [e["type"] for e in committed(kafka_bootstrap, topics.clusters)] == [
        "RestrictionApplied",
        "RestrictionDeleted",
    ]
    again = CliRunner().invoke(cli, ["delete", "modulerestriction", "fleet/tenant-lane", *options])
    assert again.exit_code == 1
