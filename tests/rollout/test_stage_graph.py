"""Stage graphs (docs/rollout-semantics.md, "Stage graphs"): one given/when/then test per
rule. A stage may follow several upstream stages (`after`), with a quorum (`All`, `OneOf`,
`N%`) and a soak per edge; stages whose quorum counts run at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rollout.api.loading import ManifestError, load_manifests
from rollout.engine.state import ModuleRecord
from rollout.wire.decision_reasons import StageWaiting
from rollout.wire.status import ModuleStatus
from tests.rollout.builders import Fleet, cluster, gate_result, given, module, removed, stage

# canary, then eu and us at once, then prod; one member each but two in eu and us
MEMBERS = {
    "can-1": "canary",
    "eu-1": "eu",
    "eu-2": "eu",
    "us-1": "us",
    "us-2": "us",
    "prod-1": "prod",
}


def after(*upstreams: str | tuple[str, str]) -> list[dict[str, str]]:
    """`after` edges: a name, or (name, soak)."""
    return [{"stage": u} if isinstance(u, str) else {"stage": u[0], "soak": u[1]} for u in upstreams]


def graph(tag: str = "v1", *, prod: dict[str, Any] | None = None, on_failure: str | None = None, **regions: Any) -> Any:
    """canary → {eu, us} → prod; `regions` extra fields for eu and us, `prod` for prod."""
    stages = [
        stage("canary", {"ring": "canary"}),
        {**stage("eu", {"ring": "eu"}), "after": after("canary"), **regions},
        {**stage("us", {"ring": "us"}), "after": after("canary"), **regions},
        {**stage("prod", {"ring": "prod"}), "after": after("eu", "us"), **(prod or {})},
    ]
    return module("app", {}, tag, *stages, on_failure=on_failure)


def fleet_of(*manifests: Any, at: float | None = 1_000.0) -> Fleet:
    return given(*[cluster(name, {"ring": ring}) for name, ring in MEMBERS.items()], *manifests, at=at)


def updating(fleet: Fleet) -> list[str]:
    return sorted(name for name in fleet.clusters if fleet.category("app", name) == "updating")


def roll_out(fleet: Fleet, tag: str) -> None:
    """Every member reports success as it is moved, until the rollout is through."""
    while updating(fleet):
        fleet.succeed_all("app", tag)


def started(fleet: Fleet) -> list[str]:
    return [d.because.stage for d in fleet.decisions if d.action == "stage-started"]  # type: ignore[attr-defined]


def waits(fleet: Fleet) -> list[StageWaiting]:
    return [d.because for d in fleet.decisions if d.action == "stage-waiting"]  # type: ignore[misc]


def stage_status(fleet: Fleet, name: str) -> Any:
    status = ModuleStatus.read(fleet.status("app"))
    return next(s for s in status.stages if s.name == name)


# --- the graph's shape --------------------------------------------------------------------


def test_a_strategy_without_after_runs_its_stages_in_list_order_and_stores_no_graph() -> None:
    stages = [stage("canary", {"ring": "canary"}), stage("eu", {"ring": "eu"}), stage("rest")]
    fleet = fleet_of(module("app", {}, "v1", *stages))
    assert updating(fleet) == ["can-1"]
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["eu-1", "eu-2"]
    record = fleet.record("app")
    assert record.graph == {}
    assert "graph" not in record.model_dump(mode="json")  # stored as the release before stored it
    assert stage_status(fleet, "eu").after is None  # status shows no graph for a chain


def test_two_stages_after_the_canary_run_at_once() -> None:
    fleet = fleet_of(graph())
    assert updating(fleet) == ["can-1"]
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["eu-1", "eu-2", "us-1", "us-2"]
    assert started(fleet) == ["canary", "eu", "us"]
    assert stage_status(fleet, "eu").state == stage_status(fleet, "us").state == "Running"


def test_a_stage_after_several_upstreams_waits_for_all_of_them_by_default() -> None:
    fleet = fleet_of(graph())
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2")
    assert updating(fleet) == ["us-1", "us-2"]  # prod waits for us
    fleet.succeed("app", "us-1", "us-2")
    assert updating(fleet) == ["prod-1"]
    fleet.succeed("app", "prod-1")
    assert fleet.phase("app") == "Complete"


def test_a_one_of_stage_starts_after_any_one_upstream() -> None:
    fleet = fleet_of(graph(prod={"quorum": "OneOf"}))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "us-1", "us-2")
    assert updating(fleet) == ["eu-1", "eu-2", "prod-1"]  # eu still runs beside prod
    fleet.succeed("app", "prod-1")
    assert fleet.phase("app") == "Progressing"  # complete only once every stage passed
    fleet.succeed("app", "eu-1", "eu-2")
    assert fleet.phase("app") == "Complete"


def test_a_percent_quorum_counts_upstream_stages_rounded_up() -> None:
    stages = [
        stage("a", {"ring": "canary"}),
        {**stage("b", {"ring": "eu"}), "after": []},
        {**stage("c", {"ring": "us"}), "after": []},
        {**stage("d", {"ring": "prod"}), "after": after("a", "b", "c"), "quorum": "50%"},
    ]
    fleet = fleet_of(module("app", {}, "v1", *stages))
    assert updating(fleet) == ["can-1", "eu-1", "eu-2", "us-1", "us-2"]  # three roots at once
    fleet.succeed("app", "can-1")
    assert "prod-1" not in updating(fleet)  # 1 of 3 is below 50 %: two are needed
    fleet.succeed("app", "eu-1", "eu-2")
    assert "prod-1" in updating(fleet)
    assert stage_status(fleet, "d").needed == 2


def test_an_edge_soak_holds_the_downstream_for_that_long_in_tick_time() -> None:
    prod = {"after": after(("eu", "30m"), "us")}
    fleet = fleet_of(graph(prod=prod))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2", "us-1", "us-2")
    assert updating(fleet) == []
    fleet.wait(1799)
    assert updating(fleet) == []
    fleet.wait(1)
    assert updating(fleet) == ["prod-1"]


def test_an_edge_soak_of_a_stage_passed_before_the_first_tick_counts_from_it() -> None:
    fleet = fleet_of(graph(prod={"after": after(("eu", "10m"), "us")}), at=None)
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2", "us-1", "us-2")
    fleet.tick(50_000.0)  # the first tick: the soak starts now, not at time 0
    assert updating(fleet) == []
    fleet.tick(50_000.0 + 599)
    assert updating(fleet) == []
    fleet.tick(50_000.0 + 600)
    assert updating(fleet) == ["prod-1"]


def test_a_stage_waiting_on_its_upstreams_says_which_it_misses_and_which_edge_soaks() -> None:
    fleet = fleet_of(graph(prod={"after": after(("eu", "30m"), "us")}))
    fleet.succeed("app", "can-1")
    assert waits(fleet) == []  # nothing upstream of prod passed: it is simply Pending
    fleet.succeed("app", "eu-1", "eu-2")
    (wait,) = waits(fleet)
    assert (wait.stage, wait.quorum, wait.needed, wait.missing) == ("prod", "All", 2, ["us"])
    assert [(e.upstream, e.until) for e in wait.soaking] == [("eu", fleet.now + 1800)]
    fleet.wait(60)
    assert len(waits(fleet)) == 1  # the same wait is said once
    edges = {edge.stage: edge for edge in stage_status(fleet, "prod").after or []}
    assert edges["eu"].passed and not edges["eu"].counts and edges["eu"].soak_until == wait.soaking[0].until
    assert not edges["us"].passed and not edges["us"].counts
    fleet.succeed("app", "us-1", "us-2")
    latest = waits(fleet)[-1]
    assert (latest.missing, latest.counting, [e.upstream for e in latest.soaking]) == ([], ["us"], ["eu"])


def test_status_shows_each_stages_upstreams_quorum_and_whether_each_edge_counts() -> None:
    fleet = fleet_of(graph(prod={"quorum": "OneOf"}))
    fleet.succeed("app", "can-1")
    prod = stage_status(fleet, "prod")
    assert (prod.state, prod.quorum, prod.needed) == ("Pending", "OneOf", 1)
    assert [(e.stage, e.passed, e.counts) for e in prod.after or []] == [("eu", False, False), ("us", False, False)]
    eu = stage_status(fleet, "eu")
    assert [(e.stage, e.counts) for e in eu.after or []] == [("canary", True)]
    body = fleet.status("app")
    edge = next(s for s in body["stages"] if s["name"] == "prod")["after"][0]
    assert set(edge) >= {"stage", "passed", "counts"}  # the JSON names


# --- what runs per stage ------------------------------------------------------------------


def test_each_running_stage_moves_within_its_own_max_concurrency() -> None:
    fleet = fleet_of(graph(maxConcurrency=1))
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["eu-1", "us-1"]  # one of eu and one of us, at once


def test_a_running_stage_outside_its_window_waits_while_the_stage_beside_it_moves() -> None:
    evenings = {"schedule": "0 22 * * 1-5", "duration": "4h", "timeZone": "Europe/Berlin"}
    monday_20h_utc = datetime(2026, 3, 2, 20, 0, tzinfo=UTC).timestamp()  # 21:00 in Berlin
    stages = [
        stage("canary", {"ring": "canary"}),
        {**stage("eu", {"ring": "eu"}), "after": after("canary"), "windows": [evenings]},
        {**stage("us", {"ring": "us"}), "after": after("canary")},
    ]
    fleet = fleet_of(module("app", {}, "v1", *stages), at=monday_20h_utc)
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["us-1", "us-2"]  # eu waits for its window, us moves
    assert [d.because.stage for d in fleet.decisions if d.action == "awaiting-window"] == ["eu"]  # type: ignore[attr-defined]
    fleet.tick(monday_20h_utc + 3600)  # 22:00 in Berlin: eu's window opens
    assert updating(fleet) == ["eu-1", "eu-2", "us-1", "us-2"]


def test_a_stage_done_with_failures_within_max_failures_counts_for_its_downstream() -> None:
    fleet = fleet_of(graph(maxFailures=1))
    fleet.succeed("app", "can-1")
    fleet.fail("app", "eu-1")
    fleet.succeed("app", "eu-2", "us-1", "us-2")
    assert updating(fleet) == ["prod-1"]
    assert stage_status(fleet, "eu").state == "Succeeded"


def test_a_stage_over_its_failure_budget_halts_every_running_stage() -> None:
    fleet = fleet_of(graph(maxConcurrency=1))
    fleet.succeed("app", "can-1")
    fleet.fail("app", "eu-1")
    assert fleet.phase("app") == "Halted"
    fleet.succeed("app", "us-1")
    assert updating(fleet) == []  # us does not move on while the module is halted
    assert fleet.category("app", "us-2") == "pending"


def test_rollback_returns_the_clusters_of_every_started_stage() -> None:
    fleet = fleet_of(graph())
    roll_out(fleet, "v1")
    fleet.apply(graph("v2", on_failure="Rollback"))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1")
    fleet.fail("app", "us-1")  # over us's budget: roll back
    assert fleet.record("app").mode == "rollback"
    assert {name: fleet.revision("app", name) for name in MEMBERS} == dict.fromkeys(MEMBERS, "v1")


def test_halt_by_command_stops_every_stage_and_resume_goes_on_where_each_was() -> None:
    fleet = fleet_of(graph(maxConcurrency=1))
    fleet.succeed("app", "can-1")
    fleet.pause("app")
    fleet.succeed("app", "eu-1", "us-1")
    assert updating(fleet) == []
    fleet.resume("app")
    assert updating(fleet) == ["eu-2", "us-2"]


def test_a_stage_whose_quorum_counts_still_waits_for_its_own_approval() -> None:
    fleet = fleet_of(graph(prod={"requireApproval": True}))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2", "us-1", "us-2")
    assert updating(fleet) == []
    assert fleet.phase("app") == "AwaitingApproval"
    assert stage_status(fleet, "prod").state == "AwaitingApproval"
    assert fleet.actions("app").count("awaiting-approval") == 1
    fleet.approve("app", "prod")
    assert updating(fleet) == ["prod-1"]


def test_an_approval_of_a_stage_not_yet_reached_is_kept_for_it() -> None:
    fleet = fleet_of(graph(prod={"requireApproval": True}))
    fleet.approve("app", "prod")
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2", "us-1", "us-2")
    assert updating(fleet) == ["prod-1"]


def test_concurrent_stages_with_waves_keep_their_own_waves() -> None:
    fleet = fleet_of(graph(waves={"size": 1, "seed": 3}))
    fleet.succeed("app", "can-1")
    assert len(updating(fleet)) == 2  # one wave of one member in eu, and one in us
    opened = [d.because.stage for d in fleet.decisions if d.action == "wave-started"]  # type: ignore[attr-defined]
    assert sorted(opened) == ["eu", "us"]
    fleet.succeed("app", *updating(fleet))
    assert len(updating(fleet)) == 2  # each stage's second wave
    fleet.succeed("app", *updating(fleet))
    assert updating(fleet) == ["prod-1"]


def test_the_gates_of_concurrent_stages_are_each_measured_while_the_stage_runs() -> None:
    gate = {"name": "errors", "webhook": {"url": "http://gates.test/errors"}}
    fleet = fleet_of(graph(gates=[gate]))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2", "us-1", "us-2")
    assert stage_status(fleet, "eu").state == "Soaking"
    fleet.send(gate_result("app", "eu", "errors", True, generation=1))
    assert updating(fleet) == []  # us's gate has not passed
    fleet.send(gate_result("app", "us", "errors", True, generation=1))
    assert updating(fleet) == ["prod-1"]


def test_running_stages_keep_the_members_fixed_when_their_run_started() -> None:
    fleet = fleet_of(graph(maxConcurrency="50%"))
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["eu-1", "us-1"]  # 50 % of two
    fleet.send(removed("eu-2"))
    fleet.succeed("app", "eu-1")
    assert fleet.run("app")["stages"]["eu"] == {"members": 2, "left": 1}
    assert stage_status(fleet, "eu").max_concurrency == 1  # still resolved against two members
    fleet.succeed("app", "us-1", "us-2")
    assert updating(fleet) == ["prod-1"]


def test_a_new_revision_runs_the_graph_again_from_its_roots() -> None:
    fleet = fleet_of(graph())
    roll_out(fleet, "v1")
    assert fleet.phase("app") == "Complete"
    fleet.apply(graph("v2"))
    assert updating(fleet) == ["can-1"]
    assert set(fleet.record("app").graph) <= {"canary"}


def test_a_chain_respecified_as_a_graph_mid_run_goes_on_where_it_was() -> None:
    chain = [stage("canary", {"ring": "canary"}), stage("eu", {"ring": "eu"}), stage("us", {"ring": "us"})]
    fleet = fleet_of(module("app", {}, "v1", *chain, stage("prod", {"ring": "prod"})))
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["eu-1", "eu-2"]
    fleet.apply(graph())  # the same revision, now a graph: us may run beside eu
    assert updating(fleet) == ["eu-1", "eu-2", "us-1", "us-2"]


def test_a_graph_respecified_as_a_chain_mid_run_goes_on_at_its_first_stage_not_passed() -> None:
    fleet = fleet_of(graph())
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "us-1", "us-2")
    assert updating(fleet) == ["eu-1", "eu-2"]
    chain = [stage("canary", {"ring": "canary"}), stage("eu", {"ring": "eu"}), stage("us", {"ring": "us"})]
    fleet.apply(module("app", {}, "v1", *chain, stage("prod", {"ring": "prod"})))  # the same revision, a chain
    record = fleet.record("app")
    assert (record.graph, record.stage_index, record.stage_started) == ({}, 1, True)  # eu, as it was
    fleet.succeed("app", "eu-1", "eu-2")
    assert updating(fleet) == ["prod-1"]  # us ran already: it passes at once
    fleet.succeed("app", "prod-1")
    assert fleet.phase("app") == "Complete"


def test_an_upstream_may_come_later_in_the_list_than_its_downstream() -> None:
    stages = [
        {**stage("prod", {"ring": "prod"}), "after": after("canary")},
        {**stage("canary", {"ring": "canary"}), "after": []},
    ]
    fleet = given(
        cluster("can-1", {"ring": "canary"}), cluster("prod-1", {"ring": "prod"}), module("app", {}, "v1", *stages)
    )
    assert updating(fleet) == ["can-1"]
    fleet.succeed("app", "can-1")
    assert updating(fleet) == ["prod-1"]


def test_records_with_a_graph_read_back_as_written() -> None:
    fleet = fleet_of(graph(prod={"after": after(("eu", "5m"), "us")}))
    fleet.succeed("app", "can-1", "eu-1", "eu-2")
    record = fleet.record("app")
    assert ModuleRecord.model_validate_json(record.model_dump_json()) == record
    fleet.restart()
    fleet.succeed("app", "us-1", "us-2")
    fleet.wait(300)
    assert updating(fleet) == ["prod-1"]


# --- manifests ----------------------------------------------------------------------------

MANIFEST = """apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: podinfo, namespace: fleet}
spec:
  selector: {}
  sync: {source: {git: {url: https://github.com/stefanprodan/podinfo, version: {tag: 6.7.0}}}}
  rollout:
    stages:
STAGES"""


def problem_of(*stages: str) -> str:
    """The one problem of the manifest with `stages` (one flow mapping each)."""
    text = MANIFEST.replace("STAGES", "".join(f"      - {line}\n" for line in stages))
    with pytest.raises(ManifestError) as error:
        load_manifests(text.encode(), file="app.yaml")
    (problem,) = error.value.problems
    assert (problem.file, problem.document, problem.identity) == ("app.yaml", 1, "Module/podinfo")
    return f"{problem.field}: {problem.reason}"


def test_a_manifest_whose_stage_follows_an_unknown_stage_is_refused_naming_it() -> None:
    found = problem_of("{name: canary}", "{name: prod, after: [{stage: cannary}]}")
    assert found.startswith("spec.rollout: ")
    assert "stages[1] (prod).after[0]: no stage 'cannary' in this rollout (stages: canary)" in found


def test_a_manifest_whose_stage_follows_itself_is_refused() -> None:
    found = problem_of("{name: canary}", "{name: prod, after: [{stage: prod}]}")
    assert "stages[1] (prod).after[0]: a stage cannot follow itself" in found


def test_a_manifest_with_a_cycle_of_stages_is_refused_naming_the_cycle() -> None:
    stages = ("{name: canary}", "{name: eu, after: [{stage: us}]}", "{name: us, after: [{stage: eu}]}")
    assert "the stage graph has a cycle: eu -> us -> eu" in problem_of(*stages)


def test_a_manifest_whose_graph_has_no_root_is_refused() -> None:
    assert "the stage graph has no root" in problem_of("{name: canary, after: [{stage: prod}]}", "{name: prod}")


def test_a_manifest_with_a_quorum_but_no_after_is_refused() -> None:
    assert "stages[1] (prod).quorum needs after" in problem_of("{name: canary}", "{name: prod, quorum: OneOf}")


@pytest.mark.parametrize("quorum", ["0%", "101%", "Some", "2"])
def test_a_quorum_that_is_not_all_one_of_or_a_percentage_is_refused(quorum: str) -> None:
    found = problem_of("{name: canary}", f"{{name: prod, after: [{{stage: canary}}], quorum: '{quorum}'}}")
    assert found.startswith("spec.rollout.stages[1].quorum: ") and "All, OneOf or a percentage" in found


def test_an_edge_soak_that_is_not_a_duration_is_refused_at_its_field() -> None:
    found = problem_of("{name: canary}", "{name: prod, after: [{stage: canary, soak: soon}]}")
    assert found.startswith("spec.rollout.stages[1].after[0].soak: ")


# --- where users look ---------------------------------------------------------------------


def test_status_prints_which_upstreams_a_waiting_stage_has_and_which_edge_soaks() -> None:
    import io

    from rich.console import Console

    from rollout_cli.views.status import status_renderable

    fleet = fleet_of(graph(prod={"after": after(("eu", "30m"), "us")}))
    fleet.succeed("app", "can-1")
    fleet.succeed("app", "eu-1", "eu-2")
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), [], []))
    text = console.export_text()
    until = stage_status(fleet, "prod").after[0].soak_until_at
    assert until is not None
    assert f"stage prod: eu passed, soaking until {until}; waiting for us (0 of 2 needed, quorum All)" in text
    assert "after eu+us (All)" in text  # LIMITS


def test_status_names_every_stage_running_side_by_side() -> None:
    import io

    from rich.console import Console

    from rollout_cli.views.status import status_renderable

    fleet = fleet_of(graph())
    fleet.succeed("app", "can-1")
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), [], []))
    lines = [line.split() for line in console.export_text().splitlines()]
    assert ["Stage", "eu,", "us", "(side", "by", "side)"] in lines
    assert fleet.status("app")["currentStage"] == "eu"  # the document's one current stage: the first under way


def test_plan_shows_which_stage_waits_for_which_with_quorum_and_soak(tmp_path: Any) -> None:
    import json

    import yaml
    from click.testing import CliRunner

    from rollout_cli.main import cli

    manifest = graph(prod={"after": after(("eu", "30m"), "us"), "quorum": "OneOf"})
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(manifest.model_dump(mode="json", by_alias=True)))
    documents = [cluster(name, {"ring": ring}).model_dump(mode="json", by_alias=True) for name, ring in MEMBERS.items()]
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump_all(documents))
    command = ["plan", "-f", str(tmp_path / "app.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    result = CliRunner().invoke(cli, [*command, "-o", "json"])
    assert result.exit_code == 0, result.output
    [plan] = json.loads(result.output)
    prod = plan["stages"][3]
    assert prod["after"] == [{"stage": "eu", "soak": "30m"}, {"stage": "us", "soak": None}]
    assert (prod["quorum"], prod["needed"]) == ("OneOf", 1)
    assert plan["stages"][0]["after"] == []  # the canary: a root
    text = CliRunner().invoke(cli, command).output
    assert "a root: starts when the rollout starts" in text
    assert "after eu (then soaks 30m), us: starts once 1 of 2 passed (quorum OneOf)" in text
