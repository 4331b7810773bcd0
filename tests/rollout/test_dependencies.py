"""Dependencies between modules (docs/rollout-semantics.md, "Dependencies"): one
given/when/then test per rule. The harness feeds the events the engine sends to other
modules' partitions (DependentLinked, DependencyReported) back, as the router would."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given as draws
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rollout.planning.dependency_graph import DependencyCycle, check_acyclic, missing_dependencies
from rollout.wire.events import DependencyReported, DependentLinked
from tests.rollout.builders import AT, applied, cluster, given, module, reported, stage

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}


def base(tag: str = "b1", labels: dict[str, str] | None = None):
    return module("base", {} if labels is None else labels, tag, stage("canary", CANARY), stage("wave", WAVE))


def app(tag: str = "v1", depends_on: list[str] | None = None):
    return module("app", {}, tag, stage("canary", CANARY), stage("wave", WAVE), depends_on=depends_on or ["base"])


def fleet_of_two():
    return given(cluster("c1", CANARY), cluster("w1", WAVE), base(), app())


def test_dependent_moves_on_a_cluster_only_once_its_dependency_succeeded_there() -> None:
    fleet = fleet_of_two()
    assert fleet.revision("base", "c1") == "b1"
    assert fleet.revision("app", "c1") is None and fleet.category("app", "c1") == "blocked"
    fleet.succeed("base", "c1")
    assert fleet.revision("app", "c1") == "v1"


def test_blocked_cluster_keeps_its_stage_from_being_done() -> None:
    fleet = fleet_of_two()
    assert fleet.counts("app", "canary")["blocked"] == 1
    assert fleet.record("app").stage_index == 0 and fleet.phase("app") == "Progressing"
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    assert fleet.record("app").stage_index == 1  # and the wave waits for base there
    assert fleet.category("app", "w1") == "blocked"


def test_dependency_that_does_not_select_the_cluster_blocks_it() -> None:
    fleet = given(cluster("c1", CANARY), cluster("c2", {**CANARY, "team": "x"}), base(labels={"team": "x"}), app())
    fleet.succeed("base", "c2")
    assert fleet.revision("app", "c2") == "v1"
    assert fleet.category("app", "c1") == "blocked"


def test_dependency_applied_after_the_dependent_unblocks_it() -> None:
    fleet = given(cluster("c1", CANARY), app())
    assert fleet.category("app", "c1") == "blocked"
    fleet.apply(base())
    fleet.succeed("base", "c1")
    assert fleet.revision("app", "c1") == "v1"


def test_new_revision_of_a_dependency_blocks_moves_until_it_is_there_again() -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    fleet.apply(base("b2"))
    fleet.apply(app("v2"))
    assert fleet.revision("app", "c1") == "v1" and fleet.category("app", "c1") == "blocked"
    fleet.succeed("base", "c1")
    assert fleet.revision("app", "c1") == "v2"


def test_cluster_already_on_the_target_stays_when_its_dependency_moves_on() -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    fleet.apply(base("b2"))
    assert fleet.category("app", "c1") == "succeeded"


def test_dropping_a_dependency_unblocks_its_clusters() -> None:
    fleet = fleet_of_two()
    fleet.apply(module("app", {}, "v1", stage("canary", CANARY), stage("wave", WAVE)))
    assert fleet.revision("app", "c1") == "v1"


def test_deleting_a_dependency_waits_for_its_dependents() -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    outcome = fleet.delete("base")
    assert outcome.verdicts[0].accepted
    assert outcome.verdicts[0].reason == (
        "Module base is deleted once the modules depending on it are: app (reverse dependency order)"
    )
    assert fleet.revision("base", "c1") == "b1" and fleet.status("base")["deleting"]
    fleet.delete("app")
    assert "base" not in fleet.modules and fleet.revision("base", "c1") is None
    removals = [(a.module, a.cluster) for a in fleet.last.assignments if a.sync is None]
    assert removals == [("app", "c1"), ("base", "c1"), ("base", "w1")]  # dependents first


def test_applying_a_deleting_module_again_cancels_the_deletion() -> None:
    fleet = fleet_of_two()
    fleet.delete("base")
    fleet.apply(base())
    fleet.delete("app")
    assert "base" in fleet.modules and fleet.revision("base", "c1") == "b1"
    assert "delete-cancelled" in fleet.actions("base")


def test_stale_dependency_report_changes_nothing() -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    newest = fleet.state["upstream"]["base/c1"].seq
    before = fleet.snapshot()
    stale = DependencyReported(
        id="old", at=AT, dependent="app", module="base", cluster="c1", ready=False, seq=newest - 1
    )
    outcome = fleet.send(stale)
    assert fleet.snapshot() == before and not outcome.decisions


def test_status_names_the_dependencies() -> None:
    fleet = fleet_of_two()
    assert fleet.status("app")["dependsOn"] == ["base"]


def test_module_cannot_depend_on_itself() -> None:
    with pytest.raises(ValidationError, match="app cannot depend on itself"):
        module("app", {}, "v1", depends_on=["app"])


def test_a_dependency_cycle_is_refused_naming_it() -> None:
    with pytest.raises(DependencyCycle, match="dependency cycle: a → b → c → a"):
        check_acyclic({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]})
    check_acyclic({"a": ["b"], "b": [], "c": ["a", "b"]})


# -- one `rollout apply` with both: the dependent names its dependency's intent (`after`) --


def apply_both_in_order(fleet, order: list[str], base_tag: str = "b2") -> list[tuple[str | None, str | None]]:
    """base at `base_tag` and app v2 applied together (app's ModuleApplied names base's
    intent in `after`), folded in `order`: "base", "app", and "deliver" — the next event
    one partition sent another (FIFO, as through the dependencies topic and the router).
    Returns app's (revision, category) on c1 after every event."""
    base_apply = applied(base(base_tag))
    app_apply = applied(app("v2"), after={"base": base_apply.id})
    fleet.feedback = False
    in_flight: list[Any] = []
    seen = []
    for step in order:
        if step == "deliver":
            event = in_flight.pop(0)
        else:
            event = base_apply if step == "base" else app_apply
        in_flight += fleet.send(event).dependency_events
        seen.append((fleet.revision("app", "c1"), fleet.category("app", "c1")))
    while in_flight:
        in_flight += fleet.send(in_flight.pop(0)).dependency_events
        seen.append((fleet.revision("app", "c1"), fleet.category("app", "c1")))
    fleet.feedback = True
    return seen


