"""`rollout plan` on a stage with randomized waves: which cluster is in which wave, in what
order — the waves the engine then runs (rollout/engine/waves.py), seed given or derived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rollout_cli.main import cli
from tests.rollout.builders import cluster, given, module, stage

NAMES = [f"edge-{n:02d}" for n in range(1, 11)]


def write_fleet(tmp_path: Path, waves: dict[str, object]) -> list[str]:
    manifest = module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("edge", waves=waves))
    clusters = [cluster("canary-1", {"ring": "canary"}), *[cluster(name, {}) for name in NAMES]]
    clusters.append(cluster("edge-down", {}, ready=False))
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(manifest.model_dump(mode="json", by_alias=True)))
    documents = [c.model_dump(mode="json", by_alias=True) for c in clusters]
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump_all(documents))
    return ["plan", "-f", str(tmp_path / "app.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]


def engine_waves(waves: dict[str, object]) -> list[list[str]]:
    """The members of each wave the engine starts, every cluster succeeding."""
    manifest = module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("edge", waves=waves))
    fleet = given(
        cluster("canary-1", {"ring": "canary"}), *[cluster(n, {}) for n in NAMES], cluster("edge-down", ready=False)
    )
    fleet.apply(manifest)
    for _ in range(10):
        fleet.succeed_all("app", "v1")
        fleet.wait(600)
    return [d.because.clusters for d in fleet.decisions if d.action == "wave-started"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("waves", [{"size": 4, "seed": 42, "delay": "10m"}, {"size": "30%"}], ids=["seed", "derived"])
def test_plan_shows_each_wave_in_the_order_the_engine_moves_them(tmp_path: Path, waves: dict[str, object]) -> None:
    command = write_fleet(tmp_path, waves)
    result = CliRunner().invoke(cli, [*command, "-o", "json"])
    assert result.exit_code == 0, result.output
    [plan] = json.loads(result.output)
    edge = plan["stages"][1]
    assert edge["waves"] == engine_waves(waves)
    assert sorted(name for wave in edge["waves"] for name in wave) == NAMES  # edge-down skipped, not ready
    flat = [name for wave in edge["waves"] for name in wave]
    assert flat != sorted(flat)  # shuffled, not the name order
    assert edge["skipped_not_ready"] == ["edge-down"]
    text = CliRunner().invoke(cli, command).output
    seed = edge["wave_seed"]
    assert f"wave(s) in random order, seed {seed}" in text
    assert f"wave 1: {', '.join(edge['waves'][0])}" in text
    if "seed" in waves:
        assert seed == 42 and "10m apart" in text
