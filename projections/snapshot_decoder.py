"""Decoding assemblage snapshots for the applier: each distinct sync validated once.

What flows through here: the bytes of one RemoteAssemblage/ProxyAssemblage record go in; the
`Assemblage` the sinks write comes out — the same model, with the same errors for a
malformed record, as `Assemblage.model_validate_json`.

Why: a snapshot is a full document, and a ProxyAssemblage carries every module of its
cluster. When 100 modules roll out together, each move of one module delivers a snapshot of
up to 100 syncs, 99 of them unchanged — and validating them (the Sync model's checks of
URLs, paths and names) was ~1.2 ms of a 50-sync snapshot: more than rendering the one that
changed. A sync's validation depends on nothing but its own JSON, so its validated
`AssignedSync` can be reused wherever the same JSON appears again — in this cluster's next
snapshot, and in every other cluster given the same module without per-cluster bindings.

How: the record is split, not parsed: msgspec reads it as a mapping of raw JSON values
(`msgspec.Raw`: the bytes of each, nothing built), its `spec` the same way, and `spec.syncs` as
a list of raw values — each sync's own bytes as the record holds them, the canonical bytes
the assembler writes (sorted keys, orjson). A 100-sync snapshot (46 KB) is split in ~0.15 ms
where parsing it with orjson (dicts and strings for every field) and serialising each sync
again to find it took ~0.7 ms — on the path of every move when 100 modules roll out
together. Each sync's bytes key a least-recently-used table of validated syncs
(`DECODED_SYNCS` of them at most, so memory is bounded whatever the fleet); a sync not in it
is validated from those bytes by `AssignedSync.model_validate_json`, exactly as the whole
document would validate it. The envelope (kind, metadata, version, and anything else at the
top or in `spec`) is validated the same way, without its syncs, from its own raw values
(`orjson.Fragment`: not parsed again), and the validated parts are put together. Anything
off the expected shape, or any validation error, falls back to
`Assemblage.model_validate_json` of the whole record: the error a malformed record gives
(and the dead-end it is) does not change.

Reused objects are safe to share: `AssignedSync` and everything in it is frozen.
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec
import orjson
from pydantic import ValidationError

from rollout.wire.assemblages import Assemblage, AssemblageSpec, AssignedSync

__all__ = ["DECODED_SYNCS", "SnapshotDecoder"]

DECODED_SYNCS = 4096
"""Validated syncs kept for reuse (each a few KB): a fleet's distinct (module, generation)
pairs fit many times over; per-cluster bindings make each cluster's sync distinct, and those
are validated again once evicted (as every sync was before)."""


class SnapshotDecoder:
    """`decode(bytes) -> Assemblage`, validating each distinct sync once (see the module doc)."""

    def __init__(self, capacity: int = DECODED_SYNCS) -> None:
        self.capacity = capacity
        self._syncs: OrderedDict[bytes, AssignedSync] = OrderedDict()
        self.validated = 0  # syncs validated (a miss), for tests and benchmarks
        self.reused = 0  # syncs taken from the table

    def decode(self, value: bytes) -> Assemblage:
        """The snapshot in `value`; raises what `Assemblage.model_validate_json` raises."""
        try:
            document = _RAW_MAPPING.decode(value)
            spec = _RAW_MAPPING.decode(document["spec"])
            syncs = _RAW_LIST.decode(spec["syncs"])
        except (msgspec.DecodeError, KeyError):
            return Assemblage.model_validate_json(value)  # its error, or whatever it accepts
        envelope_spec = {key: orjson.Fragment(bytes(raw)) for key, raw in spec.items() if key != "syncs"}
        envelope_document = {key: orjson.Fragment(bytes(raw)) for key, raw in document.items() if key != "spec"}
        try:
            envelope = Assemblage.model_validate_json(
                orjson.dumps({**envelope_document, "spec": {**envelope_spec, "syncs": []}})
            )
            decoded = [self._sync(bytes(sync)) for sync in syncs]
        except ValidationError:
            return Assemblage.model_validate_json(value)  # the error names the sync's place in the document
        return envelope.model_copy(update={"spec": AssemblageSpec(syncs=decoded)})

    def _sync(self, key: bytes) -> AssignedSync:
        known = self._syncs.get(key)
        if known is not None:
            self._syncs.move_to_end(key)
            self.reused += 1
            return known
        sync = AssignedSync.model_validate_json(key)
        self.validated += 1
        self._syncs[key] = sync
        if len(self._syncs) > self.capacity:
            self._syncs.popitem(last=False)
        return sync


_RAW_MAPPING = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
