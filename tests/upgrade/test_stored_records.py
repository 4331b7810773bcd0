"""Stored records across releases (rollout/engine/stored.py, migrations.py), through the
worker's decode path (streams/state.PartitionState): fields added and removed, unknown
fields of a newer release, migrations from older versions, versions this release does not
know — on records the previous release wrote (tests/upgrade/fixtures/v0.26)."""

from __future__ import annotations

import copy
import json
import types
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, Field, create_model

from rollout.api.manifests import Strict
from rollout.engine import migrations, stored
from rollout.engine.applied_documents import KeepAsStored
from rollout.engine.migrations import MIGRATIONS, Migration, check_registry
from rollout.engine.state import ENGINE_MAPPINGS, ModuleRecord, Record, Target
from streams.decider import state_mappings
from streams.state import PartitionState
from tests.upgrade.release_fixture import state_documents, without_previous_defaults


def stored_value(key: str) -> dict[str, Any]:
    """The JSON the previous release stored under `key`."""
    value = next(doc["value"] for doc in state_documents() if doc["key"] == key)
    assert isinstance(value, dict)
    return copy.deepcopy(value)


def restore(schema: dict[str, type], *records: tuple[str, Any]) -> PartitionState:
    state = PartitionState(schema)
    state.restore(
        (key.encode(), value if isinstance(value, bytes) else json.dumps(value).encode()) for key, value in records
    )
    return state


def written(state: PartitionState, mapping: str, key: str) -> bytes:
    """What `state` writes for `<mapping>:<key>` once the engine has stored it again."""
    state.mappings[mapping][key] = state.mappings[mapping].committed[key]
    state.keep_event()
    ((_, value),) = [(k, v) for k, v in state.changelog() if k == f"{mapping}:{key}".encode()]
    state.commit_batch()
    assert value is not None
    return value


def as_this_release_writes(kind: type[Record], old: dict[str, Any]) -> dict[str, Any]:
    """`old` as this release writes it: every stored field kept, with its value, plus the
    fields added since the fixture's release at their defaults."""
    now = json.loads(kind.model_validate(old).model_dump_json())
    assert {k: now[k] for k in old} == old, "a stored field changed on the way"
    return dict(now)


def variant(kind: type[Record], *, without: str | None = None, **added: Any) -> type[Record]:
    """`kind` as a later release might declare it: a field removed, or fields added."""
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in kind.model_fields.items() if name != without
    }
    fields.update(added)
    model: type[Record] = create_model(kind.__name__, __base__=Record, **fields)
    return model


# -- fields added and removed within a version ---------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "key", "kind", "field"),
    [("targets", "app/c2", Target, "status_message"), ("modules", "app", ModuleRecord, "window_waits")],
)
def test_a_field_removed_from_a_record_type_restores_the_state_that_has_it(
    mapping: str, key: str, kind: type[Record], field: str
) -> None:
    old = stored_value(f"{mapping}:{key}")
    assert field in old
    later = variant(kind, without=field)
    state = restore({mapping: later}, (f"{mapping}:{key}", old))
    value = state.mappings[mapping].committed[key]
    assert type(value) is later and field not in type(value).model_fields
    assert json.loads(written(state, mapping, key)) == {
        k: v for k, v in as_this_release_writes(kind, old).items() if k != field
    }


@pytest.mark.parametrize(("mapping", "key", "kind"), [("targets", "app/c2", Target), ("modules", "app", ModuleRecord)])
def test_a_field_added_with_a_default_restores_the_state_without_it(mapping: str, key: str, kind: type[Record]) -> None:
    old = stored_value(f"{mapping}:{key}")
    later = variant(kind, notes=(list[str], Field(default_factory=list)), quarantined=(bool, False))
    state = restore({mapping: later}, (f"{mapping}:{key}", old))
    value = state.mappings[mapping].committed[key]
    assert (value.notes, value.quarantined) == ([], False)
    assert json.loads(written(state, mapping, key)) == {
        **as_this_release_writes(kind, old),
        "notes": [],
        "quarantined": False,
    }


def test_a_record_a_newer_release_wrote_is_read_without_the_fields_this_release_does_not_know() -> None:
    """Mixed versions during a rolling upgrade: the older release reads what the newer one
    added within the same version by dropping it (and drops it when it rewrites the record)."""
    target, cluster = stored_value("targets:app/c2"), stored_value("clusters:c1")
    newer_target = {**target, "quarantined": True}
    newer_cluster = {**cluster, "zone": "eu-1", "lease": {**cluster["lease"], "grace_seconds": 30}}
    state = restore(dict(ENGINE_MAPPINGS), ("targets:app/c2", newer_target), ("clusters:c1", newer_cluster))
    assert state.mappings["targets"].committed["app/c2"] == Target.model_validate(target)
    assert json.loads(written(state, "targets", "app/c2")) == without_previous_defaults(
        target
    )  # Target.stored_without_defaults
    assert json.loads(written(state, "clusters", "c1")) == cluster


# -- versions and migrations ---------------------------------------------------------------


