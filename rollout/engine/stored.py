"""The stored form of state records: how a record is written to its state topic, and read
back by this release or another one.

    value ──encode──► JSON, with "_v": N when its mapping's records are at version N > 1
    JSON  ──decode──► version? ──► newer than this release knows: RecordFromNewerRelease
                               ──► older: upcast by migrations.py, one version at a time
                  ──► the record type: fields this release does not know dropped, API
                      documents it refuses kept as stored (applied_documents.py)

A stored record is its own type (rollout/engine/state.py), apart from the API types: its
fields are the engine's, it is versioned per mapping (migrations.py: version 1 carries no
marker, so what this release writes is byte for byte what v0.26 wrote), and the API
documents it holds (a module's spec) are read under this release's rules without making the
partition unloadable when they refuse them.

What a release reads:

    written by                      read as
    this release, or an older one   its version upcast to the current one
    of the same version             as written
    a newer one, same version       as written, minus the fields this release does not know
                                    (additive changes only within a version: migrations.py)
    a newer one, newer version      refused: RecordFromNewerRelease names the record and
                                    both versions — the partition stays unloaded on this
                                    worker until it runs the newer release

Cost: a record as this release writes it is validated straight from its bytes (one
`model_validate_json`, as before versions existed); only a record with a version marker, or
that does not validate as is (unknown fields), is parsed to a dict, upcast and validated
again. Every function here is pure: streams/state.py calls them for the worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from rollout.engine.applied_documents import Refusal
from rollout.engine.migrations import FIRST_VERSION, current_version, upcast

VERSION_KEY = "_v"  # always the first key of a record's JSON (`encode`)
_MARKER = b'{"_v"'


class StoredStateError(ValueError):
    """A state record this release cannot read; `key` is its key on the state topic."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"state record {key}: {message}")
        self.key = key


class RecordFromNewerRelease(StoredStateError):
    """A record of a version newer than this release knows (a stop-the-world upgrade was
    rolled, or a release rolled back past a migration)."""


class UnreadableRecord(StoredStateError):
    """A record that is not what its mapping's type reads, even with its unknown fields dropped."""


def encode(value: Any, version: int = FIRST_VERSION) -> bytes:
    """`value` as stored: a record's JSON (its version in it when above the first), or a JSON
    number. A record type that declares `stored_without_defaults` (a fleet-sized table's: a
    Target) is written without the fields at their defaults — what every release reads back
    as the same record, since each of those fields has had that default since v0.26."""
    if not isinstance(value, BaseModel):
        return json.dumps(value).encode()
    compact = getattr(type(value), "stored_without_defaults", False)
    raw: bytes = value.__pydantic_serializer__.to_json(value, exclude_defaults=compact)  # model_dump_json() → bytes
    return versioned(raw, version)


def versioned(raw: bytes, version: int) -> bytes:
    """A record's JSON `raw` as stored at `version` (the marker first, above the first version) —
    for a stage that encodes its records' JSON itself (streams/assemblage_encoding.py)."""
    if version == FIRST_VERSION:
        return raw
    marker = b'{"%s":%d' % (VERSION_KEY.encode(), version)
    return marker + (b"}" if raw == b"{}" else b"," + raw[1:])


def written_at(raw: bytes, version: int) -> bool:
    """Whether `raw` is a record of exactly `version`, as `encode` writes one (no marker for
    the first version) — one `decode` reads without upcasting it."""
    if version == FIRST_VERSION:
        return not raw.startswith(_MARKER)
    marker = b'{"%s":%d' % (VERSION_KEY.encode(), version)
    return raw.startswith(marker) and raw[len(marker) : len(marker) + 1] in (b",", b"}")


def written_at_test(version: int) -> Callable[[bytes], bool]:
    """`written_at(raw, version)` as a test of `raw` alone, its marker built once (a restore
    tests every record of a mapping against the same version)."""
    if version == FIRST_VERSION:
        return lambda raw: not raw.startswith(_MARKER)
    marker = b'{"%s":%d' % (VERSION_KEY.encode(), version)
    after = len(marker)
    ends = (b",", b"}")
    return lambda raw: raw.startswith(marker) and raw[after : after + 1] in ends


def decode(
    mapping: str,
    key: str,
    kind: type[Any],
    raw: bytes,
    *,
    current: int | None = None,
    refusals: list[Refusal] | None = None,
) -> Any:
    """The value of `<mapping>:<key>` as this release holds it. `current`: the mapping's
    record version (default: from migrations.py); `refusals` collects the API documents
    kept as stored because this release refuses them (applied_documents.py)."""
    if not issubclass(kind, BaseModel):
        return kind(json.loads(raw))  # a number (the clock)
    context: list[Refusal] = [] if refusals is None else refusals
    noted = len(context)  # the refusals noted before this record's
    current = current_version(mapping) if current is None else current
    if current == FIRST_VERSION and not raw.startswith(_MARKER):
        try:
            return kind.model_validate_json(raw, context=context)
        except ValidationError:
            pass  # fields of a newer release, or a record this release cannot read: below
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise UnreadableRecord(f"{mapping}:{key}", f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(f"{mapping}:{key}", f"a JSON object was expected, not {type(data).__name__}")
    version = data.pop(VERSION_KEY, FIRST_VERSION)
    if not isinstance(version, int) or version < FIRST_VERSION:
        raise UnreadableRecord(f"{mapping}:{key}", f"version {version!r} is not a record version")
    if version > current:
        raise RecordFromNewerRelease(
            f"{mapping}:{key}",
            f"written by a newer release (record version {version}; this release reads up to {current}): "
            "run the newer release on every worker — a new record version is a stop-the-world upgrade "
            "(README: Upgrading a running engine)",
        )
    data = upcast(mapping, data, version)
    del context[noted:]  # the fast path may have noted refusals of a record it did not return
    return _without_unknown_fields(f"{mapping}:{key}", kind, data, context)


def _without_unknown_fields(key: str, kind: type[BaseModel], data: dict[str, Any], context: list[Refusal]) -> Any:
    """`data` validated as `kind`, dropping the fields it does not know (a newer release's
    additions of the same version); any other problem is an UnreadableRecord."""
    noted = len(context)
    while True:
        try:
            return kind.model_validate_json(json.dumps(data), context=context)
        except ValidationError as error:
            details = error.errors(include_url=False)
            unknown = [detail["loc"] for detail in details if detail["type"] == "extra_forbidden"]
            if not unknown or len(unknown) < len(details):
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in detail['loc'])}: {detail['msg']}" for detail in details
                )
                raise UnreadableRecord(key, f"not a {kind.__name__} of this release: {problems}") from None
            for location in unknown:
                _drop(data, location)
            del context[noted:]


def _drop(data: Any, location: tuple[Any, ...]) -> None:
    """Delete the item at `location` (a validation error's `loc`) from the JSON `data`."""
    *path, last = location
    for part in path:
        data = data[part if isinstance(data, list) or part in data else str(part)]
    if isinstance(data, dict):
        data.pop(last if last in data else str(last), None)
