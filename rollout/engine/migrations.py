"""Migrations of the engine's stored records: each one upcasts a record's JSON by one version.

    decide-state record ──(its version, "_v": absent = 1)──► MIGRATIONS[mapping, v], [v + 1], …
                        ──► the record at the mapping's current version ──► its type (stored.py)

Every record on a state topic carries the version of its mapping's record type
(stored.py writes it; version 1 — every record up to now — carries none, so that the
records this release writes are byte for byte what v0.26 wrote and read). A mapping's
current version is 1 + the number of migrations registered for it here, so the version
and the functions that reach it cannot disagree.

When a record needs a migration, and when it does not (the rule behind rolling upgrades,
README "Upgrading a running engine"):

* additive changes keep the version: a new field with a default that is right for every
  record written without it, or a field removed that had a default in the release before.
  A release reads records written by a newer one of the same version by dropping the
  fields it does not know (stored.py), and a record it rewrites loses them — so a new
  field must also be right when an older release has reset it to its default;
* anything else — a field renamed, restructured or given a new meaning, a new field
  without a default — is a new version: the type changes, and a `Migration` here upcasts
  the JSON of the version before (a dict in, a dict out: never the current types, which
  will change again) to the new one. A release refuses a record of a version newer than
  it knows (stored.RecordFromNewerRelease): such a release is upgraded stop-the-world, not
  rolling.

A migration is registered with an example (the part of a record of its version that it
changes, and what it must become): tests/upgrade/test_stored_records.py runs every example;
add beside it a test that restores a whole record of the old version through the worker's
decode path (as `test_records_of_older_versions_are_upcast_one_version_at_a_time_on_restore`
does for two hypothetical ones). No record type has needed a migration yet: versions were
introduced after v0.26, whose records are version 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FIRST_VERSION = 1  # every record written before versions existed; written without "_v"

Upcast = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Migration:
    """How records of `mapping` at `version` become records of `version` + 1."""

    mapping: str  # the state mapping (ENGINE_MAPPINGS' key, the "<mapping>:" of the record's key)
    version: int  # the version it upcasts from
    change: str  # what changed, in the words of the release notes
    upcast: Upcast  # the record's JSON at `version` → at `version` + 1
    # a record at `version` and what `upcast` makes of it (run by the tests)
    example: tuple[dict[str, Any], dict[str, Any]]


MIGRATIONS: tuple[Migration, ...] = ()
"""Every migration, in any order; per mapping, versions 1, 2, … without a gap."""


def current_versions(migrations: Sequence[Migration] | None = None) -> dict[str, int]:
    """Mapping → its current record version, for the mappings that have migrations
    (any other mapping is at FIRST_VERSION)."""
    versions: dict[str, int] = {}
    for migration in MIGRATIONS if migrations is None else migrations:
        versions[migration.mapping] = max(versions.get(migration.mapping, FIRST_VERSION), migration.version + 1)
    return versions


def current_version(mapping: str, migrations: Sequence[Migration] | None = None) -> int:
    return current_versions(migrations).get(mapping, FIRST_VERSION)


def upcast(
    mapping: str, data: dict[str, Any], version: int, migrations: Sequence[Migration] | None = None
) -> dict[str, Any]:
    """`data`, a record of `mapping` at `version`, upcast to the current version."""
    steps = _steps(MIGRATIONS if migrations is None else migrations)
    while (mapping, version) in steps:
        data = steps[mapping, version].upcast(data)
        version += 1
    return data


def check_registry(migrations: Sequence[Migration] | None = None) -> None:
    """ValueError unless each mapping's migrations number its versions 1, 2, … once each."""
    registry = MIGRATIONS if migrations is None else migrations
    steps = _steps(registry)
    if len(steps) != len(registry):
        raise ValueError("two migrations upcast the same mapping from the same version")
    for mapping, top in current_versions(registry).items():
        missing = [v for v in range(FIRST_VERSION, top) if (mapping, v) not in steps]
        if missing:
            raise ValueError(f"{mapping}: no migration from version {missing[0]} (versions go 1, 2, … without a gap)")


def _steps(migrations: Sequence[Migration]) -> Mapping[tuple[str, int], Migration]:
    return {(m.mapping, m.version): m for m in migrations}
