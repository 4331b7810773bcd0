"""`rollout status --wait` keeps its own copy of the phases (importing pydantic would slow
`rollout --help`): the copy must stay the module-status document's list, which is the
engine's (rollout/wire/status.py)."""

from __future__ import annotations

from typing import get_args

from rollout.engine.state import Phase
from rollout.wire.status import FAILED_PHASES as DOCUMENT_FAILED_PHASES
from rollout.wire.status import ROLLOUT_PHASES, ModuleStatus
from rollout_cli.reading.status_wait import FAILED, FAILED_PHASES, MET, PHASES, judge, parse_condition


def test_the_cli_knows_exactly_the_phases_the_documents_carry() -> None:
    assert PHASES == ROLLOUT_PHASES and set(ROLLOUT_PHASES) == set(get_args(Phase))
    assert FAILED_PHASES == DOCUMENT_FAILED_PHASES and FAILED_PHASES <= set(PHASES)


def status(phase: str) -> ModuleStatus:
    return ModuleStatus(module="app", phase=phase)


def test_waiting_for_a_rollback_goes_on_through_rolling_back() -> None:
    rolled_back = parse_condition("phase=RolledBack")
    assert judge(status("RollingBack"), rolled_back) is None
    assert judge(status("RolledBack"), rolled_back) == MET
    assert judge(status("Halted"), rolled_back) == FAILED


def test_waiting_for_completion_stops_at_the_first_failure_phase() -> None:
    complete = parse_condition("phase=Complete")
    assert judge(status("RollingBack"), complete) == FAILED
    assert judge(status("Progressing"), complete) is None
    assert judge(ModuleStatus(module="app", phase="Pending", reason="held"), complete) is None  # pending: on its way
