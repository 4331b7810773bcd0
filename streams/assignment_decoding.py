"""The assembler's decoding of an assignment, its sync validated once and shared.

What flows through here: each record of the `assignments` topic (an `Assignment`'s JSON, as
the decider writes it: `model_dump_json(by_alias=True)`) becomes the `Assignment` the
assembler folds (streams/assembler.py). `AssignmentDecoder.decode(value)` returns what
`Assignment.model_validate_json(value)` returns and raises what it raises; only its sync may
be an object already decoded from an equal sync.

Why: a module moving over a fleet assigns the same sync (module, revision, generation, Flux
sync) to every cluster it reaches — 1,000 assignments of one sync in the 100-concurrent-
rollouts benchmark, one per cluster. Validating each from its JSON (the manifest's
validators: the Git URL, durations, exactly one version) was ~10 % of the worker's CPU
there, and each cluster's record then held its own copy of every sync: 100 syncs a record,
scattered over the heap, read twice a move by the encodings (streams/assemblage_encoding.py,
which key their table by the sync's identity and, with copies, hold one entry per cluster).
Shared, an assemblage record is 100 references to a few hundred syncs of the partition, and
those encodings hit a small table.

How it stays equal: the record is parsed by pydantic-core's own JSON parser (`from_json`,
the parser `model_validate_json` uses; NaN and Infinity refused, so that they take the full
path), and its `sync` value re-serialized with orjson is the key — equal keys are equal JSON
values, with their types (1 and 1.0 and true are three keys), and the validation of a JSON
value is a function of it. A key seen before gives its sync; the rest of the record is
validated with that sync in place (`model_validate`: its string fields accept only strings
either way). Anything else — a record that does not parse, has no sync object, a sync orjson
cannot write (an integer past 64 bits), an envelope that does not validate — goes the full
way, `Assignment.model_validate_json`, which also raises the dead letter's reason as before.

How it is bounded: the `capacity` most recently used syncs (`DECODED_SYNCS`, a few KB each,
with their key) — in-flight syncs of the partition's modules; past that a sync is decoded
again (as every sync was before) and no longer shared with the records that hold the
evicted one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson
import pydantic_core
from pydantic import ValidationError

from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import AssignedSync
from streams.outputs import exact

__all__ = ["DECODED_SYNCS", "AssignmentDecoder"]

DECODED_SYNCS = 1_024
"""Syncs a partition keeps decoded to share: 100 modules, each with its current and its
previous generation in flight, fit five times over."""


class AssignmentDecoder:
    """`Assignment.model_validate_json`, with equal syncs decoded once (see the module doc)."""

    def __init__(self, capacity: int = DECODED_SYNCS) -> None:
        self.capacity = capacity
        self._syncs: OrderedDict[bytes, AssignedSync] = OrderedDict()  # the sync's JSON -> it
        self.decoded = 0  # assignments validated in full, for tests and benchmarks
        self.shared = 0  # assignments given a sync decoded before

    def __len__(self) -> int:
        return len(self._syncs)

    def decode(self, value: bytes) -> Assignment:
        """The assignment `value` encodes; raises `ValidationError` or `ValueError` as
        `Assignment.model_validate_json(value)` does."""
        parsed, key = _parsed_with_key(value)
        if key is not None:
            sync = self._syncs.get(key)
            if sync is not None:
                try:
                    assignment = Assignment.model_validate({**parsed, "sync": sync})
                except ValidationError:
                    pass  # the full way raises the error as it always did
                else:
                    self._syncs.move_to_end(key)
                    self.shared += 1
                    return assignment
        self.decoded += 1
        assignment = Assignment.model_validate_json(value)
        if key is not None and assignment.sync is not None:
            self._syncs[exact(key)] = assignment.sync  # kept: of its size, not orjson's 4 KiB buffer
            if len(self._syncs) > self.capacity:
                self._syncs.popitem(last=False)
        return assignment


def _parsed_with_key(value: bytes) -> tuple[dict[str, Any], bytes | None]:
    """The record as parsed, and its sync's key (None: no key — the full way)."""
    try:
        parsed = pydantic_core.from_json(value, allow_inf_nan=False)
    except ValueError:
        return {}, None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("sync"), dict):
        return {}, None
    try:
        return parsed, orjson.dumps(parsed["sync"])
    except TypeError:  # an integer past 64 bits
        return {}, None
