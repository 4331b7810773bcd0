"""The assembler's two encodings of a cluster's syncs, each sync encoded once while it lives.

What flows through here: an `AssemblageRecord` (the assembler's state for one cluster) goes
in twice per batch that changes it — once as its state-topic record (`record_json`), once as
the ProxyAssemblage/RemoteAssemblage snapshot published for it (`snapshot_json`). Both come
out byte-for-byte as pydantic and orjson wrote them before (`stored.encode` of the record;
`orjson.dumps(snapshot.model_dump(mode="json", by_alias=True), option=OPT_SORT_KEYS)`), so
nothing that reads them — restore, `rollout replay --check`, the appliers' snapshot decoder
keyed by a sync's bytes — sees a difference.

Why: a ProxyAssemblage carries every module of its cluster. When 100 modules roll out over
the same clusters, one move re-encoded the cluster's 100 syncs twice: ~0.42 ms for the record
and ~0.54 ms for the snapshot (47 KB each) — about a third of the worker's CPU in the
100-concurrent-rollouts benchmark, for 99 syncs that had not changed. A sync is frozen, and
an assignment that does not touch a module keeps that module's `AssignedSync` object in the
record's next version (`rollout.assembly.snapshots.assemble` copies the dicts shallowly), so
a sync's two encodings can be kept with the object and put together with orjson's
`Fragment` — the cost of a move is then its one changed sync plus copying bytes.

How it is bounded: an `EncodedSyncs` table holds at most `capacity` syncs (least recently
used out first; each entry its two encodings, ~1 KB), keyed by the object's identity, and
holds each sync only weakly: an entry leaves the table when its sync is freed (a record gone
cold, replaced or dropped), so the table never keeps a sync alive — at 100,000 clusters the
assembler holds most records as bytes, and a table holding their syncs would have kept
~100 MB a partition decoded. A sync not in it — a record just decoded from its bytes, or
evicted — is encoded as before.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import orjson

from rollout.api.manifests import API_VERSION
from rollout.assembly.snapshots import AssemblageRecord
from rollout.wire.assemblages import AssignedSync
from streams.outputs import exact

__all__ = ["ENCODED_SYNCS", "EncodedSyncs"]

ENCODED_SYNCS = 25_000
"""Syncs whose encodings a partition keeps: a partition of the 100-concurrent benchmark holds
~250 clusters x 100 modules; past that, a sync is encoded again (as every sync was before)."""


class EncodedSyncs:
    """Each `AssignedSync`'s record form and snapshot form, encoded once (see the module doc)."""

    def __init__(self, capacity: int = ENCODED_SYNCS) -> None:
        self.capacity = capacity
        # id(sync) -> (a weak reference to it, its record form, its snapshot form or None until
        # first needed); the reference's callback drops the entry when the sync is freed, before
        # its id can be given to another object
        self._held: OrderedDict[int, tuple[weakref.ref[AssignedSync], bytes, bytes | None]] = OrderedDict()
        self.encoded = 0  # syncs encoded (a miss), for tests and benchmarks
        self.reused = 0  # syncs whose encoding was taken from the table

    def __len__(self) -> int:
        return len(self._held)

    def _forget(self, key: int, reference: weakref.ref[AssignedSync]) -> None:
        entry = self._held.get(key)
        if entry is not None and entry[0] is reference:
            del self._held[key]

    def _entry(self, sync: AssignedSync) -> tuple[weakref.ref[AssignedSync], bytes, bytes | None]:
        key = id(sync)
        entry = self._held.get(key)
        if entry is not None and entry[0]() is sync:
            self._held.move_to_end(key)
            self.reused += 1
            return entry
        self.encoded += 1
        reference = weakref.ref(sync, lambda dead, key=key: self._forget(key, dead))  # type: ignore[misc]
        entry = (reference, sync.__pydantic_serializer__.to_json(sync), None)
        self._held[key] = entry
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return entry

    def record_form(self, sync: AssignedSync) -> bytes:
        """`sync` as `stored.encode` of its record writes it (field names, declaration order)."""
        return self._entry(sync)[1]

    def snapshot_form(self, sync: AssignedSync) -> bytes:
        """`sync` as a published snapshot carries it (aliases, keys sorted)."""
        entry = self._entry(sync)
        if entry[2] is not None:
            return entry[2]
        form = exact(orjson.dumps(sync.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS))
        self._held[id(sync)] = (entry[0], entry[1], form)
        return form

    def record_json(self, record: AssemblageRecord) -> bytes:
        """The record's JSON, equal to `record.__pydantic_serializer__.to_json(record)`."""
        return exact(
            orjson.dumps(
                {
                    "cluster": record.cluster,
                    "namespace": record.namespace,
                    "syncs": {
                        kind: {module: orjson.Fragment(self.record_form(sync)) for module, sync in syncs.items()}
                        for kind, syncs in record.syncs.items()
                    },
                    "versions": record.versions,
                }
            )
        )

    def snapshot_json(self, record: AssemblageRecord, kind: str) -> bytes | None:
        """The `kind` snapshot of `record` as published (None: empty, a tombstone) — equal to
        the sorted-keys orjson of `snapshots.snapshot(record, kind)` dumped by alias."""
        syncs = record.syncs.get(kind, {})
        if not syncs:
            return None
        return exact(
            orjson.dumps(
                {
                    "apiVersion": API_VERSION,
                    "kind": kind,
                    "metadata": {"name": record.cluster, "namespace": record.namespace},
                    "spec": {"syncs": [orjson.Fragment(self.snapshot_form(syncs[module])) for module in sorted(syncs)]},
                    "version": record.versions.get(kind, 0),
                },
                option=orjson.OPT_SORT_KEYS,
            )
        )
