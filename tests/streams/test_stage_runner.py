"""`StageRunner` (streams/delivery.py) on the in-memory broker: take-overs, rebalances,
repairs and stops, through the partitions' phases (streams/lifecycle.py)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from streams.lifecycle import FIRST_REPAIR_BACKOFF, PartitionPhase
from streams.memory_broker import FaultPoint, MemoryStateReader
from streams.state import PartitionState
from tests.streams.memory_stage import INPUT, OUTPUT, STATE, Stage

P0, P1 = TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)


async def test_an_assigned_partition_is_taken_over_and_ready_at_its_tracked_position() -> None:
    stage = Stage()
    first = await stage.start_worker()
    stage.produce(0, b"a", b"b")
    await stage.run_until_quiet()
    await stage.stop(first)

    second = await stage.start_worker()
    await second.runner.step()  # joins: the take-over runs in a task of its own
    await second.runner.taken_over()

    assert second.runner.joined.is_set() and second.runner.healthy
    slot = second.runner.slots[P0]
    assert slot.phase is PartitionPhase.READY
    assert slot.position == slot.committed_position == 2
    assert await second.transport.consumers[0].position(P0) == 2, "sought to the tracked position"
    assert stage.outputs(0) == [b"a", b"b"]


async def test_a_new_owner_fences_the_previous_owner_and_nothing_it_began_is_seen() -> None:
    stage = Stage(commit_hops=50)
    zombie = await stage.start_worker()
    await zombie.runner.step()
    stage.produce(0, b"a")
    await zombie.runner.step()  # its transaction is in flight...
    assert zombie.runner.slots[P0].phase is PartitionPhase.COMMITTING
    stage.broker.group("echo").expel(zombie.transport.consumers[0], unaware_polls=1)  # ...and it is out

    owner = await stage.start_worker()
    await owner.runner.step()  # the group's rebalance: the partition is the owner's, fenced...
    await owner.runner.taken_over()
    await owner.runner.step()  # ...and redone
    await stage.settle()

    assert zombie.runner.slots[P0].phase is PartitionPhase.BROKEN
    assert "ProducerFenced" in (zombie.runner.slots[P0].broken or "")
    assert owner.runner.slots[P0].phase is PartitionPhase.READY
    assert stage.outputs(0) == [b"a"], "once: the zombie's transaction never shows"
    assert stage.broker.open_transactions() == []


async def test_a_revoked_partition_waits_suspended_and_its_returning_owner_reads_only_what_is_new() -> None:
    stage = Stage()
    first = await stage.start_worker()
    stage.produce(0, b"a")
    await stage.run_until_quiet()
    second = await stage.start_worker()
    await first.runner.step()  # rebalance: P0 stays with the first worker, P1 goes to the second
    await second.runner.step()
    assert set(first.runner.slots) == {P0} and set(second.runner.slots) == {P1}
    first_slot = first.runner.slots[P0]
    stage.produce(1, b"b")
    await stage.run_until_quiet()

    await stage.stop(second)  # P1 comes back to the first worker
    await first.runner.step()

    assert first.runner.partitions[P0] is first_slot, "kept through the rebalance"
    assert first.runner.slots[P1].phase is PartitionPhase.READY
    assert stage.outputs(1) == [b"b"]
    state = first.runner.slots[P1].processor.state
    assert state is not None and state.mappings["echoed"]["count"] == 1


async def test_a_partition_revoked_while_committing_is_suspended_once_its_transaction_ended() -> None:
    stage = Stage(commit_hops=50)
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.produce(0, b"a")
    await worker.runner.step()
    slot = worker.runner.slots[P0]
    assert slot.phase is PartitionPhase.COMMITTING

    await worker.runner.revoke([P0])

    assert slot.phase is PartitionPhase.SUSPENDED and slot.inflight is None
    assert slot.producers == [], "its producers are closed"
    assert stage.outputs(0) == [b"a"]
    assert P0 not in worker.runner.slots and worker.runner.partitions[P0] is slot


async def test_a_broken_partition_is_repaired_once_its_backoff_is_over_and_not_before() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.broker.inject(FaultPoint.COMMIT, match=".in.0")
    stage.produce(0, b"a")
    await worker.runner.step()
    await stage.settle()
    slot = worker.runner.slots[P0]
    assert slot.phase is PartitionPhase.BROKEN and not worker.runner.healthy
    [broken] = worker.runner.broken()
    assert broken.startswith("in-0: KafkaConnectionError") and broken.endswith("injected fault: commit")

    await worker.runner.step()
    assert slot.phase is PartitionPhase.BROKEN, "not before its backoff is over"
    stage.clock.advance(FIRST_REPAIR_BACKOFF)
    await worker.runner.step()  # repaired: fenced (the open transaction aborted), sought back
    assert slot.phase is PartitionPhase.READY and stage.broker.open_transactions() == []
    await worker.runner.step()
    await stage.settle()

    assert stage.outputs(0) == [b"a"]
    assert worker.runner.healthy


async def test_the_wait_before_a_repair_doubles_while_the_take_over_fails_and_resets_once_it_works() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    stage.broker.inject(FaultPoint.INIT, match="echo.in.0.1", times=3)
    await worker.runner.step()  # the take-over of the assignment fails (fencing the second id)
    slot = worker.runner.partitions[P0]
    assert slot.phase is PartitionPhase.BROKEN

    waits = []
    while slot.phase is PartitionPhase.BROKEN:
        waits.append(round(slot.repair.retry_at - stage.clock.now, 3))
        stage.clock.advance(waits[-1])
        await worker.runner.step()

    assert waits == [0.2, 0.4, 0.8]
    assert slot.repair.backoff == FIRST_REPAIR_BACKOFF


async def test_what_a_poll_fetched_before_repairing_a_partition_is_not_delivered() -> None:
    """The repair seeks back to the tracked position; the records this poll brought were
    read from where the consumer was, past the batch that broke the partition — delivered,
    they would skip the inputs in between."""
    stage = Stage(max_records=2)
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.produce(0, b"a", b"raise", b"c", b"d", b"e")
    await worker.runner.step()  # "a", "raise": the batch fails, the partition breaks
    assert worker.runner.slots[P0].phase is PartitionPhase.BROKEN
    stage.clock.advance()

    await worker.runner.step()  # fetches "c", "d", then repairs
    await stage.run_until_quiet()

    assert stage.outputs(0) == [b"a", b"c", b"d", b"e"]
    assert stage.dead_letters() == [(0, 1)]


async def test_a_stateless_stage_commits_its_position_when_only_transaction_markers_came() -> None:
    stage = Stage(stateful=False)
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.broker.produce_transaction(INPUT, 0, [b"a", b"b"], commit=False)  # aborted

    await worker.runner.step()
    await stage.settle()

    assert stage.broker.group("echo").offsets[P0] == 3, "past the aborted records and their marker"
    assert worker.runner.slots[P0].position == 3
    assert stage.outputs(0) == []


async def test_a_take_over_that_cannot_read_the_state_breaks_the_partition_and_retries() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    stage.produce(0, b"a")
    await stage.run_until_quiet()
    await stage.stop(worker)
    stage.broker.inject(FaultPoint.CATCH_UP, match=STATE)

    successor = await stage.start_worker()
    await successor.runner.step()
    [broken] = successor.runner.broken()
    assert broken.startswith("in-0: ") and broken.endswith("injected fault: catch up")
    await stage.run_until_quiet()

    state = successor.runner.slots[P0].processor.state
    assert state is not None and state.mappings["echoed"]["count"] == 1
    assert successor.runner.slots[P0].position == 1


async def test_a_stop_ends_the_transactions_in_flight_and_leaves_the_group() -> None:
    stage = Stage(commit_hops=50)
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.produce(1, b"a")
    await worker.runner.step()
    assert worker.runner.slots[P1].phase is PartitionPhase.COMMITTING

    await stage.stop(worker)

    assert stage.outputs(1) == [b"a"]
    assert worker.runner.partitions == {}
    assert stage.broker.group("echo").members == []
    assert [r.value for r in stage.broker.committed_records(OUTPUT, 1)] == [b"a"]


async def test_a_commit_done_but_unanswered_is_read_back_by_the_repair_not_redone() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    await worker.runner.step()
    stage.broker.inject(FaultPoint.COMMIT_UNANSWERED, match=".in.0")
    stage.produce(0, b"a")
    await worker.runner.step()
    await stage.settle()
    slot = worker.runner.slots[P0]
    assert slot.phase is PartitionPhase.BROKEN and stage.outputs(0) == [b"a"]
    state = slot.processor.state
    assert state is not None and dict(state.mappings["echoed"]) == {}, "the state dropped what it believes failed"

    await stage.run_until_quiet()

    assert stage.outputs(0) == [b"a"]
    assert dict(state.mappings["echoed"]) == {"count": 1, "last": 0}, "caught up from the state topic"
    assert slot.position == 1


async def test_a_state_catch_up_longer_than_the_take_over_timeout_is_not_cut_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A catch-up is bounded by its progress (the reader's), not by its length: bounded at
    TAKE_OVER_TIMEOUT, a 100,000-cluster partition's state under load failed, and its repair
    read it all again."""
    stage = Stage()
    worker = await stage.start_worker()
    stage.produce(0, b"a")
    await stage.run_until_quiet()
    await stage.stop(worker)
    monkeypatch.setattr("streams.delivery.TAKE_OVER_TIMEOUT", 0.5)
    reads: list[int] = []  # the partitions read
    catch_up = MemoryStateReader.catch_up

    async def long_read(self: MemoryStateReader, state: PartitionState, partition: int, start: int) -> tuple[int, int]:
        await asyncio.sleep(1.5)  # a large state, folded batch after batch
        folded, end = await catch_up(self, state, partition, start)
        reads.append(partition)
        return folded, end

    monkeypatch.setattr(MemoryStateReader, "catch_up", long_read)

    successor = await stage.start_worker()
    await successor.runner.step()
    await successor.runner.taken_over()

    assert successor.runner.broken() == []
    assert successor.runner.slots[P0].phase is PartitionPhase.READY
    assert reads.count(0) == 1, "partition 0's state read once, not again by a repair"
    state = successor.runner.slots[P0].processor.state
    assert state is not None and state.mappings["echoed"]["count"] == 1
