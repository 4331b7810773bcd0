"""The gate runner's evaluations against a real HTTP server started by the test (a tiny
Prometheus-compatible /api/v1/query endpoint and webhooks), not a mock."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from infra import client
from projections.gate_runner import (
    Compared,
    GateRunner,
    Result,
    cluster_regex,
    compared_clusters,
    judge_comparison,
    soaking_gates,
)
from rollout.wire.events import GateEvaluated, parse_event
from rollout.wire.status import CompareQuery, ModuleStatus, StageGate, TargetStatus
from tests.projections.gate_server import GateServer, running_gate_server

STATUS = {"module": "app", "phase": "Soaking", "targetRevision": "v2", "generation": 2, "currentStage": "canary"}


@pytest.fixture(scope="module")
def server() -> Iterator[GateServer]:
    with running_gate_server() as running:
        yield running


async def evaluate(gate: dict[str, Any]) -> Result:
    async def publish(key: str, value: bytes) -> None:  # not used by evaluate
        raise AssertionError("evaluate publishes nothing")

    runner = GateRunner(bootstrap="unused:9092", prefix="t.", publish=publish)
    async with aiohttp.ClientSession() as session:
        return await runner.evaluate(
            session, "app", "canary", StageGate.model_validate(gate), ModuleStatus.read(STATUS)
        )


def prometheus(url: str, query: str, **bounds: float) -> dict[str, Any]:
    return {"name": "errors", "prometheus": {"url": url, "query": query, **bounds}}


async def test_prometheus_gate_passes_when_every_sample_is_within_bounds(server: GateServer) -> None:
    server.metrics["error_rate"] = [0.01, 0.02]
    result = await evaluate(prometheus(server.url, "error_rate", max=0.05))
    assert result == Result(True, "2 sample(s) within [-∞, 0.05], latest 0.02")


async def test_prometheus_gate_fails_when_a_sample_is_outside(server: GateServer) -> None:
    server.metrics["latency"] = [0.3, 1.5]
    result = await evaluate(prometheus(server.url, "latency", min=0.1, max=1.0))
    assert result == Result(False, "1.5 outside [0.1, 1] (1 of 2 samples)")


async def test_no_samples_is_inconclusive(server: GateServer) -> None:
    result = await evaluate(prometheus(server.url, "nothing_matches", max=1))
    assert result == Result(None, "no samples")


async def test_a_prometheus_error_answer_is_inconclusive(server: GateServer) -> None:
    result = await evaluate(prometheus(server.url, "broken", max=1))
    assert result == Result(None, "Prometheus answered an error: parse error")


async def test_an_unreachable_server_is_inconclusive() -> None:
    result = await evaluate(prometheus("http://127.0.0.1:9", "up", min=1))
    assert result.passed is None and result.message.startswith("cannot evaluate: ClientConnectorError")


async def test_webhook_passes_on_2xx_and_gets_the_stage_facts(server: GateServer) -> None:
    server.hooks["smoke"] = 204
    result = await evaluate({"name": "smoke", "webhook": {"url": f"{server.url}/hooks/smoke"}})
    assert result == Result(True, "webhook answered 204")
    assert server.calls[-1] == {
        "hook": "smoke",
        "module": "app",
        "stage": "canary",
        "gate": "smoke",
        "revision": "v2",
        "generation": 2,
    }


async def test_webhook_fails_on_any_other_status(server: GateServer) -> None:
    server.hooks["broken"] = 503
    result = await evaluate({"name": "smoke", "webhook": {"url": f"{server.url}/hooks/broken"}})
    assert result == Result(False, "webhook answered 503: hook broken")


def test_only_the_gates_of_a_soaking_current_stage_are_evaluated() -> None:
    gate = {"name": "errors", "webhook": {"url": "http://x/hook"}}
    soaking = {**STATUS, "stages": [{"name": "canary", "state": "Soaking", "gates": [gate]}]}
    running = {**STATUS, "stages": [{"name": "canary", "state": "Running", "gates": [gate]}]}
    assert soaking_gates(ModuleStatus.read(soaking)) == [("canary", StageGate.model_validate(gate))]
    assert soaking_gates(ModuleStatus.read(running)) == []


def test_the_gates_of_every_stage_of_a_stage_graph_soaking_at_once_are_evaluated() -> None:
    gate = {"name": "errors", "webhook": {"url": "http://x/hook"}}
    stages = [
        {"name": "canary", "state": "Succeeded", "gates": [gate]},
        {"name": "eu", "state": "Soaking", "gates": [gate], "after": [{"stage": "canary", "passed": True}]},
        {"name": "us", "state": "Soaking", "gates": [gate], "after": [{"stage": "canary", "passed": True}]},
        {"name": "prod", "state": "Pending", "gates": [gate], "after": [{"stage": "eu"}, {"stage": "us"}]},
    ]
    found = soaking_gates(ModuleStatus.read({**STATUS, "currentStage": "eu", "stages": stages}))
    assert [stage for stage, _ in found] == ["eu", "us"]


async def test_runner_reads_statuses_with_one_consumer_and_logs_each_result(
    server: GateServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server.hooks["smoke"] = 204
    gate = {"name": "smoke", "webhook": {"url": f"{server.url}/hooks/smoke"}}
    soaking = {**STATUS, "stages": [{"name": "canary", "state": "Soaking", "gates": [gate]}]}
    started: list[str] = []

    class Consumer:
        async def stop(self) -> None:
            pass

    async def consumer(bootstrap: str, topic: str) -> tuple[Consumer, list[Any]]:
        started.append(topic)
        return Consumer(), []

    unread = [client.Record("t.module-status", 0, 0, "app", json.dumps(soaking).encode())]

    async def read_to_end(consumer: Consumer, topic: str, tps: list[Any]) -> list[client.Record]:
        read, unread[:] = list(unread), []  # what a consumer has not read yet: the topic once
        return read

    monkeypatch.setattr(client, "_consumer", consumer)
    monkeypatch.setattr(client, "_read_to_end", read_to_end)
    published: list[bytes] = []

    async def publish(key: str, value: bytes) -> None:
        published.append(value)

    runner = GateRunner(bootstrap="unused:9092", prefix="t.", publish=publish)
    caplog.set_level(logging.INFO, logger="rollout.gates")
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            await runner.round(session)
    assert started == ["t.module-status"]  # one consumer for every round, not one a round
    assert len(published) == 3
    logged = [r.getMessage() for r in caplog.records if r.name == "rollout.gates"]
    assert logged[-1] == "gate smoke of app stage canary (generation 2): passed: webhook answered 204"


def runner_over(
    monkeypatch: pytest.MonkeyPatch, statuses: list[dict[str, Any]], clock: list[float]
) -> tuple[GateRunner, list[GateEvaluated]]:
    """A runner whose module-status reads return `statuses` one per round (the last one
    after that) and whose clock reads `clock[0]`; what it publishes, parsed."""

    class Consumer:
        async def stop(self) -> None:
            pass

    async def consumer(bootstrap: str, topic: str) -> tuple[Consumer, list[Any]]:
        return Consumer(), []

    async def read_to_end(consumer: Consumer, topic: str, tps: list[Any]) -> list[client.Record]:
        document = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        return [client.Record("t.module-status", 0, 0, "app", json.dumps(document).encode())]

    monkeypatch.setattr(client, "_consumer", consumer)
    monkeypatch.setattr(client, "_read_to_end", read_to_end)
    published: list[GateEvaluated] = []

    async def publish(key: str, value: bytes) -> None:
        event = parse_event(value)
        assert isinstance(event, GateEvaluated)
        published.append(event)

    return GateRunner(bootstrap="unused:9092", prefix="t.", publish=publish, clock=lambda: clock[0]), published


async def test_an_analysis_is_measured_once_per_interval_numbered_from_the_status(
    server: GateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.hooks["smoke"] = 204
    gate = {"name": "smoke", "webhook": {"url": f"{server.url}/hooks/smoke"}, "count": 3, "interval": "10s"}
    counted = {**gate, "analysis": {"run": 1, "measured": 1, "successful": 1, "phase": "Running"}}
    soaking = [
        {**STATUS, "stages": [{"name": "canary", "state": "Soaking", "gates": [g]}]} for g in (gate, gate, counted)
    ]
    clock = [100.0]
    runner, published = runner_over(monkeypatch, soaking, clock)
    async with aiohttp.ClientSession() as session:
        await runner.round(session)  # measured: measurement 1 of run 1
        clock[0] = 105.0
        await runner.round(session)  # 5 s later: not due
        clock[0] = 110.0
        await runner.round(session)  # the engine counted measurement 1: measurement 2 is next
    assert [(e.run, e.measurement, e.passed) for e in published] == [(1, 1, True), (1, 2, True)]


async def test_a_concluded_analysis_is_not_measured_again(server: GateServer, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = {"name": "smoke", "webhook": {"url": f"{server.url}/hooks/smoke"}, "count": 1, "dryRun": True}
    done = {**gate, "analysis": {"run": 1, "measured": 1, "failed": 1, "phase": "Failed"}}
    runner, published = runner_over(
        monkeypatch, [{**STATUS, "stages": [{"name": "canary", "state": "Soaking", "gates": [done]}]}], [0.0]
    )
    async with aiohttp.ClientSession() as session:
        await runner.round(session)
    assert published == []  # a dry run that failed is over; a real one would be halted, not soaking


def test_after_a_resume_a_failed_analysis_is_measured_as_a_new_run() -> None:
    failed = StageGate.model_validate(
        {"name": "g", "webhook": {"url": "http://x"}, "count": 2, "analysis": {"run": 3, "phase": "Inconclusive"}}
    )
    assert failed.next_measurement() == (4, 1)


COMPARE = 'avg(error_ratio{cluster=~"$clusters"})'


def compare_status() -> ModuleStatus:
    """A module soaking its canary stage, then wave: each cluster's stage from its name."""
    return ModuleStatus.read(
        {**STATUS, "stages": [{"name": "canary", "state": "Soaking"}, {"name": "wave", "state": "Pending"}]}
    )


