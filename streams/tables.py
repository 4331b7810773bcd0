"""Typed, partition-scoped views of Faust tables for the decision core.

The engine evolves `MutableMapping[str, Model]`s. `ModelView` gives it one over a Faust
table: values are stored as JSON-able dicts (so the changelog can serialise them) and
handed back as pydantic models; every key is prefixed with the journal partition, because
cluster facts and the clock are replicated into every partition (broadcast) and each
partition's copy must be its own changelog entry.

Assigning `view[key] = model` is what writes the changelog — the engine never mutates a
stored model in place, it stores a new one (Faust only logs re-assignments).
A small cache keeps decoded models so a status report does not re-validate the module
record from JSON each time; it is dropped on every rebalance.

Writes are *deferred*: they stay in the view (readable at once) until `commit()` hands them
to the table. The worker commits only after the event's outputs were acknowledged by the
broker, so state in the changelog always implies its outputs reached their topics.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_DELETED = object()


class ModelView(MutableMapping[str, M], Generic[M]):
    def __init__(self, table: MutableMapping[str, Any], prefix: str, model: type[M]) -> None:
        self._table = table
        self._prefix = prefix
        self._model = model
        self._cache: dict[str, M] = {}
        self._pending: dict[str, Any] = {}

    def commit(self) -> int:
        """Hand the deferred writes to the table (changelog), in the order they were made."""
        written = len(self._pending)
        for key, value in self._pending.items():
            if value is _DELETED:
                self._table.pop(self._prefix + key, None)
            else:
                self._table[self._prefix + key] = value
        self._pending.clear()
        return written

    def __getitem__(self, key: str) -> M:
        if self._pending.get(key, None) is _DELETED:
            raise KeyError(key)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        raw = self._pending[key] if key in self._pending else self._table[self._prefix + key]
        value = self._model.model_validate(raw)
        self._cache[key] = value
        return value

    def __setitem__(self, key: str, value: M) -> None:
        self._pending.pop(key, None)  # keep insertion order = order of the last write
        self._pending[key] = value.model_dump(mode="json")
        self._cache[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._cache.pop(key, None)
        self._pending.pop(key, None)
        self._pending[key] = _DELETED

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self._pending:
            return self._pending[key] is not _DELETED
        return key in self._cache or self._prefix + key in self._table

    def __iter__(self) -> Iterator[str]:
        size = len(self._prefix)
        stored = [k[size:] for k in list(self._table.keys()) if isinstance(k, str) and k.startswith(self._prefix)]
        seen = set(stored)
        keys = [k for k in stored if self._pending.get(k, None) is not _DELETED]
        keys += [k for k, v in self._pending.items() if k not in seen and v is not _DELETED]
        return iter(keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class FloatView(MutableMapping[str, float]):
    """The clock: same deferral as ModelView (the engine never deletes from it)."""

    def __init__(self, table: MutableMapping[str, Any], prefix: str) -> None:
        self._table = table
        self._prefix = prefix
        self._pending: dict[str, float] = {}

    def commit(self) -> int:
        written = len(self._pending)
        for key, value in self._pending.items():
            self._table[self._prefix + key] = value
        self._pending.clear()
        return written

    def __getitem__(self, key: str) -> float:
        if key in self._pending:
            return self._pending[key]
        return float(self._table[self._prefix + key])

    def __setitem__(self, key: str, value: float) -> None:
        self._pending[key] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("the clock is never deleted from")

    def __iter__(self) -> Iterator[str]:
        size = len(self._prefix)
        stored = {k[size:] for k in list(self._table.keys()) if isinstance(k, str) and k.startswith(self._prefix)}
        return iter(sorted(stored | set(self._pending)))

    def __len__(self) -> int:
        return sum(1 for _ in self)
