"""Metrics and health endpoints of the real worker and applier processes on the real broker:
readiness is false until the worker joined its group and recovered its tables, and a
scrape after processing events shows the counters moved."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from infra.observability import HEALTH_PATHS
from tests.integration.stack import EXAMPLES, Stack, http_get, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("observability"))
    yield stack
    stack.stop()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text format (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        sample_name, _, sample_labels = sample.partition("{")
        found = ",".join(sorted(sample_labels.rstrip("}").split(","))) if sample_labels else ""
        if sample_name == name and found == wanted:
            return float(value)
    return 0.0


def test_worker_is_not_ready_until_it_joined_and_recovered_then_ready(stack: Stack) -> None:
    stack.worker = stack.start_worker_process()
    first = wait_for("the worker's web port", lambda: http_get(stack.worker_port, "/readyz"), timeout=60, interval=0.1)
    assert first[0] == 503, first
    assert json.loads(first[1])["problems"], first
    wait_for("readiness", lambda: (http_get(stack.worker_port, "/readyz") or (0, ""))[0] == 200, timeout=90)
    assert http_get(stack.worker_port, "/healthz") == (200, json.dumps({"ok": True, "problems": []}))


def test_a_scrape_after_processing_events_shows_the_counters_moved(stack: Stack) -> None:
    stack.start_applier("--simulate-status")
    stack.apply(EXAMPLES)
    stack.send("intents", "junk", b"junk")
    wait_for("the example's Flux files", lambda: len(stack.files()) >= 21)

    def scraped() -> str | None:
        text = http_get(stack.worker_port, "/metrics")[1]  # type: ignore[index]
        moved = metric(text, "rollout_dead_letters_total", stage="route") >= 1
        # the all-at-once modules pass their only stage, not Complete: two example clusters are not ready
        phases = [metric(text, "rollout_modules", phase=phase) for phase in ("Progressing", "Soaking")]
        return text if moved and phases == [2, 2] else None

    # the all-at-once modules complete while the staged ones' canaries are still being
    # reported on: wait for both, as a loaded machine may take a while for the second
    worker = wait_for("the dead letter, two progressing and two soaking modules to be counted", scraped)
    assert metric(worker, "rollout_events_consumed_total", topic=stack.topics.intents) >= 4
    assert metric(worker, "rollout_events_consumed_total", topic=stack.topics.clusters) == 12
    assert metric(worker, "rollout_decisions_total", action="assign") >= 21
    assert metric(worker, "rollout_modules", phase="Soaking") == 2  # podinfo and web, after their canaries
    assert metric(worker, "rollout_snapshots_published_total", kind="RemoteAssemblage", type="snapshot") == 10
    applier = http_get(stack.applier_port, "/metrics")[1]  # type: ignore[index]
    assert metric(applier, "rollout_applies_total", kind="ProxyAssemblage", outcome="changed") >= 10
    wait_for("the applier's readiness", lambda: (http_get(stack.applier_port, "/readyz") or (0, ""))[0] == 200)


def test_every_advertised_health_path_is_served(stack: Stack) -> None:
    for port in (stack.worker_port, stack.applier_port):
        for path in HEALTH_PATHS:
            answer = http_get(port, path)
            assert answer is not None and answer[0] == 200, (port, path, answer)
