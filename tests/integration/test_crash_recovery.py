"""Effectively-once under crashes and scaling, strictly (no xfail): each round streams a
fleet in while workers are SIGKILLed (mid-stream, during state recovery, during a
rebalance) or join and leave, then rolls a new revision out, and checks that every input
reached the journal, no stage skipped or double-counted an offset, the projections equal
a clean replay and no snapshot version has two contents (tests/integration/chaos.py).

ROLLOUT_CRASH_ROUNDS (default 1) rounds per disruption; `benchmarks/chaos.py` runs many.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.chaos import DISRUPTIONS, run_round

pytestmark = pytest.mark.integration
ROUNDS = int(os.environ.get("ROLLOUT_CRASH_ROUNDS", "1"))


@pytest.mark.parametrize("round_", range(1, ROUNDS + 1))
@pytest.mark.parametrize("disruption", DISRUPTIONS)
def test_no_input_lost_or_applied_twice_when_workers_are_killed_or_scaled(
    kafka_bootstrap: str, tmp_path: Path, disruption: str, round_: int
) -> None:
    result = run_round(kafka_bootstrap, tmp_path, disruption, seed=round_)
    assert result.inputs > 150, "the round published less than the fleet: nothing was tested"
    assert result.ok, result.explain()
