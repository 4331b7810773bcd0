"""After a reset (a transaction that failed, a take-over that folded another owner's writes)
the decider's new engine has no indexes; they are rebuilt before its next fold one module at a
time, and the stage lets the event loop run between the steps — built inside the fold, a
100,000-cluster partition's were one step longer than the session timeout (issue 22: the
worker was expelled, its transactions failed, their resets dropped the indexes again)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from streams.decider import DecidePartition
from streams.outputs import Outputs
from streams.state import _LazyCommitted
from tests.integration.chaos import cluster, module
from tests.streams.memory_stage import INPUT, Stage

MODULES = ("base", "extra", "more")


def folded_decider() -> DecidePartition:
    decider = DecidePartition(TopicPartition("journal", 0), TopicNames("t."), Metrics())
    events = [ClusterObserved(cluster=cluster(i).cluster) for i in range(5)] + [module(m, "1.0.0") for m in MODULES]
    records = [
        ConsumerRecord("journal", 0, offset, 0, 0, None, event.to_bytes(), None, 0, 0, [])
        for offset, event in enumerate(events)
    ]
    decider.process(records, len(records), Outputs("dead"))
    decider.state.commit_batch()
    return decider


def test_a_reset_decider_rebuilds_its_indexes_one_module_a_step_before_its_next_fold() -> None:
    decider = folded_decider()
    list(decider.warm_up())
    decider.reset()
    assert decider.engine.book._members == {}

    steps = list(decider.warm_up())

    assert steps == ["fleet", *MODULES], "the fleet's names, then one module a step"
    assert set(decider.engine.book._members) == set(MODULES)
    assert decider.engine.book.index("base") == {f"k-{i:03d}" for i in range(5)}
    assert list(decider.warm_up()) == [], "warm: nothing to do until the next reset"


def test_a_warm_up_cut_short_by_a_reset_leaves_the_new_engine_to_the_next_one() -> None:
    decider = folded_decider()
    steps = decider.warm_up()
    assert next(steps) == "fleet"
    decider.reset()  # the transaction the warm-up ran beside failed

    assert list(steps) == [], "it stops: the old engine is not built on"
    assert decider.cold and list(decider.warm_up()) == ["fleet", *MODULES]


class Ticker:
    """Counts the event loop's turns, as the consumer's heartbeat task needs them."""

    def __init__(self) -> None:
        self.turns = 0

    async def run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)


async def test_the_stage_lets_the_event_loop_run_between_a_processors_warm_up_steps() -> None:
    stage = Stage()
    worker = await stage.start_worker()
    await worker.runner.step()
    ticker = Ticker()
    seen: list[int] = []

    def warming() -> Iterator[str]:
        for step in ("fleet", "a", "b"):
            seen.append(ticker.turns)
            yield step

    processor = worker.runner.slots[TopicPartition(INPUT, 0)].processor
    processor.warm_up = warming  # type: ignore[attr-defined]
    ticking = asyncio.create_task(ticker.run())
    try:
        stage.produce(0, b"a")
        await stage.run_until_quiet()
    finally:
        ticking.cancel()

    assert len(seen) == 3
    assert seen[0] < seen[1] < seen[2], "the loop turned between the steps"
    assert stage.outputs(0) == [b"a"]


def staged_module(name: str, canary: int) -> ModuleApplied:
    """A module whose canary moves `canary` clusters at a time: the rest wait, pending."""
    return ModuleApplied(
        module=MANIFEST_ADAPTER.validate_python(
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "Module",
                "metadata": {"name": name, "namespace": "fleet"},
                "spec": {
                    "selector": {},
                    "sync": {"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0.0"}}}},
                    "rollout": {
                        "stages": [
                            {"name": "canary", "selector": {"matchLabels": {"tier": "0"}}, "maxConcurrency": canary},
                            {"name": "rest", "maxConcurrency": 1},
                        ]
                    },
                },
            }
        )
    )


def staged_decider() -> DecidePartition:
    """Eleven clusters and two staged modules: members updating, pending in two queues."""
    decider = DecidePartition(TopicPartition("journal", 0), TopicNames("t."), Metrics())
    events = [ClusterObserved(cluster=cluster(i).cluster) for i in range(11)]
    events += [staged_module("app", canary=1), staged_module("web", canary=2)]
    records = [
        ConsumerRecord("journal", 0, offset, 0, 0, None, event.to_bytes(), None, 0, 0, [])
        for offset, event in enumerate(events)
    ]
    decider.process(records, len(records), Outputs("dead"))
    STAGED_CHANGELOG[:] = decider.state.changelog()
    decider.state.commit_batch()
    return decider


STAGED_CHANGELOG: list[tuple[bytes, bytes | None]] = []
"""What `staged_decider` committed, as a new owner reads it from decide-state."""


def indexes(decider: DecidePartition) -> dict[str, object]:
    book = decider.engine.book
    return {
        name: getattr(book, name)
        for name in ("_members", "_pending", "_updating", "_held", "_late", "_not_ready", "_waited")
    }


def built_lazily(decider: DecidePartition) -> dict[str, object]:
    decider.reset()
    for name in sorted(decider.state.mappings["modules"]):
        decider.engine.book.index(name)
    return indexes(decider)


def test_a_warm_up_builds_a_module_in_slices_of_the_fleet_with_the_indexes_its_first_use_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decider = staged_decider()
    lazily = built_lazily(decider)
    assert lazily["_pending"], "the modules have clusters waiting: the queues are exercised"
    monkeypatch.setattr("streams.decider.WARM_UP_CLUSTERS_PER_STEP", 4)
    decider.reset()

    steps = list(decider.warm_up())

    assert steps == ["fleet", "app", "app", "app", "web", "web", "web"], "11 clusters: three slices a module"
    assert indexes(decider) == lazily


def test_a_module_build_cut_short_mid_fleet_is_built_again_whole_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    decider = staged_decider()
    lazily = built_lazily(decider)
    monkeypatch.setattr("streams.decider.WARM_UP_CLUSTERS_PER_STEP", 4)
    decider.reset()
    steps = decider.warm_up()
    assert [next(steps), next(steps)] == ["fleet", "app"]  # app's first slice in, then a stop

    assert "app" not in decider.engine.book._members, "half built: not taken for built"
    decider.engine.book.index("app")
    decider.engine.book.index("web")
    assert indexes(decider) == lazily


def test_a_warm_up_of_restored_targets_leaves_the_hot_ones_hot_and_the_cold_ones_as_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lazily = built_lazily(staged_decider())
    monkeypatch.setattr("streams.decider.HOT_RECORDS", {"targets": 3})
    taken_over = DecidePartition(TopicPartition("journal", 0), TopicNames("t."), Metrics())
    taken_over.state.restore(STAGED_CHANGELOG)
    targets = taken_over.state.mappings["targets"]
    in_use = ["app/k-000", "web/k-001"]
    for key in in_use:  # read by a fold: hot
        assert targets[key] is not None
    committed = targets.committed
    assert isinstance(committed, _LazyCommitted)
    cold = committed.undecoded()

    list(taken_over.warm_up())

    assert list(committed._hot) == in_use, "the scan did not push out the records in use"
    assert committed.undecoded() == cold, "every other target is still its bytes: none decoded and kept"
    assert indexes(taken_over) == lazily