def targets(**states: str) -> list[TargetStatus]:
    """Rollout-targets documents: `c…` clusters in canary on generation 2, `w…` in wave on 1."""
    return [
        TargetStatus.read(
            {
                "module": "app",
                "cluster": name.replace("_", "-"),
                "stage": "canary" if name.startswith("c") else "wave",
                "state": state,
                "generation": 2 if name.startswith("c") else 1,
            }
        )
        for name, state in states.items()
    ]


def test_updated_clusters_are_the_stages_succeeded_members_and_the_baseline_the_later_stages_pending_ones() -> None:
    found = compared_clusters(
        compare_status(), targets(c_2="succeeded", c_1="succeeded", c_3="failed", w_1="pending", w_2="not_ready")
    )
    assert found == Compared(updated=["c-1", "c-2"], baseline=["w-1"])


def test_cluster_names_become_an_escaped_regex_alternation_inside_a_promql_string() -> None:
    assert cluster_regex(["eu-1", "eu-2"]) == "eu-1|eu-2"
    assert cluster_regex(["a.b", 'x"y', "c+"]) == 'a\\\\.b|x\\"y|c\\\\+'  # RE2, then the string literal


@pytest.mark.parametrize(
    ("thresholds", "updated", "baseline", "passed", "said"),
    [
        ({"maxRatio": 1.2}, 0.011, 0.01, True, "updated 0.011 vs baseline 0.01: within maxRatio"),
        ({"maxRatio": 1.2}, 0.02, 0.01, False, "updated 0.02 vs baseline 0.01: ratio 2 > maxRatio 1.2"),
        ({"maxRatio": 1.2}, 0.0, 0.0, True, "updated 0 vs baseline 0: within maxRatio"),
        ({"maxRatio": 1.2}, 0.01, 0.0, False, "updated 0.01 vs baseline 0: ratio ∞ > maxRatio 1.2"),
        ({"maxDifference": 0.05}, 0.2, 0.1, False, "updated 0.2 vs baseline 0.1: difference 0.1 > maxDifference 0.05"),
        ({"maxRatio": 3, "maxDifference": 0.5}, 2.0, 1.0, False, "difference 1 > maxDifference 0.5"),
    ],
)
def test_a_comparison_passes_within_its_ratio_and_difference(
    thresholds: dict[str, float], updated: float, baseline: float, passed: bool, said: str
) -> None:
    spec = CompareQuery.model_validate({"url": "http://p", "query": COMPARE, **thresholds})
    result = judge_comparison(spec, updated, baseline)
    assert result.passed is passed and said in result.message


