"""What `rollout status` prints (rollout_cli/views/status.py), from the documents the engine writes."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from rollout.wire.events import parse_event
from rollout.wire.status import ModuleStatus
from rollout_cli.views.status import status_renderable
from tests.rollout.builders import cluster, gate_result, given, module, stage

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
