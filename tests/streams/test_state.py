"""The stages' changelogged state: event, batch and sealed layers, and the state-topic encoding."""

from __future__ import annotations

from typing import Any

from rollout.engine.state import ENGINE_MAPPINGS, ClusterFacts
from streams.state import PartitionState, Tracking


def facts(name: str, ready: bool = True) -> ClusterFacts:
    return ClusterFacts(name=name, namespace="fleet", ready=ready)


def test_a_dropped_event_leaves_the_batch_as_it_was() -> None:
    state = PartitionState(ENGINE_MAPPINGS)
    clusters = state.mappings["clusters"]
    clusters["a"] = facts("a")
    state.keep_event()
    clusters["b"] = facts("b")
    del clusters["a"]
    assert "a" not in clusters and "b" in clusters
    state.drop_event()
    assert "a" in clusters and "b" not in clusters
    assert sorted(clusters) == ["a"]


def test_a_dropped_batch_leaves_the_committed_values_as_they_were() -> None:
    state = PartitionState(ENGINE_MAPPINGS)
    clusters = state.mappings["clusters"]
    clusters["a"] = facts("a")
    state.keep_event()
    state.commit_batch()
    clusters["a"] = facts("a", ready=False)
    clusters["b"] = facts("b")
    state.keep_event()
    state.drop_batch()
    assert clusters["a"].ready is True
    assert "b" not in clusters
    assert state.changelog() == []


def test_the_changelog_holds_the_last_write_per_key_and_tombstones() -> None:
    state = PartitionState(ENGINE_MAPPINGS)
    clusters, clock = state.mappings["clusters"], state.mappings["clock"]
    clusters["a"] = facts("a")
    clusters["b"] = facts("b")
    state.keep_event()
    state.commit_batch()
    clusters["a"] = facts("a", ready=False)
    clusters["a"] = facts("a", ready=True)
    del clusters["b"]
    clock["now"] = 12.5
    state.tracking = Tracking(offset=7, events=3)
    state.keep_event()
    records = dict(state.changelog())
    assert set(records) == {b"clusters:a", b"clusters:b", b"clock:now", b"tracking:position"}
    assert records[b"clusters:b"] is None
    assert records[b"clock:now"] == b"12.5"


def test_restoring_the_changelog_rebuilds_the_same_state() -> None:
    live = PartitionState(ENGINE_MAPPINGS)
    log: list[tuple[bytes | None, bytes | None]] = []
    for batch in (["a", "b", "c"], ["b"], ["d"]):
        for name in batch:
            live.mappings["clusters"][name] = facts(name, ready=name != "b")
        if batch == ["b"]:
            del live.mappings["clusters"]["c"]
        live.tracking = Tracking(offset=len(log) + 1, events=len(log) + 1)
        live.keep_event()
        log.extend(live.changelog())
        live.commit_batch()
    restored = PartitionState(ENGINE_MAPPINGS)
    restored.restore(log)
    assert restored.restored and restored.tracking == live.tracking
    for name in ENGINE_MAPPINGS:
        assert restored.mappings[name].committed == live.mappings[name].committed, name
    assert sorted(restored.mappings["clusters"]) == ["a", "b", "d"]


def test_a_partition_that_never_committed_is_not_restored() -> None:
    state = PartitionState(ENGINE_MAPPINGS)
    assert not state.restored
    assert state.tracking == Tracking(offset=0, events=0)
    state.restore([(b"unknown:key", b"{}"), (None, b"x")])  # other stages' keys are ignored
    assert not state.restored


def _sealed_with_a_then_b_folded_on_it() -> tuple[PartitionState, Any]:
    """Batch 1 (a ready, x deleted) sealed — its transaction in flight — and batch 2 (b, and
    a not ready) folded on top of it."""
    state = PartitionState(ENGINE_MAPPINGS)
    clusters = state.mappings["clusters"]
    clusters["x"] = facts("x")
    state.keep_event()
    state.commit_batch()
    clusters["a"] = facts("a")
    del clusters["x"]
    state.keep_event()
    state.seal_batch()
    clusters["b"] = facts("b")
    clusters["a"] = facts("a", ready=False)
    state.keep_event()
    return state, clusters


def test_a_batch_folded_on_a_sealed_one_sees_it_and_logs_only_its_own_writes() -> None:
    state, clusters = _sealed_with_a_then_b_folded_on_it()
    assert sorted(clusters) == ["a", "b"] and clusters["a"].ready is False and "x" not in clusters
    assert sorted(key for key, _ in state.changelog()) == [b"clusters:a", b"clusters:b"]


def test_a_committed_seal_then_the_next_batch_reach_the_committed_values() -> None:
    state, clusters = _sealed_with_a_then_b_folded_on_it()
    state.commit_sealed()
    assert sorted(clusters.committed) == ["a"] and clusters.committed["a"].ready is True
    state.seal_batch()
    state.commit_sealed()
    assert sorted(clusters.committed) == ["a", "b"] and clusters.committed["a"].ready is False
    assert state.changelog() == []


def test_a_failed_seal_drops_the_batch_folded_on_it_too() -> None:
    state, clusters = _sealed_with_a_then_b_folded_on_it()
    state.drop_sealed()
    assert sorted(clusters) == ["x"] and clusters["x"].ready is True
    assert state.changelog() == []
