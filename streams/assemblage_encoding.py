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

A cluster's syncs, kind by kind, as last encoded (`_KindForms`). Looking each of a record's
100 syncs up in that table — twice a move, once per form — was still most of the stage's
CPU: ~0.7 µs a sync, 140 µs a move of the 190 (benchmarks/assembler_moves.py). So the
encoder also keeps, per (cluster, kind), each module's sync (a weak reference) and its two
forms, in the record's order: a new version of the record is compared with it by identity
(one pass, ~0.1 µs a sync), only the modules whose sync changed, came or went are looked up
in the table, and each form is joined from the kept pieces by C-level `bytes.join` — the
state record's syncs in the record's order, the snapshot's sorted by module (the order
kept until the set of modules changes). The bytes are the ones `orjson.dumps` wrote before
(keys in the same order, the same separators, each value encoded by the same call), which
tests/streams/test_assemblage_encoding.py checks against pydantic and orjson. Bounded like
the table: `ENCODED_CLUSTERS` (cluster, kind) pairs, least recently used out; a pair holds
weak references and the table's own bytes, no sync.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import orjson

from rollout.api.manifests import API_VERSION
from rollout.assembly.snapshots import AssemblageRecord
from rollout.wire.assemblages import AssignedSync
from streams.outputs import exact

__all__ = ["ENCODED_CLUSTERS", "ENCODED_SYNCS", "EncodedSyncs"]

ENCODED_SYNCS = 25_000
"""Syncs whose encodings a partition keeps: a partition of the 100-concurrent benchmark holds
~250 clusters x 100 modules; past that, a sync is encoded again (as every sync was before)."""

ENCODED_CLUSTERS = 512
"""(cluster, kind) pairs whose syncs' forms a partition keeps in order (`_KindForms`, ~15 KB
with 100 modules): a partition of the 100-concurrent benchmark moves ~250 clusters; past that,
a record's forms are put together from the table again, sync by sync."""


class _KindForms:
    """One kind of one cluster's syncs as last encoded: per module, in the record's order, its
    sync (a weak reference: nothing is kept alive) and its state-record piece (`"module":`
    and the sync's record form); the snapshot forms asked for; the modules sorted."""

    __slots__ = ("order", "pieces", "record", "refs", "snapshots")

    def __init__(self) -> None:
        self.record: weakref.ref[AssemblageRecord] | None = None  # the record these forms are of
        self.refs: dict[str, weakref.ref[AssignedSync]] = {}
        self.pieces: dict[str, bytes] = {}
        self.snapshots: dict[str, bytes] = {}
        self.order: list[str] | None = None  # the modules sorted; None: to sort again


class _SyncForms:
    """A sync's encodings in the table: its record form, its snapshot form and its piece of
    a record's `syncs` object (`"module":` and the record form), the last two when first needed."""

    __slots__ = ("keyed", "record", "ref", "snapshot")

    def __init__(self, ref: weakref.ref[AssignedSync], record: bytes) -> None:
        self.ref = ref
        self.record = record
        self.snapshot: bytes | None = None
        self.keyed: bytes | None = None


