"""`rollout status --wait` keeps its own copy of the engine's phases (importing the engine
would slow `rollout --help`): the copy must stay the engine's list."""

from __future__ import annotations

from typing import get_args

from rollout.engine.state import Phase
from rollout_cli.gates import FAILED, FAILED_PHASES, MET, PHASES, judge, parse_condition


def test_the_cli_knows_exactly_the_engines_phases() -> None:
    assert set(PHASES) == set(get_args(Phase))
    assert FAILED_PHASES <= set(PHASES)


def test_waiting_for_a_rollback_goes_on_through_rolling_back() -> None:
    rolled_back = parse_condition("phase=RolledBack")
    assert judge({"phase": "RollingBack"}, rolled_back) is None
    assert judge({"phase": "RolledBack"}, rolled_back) == MET
    assert judge({"phase": "Halted"}, rolled_back) == FAILED


def test_waiting_for_completion_stops_at_the_first_failure_phase() -> None:
    complete = parse_condition("phase=Complete")
    assert judge({"phase": "RollingBack"}, complete) == FAILED
    assert judge({"phase": "Progressing"}, complete) is None