async def compared(server: GateServer, listed: list[TargetStatus], **thresholds: float) -> Result:
    async def publish(key: str, value: bytes) -> None:
        raise AssertionError("compare publishes nothing")

    runner = GateRunner(bootstrap="unused:9092", prefix="t.", publish=publish)
    runner.round_targets = {"app": listed}  # this round's rollout-targets documents
    spec = CompareQuery.model_validate({"url": server.url, "query": COMPARE, **thresholds})
    async with aiohttp.ClientSession() as session:
        return await runner.compare(session, "app", spec, compare_status())


async def test_a_comparative_gate_asks_the_query_for_each_side_and_compares(server: GateServer) -> None:
    server.metrics['avg(error_ratio{cluster=~"c-1"})'] = [0.05]
    server.metrics['avg(error_ratio{cluster=~"w-1|w-2"})'] = [0.01]
    result = await compared(server, targets(c_1="succeeded", w_1="pending", w_2="pending"), maxRatio=1.5)
    assert result == Result(
        False, "updated 0.05 vs baseline 0.01: ratio 5 > maxRatio 1.5 (1 updated, 2 baseline clusters)"
    )
    assert server.queries[-2:] == ['avg(error_ratio{cluster=~"c-1"})', 'avg(error_ratio{cluster=~"w-1|w-2"})']


async def test_a_comparison_without_baseline_clusters_is_inconclusive(server: GateServer) -> None:
    result = await compared(server, targets(c_1="succeeded", w_1="succeeded"), maxRatio=1.5)
    assert result == Result(None, "no baseline: no cluster of a later stage is waiting for the target")


async def test_a_side_without_one_sample_is_inconclusive(server: GateServer) -> None:
    server.metrics['avg(error_ratio{cluster=~"c-9"})'] = [0.01, 0.02]
    result = await compared(server, targets(c_9="succeeded", w_9="pending"), maxRatio=1.5)
    assert result == Result(None, "updated clusters: expected one sample (aggregate with sum or avg), got 2")
