"""`rollout plan` on a Helm module: each cluster's values and what decided each path."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rollout_cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN = ["plan", "-f", str(EXAMPLES / "helm.yaml"), "--clusters", str(EXAMPLES / "clusters.yaml")]


def test_plan_table_lists_each_clusters_paths_with_layer_and_policy() -> None:
    result = CliRunner().invoke(cli, PLAN)
    assert result.exit_code == 0, result.output
    section = result.output.split("values of prod-eu-1 (stage canary):")[1].split("values of")[0]
    rows = {line.split()[0]: line.split()[1:] for line in section.splitlines()[1:] if line.strip()}
    assert rows["/resources/limits/memory"] == ['"512Mi"', "stage", "max"]
    assert rows["/image/tag"] == ['"6.7.0"', "chart", "preferChart", "left", "to", "the", "chart"]
    assert rows["/ui/message"] == ['"prod-eu-1', "in", 'eu"', "cluster", "-"]
    assert rows["/ui/color"] == ['"#34577c"', "module", "keepCurrent"]


def test_plan_json_carries_values_effective_and_decisions_per_cluster() -> None:
    result = CliRunner().invoke(cli, [*PLAN, "-o", "json"])
    assert result.exit_code == 0, result.output
    [plan] = json.loads(result.output)
    by_cluster = {v["cluster"]: v for v in plan["values"]}
    assert set(by_cluster) == {
        "prod-eu-1",
        "prod-us-2",
        "prod-ap-3",
        "prod-eu-4",
        "prod-us-5",
        "prod-ap-6",
        "prod-eu-7",
        "prod-us-8",
    }
    wave = by_cluster["prod-us-2"]
    assert wave["stage"] == "rest"
    assert wave["values"] == {
        "replicaCount": 2,
        "resources": {"limits": {"memory": "256Mi"}},
        "ui": {"color": "#34577c", "logo": "https://example.com/logo.png", "message": "prod-us-2 in us"},
    }
    assert wave["effective"]["image"] == {"tag": "6.7.0"}  # the chart's, not written
    assert wave["refusals"] == []


def test_plan_of_a_kustomize_module_has_no_values() -> None:
    result = CliRunner().invoke(
        cli, ["plan", "-f", str(EXAMPLES / "modules.yaml"), "--clusters", str(EXAMPLES / "clusters.yaml"), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert all(plan["values"] == [] for plan in json.loads(result.output))
