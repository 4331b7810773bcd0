"""A Helm module end to end on the real broker: a real worker and a directory-sink applier
turn it into a HelmRepository + HelmRelease per cluster with that cluster's merged values;
a value observed live on a cluster (HelmValuesObserved, as an applier publishes it) is kept
per `keepCurrent` and the HelmRelease is rewritten with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from projections import crds
from rollout.wire.events import HelmValuesObserved
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration

MANIFESTS = """
apiVersion: rollout.dev/v1alpha1
kind: Cluster
metadata: {name: eu-1, namespace: fleet, labels: {region: eu, ring: canary}}
status: {controlPlaneReady: true, kubeconfigSecret: true}
---
apiVersion: rollout.dev/v1alpha1
kind: Cluster
metadata: {name: us-2, namespace: fleet, labels: {region: us}}
status: {controlPlaneReady: true, kubeconfigSecret: true}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: web, namespace: fleet}
spec:
  selector: {}
  sync:
    source: {helm: {url: https://stefanprodan.github.io/podinfo, chart: podinfo, version: 6.7.0}}
    package:
      helm:
        targetNamespace: web
        chartDefaults: {resources: {limits: {memory: 128Mi}}}
        values: {replicaCount: 2, image: {tag: 6.6.0}, ui: {color: blue}, resources: {limits: {memory: 256Mi}}}
        stageValues: {canary: {replicaCount: 1}}
        clusterValues: {ui: {message: "$(CLUSTER_NAME) in $(REGION)"}}
        valuesPolicy:
          - {path: /image/tag, policy: preferChart}
          - {path: /ui/color, policy: keepCurrent}
          - {path: /resources/limits/memory, policy: max}
  bindings:
    - {name: REGION, fromLabel: region}
  rollout:
    stages:
      - {name: canary, selector: {matchLabels: {ring: canary}}}
      - {name: rest}
"""


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("helm")
    stack = Stack(kafka_bootstrap, workdir)
    stack.start_worker()
    stack.start_applier("--simulate-status")
    manifests = workdir / "web.yaml"
    manifests.write_text(MANIFESTS)
    stack.apply(manifests)
    yield stack
    stack.stop()


def release(stack: Stack, cluster: str) -> dict[str, Any] | None:
    path = stack.out / f"proxy/{cluster}/web.yaml"
    if not path.exists():
        return None
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        crds.validate(document)  # the real Flux CRDs: raises SchemaError naming the field
    assert [d["kind"] for d in documents] == ["HelmRepository", "HelmRelease"]
    return documents[1]


def test_module_applied_becomes_a_helm_release_per_cluster_with_its_merged_values(stack: Stack) -> None:
    canary = wait_for("eu-1's HelmRelease", lambda: release(stack, "eu-1"))
    assert canary["spec"]["chart"]["spec"] == {
        "chart": "podinfo",
        "version": "6.7.0",
        "sourceRef": {"kind": "HelmRepository", "name": "web-eu-1"},
    }
    assert canary["spec"]["values"] == {
        "replicaCount": 1,
        "ui": {"color": "blue", "message": "eu-1 in eu"},
        "resources": {"limits": {"memory": "256Mi"}},
    }
    # the canary succeeds (simulated status): the rest stage follows with its own values
    rest = wait_for("us-2's HelmRelease", lambda: release(stack, "us-2"), timeout=90)
    assert rest["spec"]["values"]["replicaCount"] == 2
    assert rest["spec"]["values"]["ui"]["message"] == "us-2 in us"
    assert "image" not in rest["spec"]["values"]  # preferChart: left to the chart


def test_a_value_observed_on_the_cluster_is_kept_per_keep_current(stack: Stack) -> None:
    wait_for("us-2's HelmRelease", lambda: release(stack, "us-2"), timeout=90)
    observed = HelmValuesObserved(
        cluster="us-2", module="web", values={"ui": {"color": "red"}, "resources": {"limits": {"memory": "1Gi"}}}
    )
    stack.send("status", "us-2", observed)

    def kept() -> dict[str, Any] | None:
        document = release(stack, "us-2")
        return document if document and document["spec"]["values"]["ui"]["color"] == "red" else None

    values = wait_for("us-2's HelmRelease to keep the live colour", kept)["spec"]["values"]
    assert values["resources"]["limits"]["memory"] == "1Gi"  # max: the larger live value
    assert values["ui"]["message"] == "us-2 in us"
    other = release(stack, "eu-1")
    assert other is not None and other["spec"]["values"]["ui"]["color"] == "blue"  # only us-2 observed red


def test_plan_shows_the_layers_and_policies_of_the_applied_module(stack: Stack, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rollout_cli.main import cli

    manifests = tmp_path / "web.yaml"
    manifests.write_text(MANIFESTS)
    result = CliRunner().invoke(cli, ["plan", "-f", str(manifests), "-o", "json"], env=stack.env)
    assert result.exit_code == 0, result.output
    [plan] = yaml.safe_load(result.output)
    by_cluster = {v["cluster"]: v for v in plan["values"]}
    decisions = {d["path"]: (d["layer"], d["policy"]) for d in by_cluster["eu-1"]["decisions"]}
    assert decisions["/replicaCount"] == ("stage", None)
    assert decisions["/image/tag"] == ("chart", "preferChart")
    assert decisions["/resources/limits/memory"] == ("module", "max")
    assert decisions["/ui/message"] == ("cluster", None)


def test_report_values_publishes_live_values_and_prints_the_engines_verdict(stack: Stack, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rollout_cli.main import cli

    wait_for("eu-1's HelmRelease", lambda: release(stack, "eu-1"))
    live = tmp_path / "live.yaml"
    live.write_text("ui: {color: green, message: edited}\n")
    command = ["report-values", "--cluster", "eu-1", "-f", str(live), "--timeout", "30s"]
    result = CliRunner().invoke(cli, [*command, "--module", "web"], env=stack.env)
    assert result.exit_code == 0, result.output
    assert "eu-1/web: values observed accepted: eu-1: values observed on the cluster changed" in result.output

    def kept() -> dict[str, Any] | None:
        document = release(stack, "eu-1")
        return document if document and document["spec"]["values"]["ui"]["color"] == "green" else None

    values = wait_for("eu-1's HelmRelease to keep the reported colour", kept)["spec"]["values"]
    assert values["ui"]["message"] == "eu-1 in eu"  # no policy: the declared value stays
    refused = CliRunner().invoke(cli, [*command, "--module", "nope"], env=stack.env)
    assert refused.exit_code == 1 and "module 'nope' not found" in refused.output
    live.write_text("[not, a, mapping]\n")
    bad = CliRunner().invoke(cli, [*command, "--module", "web"], env=stack.env)
    assert bad.exit_code == 2 and "values must be one mapping" in bad.output


def test_status_shows_each_clusters_values_and_the_layer_that_decided_each_path(stack: Stack) -> None:
    from click.testing import CliRunner

    from rollout_cli.main import cli

    def kept() -> dict[str, Any] | None:
        document = release(stack, "us-2")
        return document if document and document["spec"]["values"]["ui"]["color"] == "red" else None

    wait_for("us-2's HelmRelease to keep the live colour", kept, timeout=90)
    result = CliRunner().invoke(cli, ["status", "web", "-o", "json"], env=stack.env)
    assert result.exit_code == 0, result.output
    rows = {row["cluster"]: row for row in yaml.safe_load(result.output)["values"]}
    assert rows["us-2"]["values"] == release(stack, "us-2")["spec"]["values"]  # type: ignore[index]
    decided = {d["path"]: (d["value"], d["layer"], d["policy"]) for d in rows["us-2"]["decisions"]}
    assert decided["/ui/color"] == ("red", "live", "keepCurrent")
    assert decided["/resources/limits/memory"] == ("1Gi", "live", "max")
    assert decided["/replicaCount"] == (2, "module", None)
    assert decided["/ui/message"] == ("us-2 in us", "cluster", None)
    assert rows["eu-1"]["stage"] == "canary" and rows["us-2"]["refused"] == []

    table = CliRunner().invoke(cli, ["status", "web"], env=stack.env)
    assert table.exit_code == 0, table.output
    assert "Values (what each cluster was sent" in table.output
    assert "/ui/color" in table.output and "keepCurrent" in table.output
