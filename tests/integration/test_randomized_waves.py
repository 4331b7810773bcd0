"""Randomized waves end to end on the real broker: a real `rollout worker` (ticks every
second) runs the engine; the test plays the appliers (tests/integration/test_staged_rollout.py's
Driver), reporting `succeeded` for every cluster the engine moves. A stage of nine clusters
in waves of three, seeded, 20 s apart (time for the CLI to look between two waves), with
maxConcurrency 2, moves wave by wave in the order `rollout plan` printed before the apply;
`rollout status` (and its JSON) shows the open wave and when the next starts; `rollout
history` has each wave's start with its members and seed; and the delay is kept: each wave
starts at least 20 s of engine time after the last member of the one before succeeded."""

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

NAMES = [f"tide-{i}" for i in range(9)]
WAVES = {"size": 3, "seed": 11, "delay": "20s"}
STAGES = [{"name": "all", "maxConcurrency": 2, "waves": WAVES}]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("waves"), partitions=2) as stack:
        yield stack


def planned_waves(stack: Stack, tmp_path: Path) -> list[list[str]]:
    """What `rollout plan -o json` says the stage's waves are, before anything is applied."""
    document = module("tide", app="tide", tag="1.0.0", stages=STAGES).module.model_dump(mode="json", by_alias=True)
    (tmp_path / "tide.yaml").write_text(yaml.safe_dump(document))
    code, output = stack.rollout("plan", "-f", str(tmp_path / "tide.yaml"), "-o", "json")
    assert code == 0, output
    [plan] = json.loads(output)
    return plan["stages"][0]["waves"]


def decisions(stack: Stack) -> list[DecisionDocument]:
    read = (DecisionDocument.read(json.loads(r.value)) for r in stack.records("decisions") if r.value)
    return [d for d in read if d.module == "tide"]


def test_a_stage_moves_in_seeded_waves_with_a_delay_between_them(stack: Stack, tmp_path: Path) -> None:
    for name in NAMES:
        stack.send("clusters", name, cluster(name, labels={"app": "tide", "order": "0"}))
    wait_for("the clusters to be published", lambda: len(stack.records("clusters")) >= len(NAMES))
    plan = planned_waves(stack, tmp_path)
    assert [len(wave) for wave in plan] == [3, 3, 3] and sorted(name for wave in plan for name in wave) == NAMES
    stack.send("intents", "tide", module("tide", app="tide", tag="1.0.0", stages=STAGES))
    driver = Driver(stack, "tide")

    def between_waves() -> dict[str, Any] | None:
        driver.step()
        waves = driver.status().get("stages", [{}])[0].get("waves") or {}
        return waves if waves.get("nextWaveAt") else None

    waves = wait_for("the first wave to be done", between_waves, timeout=120, interval=0.2)
    assert (waves["current"], waves["count"], waves["seed"], waves["delay"]) == (1, 3, 11, "20s")
    moved = {name for name, t in driver.targets().items() if t["revision"] == "1.0.0"}
    assert moved == set(plan[0]), "the first wave is not the one the plan printed"
    code, output = stack.rollout("status", "tide", "-o", "json")
    assert code == 0 and json.loads(output)["stages"][0]["waves"] == waves
    code, text = stack.rollout("status", "tide")
    assert f"stage all: wave 1/3 of 3 (seed 11, 20s apart); next wave at {waves['nextWaveAt']}" in text, text

    driver.until("Complete", timeout=240)
    assert driver.max_updating["all"] <= 2  # maxConcurrency holds within each wave

    log = decisions(stack)
    started = [d for d in log if d.action == "wave-started"]
    assert [d.because.clusters for d in started] == plan  # type: ignore[attr-defined]
    assert {d.because.seed for d in started} == {11}  # type: ignore[attr-defined]
    succeeded_at = {d.cluster: d.at for d in log if d.action == "succeeded"}
    assigned_at = {d.cluster: d.at for d in log if d.action == "assign"}
    for number, (wave, before) in enumerate(zip(started[1:], plan, strict=False), start=2):
        done = max(succeeded_at[name] for name in before)
        assert wave.at >= done + 20, f"wave {number} started {wave.at - done:.1f} s after the one before was done"
        members = plan[number - 1]
        assert min(assigned_at[name] for name in members) >= wave.at  # nobody moved before its wave
    code, output = stack.rollout("history", "tide")
    assert code == 0 and f"stage all wave 2/3 started (seed 11, size 3): {', '.join(plan[1])}" in output
