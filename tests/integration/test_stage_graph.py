"""Stage graphs end to end on the real broker: a real `rollout worker` (ticks every second)
runs the engine; the test plays the appliers (tests/integration/test_staged_rollout.py's
Driver), reporting `succeeded` for every cluster the engine moves — but holding the us
region's members `updating` until eu is through, so that the two regions run side by side.
canary, then eu and us at once, then prod after both, the eu edge soaking 60 s (time for the
CLI to look while prod waits): `rollout plan` says which stage waits for which, `rollout
status` (and its JSON) shows prod's edges while it waits, `rollout history` has the wait,
and the decisions keep the graph's rules — eu and us started before either was done, prod
only once both had passed and eu's edge had soaked 60 s of engine time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout.wire.decisions import DecisionDocument
from tests.integration.stack import Stack, started, wait_for
from tests.integration.test_staged_rollout import Driver, cluster, module

pytestmark = pytest.mark.integration

RINGS = {
    "dag-can": "canary",
    "dag-eu-1": "eu",
    "dag-eu-2": "eu",
    "dag-us-1": "us",
    "dag-us-2": "us",
    "dag-prod": "prod",
}
STAGES = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
    {"name": "eu", "selector": {"matchLabels": {"ring": "eu"}}, "after": [{"stage": "canary"}]},
    {"name": "us", "selector": {"matchLabels": {"ring": "us"}}, "after": [{"stage": "canary"}]},
    {
        "name": "prod",
        "selector": {"matchLabels": {"ring": "prod"}},
        "after": [{"stage": "eu", "soak": "60s"}, {"stage": "us"}],
        "quorum": "All",
    },
]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("graph"), partitions=2) as stack:
        yield stack


def decisions(stack: Stack) -> list[DecisionDocument]:
    read = (DecisionDocument.read(json.loads(r.value)) for r in stack.records("decisions") if r.value)
    return [d for d in read if d.module == "dag"]


def test_regions_run_side_by_side_after_the_canary_and_prod_waits_for_both_and_the_soak(
    stack: Stack, tmp_path: Path
) -> None:
    for name, ring in RINGS.items():
        stack.send("clusters", name, cluster(name, labels={"app": "dag", "ring": ring, "order": "0"}))
    wait_for("the clusters to be published", lambda: len(stack.records("clusters")) >= len(RINGS))
    applied = module("dag", app="dag", tag="1.0.0", stages=STAGES)
    (tmp_path / "dag.yaml").write_text(yaml.safe_dump(applied.module.model_dump(mode="json", by_alias=True)))
    code, text = stack.rollout("plan", "-f", str(tmp_path / "dag.yaml"))
    assert code == 0, text
    assert "after eu (then soaks 60s), us: starts once 2 of 2 passed (quorum All)" in text, text

    eu_through = False

    def verdict(name: str, revision: str) -> str:
        return "succeeded" if not name.startswith("dag-us") or eu_through else "updating"

    stack.send("intents", "dag", applied)
    driver = Driver(stack, "dag", verdict)

    def regions_running() -> bool:
        driver.step()
        states = {s["name"]: s["state"] for s in driver.status().get("stages", [])}
        return states.get("us") == "Running" and states.get("eu") == "Succeeded"

    wait_for("eu through while us still runs", regions_running, timeout=120, interval=0.3)
    eu_through = True
    for name in ("dag-us-1", "dag-us-2"):  # now they succeed
        driver.reported.discard((name, "1.0.0"))

    def prod_soaking() -> dict[str, Any] | None:
        driver.step()
        prod = next((s for s in driver.status().get("stages", []) if s["name"] == "prod"), {})
        edges = {edge["stage"]: edge for edge in prod.get("after", [])}
        us_counts = edges.get("us", {}).get("counts")
        return prod if us_counts and edges.get("eu", {}).get("soakUntilAt") else None

    prod = wait_for("prod to wait on eu's soak alone", prod_soaking, timeout=120, interval=0.3)
    assert prod["state"] == "Pending" and (prod["quorum"], prod["needed"]) == ("All", 2)
    until = prod["after"][0]["soakUntilAt"]
    code, output = stack.rollout("status", "dag", "-o", "json")
    assert code == 0
    shown = next(s for s in json.loads(output)["stages"] if s["name"] == "prod")
    assert shown["after"][0]["soakUntilAt"] == until
    code, text = stack.rollout("status", "dag")
    assert f"stage prod: eu passed, soaking until {until}; us passed (1 of 2 needed, quorum All)" in text, text

    driver.until("Complete", timeout=240)
    log = decisions(stack)
    started = {d.because.stage: d.at for d in log if d.action == "stage-started"}  # type: ignore[attr-defined]
    succeeded = {d.because.stage: d.at for d in log if d.action == "stage-succeeded"}  # type: ignore[attr-defined]
    # side by side: both started before either succeeded — by their order in the module's
    # decision log (one partition), as engine time may not tick between a start and a success
    order = {(d.action, d.because.stage): i for i, d in enumerate(log) if d.action.startswith("stage-")}  # type: ignore[attr-defined]
    assert max(order["stage-started", "eu"], order["stage-started", "us"]) < min(
        order["stage-succeeded", "eu"], order["stage-succeeded", "us"]
    )
    assert started["prod"] >= succeeded["eu"] + 60 and started["prod"] >= succeeded["us"]
    waits = [d for d in log if d.action == "stage-waiting"]
    assert waits and all(d.because.stage == "prod" for d in waits)  # type: ignore[attr-defined]
    code, output = stack.rollout("history", "dag")
    assert code == 0 and "stage prod waits for its upstream stages (All:" in output, output
