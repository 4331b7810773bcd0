"""`Record.working_copy` (rollout/engine/state.py): a copy the engine may change in place
without touching the record it came from — every record and container in it copied, found
from the fields' types (no list of fields to keep up to date), the API's models shared.
test_failed_event_undo.py checks what this buys (an event that fails is undone by dropping
its writes); these check the copy itself, on every kind of stored record a busy fleet has."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from rollout.engine.core import MAX_TICK_STEP
from rollout.engine.state import Record, _shallow_copy
from rollout.wire.events import RestrictionApplied
from tests.rollout.builders import (
    T0,
    Fleet,
    applied,
    cluster,
    fleet_seen,
    given,
    heartbeat,
    module,
    reported,
    restriction,
    stage,
    tick,
)
from tests.rollout.test_helm_releases import helm_module, values_observed


def busy_fleet() -> Fleet:
    """Every mapping holds records: held intents, leases, values, dependencies, tombstones, gates."""
    fleet = given(cluster("a", {"ring": "canary"}), cluster("b"), applied(module("app", {}, "v1"), fleet={0: 1}))
    staged = module("base", {}, "v1", stage("canary", {"ring": "canary"}), stage("rest"))
    fleet.send(applied(staged), fleet_seen(0, 1), tick(T0 + 5 * MAX_TICK_STEP), heartbeat("a", 60))
    fleet.send(helm_module(), values_observed("a", {"replicaCount": 3}))
    fleet.send(applied(module("dep", {}, "d1")), applied(module("top", {}, "v1", depends_on=["dep"])))
    fleet.send(reported("dep", "a", "d1", "succeeded"), applied(module("held", {}, "v1"), fleet={0: 9}))
    fleet.delete("app")
    fleet.remove("b")
    fleet.send(RestrictionApplied(restriction=restriction("tenant-a")))
    return fleet


def records(fleet: Fleet) -> list[Record]:
    found = [value for mapping in fleet.state.values() for value in mapping.values() if isinstance(value, Record)]
    assert {type(value).__name__ for value in found} >= {
        "ClusterFacts", "ModuleRecord", "Target", "RemovedCluster", "DeletedModule", "FleetPosition",
        "HeldQueue", "HeldIntent", "Dependents", "Upstream", "Sequence", "RestrictionRecord",
    }  # fmt: skip
    return found


def scribble(value: Any) -> None:
    """Change every container and nested record of `value` in place."""
    if isinstance(value, Record):
        for name, item in list(value.__dict__.items()):
            if isinstance(item, list | dict | set | Record):
                scribble(item)
            elif isinstance(item, int | float) and not isinstance(item, bool):
                value.__dict__[name] = item + 1
    elif isinstance(value, dict):
        for item in value.values():
            scribble(item)
        value["scribbled"] = 1
    elif isinstance(value, list):
        for item in value:
            scribble(item)
        value.append("scribbled")
    elif isinstance(value, set):
        value.add("scribbled")


def test_a_working_copy_equals_its_record_and_shares_nothing_the_engine_may_change() -> None:
    for record in records(busy_fleet()):
        before = record.model_dump_json()
        copied = record.working_copy()
        assert copied == record and copied is not record
        assert copied.model_fields_set == record.model_fields_set
        scribble(copied)
        assert record.model_dump_json() == before, f"changing a copy of {type(record).__name__} changed it"


def test_a_working_copy_shares_the_api_models_it_holds() -> None:
    module_record = busy_fleet().record("base")
    copied = module_record.working_copy()
    assert copied.spec is module_record.spec
    for generation, revision in copied.revisions.items():
        assert revision is not module_record.revisions[generation]
        assert revision.sync is module_record.revisions[generation].sync


def test_the_shallow_copy_is_what_model_copy_makes() -> None:
    for record in records(busy_fleet()):
        ours, theirs = _shallow_copy(record), record.model_copy()
        assert ours.__dict__ == theirs.__dict__ and ours.__dict__ is not record.__dict__
        for slot in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            assert getattr(ours, slot) == getattr(theirs, slot), slot
        assert isinstance(ours, BaseModel) and ours.model_dump_json() == theirs.model_dump_json()


def test_an_updated_copy_is_what_model_copy_with_an_update_makes() -> None:
    for record in records(busy_fleet()):
        fields = list(type(record).model_fields)
        changes = {name: getattr(record, name) for name in fields[-2:]}  # values of the right types
        ours, theirs = record.updated(changes), record.model_copy(update=changes)
        assert ours.__dict__ == theirs.__dict__ and ours.__dict__ is not record.__dict__
        for slot in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            assert getattr(ours, slot) == getattr(theirs, slot), slot
        assert ours.model_dump_json(exclude_unset=True) == theirs.model_dump_json(exclude_unset=True)
