"""What `rollout status` prints (rollout_cli/views/status.py), from the documents the engine writes."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from rollout.wire.events import parse_event
from rollout.wire.status import ModuleStatus
from rollout_cli.views.status import status_renderable
from tests.rollout.builders import cluster, command, gate_result, given, module, stage

ERRORS = {"name": "errors", "prometheus": {"url": "http://prometheus:9090", "query": "error_rate", "max": 0.05}}


def printed(status: dict[str, Any]) -> str:
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(status), [], []))
    return console.export_text()


def test_status_says_why_a_gate_is_inconclusive() -> None:
    canary = {**stage("canary", {"ring": "canary"}), "gates": [ERRORS]}
    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", canary, stage("wave")))
    fleet.succeed("app", "c1")
    assert "gate errors not evaluated yet" in printed(fleet.status("app"))
    wire = gate_result("app", "canary", "errors", None, message="no samples").to_bytes()  # as the runner writes it
    fleet.send(parse_event(wire))
    assert "gate errors inconclusive: no samples" in printed(fleet.status("app"))


def test_status_shows_each_analysis_its_measurements_and_why_it_paused() -> None:
    analysis = {**ERRORS, "count": 3, "interval": "1m", "inconclusiveLimit": 1}
    dry = {**ERRORS, "name": "latency", "count": 2, "dryRun": True}
    canary = {**stage("canary", {"ring": "canary"}), "gates": [analysis, dry]}
    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", canary, stage("wave")))
    fleet.succeed("app", "c1")
    fleet.send(gate_result("app", "canary", "errors", True, run=1, measurement=1))
    fleet.send(gate_result("app", "canary", "latency", False, run=1, measurement=1, message="p99 2.1 > 1"))
    shown = printed(fleet.status("app"))
    assert "gate errors analysis running, 1/3 measured" in shown
    assert "gate latency analysis (dry run) failed, 1/2 measured: p99 2.1 > 1" in shown  # and holds nothing:
    rows = [" ".join(line.split()) for line in shown.splitlines()]
    assert "canary errors 1 1/3 every 1m 1 0 (limit 0) 0 (limit 1) Running" in rows
    assert "canary latency (dry run) 1 1/2 0 1 (limit 0) 0 (limit 0) Failed" in rows
    assert "Phase Soaking" in rows
    fleet.send(gate_result("app", "canary", "errors", None, run=1, measurement=2, message="no samples"))
    fleet.send(gate_result("app", "canary", "errors", None, run=1, measurement=3, message="no samples"))
    shown = printed(fleet.status("app"))
    assert (
        "Paused  gate errors of stage canary inconclusive: 2 inconclusive measurement(s) > inconclusiveLimit 1 "
        "(latest: no samples); `rollout resume app` measures it again"
    ) in shown


def test_status_says_a_blocked_module_waits_for_a_dependency_that_does_not_exist() -> None:
    fleet = given(cluster("c1"), module("app", {}, "v1", depends_on=["base"]))
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), [], [], known_modules={"app"}))
    assert "waiting for module base, which does not exist (1 cluster(s) blocked)" in console.export_text()


def test_status_wait_does_not_pass_a_module_that_deployed_nothing() -> None:
    from rollout_cli.reading.status_wait import judge, parse_condition, progress_line

    fleet = given(cluster("c1", ready=False), module("app", {}, "v1"))
    status = ModuleStatus.read(fleet.status("app"))
    assert judge(status, parse_condition("phase=Complete")) is None  # `--wait` waits on, then times out: exit 2
    assert progress_line(status).endswith("0/1 cluster(s) on v1 — waiting: 1 cluster not ready")
    assert "1 cluster not ready" in printed(fleet.status("app"))


def test_status_lists_who_the_run_went_on_without_and_why() -> None:
    from rollout.wire.status import TargetStatus
    from tests.rollout.builders import cluster_command, heartbeat

    hold = {"rollout.dev/hold": "true", "rollout.dev/hold-reason": "retail peak"}
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}, annotations=hold),
        cluster("w2", {"ring": "wave"}),
        cluster("w3", {"ring": "wave"}),
        cluster("w4", {"ring": "wave"}),
        module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave")),
    )
    fleet.send(heartbeat("w2", 30))
    fleet.wait(31)
    fleet.remove("w3")
    fleet.send(cluster_command("w4", "leave"))
    fleet.succeed("app", "c1")
    targets = [TargetStatus.read(v) for k, v in sorted(fleet.target_status.items()) if v is not None]
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), targets, []))
    text = console.export_text()
    assert "#1, rollout of generation 1, 5 member(s) fixed at its start" in text
    assert "1 left since" in text
    assert "SkippedOffline (1):\n  w2 (stage wave): its lease expired (no heartbeat from its applier)" in text
    assert "Held (1):\n  w1 (stage wave): held by its owner: retail peak" in text
    assert (
        "Left (2):\n  w4 (stage wave): it left the fleet (rollout cluster leave)\n"
        "  w3 (stage wave): removed from the fleet" in text
    )


def test_status_lists_late_joiners_kept_out_of_the_run_and_the_next_run_that_takes_them_in() -> None:
    from rollout.wire.status import TargetStatus

    def printed_run() -> str:
        targets = [TargetStatus.read(v) for k, v in sorted(fleet.target_status.items()) if v is not None]
        console = Console(width=400, record=True, file=io.StringIO())
        console.print(status_renderable(ModuleStatus.read(fleet.status("app")), targets, []))
        return console.export_text()

    stages = (stage("canary", {"ring": "canary"}), stage("wave"))
    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", *stages, late_joiners="NextRun"))
    fleet.send(cluster("w1", {"ring": "wave"}))  # joins mid-run
    text = printed_run()
    assert (
        "DeferredToNextRun (1):\n  w1 (stage wave): joined mid-run (lateJoiners: NextRun): the next run moves it"
        in text
    )
    fleet.succeed("app", "c1")  # the stages passed: the next run starts for w1
    text = printed_run()
    assert "#2, rollout of generation 1, 2 member(s) fixed at its start" in text
    assert "the next run for the 1 late joiner(s) deferred by the run before" in text
    assert "DeferredToNextRun" not in text


def test_status_lists_the_offline_members_a_stage_waits_for_and_until_when() -> None:
    from rollout.wire.status import TargetStatus
    from tests.rollout.builders import heartbeat

    stages = (stage("canary", {"ring": "canary"}), stage("wave"))
    fleet = given(cluster("c1", {"ring": "canary"}), cluster("w1", {"ring": "wave"}), heartbeat("w1", 30))
    fleet.apply(module("app", {}, "v1", *stages, offline={"wait": "10m"}))
    fleet.wait(31)
    fleet.succeed("app", "c1")  # the wave started at 1031: it waits for w1 until 1631
    targets = [TargetStatus.read(v) for k, v in sorted(fleet.target_status.items()) if v is not None]
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), targets, []))
    text = console.export_text()
    assert (
        "AwaitingReturn (1):\n  w1 (stage wave): its lease expired (no heartbeat from its applier); "
        "stage wave waits for it until 1970-01-01T00:27:11Z" in text
    )


def test_status_says_why_a_member_failed_by_its_offline_wait() -> None:
    from rollout.wire.status import TargetStatus
    from tests.rollout.builders import heartbeat

    stages = (stage("canary", {"ring": "canary"}), stage("wave", failures=1))
    fleet = given(cluster("c1", {"ring": "canary"}), cluster("w1", {"ring": "wave"}), heartbeat("w1", 30))
    fleet.apply(module("app", {}, "v1", *stages, offline={"wait": "5m", "then": "Fail"}))
    fleet.wait(31)
    fleet.succeed("app", "c1")
    fleet.wait(300)  # the wave's wait for w1 ran out: failed, within maxFailures
    targets = [TargetStatus.read(v) for k, v in sorted(fleet.target_status.items()) if v is not None]
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(status_renderable(ModuleStatus.read(fleet.status("app")), targets, []))
    text = console.export_text()
    assert (
        "Failed clusters:\n  w1: its lease expired (no heartbeat from its applier), past its stage's offline.wait"
        in text
    )


def test_status_shows_the_current_wave_and_when_the_next_starts() -> None:
    waves = {"size": 2, "seed": 7, "delay": "10m"}
    fleet = given(*[cluster(f"c{n}") for n in range(1, 6)], module("app", {}, "v1", stage("all", waves=waves)))
    shown = printed(fleet.status("app"))
    assert "Waves   stage all: wave 1/3 of 2 (seed 7, 10m apart)" in [line.rstrip() for line in shown.splitlines()]
    assert "waves of 2 (1/3)" in shown  # LIMITS
    fleet.succeed("app", *[t.cluster for t in fleet.targets.values() if t.category == "updating"])
    next_at = fleet.status("app")["stages"][0]["waves"]["nextWaveAt"]
    assert next_at == "1970-01-01T00:26:40Z"  # the wave was done at 1000.0 (the first tick), + 10m
    assert f"wave 1/3 of 2 (seed 7, 10m apart); next wave at {next_at}" in printed(fleet.status("app"))


def test_status_says_who_approved_how_many_more_are_needed_and_who_rejected() -> None:
    from tests.rollout.builders import command

    policy = {"required": 2, "groups": ["sre"]}
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1"),
        module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=policy)),
    )
    fleet.succeed("app", "c1")
    fleet.send(command("app", "approve", stage="wave", user="alice@example.com", via="dashboard", groups=["sre"]))
    shown = printed(fleet.status("app"))
    assert "wave: alice@example.com (dashboard); waiting for 1 more from sre" in shown
    assert "approvals 1/2" in shown
    fleet.send(command("app", "reject", stage="wave", user="carol", via="cli", reason="p99 doubled"))
    rejected = [line.split() for line in printed(fleet.status("app")).splitlines() if line.startswith("Rejected")]
    assert rejected == ["Rejected at stage wave by carol via cli: p99 doubled".split()]


def test_plan_says_how_many_verified_approvers_a_stage_waits_for() -> None:
    from rollout.planning.plan import plan_rollout
    from rollout_cli.views import plan as plan_view

    policy = {"required": 2, "groups": ["sre", "release-managers"]}
    manifest = module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", approval=policy))
    console = Console(width=400, record=True, file=io.StringIO())
    original, plan_view.terminal.console = plan_view.terminal.console, console
    try:
        plan_view.print_plan(plan_rollout(manifest, [cluster("c1", {"ring": "canary"}), cluster("w1")]))
    finally:
        plan_view.terminal.console = original
    assert "waits for approval by 2 distinct verified approvers from sre or release-managers" in console.export_text()


def test_status_shows_the_range_followed_a_command_hold_and_the_version_available_held() -> None:
    from tests.rollout.builders import promotion

    auto = {"semver": ">=1.0.0 <2.0.0"}
    fleet = given(cluster("c1"), module("app", {}, "1.0.0", stage("all"), auto_promote=auto))
    [line] = [line for line in printed(fleet.status("app")).splitlines() if line.startswith("Promotion")]
    assert line.split() == "Promotion follows >=1.0.0 <2.0.0 of git https://github.com/example/app".split()
    fleet.send(command("app", "hold-promotion", user="alice", via="cli", reason="incident 42"))
    fleet.send(promotion("app", "1.3.0", promoter="promoter-a"))
    [line] = [line for line in printed(fleet.status("app")).splitlines() if line.startswith("Promotion")]
    assert "; held by alice via cli: incident 42; 1.3.0 available, held (seen by promoter-a)" in line
    assert fleet.status("app")["promotion"]["available"] == "1.3.0"  # the JSON (`-o json`) carries it


def test_plan_says_a_module_auto_promotes_and_whether_its_manifest_holds_it() -> None:
    from rollout.planning.plan import plan_rollout
    from rollout_cli.views import plan as plan_view

    manifest = module("app", {}, "1.0.0", stage("all"), auto_promote={"semver": "~1.4", "hold": True})
    console = Console(width=400, record=True, file=io.StringIO())
    original, plan_view.terminal.console = plan_view.terminal.console, console
    try:
        plan_view.print_plan(plan_rollout(manifest, [cluster("c1")]))
    finally:
        plan_view.terminal.console = original
    assert (
        "auto-promotes: newer versions in ~1.4 of git https://github.com/example/app; held (autoPromote.hold)"
        in console.export_text()
    )


def test_status_names_the_freeze_calendars_holding_the_module_and_when_they_end() -> None:
    from datetime import datetime

    from tests.rollout.builders import freeze_calendar

    weekend = {"name": "weekend", "schedule": "0 16 * * 5", "duration": "64h", "timeZone": "Europe/Berlin"}
    friday = datetime.fromisoformat("2026-11-27T15:00:00+00:00").timestamp()
    fleet = given(
        freeze_calendar("weekends", weekend, namespace="fleet"),
        cluster("c1"),
        module("app", {}, "v1", stage("all")),
        at=friday,
    )
    frozen = [line.split() for line in printed(fleet.status("app")).splitlines() if line.startswith("Frozen")]
    assert frozen == ["Frozen by calendar fleet/weekends until 2026-11-30T07:00:00Z".split()]


def test_status_shows_an_active_break_glass_with_who_and_why() -> None:
    from datetime import datetime

    from tests.rollout.builders import command, freeze_calendar

    weekend = {"name": "weekend", "schedule": "0 16 * * 5", "duration": "64h", "timeZone": "Europe/Berlin"}
    friday = datetime.fromisoformat("2026-11-27T15:00:00+00:00").timestamp()
    fleet = given(freeze_calendar("weekends", weekend), cluster("c1"), module("app", {}, "v1", stage("all")), at=friday)
    fleet.send(command("app", "break-glass", reason="sev-1 fix", until=friday + 3600, user="bob", via="cli"))
    shown = [line.split() for line in printed(fleet.status("app")).splitlines() if line.startswith("Break-glass")]
    assert shown == [
        "Break-glass every freeze calendar overridden until 2026-11-27T16:00:00Z by bob via cli: sev-1 fix".split()
    ]


def test_status_counts_a_release_members_clusters_waiting_for_the_other_members() -> None:
    shop = ("shop", ["web", "api"])
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        module("web", {}, "v1", stage("canary", {"ring": "canary"}), release=shop),
        module("api", {}, "v1", stage("canary", {"ring": "canary"}), release=shop),
    )
    fleet.succeed("web", "c1")  # on its target; api still updates there
    lines = printed(fleet.status("web")).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("STAGE"))
    row = next(line for line in lines if line.lstrip().startswith("canary"))
    column = header.index("AWAITING RELEASE")
    assert column < header.index("PINNED") and row[column] == "1"  # web on c1, waiting for api there
    assert "AWAITING" not in printed(module_status_without_release())


def module_status_without_release() -> dict[str, Any]:
    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", stage("canary", {"ring": "canary"})))
    return fleet.status("app")


def test_status_shows_a_release_promoted_as_a_unit_its_hold_and_the_combination_available() -> None:
    from tests.rollout.test_release_promotions import observed, shop

    fleet = shop()
    fleet.send(command("api", "hold-promotion", user="alice", via="cli", reason="incident 7"))
    fleet.send(observed(promoter="promoter-a", web="1.1.0", api="2.2.0"))
    [line] = [
        " ".join(line.split()) for line in printed(fleet.status("api")).splitlines() if "Release promotion" in line
    ]
    assert line == (
        "Release promotion as a unit: web >=1.0.0 <2.0.0, api ^2.0.0 — decided by api; held by alice via cli: "
        "incident 7; available api 2.2.0, web 1.1.0, held (seen by promoter-a)"
    )
    [other] = [
        " ".join(line.split()) for line in printed(fleet.status("web")).splitlines() if "Release promotion" in line
    ]
    assert other.endswith("decided by api (its hold and what is available: rollout status api)")
    document = fleet.status("api")["release"]["autoPromote"]  # the JSON (`-o json`) carries it
    assert document["available"] == {"api": "2.2.0", "web": "1.1.0"} and document["heldBy"]["user"] == "alice"
