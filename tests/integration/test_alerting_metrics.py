"""What alerts and dashboards rely on, checked against a real worker and applier on the
real broker: every metric the PrometheusRule and the Grafana dashboard name is exported;
the histograms observe; `rollout_module_info` follows phase changes and is right again
straight after a restart (read from the state the worker restores, not from events seen
since it started); JSON log lines carry module, stage and event id as fields."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollout.wire.events import RolloutCommanded
from tests.integration.stack import EXAMPLES, Stack, http_get, wait_for
from tests.packaging.conftest import CHART

pytestmark = pytest.mark.integration

METRIC_NAME = re.compile(r"\b((?:rollout|process)_[a-z_]+)\b")


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("alerting"))
    stack.worker = stack.start_worker_process("worker", "--log-format", "json")
    stack.wait_ready(stack.worker)
    stack.start_applier("--simulate-status")
    stack.apply(EXAMPLES)
    yield stack
    stack.stop()


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    answer = http_get(port, "/metrics")
    assert answer is not None and answer[0] == 200, answer
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(answer[1]):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def module_phases(port: int) -> dict[str, list[str]] | None:
    """module -> the phases of its rollout_module_info series (None: not scraped)."""
    answer = http_get(port, "/metrics")
    if answer is None or answer[0] != 200:
        return None
    phases: dict[str, list[str]] = {}
    for labels, _ in scrape(port).get("rollout_module_info", []):
        phases.setdefault(labels["module"], []).append(labels["phase"])
    return phases


def expected_phases(phases: dict[str, list[str]] | None) -> bool:
    """podinfo and web soak after their canaries (5 minutes); the other two examples pass
    their stages (not Complete: two example clusters are not ready); the Release
    storefront's members wait for approvals of their rest stage."""
    return (
        phases is not None
        and phases.get("podinfo") == ["Soaking"]
        and phases.get("web") == ["Soaking"]
        and phases.get("storefront-web") == phases.get("storefront-api") == ["AwaitingApproval"]
        and len(phases) == 6
    )


def names_used_by_rules_and_dashboard() -> set[str]:
    rules = (CHART / "files" / "prometheus-rules.yaml").read_text()
    exprs = [line for line in rules.splitlines() if line.strip().startswith("expr:")]
    dashboard = json.loads((CHART / "dashboards" / "rollout.json").read_text())
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return {name for expr in exprs for name in METRIC_NAME.findall(expr)}


def declared(port: int) -> set[str]:
    """Every sample name a scrape declares (`# TYPE` lines): a labelled counter with no
    sample yet — no applier error so far — is exported all the same."""
    answer = http_get(port, "/metrics")
    assert answer is not None and answer[0] == 200, answer
    names: set[str] = set()
    for line in answer[1].splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
            names |= {name + suffix for suffix in suffixes}
    return names


def test_every_metric_the_rules_and_the_dashboard_use_is_exported(stack: Stack) -> None:
    wait_for("podinfo soaking, two modules complete", lambda: expected_phases(module_phases(stack.worker_port)))
    exported = declared(stack.worker_port) | declared(stack.applier_port)
    used = names_used_by_rules_and_dashboard()
    assert {"rollout_module_info", "rollout_consumer_lag", "process_cpu_seconds_total"} <= used
    assert used - exported == set(), f"metrics named in rules/dashboard but not exported: {used - exported}"


def test_histograms_observe_decisions_stages_and_applies(stack: Stack) -> None:
    wait_for("podinfo soaking", lambda: expected_phases(module_phases(stack.worker_port)))
    worker, applier = scrape(stack.worker_port), scrape(stack.applier_port)
    latency = {labels["stage"]: value for labels, value in worker["rollout_decision_latency_seconds_count"]}
    assert latency.keys() == {"route", "decide", "assemble"} and all(count >= 1 for count in latency.values())
    stages = {labels["stage"]: value for labels, value in worker["rollout_stage_duration_seconds_count"]}
    assert stages.get("canary", 0) >= 1  # podinfo's canary succeeded (it soaks now)
    applies = sum(value for _, value in applier["rollout_apply_latency_seconds_count"])
    assert applies >= 10
    for scraped in (worker, applier):
        assert scraped["process_resident_memory_bytes"][0][1] > 0
        assert not [name for name in scraped if name.endswith("_created")]


def test_module_info_replaces_the_phase_and_is_right_straight_after_a_restart(stack: Stack) -> None:
    wait_for("podinfo soaking", lambda: expected_phases(module_phases(stack.worker_port)))
    stack.send("intents", "podinfo", RolloutCommanded(module="podinfo", command="pause", user="test"))
    wait_for("podinfo paused", lambda: (module_phases(stack.worker_port) or {}).get("podinfo") == ["Paused"])
    before = module_phases(stack.worker_port)
    assert stack.stop_worker() == 0
    stack.worker = stack.start_worker_process("worker", "--log-format", "json")
    stack.wait_ready(stack.worker)
    # nothing new happened to any module: what is exported comes from the restored state
    assert module_phases(stack.worker_port) == before
    by_phase = {labels["phase"]: value for labels, value in scrape(stack.worker_port)["rollout_modules"]}
    # flux-install and monitoring passed their stages; two example clusters are not ready: Progressing
    assert by_phase["Paused"] == 1 and by_phase["Progressing"] == 2 and by_phase["Halted"] == 0


def test_json_logs_carry_module_stage_and_event_id_as_fields(stack: Stack) -> None:
    def canary_lines() -> list[dict[str, str]]:
        lines = [json.loads(line) for line in stack.log("worker").splitlines() if line.startswith("{")]
        return [line for line in lines if line.get("module") == "podinfo" and line.get("stage") == "canary"]

    lines = wait_for("log lines about podinfo's canary stage", canary_lines)
    assert all(line["event_id"] and line["logger"] == "rollout.decide" for line in lines)
    assert any("stage canary started" in line["message"] for line in lines)
    assert any("stage canary succeeded" in line["message"] for line in lines)
