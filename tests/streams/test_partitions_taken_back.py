"""A stage that loses its partitions and is assigned them back — an expelled member rejoining
after its session expired (issue 22: a 100,000-cluster worker whose event loop stopped past its
session timeout) — on the in-memory broker, and what a partition it lets go of for good keeps.

* Taken back unchanged: the take-over reads nothing (`Slot.state_position` is past the state
  records of its own last commit) and keeps the processor's derived caches — the decider's
  indexes, minutes of one fold to rebuild at fleet scale — then commits again.
* Taken back after someone else wrote its state: the take-over folds that and resets.
* Let go for good (another worker owns it): its state is released at once, and a decider's
  reset drops its old engine's indexes at once — the engine sits in reference cycles the
  worker's frozen heap (streams/heap.py) would keep for minutes.
"""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved
from streams.decider import DecidePartition
from streams.lifecycle import PartitionPhase
from streams.outputs import Outputs
from tests.integration.chaos import cluster, module
from tests.streams.memory_stage import INPUT, STATE, Stage

P0, P1 = TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)


async def test_a_partition_taken_back_unchanged_folds_nothing_keeps_its_caches_and_commits_again() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    stage.produce(0, b"a", b"b")
    stage.produce(1, b"c")
    await stage.run_until_quiet()
    slots = {tp: worker.runner.slots[tp] for tp in (P0, P1)}
    resets = {tp: slot.processor.resets for tp, slot in slots.items()}  # type: ignore[attr-defined]

    await worker.runner.revoke([P0, P1])  # expelled: the group's callbacks, as aiokafka calls them
    await worker.runner.assign([P0, P1])
    await worker.runner.taken_over()

    for tp, slot in slots.items():
        assert worker.runner.slots[tp] is slot and slot.phase is PartitionPhase.READY
        assert slot.processor.resets == resets[tp], f"{tp}: taken back unchanged, its caches were dropped"  # type: ignore[attr-defined]
    stage.produce(0, b"d")
    await stage.run_until_quiet()
    assert stage.outputs(0) == [b"a", b"b", b"d"], "it commits again"
    state = slots[P0].processor.state
    assert state is not None and dict(state.mappings["echoed"]) == {"count": 3, "last": 2}
    assert stage.committed_state(0)["echoed:count"] == 3


async def test_a_partition_taken_back_after_its_state_was_written_elsewhere_refolds_and_resets() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    stage.produce(0, b"a")
    await stage.run_until_quiet()
    slot = worker.runner.slots[P0]
    resets = slot.processor.resets  # type: ignore[attr-defined]

    await worker.runner.revoke([P0, P1])
    stage.broker.produce(STATE, 0, [b"41"], key=b"echoed:count")  # another owner's commit, meanwhile
    await worker.runner.assign([P0, P1])
    await worker.runner.taken_over()

    assert slot.processor.resets == resets + 1  # type: ignore[attr-defined]
    state = slot.processor.state
    assert state is not None and state.mappings["echoed"]["count"] == 41


async def test_the_state_position_after_a_commit_is_just_past_its_last_state_record() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    stage.produce(0, b"a", b"b", b"c")
    await stage.run_until_quiet()
    slot = worker.runner.slots[P0]
    state_tp = TopicPartition(STATE, 0)

    after, _ = stage.broker.read_committed(state_tp, slot.state_position, None)
    last, _ = stage.broker.read_committed(state_tp, slot.state_position - 1, None)

    assert after == [], "nothing of its own is read again"
    assert [r.key for r in last] == [b"tracking:position"], "and nothing is skipped"


async def test_a_partition_another_worker_owns_now_lets_go_of_its_state_at_once() -> None:
    stage = Stage()
    first = await stage.start_worker()
    stage.produce(1, b"a")
    await stage.run_until_quiet()
    dropped = first.runner.slots[P1]
    resets = dropped.processor.resets  # type: ignore[attr-defined]

    second = await stage.start_worker()
    await first.runner.step()  # the rebalance: P1 goes to the second worker
    await second.runner.step()

    assert P1 not in first.runner.partitions and P1 in second.runner.slots
    state = dropped.processor.state
    assert state is not None and all(not mapping.committed for mapping in state.mappings.values())
    assert dropped.processor.resets == resets + 1  # type: ignore[attr-defined]
    assert stage.committed_state(1)["echoed:count"] == 1, "what it committed stays on the state topic"


def test_a_reset_decider_drops_the_old_engines_indexes_at_once() -> None:
    decider = DecidePartition(TopicPartition("journal", 0), TopicNames("t."), Metrics())
    events = [ClusterObserved(cluster=cluster(i).cluster) for i in range(5)] + [module("base", "1.0.0")]
    records = [
        ConsumerRecord("journal", 0, offset, 0, 0, None, event.to_bytes(), None, 0, 0, [])
        for offset, event in enumerate(events)
    ]
    decider.process(records, len(records), Outputs("dead"))
    decider.state.commit_batch()
    old = decider.engine
    assert old.book.index("base"), "the module's index is built"

    decider.reset()

    assert decider.engine is not old
    assert old.book._members == {} and old.book._pending == {}, "the old engine's indexes are gone"
    assert decider.engine.book.index("base") == {f"k-{i:03d}" for i in range(5)}, "rebuilt from the state"