class EncodedSyncs:
    """Each `AssignedSync`'s record form and snapshot form, encoded once (see the module doc)."""

    def __init__(self, capacity: int = ENCODED_SYNCS, clusters: int = ENCODED_CLUSTERS) -> None:
        self.capacity = capacity
        # id(sync) -> its forms, with a weak reference to it whose callback drops the entry
        # when the sync is freed, before its id can be given to another object
        self._held: OrderedDict[int, _SyncForms] = OrderedDict()
        self.encoded = 0  # syncs encoded (a miss), for tests and benchmarks
        self.reused = 0  # syncs whose encoding was taken from the table
        self.clusters = clusters
        self._forms: OrderedDict[tuple[str, str], _KindForms] = OrderedDict()  # (cluster, kind) -> its forms

    def __len__(self) -> int:
        return len(self._held)

    def _forget(self, key: int, reference: weakref.ref[AssignedSync]) -> None:
        entry = self._held.get(key)
        if entry is not None and entry.ref is reference:
            del self._held[key]

    def _entry(self, sync: AssignedSync) -> _SyncForms:
        key = id(sync)
        entry = self._held.get(key)
        if entry is not None and entry.ref() is sync:
            self._held.move_to_end(key)
            self.reused += 1
            return entry
        self.encoded += 1
        reference = weakref.ref(sync, lambda dead, key=key: self._forget(key, dead))  # type: ignore[misc]
        entry = _SyncForms(reference, sync.__pydantic_serializer__.to_json(sync))
        self._held[key] = entry
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return entry

    def record_form(self, sync: AssignedSync) -> bytes:
        """`sync` as `stored.encode` of its record writes it (field names, declaration order)."""
        return self._entry(sync).record

    def snapshot_form(self, sync: AssignedSync) -> bytes:
        """`sync` as a published snapshot carries it (aliases, keys sorted)."""
        entry = self._entry(sync)
        if entry.snapshot is None:
            entry.snapshot = exact(
                orjson.dumps(sync.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)
            )
        return entry.snapshot

    def keyed_record_form(self, module: str, sync: AssignedSync) -> bytes:
        """`"module":` and the record form of `sync`: its piece of a record's `syncs` object
        (kept in the table when `module` is the sync's own, so that every record shares it)."""
        entry = self._entry(sync)
        if module != sync.module:
            return orjson.dumps(module) + b":" + entry.record
        if entry.keyed is None:
            entry.keyed = orjson.dumps(module) + b":" + entry.record
        return entry.keyed

    def _kind_forms(self, record: AssemblageRecord, kind: str, syncs: dict[str, AssignedSync]) -> _KindForms:
        """The forms of `record`'s `kind` syncs: those kept for its cluster, brought up to
        date with the modules whose sync is not the one they were made of."""
        key = (record.cluster, kind)
        forms = self._forms.get(key)
        if forms is None:
            forms = self._forms[key] = _KindForms()
            while len(self._forms) > self.clusters:
                self._forms.popitem(last=False)
        else:
            self._forms.move_to_end(key)
            if forms.record is not None and forms.record() is record:
                return forms
        refs, pieces, snapshots = forms.refs, forms.pieces, forms.snapshots
        stale = [module for module, sync in syncs.items() if (ref := refs.get(module)) is None or ref() is not sync]
        reordered = False
        for module in stale:
            sync = syncs[module]
            reordered = reordered or module not in refs
            refs[module] = weakref.ref(sync)
            pieces[module] = self.keyed_record_form(module, sync)
            snapshots.pop(module, None)
        if len(refs) != len(syncs):  # modules gone
            for module in [module for module in refs if module not in syncs]:
                del refs[module], pieces[module]
                snapshots.pop(module, None)
            reordered = True
        if reordered:
            forms.order = None
        # the record's own order, whatever changed since the last encoding: a module gone and
        # back between two encodings is where it was, and its sync may be the very object it
        # was (a wave's shared `AssignedSync`), so neither a new module nor a stale sync says so
        if list(pieces) != list(syncs):
            forms.refs = {module: refs[module] for module in syncs}
            forms.pieces = {module: pieces[module] for module in syncs}
        forms.record = weakref.ref(record)
        return forms

    def record_json(self, record: AssemblageRecord) -> bytes:
        """The record's JSON, equal to `record.__pydantic_serializer__.to_json(record)`."""
        kinds = [
            orjson.dumps(kind) + b":{" + b",".join(self._kind_forms(record, kind, syncs).pieces.values()) + b"}"
            for kind, syncs in record.syncs.items()
        ]
        return b"".join(
            [
                b'{"cluster":',
                orjson.dumps(record.cluster),
                b',"namespace":',
                orjson.dumps(record.namespace),
                b',"syncs":{',
                b",".join(kinds),
                b'},"versions":',
                orjson.dumps(record.versions),
                b"}",
            ]
        )

    def snapshot_json(self, record: AssemblageRecord, kind: str) -> bytes | None:
        """The `kind` snapshot of `record` as published (None: empty, a tombstone) — equal to
        the sorted-keys orjson of `snapshots.snapshot(record, kind)` dumped by alias."""
        syncs = record.syncs.get(kind, {})
        if not syncs:
            return None
        forms = self._kind_forms(record, kind, syncs)
        if forms.order is None:
            forms.order = sorted(syncs)
        snapshots = forms.snapshots
        missing = [module for module in forms.order if module not in snapshots] if len(snapshots) < len(syncs) else []
        for module in missing:
            snapshots[module] = self.snapshot_form(syncs[module])
        head = orjson.dumps(
            {
                "apiVersion": API_VERSION,
                "kind": kind,
                "metadata": {"name": record.cluster, "namespace": record.namespace},
            },
            option=orjson.OPT_SORT_KEYS,
        )
        version = record.versions.get(kind, 0)
        return b"".join(
            [
                head[:-1],
                b',"spec":{"syncs":[',
                b",".join([snapshots[module] for module in forms.order]),
                b']},"version":',
                orjson.dumps(version),
                b"}",
            ]
        )
