"""`rollout status --wait` keeps its own copy of the engine's phases (importing the engine
would slow `rollout --help`): the copy must stay the engine's list."""

from __future__ import annotations

from typing import get_args

from rollout.state import Phase
from rollout_cli.gates import FAILED_PHASES, PHASES


def test_the_cli_knows_exactly_the_engines_phases() -> None:
    assert set(PHASES) == set(get_args(Phase))
    assert FAILED_PHASES <= set(PHASES)
