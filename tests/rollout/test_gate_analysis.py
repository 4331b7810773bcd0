"""Gate analyses (docs/rollout-semantics.md, "Health gates" → "Analysis"): a gate with
`count` measures repeatedly; `failureLimit` / `inconclusiveLimit` decide it; `dryRun`
gates are recorded but hold nothing. One given/when/then test per rule; the gate
runner's measurements arrive as GateEvaluated events naming (run, measurement)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.manifests import Stage
from tests.rollout.builders import Fleet, cluster, gate_result, given, module, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
QUERY = {"url": "http://prometheus:9090", "query": "error_rate", "max": 0.05}


def analysis(**fields: Any) -> dict[str, Any]:
    return {"name": "errors", "prometheus": QUERY, "count": 3, **fields}


def app(*gates: dict[str, Any], tag: str = "v1", on_failure: str | None = None, soak: str | None = None):
    canary = {**stage("canary", CANARY, soak=soak), "gates": list(gates)}
    return module("app", {}, tag, canary, stage("wave", WAVE), on_failure=on_failure)


def canary_done(*gates: dict[str, Any], **kwargs: Any) -> Fleet:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(*gates, **kwargs))
    fleet.succeed("app", "c1")
    return fleet


def measure(fleet: Fleet, passed: bool | None, n: int, *, run: int = 1, gate: str = "errors", message: str = ""):
    return fleet.send(gate_result("app", "canary", gate, passed, run=run, measurement=n, message=message))


def analysis_of(fleet: Fleet, gate: int = 0) -> dict[str, Any]:
    return fleet.status("app")["stages"][0]["gates"][gate]["analysis"]


def test_analysis_passes_once_count_measurements_are_in_within_the_limits() -> None:
    fleet = canary_done(analysis(failureLimit=1))
    measure(fleet, True, 1)
    measure(fleet, False, 2)
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None  # 2 of 3: still running
    measure(fleet, True, 3)
    assert fleet.revision("app", "w1") == "v1"
    assert fleet.decisions_of("app", "gate-passed")[-1].reason == (
        "gate errors of stage canary passes — 2 passed, 1 failed (failureLimit 1), 0 inconclusive "
        "(inconclusiveLimit 0) of 3 measurements"
    )


def test_analysis_fails_as_soon_as_failures_exceed_the_failure_limit() -> None:
    fleet = canary_done(analysis(count=5, failureLimit=1))
    measure(fleet, False, 1)
    assert fleet.phase("app") == "Soaking"  # 1 failure is within failureLimit 1
    measure(fleet, False, 2, message="error_rate 0.2 above 0.05")
    assert fleet.phase("app") == "Halted"  # 2 > 1, without waiting for the 5 measurements
    assert analysis_of(fleet) == {
        "run": 1,
        "measured": 2,
        "successful": 0,
        "failed": 2,
        "inconclusive": 0,
        "phase": "Failed",
    }
    assert fleet.decisions[-1].reason.startswith("halted: gate errors of stage canary failed — 0 passed, 2 failed")


def test_failed_analysis_rolls_back_with_on_failure_rollback() -> None:
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), app(analysis(count=1), on_failure="Rollback"))
    fleet.succeed("app", "c1")
    measure(fleet, True, 1)
    fleet.succeed("app", "w1")
    fleet.apply(app(analysis(count=1), tag="v2", on_failure="Rollback"))
    fleet.succeed("app", "c1")
    fleet.send(gate_result("app", "canary", "errors", False, generation=2, run=1, measurement=1))
    assert fleet.phase("app") in ("RollingBack", "RolledBack") and fleet.revision("app", "c1") == "v1"


def test_inconclusive_measurements_over_the_limit_pause_the_run_and_say_why() -> None:
    fleet = canary_done(analysis(inconclusiveLimit=1))
    measure(fleet, None, 1, message="no samples")
    assert fleet.phase("app") == "Soaking"
    measure(fleet, None, 2, message="Prometheus answered an error: timeout")
    assert fleet.phase("app") == "Paused" and fleet.revision("app", "w1") is None
    decision = fleet.decisions_of("app", "gate-inconclusive")[-1]
    assert decision.because.analysis.inconclusive == 2 and decision.because.analysis.inconclusive_limit == 1
    assert decision.reason.endswith("Prometheus answered an error: timeout; paused until resume")
    status = fleet.status("app")
    assert status["paused"] is True and status["lastDecision"] == decision.reason
    assert analysis_of(fleet)["phase"] == "Inconclusive"


def test_a_resumed_analysis_starts_a_new_run_from_zero() -> None:
    fleet = canary_done(analysis(count=2))
    measure(fleet, None, 1)
    assert fleet.phase("app") == "Paused"
    measure(fleet, True, 1, run=2)  # still paused: a new run does not start by itself
    assert analysis_of(fleet)["run"] == 1
    fleet.resume("app")
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None
    measure(fleet, True, 1, run=2)
    measure(fleet, True, 2, run=2)
    assert analysis_of(fleet) == {
        "run": 2,
        "measured": 2,
        "successful": 2,
        "failed": 0,
        "inconclusive": 0,
        "phase": "Successful",
    }
    assert fleet.revision("app", "w1") == "v1"


def test_after_a_failed_analysis_is_resumed_its_new_run_must_pass_again() -> None:
    fleet = canary_done(analysis(count=1))
    measure(fleet, False, 1)
    fleet.resume("app")
    assert fleet.phase("app") == "Soaking" and fleet.revision("app", "w1") is None
    measure(fleet, False, 1, run=2)
    assert fleet.phase("app") == "Halted"
    fleet.resume("app")
    measure(fleet, True, 1, run=3)
    assert fleet.revision("app", "w1") == "v1"


def test_each_measurement_counts_once_whoever_sends_it() -> None:
    fleet = canary_done(analysis(count=3))
    measure(fleet, True, 1)
    before = fleet.snapshot()
    assert not measure(fleet, False, 1).decisions  # a second runner's measurement 1: already counted
    assert not measure(fleet, True, 3).decisions  # ahead of measurement 2: not counted
    assert not measure(fleet, True, 1, run=2).decisions  # a run that has not started
    assert fleet.snapshot() == before and analysis_of(fleet)["measured"] == 1


def test_a_result_without_a_measurement_number_is_not_counted_for_an_analysis() -> None:
    fleet = canary_done(analysis(count=1))
    fleet.send(gate_result("app", "canary", "errors", True))
    assert fleet.phase("app") == "Soaking" and "analysis" not in fleet.status("app")["stages"][0]["gates"][0]


def test_a_dry_run_gate_is_recorded_but_never_blocks_or_fails() -> None:
    dry = analysis(name="latency", count=2, dryRun=True)
    fleet = canary_done(analysis(count=1), dry)
    measure(fleet, False, 1, gate="latency")
    measure(fleet, False, 2, gate="latency")
    assert fleet.phase("app") == "Soaking"  # not halted: the dry run failed, the real gate waits
    failed = fleet.decisions_of("app", "gate-failed")[-1]
    assert failed.because.dry_run and "(dry run: it holds nothing)" in failed.reason
    measure(fleet, True, 1)
    assert fleet.revision("app", "w1") == "v1"  # the failed dry run held nothing
    gates = fleet.status("app")["stages"][0]["gates"]
    assert gates[1]["dryRun"] is True and gates[1]["analysis"]["phase"] == "Failed"


def test_a_dry_run_analysis_that_is_inconclusive_does_not_pause() -> None:
    fleet = canary_done(analysis(count=1), analysis(name="latency", count=2, dryRun=True))
    measure(fleet, None, 1, gate="latency")
    assert fleet.phase("app") == "Soaking" and "gate-inconclusive" in fleet.actions("app")


def test_a_dry_run_gate_without_count_never_holds_the_stage() -> None:
    fleet = canary_done({"name": "smoke", "webhook": {"url": "http://hooks/smoke"}, "dryRun": True}, soak="1m")
    fleet.send(gate_result("app", "canary", "smoke", False))
    fleet.send(gate_result("app", "canary", "smoke", False))  # still failing: decided once
    assert fleet.actions("app").count("gate-failed") == 1 and fleet.phase("app") == "Soaking"
    fleet.wait(60)
    assert fleet.revision("app", "w1") == "v1"


def test_plain_gates_keep_the_latest_result_rule_beside_an_analysis() -> None:
    fleet = canary_done(analysis(count=1), {"name": "smoke", "webhook": {"url": "http://hooks/smoke"}})
    measure(fleet, True, 1)
    assert fleet.revision("app", "w1") is None  # the webhook has not passed yet
    fleet.send(gate_result("app", "canary", "smoke", True))
    assert fleet.revision("app", "w1") == "v1"


COMPARE = {"url": "http://prometheus:9090", "query": 'sum(rate(errors{cluster=~"$clusters"}[5m]))', "maxRatio": 1.2}


def test_a_comparative_canary_is_an_analysis_like_any_other() -> None:
    fleet = canary_done({"name": "vs-baseline", "compare": COMPARE, "count": 2})
    measure(fleet, True, 1, gate="vs-baseline", message="updated 0.01 vs baseline 0.01: within maxRatio")
    measure(fleet, False, 2, gate="vs-baseline", message="updated 0.05 vs baseline 0.01: ratio 5 > maxRatio 1.2")
    assert fleet.phase("app") == "Halted" and fleet.revision("app", "w1") is None
    assert fleet.status("app")["stages"][0]["gates"][0]["compare"] == COMPARE


@pytest.mark.parametrize(
    ("compare", "message"),
    [
        ({**COMPARE, "query": "sum(rate(errors[5m]))"}, r"query must name \$clusters"),
        ({"url": "http://p", "query": 'x{c=~"$clusters"}'}, "give 'maxRatio', 'maxDifference' or both"),
        ({**COMPARE, "maxRatio": -1.0}, "maxRatio must be a finite number ≥ 0"),
    ],
)
def test_invalid_comparison_is_refused_with_the_reason(compare: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Stage.model_validate({"name": "s", "gates": [{"name": "g", "compare": compare}]})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"count": None, "failureLimit": 1}, "failureLimit need 'count'"),
        ({"count": 3, "failureLimit": 3}, "failureLimit 3 must be below count 3"),
        ({"count": 3, "inconclusiveLimit": 5}, "inconclusiveLimit 5 must be below count 3"),
        ({"count": 0}, "greater than or equal to 1"),
        ({"count": 2, "interval": "0s"}, "interval must be longer than 0s"),
        ({"count": 2, "interval": "soon"}, "not a duration"),
    ],
)
def test_invalid_analysis_is_refused_with_the_reason(fields: dict[str, Any], message: str) -> None:
    gate = {k: v for k, v in analysis(**fields).items() if v is not None}
    with pytest.raises(ValidationError, match=message):
        Stage.model_validate({"name": "s", "gates": [gate]})
