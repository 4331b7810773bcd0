"""The partition lifecycle's table (streams/lifecycle.py): what it allows and refuses."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from streams.lifecycle import (
    MAX_REPAIR_BACKOFF,
    TRANSITIONS,
    IllegalTransition,
    PartitionPhase,
    RepairSchedule,
)
from streams.slots import Slot

P = PartitionPhase


class _Stateless:
    state = None

    def process(self, records: object, position: int, out: object) -> None:
        pass

    def reset(self) -> None:
        pass


def _reachable(start: PartitionPhase) -> set[PartitionPhase]:
    seen, frontier = {start}, [start]
    while frontier:
        for phase in TRANSITIONS[frontier.pop()]:
            if phase not in seen:
                seen.add(phase)
                frontier.append(phase)
    return seen


def test_every_phase_can_get_back_to_ready_and_to_suspended() -> None:
    for phase in PartitionPhase:
        assert {P.READY, P.SUSPENDED} <= _reachable(phase) | {phase}, phase


def test_only_a_take_over_makes_a_partition_ready_or_leaves_broken_and_suspended() -> None:
    into_ready = {phase for phase, targets in TRANSITIONS.items() if P.READY in targets}
    assert into_ready == {P.TAKING_OVER, P.COMMITTING}, "COMMITTING: its transaction committed"
    assert TRANSITIONS[P.BROKEN] == {P.TAKING_OVER, P.SUSPENDED}
    assert TRANSITIONS[P.SUSPENDED] == {P.TAKING_OVER}


def test_a_transaction_begins_only_on_a_ready_partition() -> None:
    assert {phase for phase, targets in TRANSITIONS.items() if P.COMMITTING in targets} == {P.READY}


def test_a_new_slot_is_suspended_until_its_take_over() -> None:
    slot = Slot(TopicPartition("in", 3), _Stateless())
    assert slot.phase is P.SUSPENDED and not slot.phase.owned and not slot.phase.delivering
    slot.enter(P.TAKING_OVER)
    slot.enter(P.READY)
    assert slot.phase.owned and slot.phase.delivering and slot.broken is None


def test_an_illegal_transition_is_refused_and_names_the_partition() -> None:
    slot = Slot(TopicPartition("in", 3), _Stateless())
    with pytest.raises(IllegalTransition, match="in-3: suspended cannot become committing"):
        slot.enter(P.COMMITTING)
    assert slot.phase is P.SUSPENDED


def test_a_broken_partition_says_why_only_while_it_is_broken() -> None:
    slot = Slot(TopicPartition("in", 0), _Stateless())
    slot.enter(P.TAKING_OVER)
    slot.fail("echo", TimeoutError("no answer"), now=10.0)
    assert slot.broken == "TimeoutError: no answer"
    assert slot.repair.retry_at == 10.2 and not slot.repair.due(10.1) and slot.repair.due(10.2)
    slot.enter(P.SUSPENDED)
    assert slot.broken is None


def test_the_repair_backoff_doubles_up_to_its_bound_and_starts_over_after_a_success() -> None:
    schedule = RepairSchedule()
    waits = []
    for _ in range(8):
        before = schedule.backoff
        schedule.failed(now=0.0)
        waits.append(schedule.retry_at)
        assert schedule.backoff == min(before * 2, MAX_REPAIR_BACKOFF)
    assert waits[:4] == [0.2, 0.4, 0.8, 1.6] and waits[-1] == MAX_REPAIR_BACKOFF
    schedule.succeeded()
    schedule.failed(now=0.0)
    assert schedule.retry_at == 0.2
