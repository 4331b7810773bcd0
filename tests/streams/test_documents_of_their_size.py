"""The documents a stage writes with orjson hold their own bytes, not orjson's buffer.

orjson returns its output in the buffer it wrote it into — at least 4 KiB, whatever the
document's length — and a batch holds its outputs (and the assembler its encoded records)
until its transaction commits: at a wave's start, thousands of them per partition. So each
such document goes through `streams.outputs.exact`. Measured with tracemalloc (the bytes the
allocator holds for the object, exactly, whatever else runs on the machine)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any, TypeVar

from rollout.api.manifests import Sync
from rollout.assembly.snapshots import AssemblageRecord
from rollout.wire.assemblages import AssignedSync
from streams.assemblage_encoding import EncodedSyncs
from streams.chain import DecisionChain
from streams.decider import document

T = TypeVar("T")
SLACK = 128  # a bytes object's header, and the allocator's rounding
HEAD = 1024  # a decision chain's new head (below)


def held(make: Callable[[], T]) -> tuple[T, int]:
    """What `make` returns, and the bytes still allocated once it returned (it alone is kept)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = make()
        return value, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def record() -> AssemblageRecord:
    sync = AssignedSync(
        module="m-000",
        module_namespace="fleet",
        revision="v1",
        sync=Sync.model_validate({"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0"}}}}),
    )
    return AssemblageRecord(
        cluster="c-000001",
        namespace="fleet",
        syncs={"ProxyAssemblage": {"m-000": sync}},
        versions={"ProxyAssemblage": 3},
    )


def test_a_status_document_the_decider_writes_holds_its_own_size() -> None:
    status: dict[str, Any] = {"module": "m-000", "cluster": "c-000001", "phase": "Succeeded", "reason": "x" * 300}

    value, size = held(lambda: document(status))

    assert size <= len(value) + SLACK


def test_a_linked_decision_record_holds_its_own_size() -> None:
    chain = DecisionChain(0, {})
    body = {"id": "0-12-0", "module": "m-000", "cluster": "c-000001", "action": "assign", "reason": "y" * 200}

    chain.link(body)  # the head is a ChainHead from here on: each link replaces it

    value, size = held(lambda: chain.link(body))

    # the record, and the new head the chain keeps (a model, its fields set, its hash: ~0.5 KiB;
    # the old head's release is not counted, it was allocated before tracing) — not 4 KiB more
    assert size <= len(value) + HEAD + SLACK


def test_an_assemblage_snapshot_and_its_state_record_hold_their_own_size() -> None:
    encoded, held_record = EncodedSyncs(), record()
    encoded.record_json(held_record)  # the sync's forms are the table's, kept with the record
    encoded.snapshot_json(held_record, "ProxyAssemblage")

    snapshot, snapshot_size = held(lambda: encoded.snapshot_json(held_record, "ProxyAssemblage") or b"")
    state, state_size = held(lambda: encoded.record_json(held_record))

    assert snapshot and snapshot_size <= len(snapshot) + SLACK
    assert state_size <= len(state) + SLACK
