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
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


class ModelView(MutableMapping[str, M], Generic[M]):
    def __init__(self, table: MutableMapping[str, Any], prefix: str, model: type[M]) -> None:
        self._table = table
        self._prefix = prefix
        self._model = model
        self._cache: dict[str, M] = {}

    def __getitem__(self, key: str) -> M:
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        raw = self._table[self._prefix + key]
        value = self._model.model_validate(raw)
        self._cache[key] = value
        return value

    def __setitem__(self, key: str, value: M) -> None:
        self._table[self._prefix + key] = value.model_dump(mode="json")
        self._cache[key] = value

    def __delitem__(self, key: str) -> None:
        self._cache.pop(key, None)
        del self._table[self._prefix + key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._cache or self._prefix + key in self._table)

    def __iter__(self) -> Iterator[str]:
        size = len(self._prefix)
        return (k[size:] for k in list(self._table.keys()) if isinstance(k, str) and k.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class FloatView(MutableMapping[str, float]):
    def __init__(self, table: MutableMapping[str, Any], prefix: str) -> None:
        self._table = table
        self._prefix = prefix

    def __getitem__(self, key: str) -> float:
        return float(self._table[self._prefix + key])

    def __setitem__(self, key: str, value: float) -> None:
        self._table[self._prefix + key] = value

    def __delitem__(self, key: str) -> None:
        del self._table[self._prefix + key]

    def __iter__(self) -> Iterator[str]:
        size = len(self._prefix)
        return (k[size:] for k in list(self._table.keys()) if isinstance(k, str) and k.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)
