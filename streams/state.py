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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
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


class LayeredMapping(MutableMapping[str, Any]):
    """Committed values under a sealed, a batch and an event layer (see the module doc)."""

    def __init__(self, written: list[LayeredMapping] | None = None) -> None:
        self.committed: dict[str, Any] = {}
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
        return iter(self._batch.items())

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
        value = self._lookup(key)
        return default if value is _DELETED else value

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

    def __init__(self, schema: Mapping[str, type]) -> None:
        self.schema: dict[str, type] = {**schema, self.TRACKING: Tracking}
        # the version each mapping's records are written at (rollout/engine/migrations.py)
        self.versions: dict[str, int] = current_versions()
        self._written: list[LayeredMapping] = []  # by the current event (LayeredMapping)
        self.mappings: dict[str, LayeredMapping] = {name: LayeredMapping(self._written) for name in self.schema}

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

    def commit_batch(self) -> None:
        for mapping in self.mappings.values():
            mapping.commit_batch()

    def seal_batch(self) -> None:
        for mapping in self.mappings.values():
            mapping.seal_batch()

    def commit_sealed(self) -> None:
        for mapping in self.mappings.values():
            mapping.commit_sealed()

    def drop_sealed(self) -> None:
        """The sealed batch's transaction failed: it, and what was folded on it, are gone."""
        for mapping in self.mappings.values():
            mapping.drop_sealed()
        self.drop_batch()

    def changelog(self) -> list[tuple[bytes, bytes | None]]:
        """The batch layer as state-topic records (key, JSON value or tombstone)."""
        records: list[tuple[bytes, bytes | None]] = []
        for name, mapping in self.mappings.items():
            version = self.versions.get(name, FIRST_VERSION)
            for key, value in mapping.batch_writes():
                encoded = None if value is _DELETED else stored.encode(value, version)
                records.append((f"{name}:{key}".encode(), encoded))
        return records

    def restore(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Apply state-topic records (in offset order) to the committed values; a record of a
        mapping this stage does not have (a newer release's) is skipped."""
        applied = 0
        for raw_key, raw_value in records:
            if raw_key is None:
                continue
            name, _, key = raw_key.decode().partition(":")
            kind = self.schema.get(name)
            if kind is None:
                continue
            committed = self.mappings[name].committed
            if raw_value is None:
                committed.pop(key, None)
            else:
                committed[key] = _decode(name, key, kind, raw_value, self.versions.get(name, FIRST_VERSION))
            applied += 1
        return applied


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