RACING_ORDERS = [
    ["base", "app"],  # app's apply folded before base's reports of its new target arrive
    ["app", "base"],  # app's apply folded first: its link reaches base's partition after base's apply
    ["app", "deliver", "base"],  # app's link reaches base's partition before base's own apply
]


@pytest.mark.parametrize("order", RACING_ORDERS, ids=["-".join(o) for o in RACING_ORDERS])
def test_dependent_applied_with_its_dependency_waits_for_it_whatever_order_the_events_arrive(
    order: list[str],
) -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    seen = apply_both_in_order(fleet, order)
    assert all(revision == "v1" for revision, _ in seen), seen  # app never moved before base succeeded
    assert seen[-1] == ("v1", "blocked")
    assert fleet.revision("base", "c1") == "b2"
    fleet.succeed("base", "c1")
    assert fleet.revision("app", "c1") == "v2"


def test_dependent_applied_with_an_unchanged_dependency_moves_once_the_dependency_answers() -> None:
    fleet = fleet_of_two()
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    seen = apply_both_in_order(fleet, ["app", "base"], base_tag="b1")  # base applied again as it was
    assert seen[0] == ("v1", "blocked")  # until base's partition folded the same apply
    assert fleet.revision("app", "c1") == "v2"  # base is still ready there: app moves


def test_a_blocked_member_names_the_dependency_it_waits_for() -> None:
    fleet = fleet_of_two()
    assert fleet.target_status["app/c1"]["state"] == "blocked"
    assert fleet.target_status["app/c1"]["message"] == "waiting for base: not on its target and succeeded here"


def test_status_names_the_dependency_whose_apply_is_awaited() -> None:
    fleet = fleet_of_two()
    fleet.feedback = False
    base_apply = applied(base("b2"))
    fleet.send(applied(app("v2"), after={"base": base_apply.id}))
    assert fleet.status("app")["awaiting"] == ["base"]
    fleet.feedback = True
    fleet.send(base_apply, *fleet.last.dependency_events)
    assert "awaiting" not in fleet.status("app")


def test_a_dependency_that_exists_nowhere_is_named() -> None:
    graph = {"app": ["base", "lib"], "lib": [], "web": ["app"]}
    assert missing_dependencies(graph, ["app", "web"]) == {"app": ["base"]}


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@draws(st.data())
def test_a_dependent_never_moves_on_its_dependencys_previous_success_whatever_the_interleaving(
    data: st.DataObject,
) -> None:
    """base and app applied together onto a completed rollout of both; Hypothesis picks what
    is folded next — either apply, the next event either partition sent the other (each
    channel FIFO, as through the dependencies topic), a success report of base's new
    target — and after every event app runs v2 on a cluster only where base runs b2 and
    succeeded. Once everything is delivered and base succeeded everywhere, app moves on."""
    fleet = fleet_of_two()
    fleet.succeed("base", "c1", "w1")
    fleet.succeed("app", "c1", "w1")
    fleet.feedback = False
    base_apply = applied(base("b2"))
    applies = [base_apply, applied(app("v2"), after={"base": base_apply.id})]
    to_base: list[Any] = []  # DependentLinked: to the dependency's partition
    to_app: list[Any] = []  # DependencyReported, DependencyCurrent: to the dependent's

    def fold(event: Any) -> None:
        for sent in fleet.send(event).dependency_events:
            (to_base if isinstance(sent, DependentLinked) else to_app).append(sent)
        for name in ("c1", "w1"):
            if fleet.revision("app", name) == "v2":
                found = fleet.target("base", name)
                assert found is not None and fleet.revision("base", name) == "b2" and found.status == "succeeded"

    def base_updating(name: str) -> bool:
        found = fleet.target("base", name)
        return found is not None and fleet.revision("base", name) == "b2" and found.status == "updating"

    def choices() -> list[str]:
        ready = [f"apply-{i}" for i in range(len(applies))] + ["to_base"] * bool(to_base) + ["to_app"] * bool(to_app)
        return ready + [f"succeed-{name}" for name in ("c1", "w1") if base_updating(name)]

    while options := choices():
        choice = data.draw(st.sampled_from(options))
        if choice.startswith("apply-"):
            fold(applies.pop(int(choice.removeprefix("apply-"))))
        elif choice == "to_base":
            fold(to_base.pop(0))
        elif choice == "to_app":
            fold(to_app.pop(0))
        else:
            fold(reported("base", choice.removeprefix("succeed-"), "b2", "succeeded"))
    assert fleet.revision("base", "c1") == fleet.revision("base", "w1") == "b2"
    assert fleet.revision("app", "c1") == "v2"  # and the wave follows once app succeeds on the canary
