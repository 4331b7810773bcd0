"""Changelogged, per-partition state: what a stateful stage remembers between batches.

Each input partition a stage owns has one `PartitionState`: named mappings (for the
decider, the engine's clusters/modules/targets/…; for the assembler, one record per
cluster) held in memory as decoded values, plus the `Tracking` record — the input
position processed so far and how many events that was.

Writes go through layers of pending changes before they reach the committed values:

    event layer ──(event handled)──► batch layer ──(sealed)──► sealed layer ──(transaction committed)──► committed
         └──(event failed: dropped)        └──(batch failed)         └──(transaction failed: dropped, and
                                                                        the batch folded on it too)

so that one poison event is undone without touching the rest of its batch, and a batch
whose transaction did not commit leaves nothing behind. The sealed layer is the batch whose
transaction is in flight: the next batch is folded on top of it meanwhile
(streams/slots.py), and is dropped with it if that transaction fails. `changelog()` turns the batch
layer into the records written to the stage's compacted state topic *inside the same
transaction* as the stage's outputs and its consumer offsets: state, outputs and input
position advance together or not at all (eventsourcing's `Tracking`, Kafka Streams'
exactly-once). A restart or a new owner rebuilds the state by `restore`-ing that topic.

Keys on the state topic are `"<mapping>:<key>"`; values are JSON (pydantic models
dumped in JSON mode, floats as JSON numbers); a tombstone (None) deletes the key. How a
record is versioned, migrated and read back by another release (one a rolling upgrade runs
beside this one, or rolls back to) is rollout/engine/stored.py's: `changelog` writes each
mapping's records at its current version, `restore` reads them through `stored.decode` —
the one decode path of every state topic — and logs each API document kept as stored
because this release refuses it (rollout/engine/applied_documents.py). A record this
release cannot read (`stored.StoredStateError`) fails the restore with its key.
Reads cost one or three dict lookups, whatever the number of keys: nothing here scans.

Fleet-sized tables. The decider's `targets` (modules x clusters) and `clusters` (the whole
fleet, in every journal partition) are most of a worker's memory and of its take-over time.
Two things keep them down (`PartitionState(lazy=…, shared=…)`):

* *lazy*: a restored record of the version this release writes is kept as its bytes and
  decoded the first time it is read (`_LazyCommitted`) — a take-over reads the state topic
  and validates nothing. Any other record (one to upcast, a newer release's) is decoded at
  restore, so a restore still fails on what this release cannot read. With a *hot* capacity,
  only that many records, the most recently used, are held decoded: the targets of rollouts
  long complete go back to their bytes — a few hundred bytes each instead of a decoded
  model's ~2 KB.
* *shared*: equal records of the fleet's facts are one object per process (`SharedRecords`,
  keyed by their encoding, held weakly), whichever partition folded or restored them: a
  worker owning P journal partitions holds the fleet once, not P times.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from rollout.engine import stored
from rollout.engine.applied_documents import Refusal
from rollout.engine.migrations import FIRST_VERSION, current_versions

log = logging.getLogger("rollout.state")

_DELETED: Any = object()


class Tracking(BaseModel):
    """The input position a partition's state corresponds to: `offset` is the next offset
    to read; `events` counts every input record processed (duplicates excluded)."""

    model_config = ConfigDict(extra="forbid")

    offset: int = 0
    events: int = 0


class _Stored(bytes):
    """A restored record not decoded yet: its bytes, as the state topic holds them — a bytes
    object of its own type (one object per cold record, not a wrapper around one: ~50 bytes
    less for each of a partition's hundreds of thousands of cold targets)."""

    __slots__ = ()

    @property
    def raw(self) -> bytes:
        return self


class SharedRecords:
    """Equal records of one mapping held once per process, whatever the partition that holds
    them: the decoded record of each distinct encoding, kept while any partition uses it.

    The fleet's cluster facts are folded into every journal partition (the router broadcasts
    cluster events: streams/router.py), so a worker owning P partitions would otherwise hold P
    equal copies of each. Records are never changed in place (the engine replaces a stored
    value, it never edits one: rollout/engine/tables.py), so sharing one is safe."""

    def __init__(self) -> None:
        self._by_encoding: weakref.WeakValueDictionary[bytes, Any] = weakref.WeakValueDictionary()

    def canonical(self, encoded: bytes, value: Any) -> Any:
        """The record held for `encoded`: `value`, unless an equal one is held already."""
        held = self._by_encoding.get(encoded)
        if held is None:
            self._by_encoding[encoded] = value
            return value
        return held

    def __len__(self) -> int:
        return len(self._by_encoding)


_SHARED: dict[str, SharedRecords] = {}


def shared_records(mapping: str) -> SharedRecords:
    """The process's shared records of `mapping` (one table per mapping name)."""
    return _SHARED.setdefault(mapping, SharedRecords())


class _LazyCommitted(dict[str, Any]):
    """Committed values of a mapping restored lazily: a restored record is decoded the first
    time it is read (then kept decoded), so taking a partition over costs reading its bytes,
    not validating every record — most of a large fleet's targets are not read again for a
    long time. With a `hot` capacity, only that many records — the most recently read or
    written — are held decoded; the least recent beyond it go back to their bytes, so the
    targets of rollouts long complete cost a few hundred bytes each, not a decoded model's
    kilobytes. Every read path of a dict decodes; nothing hands out a `_Stored`."""

    def __init__(self, decode: Any, encode: Any = None, hot: int | None = None) -> None:
        super().__init__()
        self._decode = decode  # (key, raw) -> value
        self._encode = encode  # value -> raw, to let a cold record go back to its bytes
        self._capacity = hot
        self._hot: OrderedDict[str, None] = OrderedDict()  # decoded keys, least recent first

    def _used(self, key: str) -> None:
        if self._capacity is None:
            return
        hot = self._hot
        if key in hot:
            hot.move_to_end(key)
            return
        hot[key] = None
        while len(hot) > self._capacity:
            cold, _ = hot.popitem(last=False)
            value = dict.get(self, cold)
            if value is not None and type(value) is not _Stored:
                dict.__setitem__(self, cold, _Stored(self._encode(value)))

    def _value(self, key: str, value: Any) -> Any:
        if type(value) is _Stored:
            value = self._decode(key, value.raw)
            dict.__setitem__(self, key, value)
        self._used(key)
        return value

    def __getitem__(self, key: str) -> Any:
        return self._value(key, dict.__getitem__(self, key))

    def __setitem__(self, key: str, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._used(key)

    def get(self, key: str, default: Any = None) -> Any:
        value = dict.get(self, key, _DELETED)
        return default if value is _DELETED else self._value(key, value)

    def peek(self, key: str, default: Any = None) -> Any:
        """`get` for a scan over many records (the decider's index rebuild reads each target
        of a module): a cold record is decoded for the caller and left as its bytes, and the
        hot records stay the ones in use — read through `get`, a scan of a module's 100,000
        targets pushed out the 50,000 hot ones, re-encoding each (~40 % of a warm-up)."""
        value = dict.get(self, key, _DELETED)
        return default if value is _DELETED else self._decoded(key, value)

    def pop(self, key: str, default: Any = _DELETED) -> Any:
        value = dict.pop(self, key, _DELETED)
        self._hot.pop(key, None)
        if value is _DELETED:
            if default is _DELETED:
                raise KeyError(key)
            return default
        return self._decode(key, value.raw) if type(value) is _Stored else value

    def values(self) -> Any:
        return [self._decoded(key, value) for key, value in list(dict.items(self))]

    def items(self) -> Any:
        return [(key, self._decoded(key, value)) for key, value in list(dict.items(self))]

    def _decoded(self, key: str, value: Any) -> Any:
        """`value` decoded for a whole-table read, which does not make every record hot."""
        if type(value) is not _Stored:
            return value
        if self._capacity is None:
            return self._value(key, value)
        return self._decode(key, value.raw)

    def copy(self) -> dict[str, Any]:
        return dict(self.items())

    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self)

    def __eq__(self, other: object) -> bool:
        return dict(self.items()) == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def clear(self) -> None:
        super().clear()
        self._hot.clear()

    def discard(self, key: str) -> None:
        """Drop `key`'s record, whatever it holds, without decoding it (a restored tombstone)."""
        dict.pop(self, key, None)
        self._hot.pop(key, None)

    def undecoded(self) -> int:
        """How many records are held as their bytes (not read yet, or gone cold)."""
        return sum(1 for value in dict.values(self) if type(value) is _Stored)


class LayeredMapping(MutableMapping[str, Any]):
    """Committed values under a sealed, a batch and an event layer (see the module doc)."""

    def __init__(self, written: list[LayeredMapping] | None = None, committed: dict[str, Any] | None = None) -> None:
        self.committed: dict[str, Any] = {} if committed is None else committed
        self._sealed: dict[str, Any] = {}
        self._batch: dict[str, Any] = {}
        self._event: dict[str, Any] = {}
        # the mappings of a PartitionState share one list of those written by the current
        # event, so that keeping or dropping an event visits those only (most events write
        # two or three mappings of a dozen)
        self._written = written  # None: a mapping on its own (its layers are kept by hand)

    # -- layers ---------------------------------------------------------------------------

    def keep_event(self) -> None:
        if self._event:
            self._batch.update(self._event)
            self._event.clear()

    def drop_event(self) -> None:
        if self._event:
            self._event.clear()

    def drop_batch(self) -> None:
        self._event.clear()
        self._batch.clear()

    def batch_writes(self) -> Iterator[tuple[str, Any]]:
        """(key, value or _DELETED) for every key written in the batch, last write wins."""
        return iter(list(self._batch.items()))

    def replace_written(self, key: str, value: Any) -> None:
        """Hold `value` — equal to what the batch wrote for `key` — instead (SharedRecords)."""
        self._batch[key] = value

    def seal_batch(self) -> None:
        """The batch layer becomes the sealed one (its transaction begins); nothing may be sealed."""
        assert not self._sealed, "a batch is sealed already"
        if self._batch:
            self._sealed, self._batch = self._batch, {}

    def commit_sealed(self) -> None:
        _apply(self._sealed, self.committed)
        self._sealed = {}

    def drop_sealed(self) -> None:
        self._sealed = {}

    def release(self) -> None:
        """Hold nothing any more: every layer and the committed values (`PartitionState.release`)."""
        self._event.clear()
        self._batch.clear()
        self._sealed = {}
        self.committed.clear()

    def commit_batch(self) -> None:
        """The batch layer straight to the committed values (nothing sealed in between)."""
        self.commit_sealed()
        _apply(self._batch, self.committed)
        self._batch.clear()

    # -- mapping --------------------------------------------------------------------------

    def _lookup(self, key: str) -> Any:
        event, batch, sealed = self._event, self._batch, self._sealed
        if key in event:
            return event[key]
        if key in batch:
            return batch[key]
        if sealed and key in sealed:
            return sealed[key]
        return self.committed.get(key, _DELETED)

    def __getitem__(self, key: str) -> Any:
        value = self._lookup(key)
        if value is _DELETED:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        # `_lookup` inline: the engine reads ~20 values a status report through here
        if key in self._event:
            value = self._event[key]
        elif key in self._batch:
            value = self._batch[key]
        elif self._sealed and key in self._sealed:
            value = self._sealed[key]
        else:
            value = self.committed.get(key, _DELETED)
        return default if value is _DELETED else value

    def peek(self, key: str, default: Any = None) -> Any:
        """`get` for a scan over many records: committed values that keep only their most
        recently used records decoded (`_LazyCommitted`) do not count it as a use."""
        event, batch, sealed = self._event, self._batch, self._sealed
        if key in event or key in batch or (sealed and key in sealed):
            return self.get(key, default)
        committed = self.committed
        if isinstance(committed, _LazyCommitted):
            return committed.peek(key, default)
        return committed.get(key, default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._lookup(key) is not _DELETED

    def __setitem__(self, key: str, value: Any) -> None:
        if not self._event and self._written is not None:
            self._written.append(self)
        self._event[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if not self._event and self._written is not None:
            self._written.append(self)
        self._event[key] = _DELETED

    def __iter__(self) -> Iterator[str]:
        if not self._sealed and not self._batch and not self._event:
            return iter(list(self.committed))
        keys = dict.fromkeys(self.committed)
        for layer in (self._sealed, self._batch, self._event):
            keys.update(dict.fromkeys(layer))
        return iter([k for k in keys if self._lookup(k) is not _DELETED])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class PartitionState:
    """The named mappings of one partition and their changelog encoding."""

    TRACKING = "tracking"

    def __init__(
        self,
        schema: Mapping[str, type],
        *,
        lazy: Collection[str] = (),
        shared: Collection[str] = (),
        hot: Mapping[str, int] | None = None,
        encoders: Mapping[str, Callable[[Any], bytes]] | None = None,
    ) -> None:
        """`lazy`: mappings whose restored records are decoded when first read
        (`_LazyCommitted`), `hot[mapping]` of them at most held decoded; `shared`: mappings
        whose equal records are held once per process (`SharedRecords`) — all for the
        decider's fleet-sized tables. `encoders[mapping]`: a record's JSON written by the
        stage itself (equal to what `stored.encode` writes; the version marker is added
        here) — the assembler's, which reuses each sync's encoding."""
        self.hot: dict[str, int] = dict(hot or {})
        self.encoders: dict[str, Callable[[Any], bytes]] = dict(encoders or {})
        self.schema: dict[str, type] = {**schema, self.TRACKING: Tracking}
        # the version each mapping's records are written at (rollout/engine/migrations.py)
        self.versions: dict[str, int] = current_versions()
        self._written: list[LayeredMapping] = []  # by the current event (LayeredMapping)
        # those whose batch layer holds something: `batch_writes` is asked before each event
        # a decider folds, and summing a dozen mappings' layers each time was ~3 % of its CPU
        self._batched: list[LayeredMapping] = []
        self.lazy = frozenset(lazy)
        self.shared: dict[str, SharedRecords] = {name: shared_records(name) for name in shared}
        self.mappings: dict[str, LayeredMapping] = {
            name: LayeredMapping(self._written, self._committed(name)) for name in self.schema
        }

    def _committed(self, name: str) -> dict[str, Any] | None:
        if name not in self.lazy:
            return None
        kind, version, shared = self.schema[name], self.versions.get(name, FIRST_VERSION), self.shared.get(name)

        def decode(key: str, raw: bytes) -> Any:
            value = _decode(name, key, kind, raw, version)
            return value if shared is None else shared.canonical(raw, value)

        def encode(value: Any) -> bytes:
            return self.encode(name, value, version)

        return _LazyCommitted(decode, encode, self.hot.get(name))

    def encode(self, name: str, value: Any, version: int) -> bytes:
        """A record of mapping `name` as stored at `version`."""
        encoder = self.encoders.get(name)
        return stored.encode(value, version) if encoder is None else stored.versioned(encoder(value), version)

    @property
    def tracking(self) -> Tracking:
        value = self.mappings[self.TRACKING].get("position")
        return value if value is not None else Tracking()

    @tracking.setter
    def tracking(self, value: Tracking) -> None:
        self.mappings[self.TRACKING]["position"] = value

    @property
    def sealed(self) -> bool:
        """Whether a batch is sealed: its transaction in flight, not known committed yet."""
        return any(mapping._sealed for mapping in self.mappings.values())

    @property
    def restored(self) -> bool:
        """Whether this partition ever committed anything (then `tracking` is authoritative)."""
        return "position" in self.mappings[self.TRACKING]

    def keep_event(self) -> None:
        for mapping in self._written:
            if not mapping._batch and mapping._event:
                self._batched.append(mapping)
            mapping.keep_event()
        self._written.clear()

    def drop_event(self) -> None:
        for mapping in self._written:
            mapping.drop_event()
        self._written.clear()

    def drop_batch(self) -> None:
        for mapping in self.mappings.values():
            mapping.drop_batch()
        self._written.clear()
        self._batched.clear()

    def commit_batch(self) -> None:
        for mapping in self.mappings.values():
            mapping.commit_batch()
        self._batched.clear()

    def seal_batch(self) -> None:
        for mapping in self.mappings.values():
            mapping.seal_batch()
        self._batched.clear()

    def commit_sealed(self) -> None:
        for mapping in self.mappings.values():
            mapping.commit_sealed()

    def drop_sealed(self) -> None:
        """The sealed batch's transaction failed: it, and what was folded on it, are gone."""
        for mapping in self.mappings.values():
            mapping.drop_sealed()
        self.drop_batch()

    def release(self) -> None:
        """Hold nothing any more: the stage let the partition go for good (another worker owns
        it). Whatever still refers to the mappings — an engine in a reference cycle the
        collector has not reached — holds them empty, not a fleet's worth of records."""
        for mapping in self.mappings.values():
            mapping.release()
        self._written.clear()
        self._batched.clear()

    def batch_writes(self) -> int:
        """How many keys the batch layer has written (each a state record of its changelog)."""
        return sum([len(mapping._batch) for mapping in self._batched])

    def changelog(self) -> list[tuple[bytes, bytes | None]]:
        """The batch layer as state-topic records (key, JSON value or tombstone)."""
        records: list[tuple[bytes, bytes | None]] = []
        for name, mapping in self.mappings.items():
            version = self.versions.get(name, FIRST_VERSION)
            shared = self.shared.get(name)
            for key, value in mapping.batch_writes():
                encoded = None if value is _DELETED else self.encode(name, value, version)
                records.append((f"{name}:{key}".encode(), encoded))
                if shared is not None and encoded is not None:
                    held = shared.canonical(encoded, value)
                    if held is not value:  # an equal record another partition holds: keep that one
                        mapping.replace_written(key, held)
        return records

    def restore(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Apply state-topic records (in offset order) to the committed values; a record of a
        mapping this stage does not have (a newer release's) is skipped.

        The loop is most of a take-over's CPU besides the fetch (benchmarks/take_over.py):
        what a mapping needs — its committed values, whether and at which version its
        records stay lazy — is looked up once per mapping, not per record, and the key is
        split as bytes, the mapping's name never decoded again."""
        applied = 0
        folds: dict[bytes, _Fold | None] = {}
        for raw_key, raw_value in records:
            if raw_key is None:
                continue
            raw_name, _, raw_rest = raw_key.partition(b":")
            fold = folds.get(raw_name, _UNSEEN)
            if fold is _UNSEEN:
                fold = folds[raw_name] = self._fold(raw_name.decode())
            if fold is None:
                continue
            key = raw_rest.decode()
            if raw_value is None:
                fold.forget(key)
            elif fold.stays_lazy is not None and fold.stays_lazy(raw_value):
                # a record of the version this release writes: decoded when first read. Any
                # other (to upcast, or a newer release's: refused) is decoded now, so that a
                # restore still fails on what this release cannot read
                dict.__setitem__(fold.committed, key, _Stored(raw_value))
            else:
                value = _decode(fold.name, key, fold.kind, raw_value, fold.version)
                fold.committed[key] = value if fold.shared is None else fold.shared.canonical(raw_value, value)
            applied += 1
        return applied

    def _fold(self, name: str) -> _Fold | None:
        """How `restore` folds the records of mapping `name` (None: not this stage's)."""
        kind = self.schema.get(name)
        if kind is None:
            return None
        version = self.versions.get(name, FIRST_VERSION)
        committed = self.mappings[name].committed
        stays_lazy = stored.written_at_test(version) if name in self.lazy else None
        return _Fold(name, kind, version, committed, stays_lazy, self.shared.get(name))


class _Fold:
    """What `PartitionState.restore` needs of one mapping, looked up once per restore."""

    __slots__ = ("committed", "forget", "kind", "name", "shared", "stays_lazy", "version")

    def __init__(
        self,
        name: str,
        kind: type,
        version: int,
        committed: dict[str, Any],
        stays_lazy: Callable[[bytes], bool] | None,
        shared: SharedRecords | None,
    ) -> None:
        self.name, self.kind, self.version, self.committed = name, kind, version, committed
        self.stays_lazy, self.shared = stays_lazy, shared
        # a tombstone: a lazy mapping's record is dropped as it is held, not decoded first
        self.forget: Callable[[str], Any] = (
            committed.discard if isinstance(committed, _LazyCommitted) else lambda key: committed.pop(key, None)
        )


_UNSEEN: Any = object()


def _apply(layer: dict[str, Any], committed: dict[str, Any]) -> None:
    for key, value in layer.items():
        if value is _DELETED:
            committed.pop(key, None)
        else:
            committed[key] = value


def _decode(mapping: str, key: str, kind: type, raw: bytes, version: int) -> Any:
    """The stored value of `<mapping>:<key>` as this release holds it (rollout/engine/stored.py)."""
    refusals: list[Refusal] = []
    value = stored.decode(mapping, key, kind, raw, current=version, refusals=refusals)
    for refusal in refusals:
        log.warning(
            "%s:%s: kept as stored, this release refuses its %s (%s)%s",
            mapping,
            key,
            refusal.document,
            "; ".join(refusal.problems),
            "; the module is halted until it is applied again" if refusal.document == "spec" else "",
        )
    return value
