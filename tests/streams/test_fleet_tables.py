"""The decider's fleet-sized tables (streams/state.py): restored without decoding, decoded
when first read; the fleet's cluster facts held once per process however many journal
partitions fold them."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.engine.state import ClusterFacts, Target
from rollout.engine.stored import RecordFromNewerRelease
from streams.decider import DecidePartition
from streams.state import PartitionState, _Stored, shared_records
from tests.streams.test_decider_batch_bound import SETUP, claims, fold_all, journal

SCHEMA = {"clusters": ClusterFacts, "targets": Target}


def folded(*, lazy: tuple[str, ...] = (), shared: tuple[str, ...] = ()) -> PartitionState:
    state = PartitionState(SCHEMA, lazy=lazy, shared=shared)
    for i in range(50):
        state.mappings["clusters"][f"c-{i}"] = ClusterFacts(
            name=f"c-{i}", namespace="fleet", labels={"ring": str(i % 3)}
        )
        state.mappings["targets"][f"app/c-{i}"] = Target(module="app", cluster=f"c-{i}", status="succeeded")
        state.keep_event()
    return state


def test_a_lazily_restored_table_reads_back_every_record_as_an_eager_restore_does() -> None:
    changelog = folded().changelog()
    eager = PartitionState(SCHEMA)
    lazy = PartitionState(SCHEMA, lazy=("clusters", "targets"))
    eager.restore(changelog)
    lazy.restore(changelog)

    targets = lazy.mappings["targets"].committed
    assert targets.undecoded() == 50  # type: ignore[attr-defined]
    assert lazy.mappings["targets"]["app/c-7"] == eager.mappings["targets"]["app/c-7"]
    assert targets.undecoded() == 49  # type: ignore[attr-defined]
    for name in SCHEMA:
        assert sorted(lazy.mappings[name]) == sorted(eager.mappings[name])
        assert dict(lazy.mappings[name].items()) == dict(eager.mappings[name].items())
        assert not any(isinstance(value, _Stored) for value in lazy.mappings[name].values())
    assert lazy.mappings["clusters"].committed.pop("c-3") == eager.mappings["clusters"]["c-3"]
    assert "c-3" not in lazy.mappings["clusters"]


def test_a_record_from_a_newer_release_still_fails_the_restore_of_a_lazy_table() -> None:
    newer = b'{"_v":99,"module":"app","cluster":"c-1"}'
    lazy = PartitionState(SCHEMA, lazy=("targets",))
    with pytest.raises(RecordFromNewerRelease, match="targets:app/c-1"):
        lazy.restore([(b"targets:app/c-1", newer)])


def test_equal_cluster_facts_of_two_partitions_are_one_object_in_the_process() -> None:
    first, second = folded(shared=("clusters",)), folded(shared=("clusters",))
    first.changelog()
    second.changelog()
    first.commit_batch()
    second.commit_batch()
    assert first.mappings["clusters"]["c-4"] is second.mappings["clusters"]["c-4"]
    assert first.mappings["targets"]["app/c-4"] is not second.mappings["targets"]["app/c-4"]  # not shared

    changed = ClusterFacts(name="c-4", namespace="fleet", labels={"ring": "canary"})
    second.mappings["clusters"]["c-4"] = changed
    second.keep_event()
    second.changelog()
    second.commit_batch()
    assert second.mappings["clusters"]["c-4"] is changed
    assert first.mappings["clusters"]["c-4"].labels == {"ring": "1"}


def test_restored_facts_are_shared_with_the_partitions_that_folded_them() -> None:
    live = folded(shared=("clusters",))
    changelog = live.changelog()
    live.commit_batch()
    restored = PartitionState(SCHEMA, lazy=("clusters",), shared=("clusters",))
    restored.restore(changelog)
    assert restored.mappings["clusters"]["c-9"] is live.mappings["clusters"]["c-9"]
    assert len(shared_records("clusters")) >= 50


def test_the_decider_restores_its_fleet_tables_lazily_and_shares_the_facts_and_claims() -> None:
    names = TopicNames("fleet-tables.")
    decider = DecidePartition(TopicPartition(names.journal, 0), names, Metrics())
    assert decider.state.lazy == {"targets", "clusters", "claims"}
    assert set(decider.state.shared) == {"clusters", "claims"}


def test_a_lazily_restored_table_equals_an_eager_one_whichever_side_it_is_on() -> None:
    changelog = folded().changelog()
    eager, lazy = PartitionState(SCHEMA), PartitionState(SCHEMA, lazy=("targets",))
    eager.restore(changelog)
    lazy.restore(changelog)
    assert lazy.mappings["targets"].committed == eager.mappings["targets"].committed
    assert eager.mappings["targets"].committed == lazy.mappings["targets"].committed
    lazy.restore([(b"targets:app/c-1", None)])
    assert lazy.mappings["targets"].committed != eager.mappings["targets"].committed


def test_only_the_most_recently_used_records_of_a_hot_capped_table_stay_decoded() -> None:
    state = PartitionState(SCHEMA, lazy=("targets",), hot={"targets": 3})
    written = {}
    for i in range(10):
        target = Target(module="app", cluster=f"c-{i}", status="succeeded", report_ids=[f"r-{i}"])
        written[f"app/c-{i}"] = target
        state.mappings["targets"][f"app/c-{i}"] = target
        state.keep_event()
    state.changelog()
    state.commit_batch()
    committed = state.mappings["targets"].committed

    assert committed.undecoded() == 7  # type: ignore[attr-defined]
    assert state.mappings["targets"]["app/c-0"] == written["app/c-0"]  # cold: decoded again, equal
    assert committed.undecoded() == 7  # type: ignore[attr-defined]  # and the least recent went cold
    assert dict(state.mappings["targets"].items()) == written
    assert committed.undecoded() == 7  # type: ignore[attr-defined]  # a whole-table read makes nothing hot
    assert committed.pop("app/c-5") == written["app/c-5"]
    assert "app/c-5" not in state.mappings["targets"]


def test_a_hot_capped_table_restored_and_refolded_agrees_with_an_unbounded_one() -> None:
    changelog = folded().changelog()
    capped, unbounded = PartitionState(SCHEMA, lazy=("targets",), hot={"targets": 5}), PartitionState(SCHEMA)
    for state in (capped, unbounded):
        state.restore(changelog)
        for i in range(0, 50, 7):  # read some, rewrite some, as events do
            target = state.mappings["targets"][f"app/c-{i}"]
            state.mappings["targets"][f"app/c-{i}"] = target.model_copy(update={"status": "updating"})
            state.keep_event()
        state.changelog()
        state.commit_batch()
    assert capped.mappings["targets"].committed == unbounded.mappings["targets"].committed
    assert capped.changelog() == unbounded.changelog() == []


def test_the_claims_two_partitions_fold_from_one_applier_are_one_object_in_the_process() -> None:
    events = claims()
    names = TopicNames("bound.")
    partitions = [DecidePartition(TopicPartition(names.journal, p), names, Metrics()) for p in (0, 1)]
    for decider in partitions:
        fold_all(decider, journal([*SETUP, *events]))
    first, second = (decider.state.mappings["claims"] for decider in partitions)

    assert len(first.committed) == len(SETUP) - 1  # every cluster claimed
    assert all(first[name] is second[name] for name in first.committed)
