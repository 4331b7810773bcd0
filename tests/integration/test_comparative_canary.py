"""Comparative canaries end to end: the real worker, a real `rollout gate-runner` process
and a real Prometheus (built from the Go module proxy, infra/localprometheus) scraping a
real exporter the test runs — one `error_ratio{cluster=…}` series per cluster, each second.
The test plays the appliers (status reports). A canary whose error ratio matches the
clusters not updated yet lets the wave start; one that is worse halts the rollout, with the
comparison as the reason.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from infra.localprometheus import LocalPrometheus
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from tests.integration.stack import EXAMPLES, Stack, free_port, wait_for

pytestmark = pytest.mark.integration

QUERY = 'avg(error_ratio{cluster=~"$clusters"})'


class Exporter:
    """A real Prometheus exporter on 127.0.0.1: `error_ratio{cluster}` gauges the test sets."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ratio = Gauge("error_ratio", "errors per request, per cluster", ["cluster"], registry=self.registry)
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    def set(self, cluster: str, value: float) -> None:
        self.ratio.labels(cluster=cluster).set(value)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exporter]:
    running = Exporter()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def prometheus(exporter: Exporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    server = LocalPrometheus(tmp_path_factory.mktemp("prometheus"), targets=[f"127.0.0.1:{exporter.port}"])
    server.start(progress=print)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("compare"), partitions=2, tick_interval=1.0)
    stack.start_worker()
    runner = stack._spawn("gate-runner", "gate-runner", "--interval", "1s", "--web-port", "0")
    yield stack
    stack._stop(runner)
    stack.stop()


def scraped(prometheus: LocalPrometheus, cluster: str, value: float) -> bool:
    """Prometheus answers `value` for the cluster's series (it has scraped the exporter)."""
    query = urllib.parse.urlencode({"query": f'error_ratio{{cluster="{cluster}"}}'})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as answer:
        result = json.loads(answer.read())["data"]["result"]
    return bool(result) and float(result[0]["value"][1]) == value


def fleet(stack: Stack, exporter: Exporter, prometheus: LocalPrometheus, app: str, ratios: dict[str, float]) -> None:
    """Clusters `<app>-c1` (canary) and `<app>-w1`, `<app>-w2` (wave), each with its error ratio."""
    for suffix, ratio in ratios.items():
        name = f"{app}-{suffix}"
        exporter.set(name, ratio)
        ring = "canary" if suffix.startswith("c") else "wave"
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": app, "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    for suffix, ratio in ratios.items():
        name = f"{app}-{suffix}"
        wait_for(f"Prometheus to scrape {name}", lambda n=name, r=ratio: scraped(prometheus, n, r), 60)


def compared_module(app: str, prometheus: LocalPrometheus) -> ModuleApplied:
    gate = {
        "name": "vs-baseline",
        "compare": {"url": prometheus.url, "query": QUERY, "maxRatio": 1.2},
        "count": 2,
        "interval": "1s",
    }
    document = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": app, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": "1.0.0"}}}},
            "rollout": {
                "stages": [
                    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "gates": [gate]},
                    {"name": "wave"},
                ]
            },
        },
    }
    return ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document))


def canary_succeeds(stack: Stack, app: str) -> None:
    wait_for("the canary assigned", lambda: (stack.latest("targets").get(f"{app}/{app}-c1") or {}).get("revision"), 90)
    report = SyncStatusReported(cluster=f"{app}-c1", module=app, revision="1.0.0", state="succeeded", generation=1)
    stack.send("status", f"{app}-c1", report)


def status(stack: Stack, app: str) -> dict[str, Any]:
    return stack.latest("module_status").get(app) or {}


def test_a_canary_as_healthy_as_its_baseline_lets_the_wave_start(
    stack: Stack, exporter: Exporter, prometheus: LocalPrometheus
) -> None:
    fleet(stack, exporter, prometheus, "shop", {"c1": 0.011, "w1": 0.01, "w2": 0.01})
    stack.send("intents", "shop", compared_module("shop", prometheus))
    canary_succeeds(stack, "shop")
    wait_for("the wave to start", lambda: (stack.latest("targets").get("shop/shop-w1") or {}).get("revision"), 120)
    gate = status(stack, "shop")["stages"][0]["gates"][0]
    assert gate["analysis"]["phase"] == "Successful" and gate["analysis"]["successful"] == 2
    assert gate["message"] == "updated 0.011 vs baseline 0.01: within maxRatio (1 updated, 2 baseline clusters)"


def test_a_canary_worse_than_its_baseline_halts_the_rollout(
    stack: Stack, exporter: Exporter, prometheus: LocalPrometheus
) -> None:
    fleet(stack, exporter, prometheus, "cart", {"c1": 0.2, "w1": 0.01, "w2": 0.03})
    stack.send("intents", "cart", compared_module("cart", prometheus))
    canary_succeeds(stack, "cart")
    halted = wait_for(
        "cart halted", lambda: status(stack, "cart").get("phase") == "Halted" and status(stack, "cart"), 120
    )
    assert halted["lastDecision"] == (
        "halted: gate vs-baseline of stage canary failed — 0 passed, 1 failed (failureLimit 0), 0 inconclusive "
        "(inconclusiveLimit 0) of 2 measurements: updated 0.2 vs baseline 0.02: ratio 10 > maxRatio 1.2 "
        "(1 updated, 2 baseline clusters)"
    )
    assert not (stack.latest("targets").get("cart/cart-w1") or {}).get("revision")


def test_the_prometheus_binary_is_cached_for_the_next_run(prometheus: LocalPrometheus) -> None:
    from infra.localprometheus import PROMETHEUS

    assert PROMETHEUS.is_built() and Path(PROMETHEUS.target).stat().st_size > 10_000_000


@pytest.fixture(scope="module")
def example(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """What `rollout up --example` runs: worker, simulating applier, gate runner, the examples."""
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("example"), tick_interval=1.0)
    stack.start_worker()
    stack.start_applier("--simulate-status")
    runner = stack._spawn("gate-runner", "gate-runner", "--interval", "1s", "--web-port", "0")
    stack.apply(EXAMPLES)
    yield stack
    stack._stop(runner)
    stack.stop()


def test_the_examples_comparative_gate_is_measured_as_a_dry_run_and_holds_nothing(example: Stack) -> None:
    def concluded() -> dict[str, Any] | None:
        canary = (status(example, "podinfo").get("stages") or [{}])[0]
        gate = (canary.get("gates") or [{}])[0]
        return gate if (gate.get("analysis") or {}).get("phase") == "Inconclusive" else None

    gate = wait_for("the example's dry-run comparison concluded", concluded, 120)
    assert gate["name"] == "errors-vs-baseline" and gate["dryRun"] is True and gate["compare"]["maxRatio"] == 1.5
    assert gate["passed"] is None and gate["analysis"]["inconclusive"] == 1  # no Prometheus on the local stack
    podinfo = status(example, "podinfo")
    assert podinfo["phase"] == "Soaking" and not podinfo.get("paused")  # a dry run pauses nothing
    decisions = [d.json() for d in example.records("decisions") if d.key == "podinfo"]
    inconclusive = [d for d in decisions if d["action"] == "gate-inconclusive"]
    assert len(inconclusive) == 1 and inconclusive[0]["because"]["dry_run"] is True
