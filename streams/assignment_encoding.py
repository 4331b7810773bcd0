"""The decider's encoding of an `Assignment`, its sync encoded once per wave.

What flows through here: each `Assignment` the engine makes (one per cluster moved) becomes
the record the decider sends to the `assignments` topic — the bytes
`assignment.model_dump_json(by_alias=True)` writes, which the assembler reads
(streams/assignment_decoding.py).

Why: a module moving over a fleet assigns one sync to every cluster it reaches, and the
engine gives each of those assignments the same `AssignedSync` object
(rollout/engine/targets.py `assigned_sync`). Dumping the assignment re-encoded that sync per
cluster: ~7 µs of the decider's ~260 µs a move (benchmarks/decider_moves.py). Here the sync's
JSON is kept with the object and the assignment is put together around it: its five string
fields encoded by orjson — the same bytes as pydantic's (the assembler's encodings rely on
the same equality: tests/streams/test_assemblage_encoding.py) — in the model's field order
under its aliases.

How it is bounded: the `capacity` syncs encoded last (the waves in flight), each held with
its encoding so that its identity cannot be given to another object meanwhile; an
assignment without a sync (a removal) is dumped by pydantic as before.
"""

from __future__ import annotations

import orjson

from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import AssignedSync

__all__ = ["ENCODED_ASSIGNED_SYNCS", "AssignmentEncoder"]

ENCODED_ASSIGNED_SYNCS = 1_024
"""Syncs whose JSON the decider keeps: one per module in flight (its current generation's)."""


class AssignmentEncoder:
    """`Assignment.model_dump_json(by_alias=True)` as bytes, each sync encoded once."""

    def __init__(self, capacity: int = ENCODED_ASSIGNED_SYNCS) -> None:
        self.capacity = capacity
        self._syncs: dict[int, tuple[AssignedSync, bytes]] = {}  # id(sync) -> it, its JSON by alias
        self.encoded = 0  # syncs encoded, for tests and benchmarks

    def encode(self, assignment: Assignment) -> bytes:
        sync = assignment.sync
        if sync is None:
            return assignment.model_dump_json(by_alias=True).encode()
        held = self._syncs.get(id(sync))
        if held is None or held[0] is not sync:
            if len(self._syncs) >= self.capacity:
                self._syncs.clear()
            held = (sync, sync.__pydantic_serializer__.to_json(sync, by_alias=True))
            self._syncs[id(sync)] = held
            self.encoded += 1
        dumps = orjson.dumps
        return b"".join(
            [
                b'{"cluster":',
                dumps(assignment.cluster),
                b',"clusterNamespace":',
                dumps(assignment.cluster_namespace),
                b',"module":',
                dumps(assignment.module),
                b',"assemblage":',
                dumps(assignment.assemblage),
                b',"sync":',
                held[1],
                b',"reason":',
                dumps(assignment.reason),
                b"}",
            ]
        )
