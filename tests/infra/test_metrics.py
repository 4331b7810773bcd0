"""What every process exports (infra/metrics.py) and how log lines carry domain fields
(infra/observability.py), without a broker: a `Metrics` registry rendered as Prometheus
text, module gauges read from records the way the worker holds them, and the JSON
formatter given a record logged with `extra=log_fields(...)`."""

from __future__ import annotations

import io
import json
import logging
import logging.config

from prometheus_client.parser import text_string_to_metric_families

from infra.metrics import PHASES, Metrics
from infra.observability import log_fields, logging_config
from rollout.engine.state import ModuleRecord, Revision


def samples(metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of one scrape."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def module(name: str, phase: str, *, target: str = "v2", stable: str | None = "v1") -> ModuleRecord:
    """A record with what the module gauges read (the spec and syncs play no part)."""
    revisions = {2: Revision.model_construct(generation=2, revision=target)}
    if stable is not None:
        revisions[1] = Revision.model_construct(generation=1, revision=stable)
    return ModuleRecord.model_construct(
        name=name, kind="Module", revisions=revisions, target=2, stable=1 if stable is not None else None, phase=phase
    )


def test_every_registry_exports_process_metrics_and_no_created_series() -> None:
    metrics = Metrics()
    metrics.decisions.labels("assign").inc()
    metrics.decision_latency.labels("decide").observe(0.2)
    found = samples(metrics)
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"} <= set(found)
    assert "python_info" in found
    assert not [name for name in found if name.endswith("_created")]
    assert found["rollout_decisions_total"] == [({"action": "assign"}, 1.0)]


def test_histograms_count_what_was_observed() -> None:
    metrics = Metrics()
    metrics.decision_latency.labels("decide").observe(0.2)
    metrics.stage_duration.labels("canary").observe(90.0)
    metrics.apply_latency.labels("ProxyAssemblage").observe(1.5)
    found = samples(metrics)
    assert found["rollout_decision_latency_seconds_count"] == [({"stage": "decide"}, 1.0)]
    assert found["rollout_stage_duration_seconds_sum"] == [({"stage": "canary"}, 90.0)]
    buckets = dict((labels["le"], value) for labels, value in found["rollout_apply_latency_seconds_bucket"])
    assert buckets["1.0"] == 0.0 and buckets["2.5"] == 1.0


def test_module_info_is_what_the_worker_holds_at_scrape_time() -> None:
    held = [module("podinfo", "Soaking"), module("monitoring", "Complete", target="v3", stable="v3")]
    metrics = Metrics(modules=lambda: held)
    info = samples(metrics)["rollout_module_info"]
    assert sorted((labels["module"], labels["phase"], labels["target"], labels["stable"]) for labels, _ in info) == [
        ("monitoring", "Complete", "v3", "v3"),
        ("podinfo", "Soaking", "v2", "v1"),
    ]
    assert all(value == 1.0 for _, value in info)

    held[0] = module("podinfo", "AwaitingApproval")  # a phase change replaces the label set
    held.pop(1)  # a module whose partition went to another worker is not this one's to report
    info = samples(metrics)["rollout_module_info"]
    assert [(labels["module"], labels["phase"]) for labels, _ in info] == [("podinfo", "AwaitingApproval")]


def test_modules_by_phase_exports_every_phase_zero_included() -> None:
    metrics = Metrics(
        modules=lambda: [module("a", "Halted"), module("b", "Halted"), module("c", "Complete", stable=None)]
    )
    by_phase = {labels["phase"]: value for labels, value in samples(metrics)["rollout_modules"]}
    assert set(by_phase) == set(PHASES)
    assert by_phase["Halted"] == 2 and by_phase["Complete"] == 1 and by_phase["Paused"] == 0
    stable = {labels["module"]: labels["stable"] for labels, _ in samples(metrics)["rollout_module_info"]}
    assert stable["c"] == ""


def test_a_process_without_modules_exports_no_module_gauges() -> None:
    assert "rollout_module_info" not in samples(Metrics())


def test_json_log_lines_carry_module_cluster_stage_and_event_id_as_fields() -> None:
    stream = io.StringIO()
    config = logging_config("json", "info")
    config["handlers"]["console"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        log = logging.getLogger("rollout.test")
        fields = log_fields(module="podinfo", stage="canary", event_id="e-1", cluster=None)
        log.info("podinfo: stage canary started", extra=fields)
        log.info("no fields here")
    finally:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["module"] == "podinfo" and first["stage"] == "canary" and first["event_id"] == "e-1"
    assert "cluster" not in first
    assert first["message"] == "podinfo: stage canary started" and first["level"] == "info"
    assert not {"module", "cluster", "stage", "event_id"} & set(second)
