"""No canary bypass from arrival order: clusters and a staged Module applied from one
file travel on different topics, and the module may reach the engine first. Whatever the
order, under load, the canary stage moves first, alone, and soaks before wave-1 starts.

Each round applies a fresh file (30 clusters: 3 canaries, 27 in wave-1, and the Module)
while another publisher floods the cluster-observations topic, and the applier reports
every written sync as succeeded. The decisions log of the module (one journal partition,
totally ordered) must show: every canary assigned before any wave cluster, never more
than one canary updating at once, and wave-1 starting no earlier than `minSuccessTime`
after the last canary succeeded (time as the engine saw it: the decisions' `at`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import client
from tests.integration.chaos import cluster as filler_cluster
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration
ROUNDS = 4
CANARIES = 3
WAVE = 27
SOAK = 2.0


def fleet_file(path: Path, round_: int) -> None:
    documents: list[dict[str, Any]] = []
    for i in range(CANARIES + WAVE):
        ring = "canary" if i < CANARIES else "wave-1"
        documents.append(
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {
                    "name": f"r{round_}-c{i:02d}",
                    "namespace": "fleet",
                    "labels": {"ring": ring, "round": str(round_)},
                },
                "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
            }
        )
    documents.append(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": f"app-{round_}", "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"round": str(round_)}},
                "sync": {"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0.0"}}}},
                "rollout": {
                    "stages": [
                        {
                            "name": "canary",
                            "selector": {"matchLabels": {"ring": "canary"}},
                            "maxConcurrency": 1,
                            "minSuccessTime": f"{SOAK:.0f}s",
                        },
                        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "50%"},
                    ]
                },
            },
        }
    )
    path.write_text(yaml.safe_dump_all(documents))


def test_canaries_always_move_first_and_soak_whatever_the_arrival_order(kafka_bootstrap: str, tmp_path: Path) -> None:
    stack = Stack(kafka_bootstrap, tmp_path, partitions=4, tick_interval=0.2)
    flooding = threading.Event()
    flooding.set()

    def flood() -> None:  # unrelated cluster observations keep the router busy
        i = 0
        while flooding.is_set():  # ~250 observations/s, each routed to every journal partition
            batch = [(f"k-{n % 200:03d}", filler_cluster(n % 200).to_bytes()) for n in range(i, i + 50)]
            asyncio.run(client.publish(stack.bootstrap, stack.topics.clusters, batch))
            i += 50
            time.sleep(0.2)

    flooder = threading.Thread(target=flood)
    try:
        stack.start_worker()
        stack.start_applier("--simulate-status")
        flooder.start()
        for round_ in range(ROUNDS):
            path = tmp_path / f"fleet-{round_}.yaml"
            fleet_file(path, round_)
            stack.apply(path)
        for round_ in range(ROUNDS):
            wait_for(
                f"app-{round_} to complete",
                lambda r=round_: (stack.latest("module_status").get(f"app-{r}") or {}).get("phase") == "Complete",
                timeout=120,
            )
        flooding.clear()
        flooder.join()
        decisions = [r.json() for r in stack.records("decisions")]
        for round_ in range(ROUNDS):
            check_order([d for d in decisions if d["module"] == f"app-{round_}"], round_)
    finally:
        flooding.clear()
        if flooder.is_alive():
            flooder.join()
        stack.stop()


def check_order(decisions: list[dict[str, Any]], round_: int) -> None:
    canaries = {f"r{round_}-c{i:02d}" for i in range(CANARIES)}
    assigns = [d for d in decisions if d["action"] == "assign" and d.get("cluster")]
    assert {d["cluster"] for d in assigns} == canaries | {
        f"r{round_}-c{i:02d}" for i in range(CANARIES, CANARIES + WAVE)
    }
    first_wave = next(i for i, d in enumerate(assigns) if d["cluster"] not in canaries)
    assert {d["cluster"] for d in assigns[:first_wave]} == canaries, (
        f"app-{round_}: a wave cluster moved before the canaries: {assigns[: first_wave + 1]}"
    )
    updating: set[str] = set()
    last_canary_success = 0.0
    for decision in decisions:
        cluster = decision.get("cluster")
        if cluster in canaries and decision["action"] == "assign":
            updating.add(cluster)
            assert len(updating) <= 1, f"app-{round_}: two canaries updating at once: {sorted(updating)}"
        if cluster in canaries and decision["action"] == "succeeded":
            updating.discard(cluster)
            last_canary_success = max(last_canary_success, decision["at"])
    assert not updating, f"app-{round_}: canaries never succeeded: {updating}"
    wave_start = assigns[first_wave]["at"]
    assert wave_start - last_canary_success >= SOAK, (
        f"app-{round_}: wave-1 started {wave_start - last_canary_success:.2f}s after the last canary succeeded "
        f"(soak {SOAK}s)"
    )