def hypothetical_migrations() -> tuple[Migration, ...]:
    """Two changes of Target a later release might make: its status message once stored as
    `message` (version 1 → 2), its report ids once one comma-separated string (2 → 3)."""

    def rename_message(data: dict[str, Any]) -> dict[str, Any]:
        data["status_message"] = data.pop("message", "")
        return data

    def split_report_ids(data: dict[str, Any]) -> dict[str, Any]:
        data["report_ids"] = [i for i in data.get("report_ids", "").split(",") if i]
        return data

    return (
        Migration(
            "targets", 2, "report ids as a list", split_report_ids, ({"report_ids": "a,b"}, {"report_ids": ["a", "b"]})
        ),
        Migration(
            "targets", 1, "message → status_message", rename_message, ({"message": "x"}, {"status_message": "x"})
        ),
    )


def test_records_of_older_versions_are_upcast_one_version_at_a_time_on_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrations, "MIGRATIONS", hypothetical_migrations())
    current = stored_value("targets:app/c2")
    ids = ",".join(current["report_ids"])
    version_1 = {k: v for k, v in current.items() if k != "status_message"} | {"message": "", "report_ids": ids}
    version_2 = {"_v": 2, **current, "report_ids": ids}
    version_3 = {"_v": 3, **current}
    state = restore(
        state_mappings(), ("targets:one", version_1), ("targets:two", version_2), ("targets:three", version_3)
    )
    assert state.versions["targets"] == 3 and state.versions.get("modules", 1) == 1
    expected = Target.model_validate(current)
    assert [state.mappings["targets"].committed[k] for k in ("one", "two", "three")] == [expected] * 3

    raw = written(state, "targets", "one")
    assert raw.startswith(b'{"_v":3,') and json.loads(raw) == {"_v": 3, **without_previous_defaults(current)}
    assert restore(state_mappings(), ("targets:one", raw)).mappings["targets"].committed["one"] == expected


def test_a_record_of_a_version_this_release_does_not_know_is_refused_naming_it() -> None:
    newer = {"_v": 2, **stored_value("targets:app/c2")}
    with pytest.raises(stored.RecordFromNewerRelease) as refused:
        restore(state_mappings(), ("targets:app/c2", newer))
    assert refused.value.key == "targets:app/c2"
    assert "record version 2; this release reads up to 1" in str(refused.value)
    assert "stop-the-world" in str(refused.value)


def test_a_record_this_release_cannot_read_names_its_key_and_what_is_wrong() -> None:
    broken = {k: v for k, v in stored_value("targets:app/c2").items() if k != "module"}
    with pytest.raises(stored.UnreadableRecord) as unreadable:
        restore(state_mappings(), ("targets:app/c2", broken))
    assert str(unreadable.value) == "state record targets:app/c2: not a Target of this release: module: Field required"


def test_the_migrations_registry_numbers_each_mappings_versions_from_one_without_a_gap() -> None:
    check_registry()  # the real one
    check_registry(hypothetical_migrations())
    first, second = hypothetical_migrations()
    with pytest.raises(ValueError, match="targets: no migration from version 1"):
        check_registry([first])
    with pytest.raises(ValueError, match="the same mapping from the same version"):
        check_registry([first, second, second])


def test_each_registered_migration_turns_its_example_into_the_next_version() -> None:
    """Every migration of the registry (and the hypothetical ones above) does what its
    example says; a whole record of its version restored is tested beside it."""
    for migration in [*MIGRATIONS, *hypothetical_migrations()]:
        before, after = migration.example
        assert migration.upcast(copy.deepcopy(before)) == after, f"{migration.mapping} from v{migration.version}"


# -- API documents in records ----------------------------------------------------------------


def api_fields(kind: type[BaseModel], path: str = "") -> list[tuple[str, bool]]:
    """(field path, kept as applied?) for every field of a record (and of the records in it)
    whose type holds an API model (rollout/api/manifests.Strict)."""
    found: list[tuple[str, bool]] = []
    for name, info in kind.model_fields.items():
        where = f"{path}{kind.__name__}.{name}"
        kept = any(isinstance(getattr(m, "func", None), KeepAsStored) for m in _metadata(info))
        if _holds(info.annotation, Strict):
            found.append((where, kept))
        for record in _models(info.annotation):
            if issubclass(record, Record):
                found += api_fields(record, f"{where} → ")
    return found


def _metadata(info: Any) -> list[Any]:
    nested = [m for arg in get_args(info.annotation) if get_origin(arg) is Annotated for m in get_args(arg)[1:]]
    return [*info.metadata, *nested]


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Annotated, list, dict, Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _models(arg)]
    return []


def _holds(annotation: Any, base: type) -> bool:
    return any(issubclass(model, base) for model in _models(annotation))


def test_every_api_document_a_stored_record_holds_is_kept_as_applied() -> None:
    """A field typed with an API model must be AppliedSpec/AppliedSync/AppliedRestriction
    (applied_documents.py): else a rule tightened in a later release bricks the partition."""
    kinds = [kind for kind in state_mappings().values() if issubclass(kind, BaseModel)]
    found = [entry for kind in kinds for entry in api_fields(kind)]
    assert {where for where, _ in found} >= {
        "ModuleRecord.spec",
        "ModuleRecord.revisions → Revision.sync",
        "RestrictionRecord.restriction",
    }
    assert [where for where, kept in found if not kept] == []
