"""Health gates (docs/rollout-semantics.md, "Health gates"): one given/when/then test per
rule. The gate runner's results arrive as GateEvaluated events."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.manifests import Stage
from tests.rollout.builders import cluster, gate_result, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
ERRORS = {"name": "errors", "prometheus": {"url": "http://prometheus:9090", "query": "error_rate", "max": 0.05}}


def app(tag: str = "v1", *, soak: str | None = None, on_failure: str | None = None, gates: Any = None):
    canary = {**stage("canary", CANARY, soak=soak), "gates": [ERRORS] if gates is None else gates}
    return module("app", {}, tag, canary, stage("wave", WAVE), on_failure=on_failure)


def canary_done(**kwargs: Any):
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(**kwargs))
    fleet.succeed("app", "c1")
    return fleet


def test_stage_with_a_gate_waits_for_it_to_pass() -> None:
    fleet = canary_done()
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None
    fleet.send(gate_result("app", "canary", "errors", True))
    assert fleet.revision("app", "w1") == "v1"
    assert "gate-passed" in fleet.actions("app")


def test_gate_must_pass_for_the_soak_duration() -> None:
    fleet = canary_done(soak="5m")
    fleet.wait(60)
    fleet.send(gate_result("app", "canary", "errors", True))  # passing from T0+60
    fleet.wait(240)
    fleet.send(gate_result("app", "canary", "errors", True))  # still passing: the run goes on
    assert fleet.revision("app", "w1") is None  # the stage's own soak is over, the gate's not
    fleet.wait(60)
    assert fleet.revision("app", "w1") == "v1"


def test_inconclusive_result_keeps_the_stage_waiting_without_failing() -> None:
    fleet = canary_done()
    fleet.send(gate_result("app", "canary", "errors", None, message="no samples"))
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None


def test_failing_gate_halts_the_rollout() -> None:
    fleet = canary_done()
    fleet.send(gate_result("app", "canary", "errors", False, message="error_rate 0.2 above max 0.05"))
    assert fleet.phase("app") == "Halted"
    assert fleet.decisions[-1].reason == ("halted: gate errors of stage canary failed: error_rate 0.2 above max 0.05")


def test_failing_gate_rolls_back_with_on_failure_rollback() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app("v1", on_failure="Rollback"))
    fleet.succeed("app", "c1")
    fleet.send(gate_result("app", "canary", "errors", True))
    fleet.succeed("app", "w1")
    fleet.apply(app("v2", on_failure="Rollback"))
    fleet.succeed("app", "c1")
    fleet.send(gate_result("app", "canary", "errors", False, generation=2))
    assert fleet.phase("app") in ("RollingBack", "RolledBack") and fleet.revision("app", "c1") == "v1"


def test_after_a_resume_the_gate_must_pass_again() -> None:
    fleet = canary_done()
    fleet.send(gate_result("app", "canary", "errors", False))
    fleet.resume("app")
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None
    fleet.send(gate_result("app", "canary", "errors", False))
    assert fleet.phase("app") == "Halted"  # still failing: halted again
    fleet.resume("app")
    fleet.send(gate_result("app", "canary", "errors", True))
    assert fleet.revision("app", "w1") == "v1"


def test_result_for_another_generation_or_stage_is_ignored() -> None:
    fleet = canary_done()
    fleet.send(gate_result("app", "canary", "errors", False, generation=7))
    fleet.send(gate_result("app", "wave", "errors", False))
    fleet.send(gate_result("app", "canary", "latency", False))
    assert fleet.phase("app") == "Soaking" and "gate-failed" not in fleet.actions("app")


def test_redelivered_gate_result_changes_nothing() -> None:
    fleet = canary_done(soak="5m")
    result = gate_result("app", "canary", "errors", True)
    fleet.send(result)
    fleet.wait(60)
    before = fleet.snapshot()
    outcome = fleet.send(result)
    assert fleet.snapshot() == before and not outcome.decisions


def test_status_shows_each_gate_and_its_latest_result() -> None:
    fleet = canary_done()
    fleet.send(gate_result("app", "canary", "errors", None, message="no samples"))
    gates = fleet.status("app")["stages"][0]["gates"]
    assert gates == [
        {**ERRORS, "passed": None, "passingSince": None, "message": "no samples"},
    ]


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        ({"name": "g", "prometheus": {"url": "http://p", "query": "up"}}, "give 'min', 'max' or both"),
        ({"name": "g", "prometheus": {"url": "http://p", "query": "up", "min": 2, "max": 1}}, "min 2.0 is above max"),
        ({"name": "g"}, "give exactly one of 'prometheus', 'webhook' or 'compare'"),
        ({"name": "g", "webhook": {"url": "ftp://hooks"}}, "webhook URL"),
    ],
)
def test_invalid_gate_is_refused_with_the_reason(gate: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Stage.model_validate({"name": "s", "gates": [gate]})


def test_gate_names_are_unique_in_a_stage() -> None:
    with pytest.raises(ValidationError, match="gate names must be unique"):
        Stage.model_validate({"name": "s", "gates": [ERRORS, ERRORS]})
