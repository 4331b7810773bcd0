"""Health gates end to end on the real broker: a real worker, a real `rollout gate-runner`
process and a real HTTP server started by the test (a Prometheus-compatible query
endpoint and a webhook). The test plays the appliers (status reports). A canary whose
error-rate gate passes for the soak lets the wave start; a canary whose webhook fails
halts the rollout, with the gate's answer as the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from tests.integration.stack import Stack, free_port, http_get, wait_for
from tests.projections.gate_server import GateServer, running_gate_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[GateServer]:
    with running_gate_server() as running:
        yield running


@pytest.fixture(scope="module")
def runner_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, runner_port: int) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("gates"), partitions=2, tick_interval=1.0)
    stack.start_worker()
    runner = stack._spawn("gate-runner", "gate-runner", "--interval", "1s", "--web-port", str(runner_port))
    yield stack
    stack._stop(runner)
    stack.stop()


def fleet(stack: Stack, app: str) -> None:
    for name, ring in ((f"{app}-c1", "canary"), (f"{app}-w1", "wave")):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": app, "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))


def gated_module(app: str, gate: dict[str, Any]) -> ModuleApplied:
    document = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": app, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": "1.0.0"}}}},
            "rollout": {
                "stages": [
                    {
                        "name": "canary",
                        "selector": {"matchLabels": {"ring": "canary"}},
                        "minSuccessTime": "2s",
                        "gates": [gate],
                    },
                    {"name": "wave"},
                ]
            },
        },
    }
    return ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document))


def canary_succeeds(stack: Stack, app: str) -> None:
    wait_for("the canary assigned", lambda: (stack.latest("targets").get(f"{app}/{app}-c1") or {}).get("revision"))
    report = SyncStatusReported(cluster=f"{app}-c1", module=app, revision="1.0.0", state="succeeded", generation=1)
    stack.send("status", f"{app}-c1", report)


def status(stack: Stack, app: str) -> dict[str, Any]:
    return stack.latest("module_status").get(app) or {}


def test_a_passing_prometheus_gate_lets_the_next_stage_start_after_the_soak(stack: Stack, server: GateServer) -> None:
    server.metrics["shop_error_rate"] = [0.001]
    gate = {"name": "errors", "prometheus": {"url": server.url, "query": "shop_error_rate", "max": 0.05}}
    fleet(stack, "shop")
    stack.send("intents", "shop", gated_module("shop", gate))
    canary_succeeds(stack, "shop")
    wait_for("the wave to start", lambda: (stack.latest("targets").get("shop/shop-w1") or {}).get("revision"), 60)
    gates = status(stack, "shop")["stages"][0]["gates"]
    assert gates[0]["passed"] is True and "within [-∞, 0.05]" in gates[0]["message"]
    decisions = [d for d in stack.records("decisions") if d.key == "shop"]
    actions = [d.json()["action"] for d in decisions]
    assert actions.index("gate-passed") < actions.index("stage-started", actions.index("gate-passed"))


def test_a_failing_webhook_gate_halts_the_rollout(stack: Stack, server: GateServer) -> None:
    server.hooks["cart-smoke"] = 500
    gate = {"name": "smoke", "webhook": {"url": f"{server.url}/hooks/cart-smoke"}}
    fleet(stack, "cart")
    stack.send("intents", "cart", gated_module("cart", gate))
    canary_succeeds(stack, "cart")
    halted = wait_for("cart halted", lambda: status(stack, "cart").get("phase") == "Halted" and status(stack, "cart"))
    assert halted["lastDecision"] == "halted: gate smoke of stage canary failed: webhook answered 500: hook cart-smoke"
    assert not (stack.latest("targets").get("cart/cart-w1") or {}).get("revision")
    assert server.calls[-1]["module"] == "cart" and server.calls[-1]["generation"] == 1


def test_a_query_without_samples_is_inconclusive_in_the_status_not_a_dead_letter(
    stack: Stack, server: GateServer
) -> None:
    gate = {"name": "errors", "prometheus": {"url": server.url, "query": "nothing_matches", "max": 0.05}}
    fleet(stack, "mall")
    stack.send("intents", "mall", gated_module("mall", gate))
    canary_succeeds(stack, "mall")
    gates = wait_for(
        "an inconclusive result in the status",
        lambda: [g for s in status(stack, "mall").get("stages", []) for g in s.get("gates", []) if g.get("message")],
    )
    assert gates[0]["passed"] is None and gates[0]["message"] == "no samples"
    assert status(stack, "mall")["phase"] == "Soaking"  # waiting, failing nothing
    letters = [r.json() for r in stack.records("dead_letters") if r.value is not None]
    assert not [letter for letter in letters if "GateEvaluated" in str(letter.get("reason", ""))]


def test_an_analysis_counts_its_measurements_and_lets_the_wave_start_once_all_are_in(
    stack: Stack, server: GateServer
) -> None:
    server.metrics["deli_error_rate"] = [0.001]
    gate = {
        "name": "errors",
        "prometheus": {"url": server.url, "query": "deli_error_rate", "max": 0.05},
        "count": 3,
        "interval": "1s",
    }
    fleet(stack, "deli")
    stack.send("intents", "deli", gated_module("deli", gate))
    canary_succeeds(stack, "deli")
    wait_for("the wave to start", lambda: (stack.latest("targets").get("deli/deli-w1") or {}).get("revision"), 90)
    analysis = status(stack, "deli")["stages"][0]["gates"][0]["analysis"]
    assert analysis == {"run": 1, "measured": 3, "successful": 3, "failed": 0, "inconclusive": 0, "phase": "Successful"}
    decisions = [d.json() for d in stack.records("decisions") if d.key == "deli"]
    passed = [d for d in decisions if d["action"] == "gate-passed"]
    assert len(passed) == 1 and passed[0]["because"]["analysis"]["successful"] == 3


def test_an_inconclusive_analysis_pauses_the_rollout_and_says_why(stack: Stack, server: GateServer) -> None:
    gate = {
        "name": "errors",
        "prometheus": {"url": server.url, "query": "nothing_for_bakery", "max": 0.05},
        "count": 3,
        "interval": "1s",
        "inconclusiveLimit": 1,
    }
    fleet(stack, "bakery")
    stack.send("intents", "bakery", gated_module("bakery", gate))
    canary_succeeds(stack, "bakery")
    paused = wait_for(
        "bakery paused", lambda: status(stack, "bakery").get("phase") == "Paused" and status(stack, "bakery")
    )
    assert paused["lastDecision"] == (
        "gate errors of stage canary inconclusive — 0 passed, 0 failed (failureLimit 0), 2 inconclusive "
        "(inconclusiveLimit 1) of 3 measurements: no samples; paused until resume"
    )
    assert paused["stages"][0]["gates"][0]["analysis"]["phase"] == "Inconclusive"
    assert not (stack.latest("targets").get("bakery/bakery-w1") or {}).get("revision")


def test_the_gate_runner_serves_health_and_metrics_like_the_other_processes(stack: Stack, runner_port: int) -> None:
    wait_for("the gate runner's /readyz", lambda: (http_get(runner_port, "/readyz") or (0, ""))[0] == 200, timeout=30)
    assert (http_get(runner_port, "/healthz") or (0, ""))[0] == 200
    answer = http_get(runner_port, "/metrics")
    assert answer is not None and answer[0] == 200
    assert "process_cpu_seconds_total" in answer[1]
