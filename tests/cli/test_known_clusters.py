"""The fleet as the CLI reads it from the cluster-observations topic (rollout_cli/reading/,
`KnownCluster`): a cluster's manifest stays a ClusterManifest after `rollout cluster
leave`/`join` — `status`, `apply` and `plan` read it as such — and whether it left is kept
beside it, not inside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from infra.client import Record
from infra.topics import TopicNames
from rollout.api.loading import Loaded
from rollout.wire.events import ClusterCommanded, ClusterObserved, EventBase, ModuleApplied
from rollout_cli.main import cli
from rollout_cli.options import Context
from rollout_cli.publishing import applying
from rollout_cli.reading.known_clusters import clusters_from_records
from rollout_cli.reading.status_screen import gather_status
from rollout_cli.reading.status_values import module_values
from tests.rollout.builders import cluster, given, module, stage
from tests.rollout.test_helm_releases import helm_module

CANARY = {"ring": "canary"}


def records(topic: str, *keyed: tuple[str, EventBase]) -> list[Record]:
    return [Record(topic, 0, offset, key, event.to_bytes()) for offset, (key, event) in enumerate(keyed)]


def left_and_back(name: str = "c1", *, joined: bool = False) -> list[Record]:
    """c1 (canary) and w1 observed, then `rollout cluster leave c1` (and `join c1`)."""
    events: list[tuple[str, EventBase]] = [
        (name, ClusterObserved(cluster=cluster(name, CANARY))),
        ("w1", ClusterObserved(cluster=cluster("w1"))),
        (name, ClusterCommanded(cluster=name, command="leave")),
    ]
    if joined:
        events.append((name, ClusterCommanded(cluster=name, command="join")))
    return records(TopicNames("t.").clusters, *events)


class TopicsRead:
    """A Context whose topics are given, for the CLI's readers."""

    def __init__(self, by_topic: dict[str, list[Record]], latest: dict[str, dict[str, Any]]) -> None:
        self.topics = TopicNames("t.")
        self.by_topic = by_topic
        self.latest_by_topic = latest

    def records(self, topic: str) -> list[Record]:
        return self.by_topic.get(topic, [])

    def latest(self, topic: str) -> dict[str, Any]:
        return self.latest_by_topic.get(topic, {})


def test_a_left_cluster_keeps_its_manifest_and_says_it_left() -> None:
    known = clusters_from_records(left_and_back())
    assert known["c1"].left and not known["w1"].left
    assert known["c1"].manifest == cluster("c1", CANARY).model_dump(mode="json", by_alias=True, exclude_none=True)
    observed_again = records(TopicNames("t.").clusters, ("c1", ClusterObserved(cluster=cluster("c1", CANARY))))
    assert clusters_from_records(left_and_back() + observed_again)["c1"].left  # as the engine keeps it


def test_status_of_a_helm_module_after_a_cluster_left_shows_its_values() -> None:
    podinfo = helm_module(values={"replicaCount": 2}, bindings=False)
    fleet = given(cluster("c1", CANARY), cluster("w1"), podinfo)
    topics = TopicNames("t.")
    sent = {
        "spec": {
            "syncs": [
                {"module": "podinfo", "generation": 1, "sync": {"package": {"helm": {"values": {"replicaCount": 2}}}}}
            ]
        }
    }
    ctx = TopicsRead(
        {
            topics.clusters: left_and_back(),
            topics.intents: records(topics.intents, ("podinfo", ModuleApplied(module=podinfo))),
        },
        {topics.module_status: {"podinfo": fleet.status("podinfo")}, topics.proxy: {"c1": sent}},
    )
    status, renderable = gather_status(ctx, "podinfo", 10)  # no "fleet: Extra inputs are not permitted"
    assert status is not None and renderable is not None
    [row] = module_values(ctx, "podinfo", status, []) or []
    assert row["cluster"] == "c1" and row["decisions"] == [
        {"path": "/replicaCount", "value": 2, "layer": "module", "policy": None, "emitted": True}
    ]


def loaded(manifest: Any) -> Loaded:
    return Loaded(file="fleet.yaml", document=1, manifest=manifest)


def test_reapplying_an_unchanged_cluster_after_leave_and_join_is_unchanged() -> None:
    fleet = clusters_from_records(left_and_back(joined=True))
    assert applying.cluster_changes([loaded(cluster("c1", CANARY))], fleet) == {"cluster/c1": "unchanged"}


def test_apply_does_not_warn_that_a_stage_gets_none_of_the_clusters_after_one_left() -> None:
    app = module("app", {}, "v1", stage("canary", CANARY), stage("rest"))
    assert applying.fleet_warnings([app], clusters_from_records(left_and_back())) == []


def test_plan_lists_a_left_cluster_in_its_stage_as_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    app = module("app", {}, "v1", stage("canary", CANARY), stage("rest"))
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(app.model_dump(mode="json", by_alias=True, exclude_none=True)))
    on_topics = {TopicNames("t.").clusters: left_and_back()}
    monkeypatch.setattr(Context, "records", lambda self, topic: on_topics.get(topic, []))
    monkeypatch.setattr(Context, "latest", lambda self, topic: {})  # no module status (break-glass) yet
    result = CliRunner().invoke(
        cli, ["plan", "-f", str(path), "-o", "json", "--bootstrap-servers", "unused:9092", "--topic-prefix", "t."]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)[0]
    canary = plan["stages"][0]
    assert canary["batches"] == [] and canary["skipped_not_ready"] == ["c1"]
    assert plan["not_selected"] == 0


def test_plan_lists_a_held_cluster_in_its_stage_as_held(capsys: pytest.CaptureFixture[str]) -> None:
    from rollout.planning.plan import plan_rollout
    from rollout_cli.views.plan import print_plan
    from tests.rollout.builders import cluster

    hold = {"rollout.dev/hold": "true", "rollout.dev/hold-reason": "peak season"}
    app = module("app", {}, "v1", stage("canary", CANARY), stage("rest"))
    fleet = [cluster("c1", CANARY), cluster("r1", {"ring": "rest"}, annotations=hold), cluster("r2", {"ring": "rest"})]
    plan = plan_rollout(app, fleet)  # type: ignore[arg-type]
    rest = plan.stages[1]
    assert (rest.batches, rest.held, rest.skipped_not_ready) == ([["r2"]], {"r1": "peak season"}, [])
    print_plan(plan)
    printed = capsys.readouterr().out
    assert "held by its owner: r1 (peak season)" in printed
    assert "run: 3 member(s) fixed when it starts" in printed


def test_plan_says_what_the_run_does_with_clusters_joining_mid_run(capsys: pytest.CaptureFixture[str]) -> None:
    from rollout.planning.plan import plan_rollout
    from rollout_cli.views.plan import print_plan
    from tests.rollout.builders import cluster

    app = module("app", {}, "v1", stage("canary", CANARY), stage("rest"), late_joiners="NextRun")
    plan = plan_rollout(app, [cluster("c1", CANARY)])  # type: ignore[arg-type]
    assert plan.late_joiners == "NextRun"
    print_plan(plan)
    assert "clusters joining mid-run wait for the next run (lateJoiners: NextRun" in capsys.readouterr().out
