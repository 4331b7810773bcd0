"""A journal batch writes at most `DecidePartition.batch_writes` records (outputs and state
changes, give or take its last event's): the decider stops folding there and the rest of the
fetch is the next transaction's (streams/slots.py). Claims that reach a whole fleet at once
fit in one fetch — two state records per cluster, per partition — and were one batch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved, HolderClaims, ModuleApplied, Tick, claim_chunk
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, module, stage

TOPICS = TopicNames("bound.")
CLUSTERS = [f"c{i:03d}" for i in range(120)]


def journal(events: list[Any], first: int = 0) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(topic=TOPICS.journal, partition=0, offset=first + i, key=b"k", value=event.to_bytes())
        for i, event in enumerate(events)
    ]


def claims() -> list[HolderClaims]:
    """One applier's claims of the whole fleet, chunk by chunk (what a wave's start brings)."""
    chunks: dict[int, list[str]] = {}
    for name in CLUSTERS:
        chunks.setdefault(claim_chunk(name), []).append(name)
    return [
        HolderClaims(id=f"claims-{index}", holder="applier-a", chunk=index, clusters=names)
        for index, names in sorted(chunks.items())
    ]


SETUP = [Tick(id="t1", now=1_800_000_000.0), *(ClusterObserved(id=f"o-{c}", cluster=cluster(c)) for c in CLUSTERS)]


def fleet(decider: DecidePartition) -> int:
    """The fleet and the time folded and committed; the next offset."""
    fold_all(decider, journal(SETUP))
    return len(SETUP)


def fold_all(decider: DecidePartition, records: list[SimpleNamespace], sizes: list[int] | None = None) -> list[int]:
    """Fold `records` as the runtime does — a batch, then its rest — committing each part; the
    number of records each part wrote (and into `sizes`, the bytes of its outputs)."""
    written = []
    while records:
        out = Outputs(TOPICS.dead_letters)
        folded = decider.process(records, records[-1].offset + 1, out)  # type: ignore[arg-type]
        written.append(len(out.all()) + len(decider.state.changelog()))
        if sizes is not None:
            sizes.append(sum(len(r.key or b"") + len(r.value or b"") for r in out.all()))
        decider.state.commit_batch()
        records = records[folded:]
    return written


def committed(decider: DecidePartition) -> dict[str, dict[str, Any]]:
    return {name: dict(mapping.committed.items()) for name, mapping in decider.state.mappings.items()}


def test_a_batch_of_claims_stops_at_the_bound_and_its_rest_folds_to_the_same_state() -> None:
    bounded = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    unbounded = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    bounded.batch_writes = 60
    events = claims()  # the same events (ids) for both
    largest_event = max(2 * len(event.clusters) + 2 for event in events)  # a claim and facts a cluster

    start = fleet(bounded)
    fleet(unbounded)
    parts = fold_all(bounded, journal(events, start))
    whole = fold_all(unbounded, journal(events, start))

    assert len(whole) == 1 and whole[0] > 2 * len(CLUSTERS)  # unbounded: the whole fleet in one batch
    assert len(parts) > 1
    assert all(part <= bounded.batch_writes + largest_event for part in parts)
    by_mapping_bounded, by_mapping_whole = committed(bounded), committed(unbounded)
    by_mapping_bounded.pop("tracking"), by_mapping_whole.pop("tracking")
    assert by_mapping_bounded == by_mapping_whole
    assert len(by_mapping_bounded["claims"]) == len(CLUSTERS)


def test_a_batch_folds_its_first_event_whatever_it_writes() -> None:
    decider = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    decider.batch_writes = 1
    start = fleet(decider)
    events = claims()

    folded = decider.process(journal(events, start), start + len(events), Outputs(TOPICS.dead_letters))  # type: ignore[arg-type]

    assert folded == 1


def modules_applied(count: int) -> list[ModuleApplied]:
    """`count` modules over the whole fleet: each apply joins every cluster — a decision and
    a target document a cluster, in one event."""
    return [
        ModuleApplied(id=f"apply-{index}", module=module(f"m{index}", {}, "v1", stage("all", None, concurrency=1)))
        for index in range(count)
    ]


def test_a_batch_stops_at_its_bytes_of_outputs_and_its_rest_folds_to_the_same_state() -> None:
    bounded = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    unbounded = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    events = modules_applied(6)
    start = fleet(bounded)
    fleet(unbounded)
    whole_sizes: list[int] = []
    whole = fold_all(unbounded, journal(events, start), whole_sizes)
    per_event = whole_sizes[0] // len(events)
    bounded.batch_bytes = 2 * per_event  # records are not the bound here: the bytes are

    sizes: list[int] = []
    parts = fold_all(bounded, journal(events, start), sizes)

    assert len(whole) == 1 and bounded.batch_writes > whole[0]  # the records bound never binds
    assert len(parts) > 1
    largest_event = 2 * per_event  # an apply's outputs, with slack for longer module names
    assert all(size <= bounded.batch_bytes + largest_event for size in sizes)
    by_mapping_bounded, by_mapping_whole = committed(bounded), committed(unbounded)
    by_mapping_bounded.pop("tracking"), by_mapping_whole.pop("tracking")
    assert by_mapping_bounded == by_mapping_whole
    assert len(by_mapping_bounded["modules"]) == len(events)
