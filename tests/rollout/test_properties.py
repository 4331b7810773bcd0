"""Properties of the decision core over random fleets, strategies and event interleavings.

Hypothesis draws a fleet (up to 40 clusters), one or two modules with random strategies
(1-3 stages, int/% limits, soak, approval, onFailure, deadlines, sorting, maintenance windows,
health gates, base dependsOn app or not, both members of one Release or not) and a sequence of
operations — status reports for the assigned revision (and stale ones), readiness flips,
joins, leaves and relabels, ticks, commands, new revisions, strategy and selector changes,
module deletes and re-creations, heartbeats (leases that then expire), clusters leaving and
joining, health gate results (passing, failing, inconclusive, stale), approvals by several
people through several doors (some not counted) and rejections, the namespace's
ModuleRestriction applied, changed or deleted, freeze calendars (the fleet's and the
namespace's) applied and deleted and break-glass of them — a module's, or the fleet
calendar's own (drawn last), redeliveries. After
every event it checks:

* the stored state is consistent (counters = a recount of the targets, categories follow
  the rules, assemblages agree with the targets — `builders.check_consistency`);
* moves never take a stage over `maxConcurrency` (counted from the targets), and no event
  but an unpin, a cluster observation or a module apply makes a stage exceed it;
* no member gets the target outside its stage's maintenance windows;
* no member starts moving to the target while a freeze calendar governing its module — and
  not overridden by a break-glass in force, the module's or the calendar's — holds the
  decision's time;
* no stage is passed before each of its health gates passed for its soak;
* no member of stage k+1 gets the target before stage k was done, soaked and approved — by
  as many people as its approval policy asks (tracked from the decisions alone);
* after a rejection, no stage of that target starts;
* once over the failure budget with `Halt`, the target is assigned nowhere until a resume
  (that is not over budget any more) or a new revision;
* a rolled-back module has every unpinned member on stable (or nothing without one);
* a pinned cluster's assignment never changes while it stays pinned;
* a redelivered event emits nothing and changes nothing;
* while a module re-sorts its members (membership.py "Re-sorts per event"), nothing moves
  to its target, and every member a rollback's re-sort passed is back on stable.

From wherever the scenario left it, its restriction and freeze calendars deleted, a new
revision with every cluster succeeding and every stage approved must complete, and stay
complete under a new strategy, with every ready, staged, unpinned member on the target.
Then the whole journal is refolded into a fresh
engine (determinism: identical outcomes and state) and into one restarted before every
event — JSON round trip, cold indexes — so that every prefix is folded, recovered and
continued (identical outcomes and final state). Two more: plain rollouts always complete,
and a fixed busy scenario gives the same outcomes under different PYTHONHASHSEEDs. Sliced
at two moves an event, plain rollouts — and their re-applies, new revisions and rollbacks,
whose re-sorts then cross several slices — decide what unbounded folds decide.

Redelivery of suffixes: after a scenario is folded, *every* suffix of its journal is fed
again (same events, same ids) onto the advanced state — what a consumer restarting from an
older committed offset does. Nothing may be emitted and the state must stay identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rollout.api.manifests import Stage
from rollout.api.promotion import in_range, newer
from rollout.engine.approvals import approval_met
from rollout.engine.core import DecisionAction, Outcome, stages_of
from rollout.engine.promotions import held_by, release_held_by
from rollout.engine.state import ModuleRecord
from rollout.wire.decision_reasons import MovedToTarget, Promoted, ReleaseCombinationPromoted
from rollout.wire.events import CalendarBreakGlass, ModuleApplied, RestrictionDeleted, RolloutCommanded
from rollout.wire.status import SETTLED_RUN_STATES
from tests.rollout.builders import (
    Fleet,
    applied,
    command,
    gate_result,
    module,
    next_id,
    reported,
    serialize,
    stage,
    tick,
)
from tests.rollout.invariants import Checker
from tests.rollout.scenarios import (
    LATE_JOINERS,
    MODULES,
    OFFLINE_POLICIES,
    OPERATIONS,
    PROMOTION_RANGE,
    PROMOTION_STEPS,
    World,
    calendar_break_glass_scenario,
    cluster_specs,
    graph_shapes,
    measurement_of,
    scenarios,
    strategies,
    with_freezes,
    with_promotions,
)

# --- the properties -----------------------------------------------------------------------


def approval(module: str, stage: str, user: str) -> Any:
    """An approval by `user` of group sre through the dashboard: it counts under every policy drawn."""
    return command(module, "approve", stage=stage, user=user, via="dashboard", groups=["sre"])


def running_stages(record: ModuleRecord) -> list[Stage]:
    """The stages whose gates are measured now: a chain's current stage; in a stage graph
    every stage started and not passed."""
    stages = stages_of(record)
    if record.graph:
        return [s for s in stages if (p := record.graph.get(s.name)) is not None and p.started and not p.passed]
    return [stages[min(record.stage_index, len(stages) - 1)]]


@dataclass
class Run:
    """A scenario fed event by event into a checked fleet; `journal` holds every event."""

    scenario: dict[str, Any]
    fleet: Fleet = field(default_factory=Fleet)
    journal: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.world = World(self.fleet, self.scenario)
        self.checker = Checker(self.fleet)
        self.journal = self.fleet.journal  # with the events fed back (dependencies)
        for item in [*self.world.setup_events(), *with_freezes(self.scenario, with_promotions(self.scenario))]:
            duplicate = isinstance(item, tuple) and item[0] == "dup"
            for event in self.world.events_for(item) if isinstance(item, tuple) else [item]:
                self.feed(event, duplicate=duplicate)

    def feed(self, event: Any, *, duplicate: bool = False) -> None:
        before = self.checker.before()
        held = {name: held_by(record) for name, record in self.fleet.modules.items()}
        release_held = {name: release_held_by(record) for name, record in self.fleet.modules.items()}
        door_refused = refused_by_door(self.fleet, event)
        record_before = self.fleet.modules.get(event.module) if door_refused else None
        waiting, self.fleet.held_back = (self.fleet.held_back, []) if duplicate else ([], self.fleet.held_back)
        outcome = self.fleet.send(event)  # a redelivery alone: what was fed back late waits for the next
        self.fleet.held_back = waiting + self.fleet.held_back
        if door_refused:
            check_door_refusal(self.fleet, event, outcome, record_before)
        check_promotions(event, outcome, held)
        if not self.fleet.late_feedback and not self.fleet.held_back:  # its members told in the same event
            check_release_promotions(self.fleet, event, outcome, release_held)
        self.checker.note_respec(event, before)
        self.checker.after(event, outcome, before, duplicate)
        self.world.previous = event

    def finish(self, *, new_revision: bool) -> None:
        """Drive every module to Complete: (a new revision,) resume, approve every stage,
        let every updating cluster succeed, let time pass — then check where members are."""
        self.feed(RestrictionDeleted(id=next_id(), namespace="fleet", name="tenant-lane"))  # restrictions lifted
        for event in [*self.world.release_holds(), *self.world.thaw()]:  # every owner's hold, every freeze
            self.feed(event)
        for name in self.world.missing():  # modules the restriction refused: applied again
            for event in self.world.events_for(("revision", name)):
                self.feed(event)
        if self.scenario.get("depends"):
            self.satisfy_dependencies()
        if self.world.in_release():
            self.satisfy_release()
        names = self.world.modules()
        if new_revision:
            for name in names:
                for event in self.world.events_for(("revision", name)):
                    self.feed(event)
        for _ in range(100):
            moving = [
                t
                for t in self.fleet.targets.values()
                if t.stage_index is not None and t.category in ("pending", "updating")
            ]
            if all(self.settled(name) for name in names) and not moving:
                break
            for name in names:
                self.feed(command(name, "resume"))
                for spec in self.world.specs[name]["stages"]:
                    if spec["name"] not in self.fleet.record(name).approvals:
                        self.feed(approval(name, spec["name"], "alice"))
                    policy = next((s for s in stages_of(self.fleet.record(name)) if s.name == spec["name"]), None)
                    for person in ("alice", "bob"):  # the distinct people an N-of-M stage asks for
                        if policy is not None and not approval_met(self.fleet.record(name), policy):
                            self.feed(approval(name, spec["name"], person))
                record = self.fleet.record(name)
                for current in running_stages(record):
                    if not current.gates or record.mode != "rollout":
                        continue  # before the settling: it may move clusters
                    run, measurement = measurement_of(self.fleet, name, "errors", stage_name=current.name)
                    self.feed(
                        gate_result(
                            name,
                            current.name,
                            "errors",
                            True,
                            generation=record.target,
                            run=run,
                            measurement=measurement,
                        )
                    )
                while settled := self.world.settle(name, 1_000, 0):  # successes free slots: repeat
                    for event in settled:
                        self.feed(event)
            # one module's successes may move another's clusters (a Release's members pass
            # their stages together): every module settled before time passes
            while settled := [event for name in names for event in self.world.settle(name, 1_000, 0)]:
                for event in settled:
                    self.feed(event)
            self.feed(tick(self.fleet.now + 600))
        for name in names:
            record = self.fleet.record(name)
            # a member that never became ready keeps the module from Complete (it ran nothing)
            skipped = any(
                t.module == name and t.category == "not_ready" and t.stage_index is not None
                for t in self.fleet.targets.values()
            )
            expected = "Progressing" if skipped else "Complete"
            assert record.phase == expected, f"{name} is stuck: {record.phase}, {record.last_reason}"
            for found in self.fleet.targets.values():
                excluded = found.late == "excluded"  # a late joiner its run leaves alone (lateJoiners: Exclude)
                if found.module == name and found.stage_index is not None and found.ready and not found.pinned:
                    assert found.assigned == record.target or excluded, f"{found.cluster} missed the rollout of {name}"

    def settled(self, name: str) -> bool:
        """Complete, or every stage passed and only not-ready members left (docs: not Complete)."""
        record = self.fleet.record(name)
        waiting = record.phase == "Progressing" and record.mode == "rollout" and record.stable == record.target
        return record.phase == "Complete" or waiting

    def satisfy_dependencies(self) -> None:
        """base depends on app: app exists, selects and stages every cluster base does,
        and holds no cluster back by a pin — so that base can complete wherever app does."""
        if "app" in self.world.dropped:
            for event in self.world.events_for(("revision", "app")):
                self.feed(event)
        app = self.world.specs["app"]
        last = {key: value for key, value in app["stages"][-1].items() if key != "selector"}
        self.world.specs["app"] = {**app, "stages": [*app["stages"][:-1], last]}  # app stages every member
        for name in self.world.modules():
            self.feed(self.world.event_for(("respec", name, self.world.specs[name], "all")))
        for pinned in list(self.fleet.record("app").pinned):
            self.feed(command("app", "unpin", cluster=pinned))

    def satisfy_release(self) -> None:
        """app and base are one Release: both exist, with the same selector and stages (as
        a Release gives its members), and no pin holds a cluster of either back."""
        for name in MODULES:
            if name in self.world.dropped:
                for event in self.world.events_for(("revision", name)):
                    self.feed(event)
        self.world.specs["base"] = self.world.specs["app"]
        self.world.selectors["base"] = self.world.selectors.get("app", self.scenario["selector"])
        for name in self.world.modules():
            self.feed(self.world.event_for(("respec", name, self.world.specs[name], "keep")))
        for name in self.world.modules():
            for pinned in list(self.fleet.record(name).pinned):
                self.feed(command(name, "unpin", cluster=pinned))


def check_release_promotions(fleet: Fleet, event: Any, outcome: Outcome, held: dict[str, str | None]) -> None:
    """A release's combination is decided by its leader only, only ever goes up and stays in
    range, never while the release is held (but by the resume or apply that lifts it) — and
    every member present ends the event on its version of it or newer: the unit moved as one."""
    lifting = isinstance(event, ModuleApplied) or (
        isinstance(event, RolloutCommanded) and event.command == "resume-promotion"
    )
    for decision in outcome.decisions:
        if decision.action != DecisionAction.RELEASE_PROMOTED:
            continue
        because = decision.because
        assert isinstance(because, ReleaseCombinationPromoted) and decision.module == "app", decision.reason
        assert held.get("app") is None or lifting, f"{decision.reason} while held"
        assert any(newer(m.version, m.previous) for m in because.members), f"{decision.reason}: nothing newer"
        for member in because.members:
            assert not newer(member.previous, member.version), f"{decision.reason}: a downgrade"
            assert in_range(member.version, PROMOTION_RANGE) and "-" not in member.version, decision.reason
            record = fleet.modules.get(member.module)
            if record is not None and record.spec.release is not None:
                on = record.revisions[record.target].revision
                assert not newer(member.version, on), f"{member.module} stayed on {on}: {decision.reason}"


def refused_by_door(fleet: Fleet, event: Any) -> bool:
    """Whether `event` is a command through another namespace's door than its module's."""
    if not isinstance(event, RolloutCommanded) or event.namespace is None or event.module not in fleet.modules:
        return False
    return event.namespace != fleet.modules[event.module].namespace


def check_door_refusal(fleet: Fleet, event: RolloutCommanded, outcome: Outcome, before: Any) -> None:
    """A command through another namespace's door is refused (once) and changes nothing:
    no decision, no move, the module as it was but for the command's id remembered."""
    assert outcome.decisions == [] and outcome.assignments == [], f"{event.command} through {event.namespace}"
    assert all(not v.accepted for v in outcome.verdicts if v.event == event.id)
    after = fleet.modules[event.module]
    assert after.model_copy(update={"handled_intents": before.handled_intents}) == before


def check_promotions(event: Any, outcome: Outcome, held: dict[str, str | None]) -> None:
    """A promotion only ever goes up, within the range, to a release (the range names no
    pre-release), and never while held — but by the resume or the apply that lifts the hold."""
    for decision in outcome.decisions:
        if decision.action != DecisionAction.PROMOTED:
            continue
        because = decision.because
        assert isinstance(because, Promoted)
        assert newer(because.version, because.previous), f"{decision.module}: {decision.reason} is no upgrade"
        assert in_range(because.version, PROMOTION_RANGE) and "-" not in because.version, decision.reason
        lifting = isinstance(event, ModuleApplied) or (
            isinstance(event, RolloutCommanded) and event.command == "resume-promotion"
        )
        assert held.get(decision.module or "") is None or lifting, f"{decision.reason} while held"


def refold(
    journal: list[Any], *, restart: bool, moves_per_event: int | None = None, expiries_per_event: int | None = None
) -> Fleet:
    """The journal folded by a fresh engine; with `restart`, by a new engine before every
    event over the JSON round trip of the stored state (so every prefix is folded, then
    recovered with cold indexes, then the rest folded)."""
    fleet = Fleet(moves_per_event=moves_per_event)
    if expiries_per_event is not None:
        fleet.expiries_per_event = fleet.engine.leases.expiries_per_event = expiries_per_event
    fleet.check_each_event = False
    fleet.feedback = False  # the journal holds the events fed back already
    for event in journal:
        if restart:
            fleet.restart()
        fleet.send(event)
    return fleet


PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(scenarios())
def test_invariants_hold_after_every_event(scenario: dict[str, Any]) -> None:
    checked = Run(scenario)
    checked.finish(new_revision=True)  # from wherever it stands, a new revision completes
    for name in checked.world.modules():  # and a completed rollout stays complete under a new strategy
        checked.feed(checked.world.event_for(("respec", name, scenario["final_strategy"])))
    checked.finish(new_revision=False)
    fleet, journal = checked.fleet, checked.journal

    expected = [serialize(o) for o in fleet.outcomes]
    again = refold(journal, restart=False)
    assert [serialize(o) for o in again.outcomes] == expected, "the same events gave different outcomes"
    assert again.snapshot() == fleet.snapshot()

    restarted = refold(journal, restart=True)
    for position, got in enumerate(restarted.outcomes):
        assert serialize(got) == expected[position], (
            f"after a restart, event {position} ({journal[position].type}) differs"
        )
    assert restarted.snapshot() == fleet.snapshot()


def test_invariants_hold_with_a_calendars_break_glass_inside_its_window() -> None:
    """The freeze invariant meets a calendar's own break-glass: members move inside the fleet
    calendar's window only while its break-glass is in force (the check excuses no other),
    and the folds replay as they were decided."""
    scenario = calendar_break_glass_scenario()
    checked = Run(scenario)
    glass = [e for e in checked.journal if isinstance(e, CalendarBreakGlass)]
    assert len(glass) == 1
    opened, until = 1_200.0, glass[0].until  # the window opens at 00:20 UTC on 1 January 1970
    inside = [
        d
        for outcome in checked.fleet.outcomes
        for d in outcome.decisions
        if isinstance(d.because, MovedToTarget) and opened <= d.at < until
    ]
    assert inside, "no member moved inside the window while the break-glass was in force"
    after = [
        d
        for outcome in checked.fleet.outcomes
        for d in outcome.decisions
        if isinstance(d.because, MovedToTarget) and until <= d.at < 3_000.0
    ]
    assert not after  # ended (on the last tick): the freeze holds again
    assert [d.at for d in checked.fleet.decisions if d.action == "break-glass-ended"] == [until]
    checked.finish(new_revision=True)
    again = refold(checked.journal, restart=True)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in checked.fleet.outcomes]


@settings(
    max_examples=120, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(scenarios(max_clusters=20, max_steps=60))
def test_redelivered_suffixes_change_nothing_and_emit_nothing(scenario: dict[str, Any]) -> None:
    run = Run(scenario)
    run.finish(new_revision=True)  # the journal then also holds completions, commands and ticks
    fleet, journal = run.fleet, run.journal
    expected = fleet.snapshot()
    nothing = serialize(Outcome())
    for start in range(len(journal)):
        if start % 7 == 0:
            fleet.restart()  # some suffixes redelivered after a restart: cold indexes
        for position in range(start, len(journal)):
            outcome = fleet.engine.handle(journal[position])
            assert serialize(outcome) == nothing, (
                f"suffix from {start}: re-fed event {position} ({journal[position].type}) emitted {serialize(outcome)}"
            )
        assert fleet.snapshot() == expected, f"suffix from {start} changed the state"
    # and the journal folded again from scratch gives the same outcomes (determinism)
    again = refold(journal, restart=False)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes]


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(scenarios(max_clusters=20, max_steps=60))
def test_folds_sliced_at_two_moves_are_deterministic_and_redelivery_safe(scenario: dict[str, Any]) -> None:
    """Moves per event (stages.py): a journal whose moves were cut at two per event, with
    its continuations in it, keeps the invariants after every event (Run checks them),
    completes every rollout, refolds to the same outcomes after a restart before every
    event, and a suffix of it redelivered changes nothing. (What one event did after a
    module stopped at the limit — a lease expiring on the same tick, say — comes before
    that module's remaining moves, so the decisions are not those of an unbounded fold in
    general: `test_sliced_plain_rollouts_decide_what_unbounded_folds_decide`.)"""
    sliced = Run(scenario, fleet=Fleet(moves_per_event=2))
    sliced.finish(new_revision=True)
    fleet, journal = sliced.fleet, sliced.journal
    again = refold(journal, restart=True, moves_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes]
    expected = fleet.snapshot()
    for start in range(0, len(journal), 5):
        for position in range(start, len(journal)):
            assert serialize(fleet.engine.handle(journal[position])) == serialize(Outcome())
        assert fleet.snapshot() == expected, f"suffix from {start} changed the state"


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_clusters=20, max_steps=60))
def test_folds_sliced_at_two_with_late_continuations_keep_the_invariants(scenario: dict[str, Any]) -> None:
    """Moves, joins and re-sorts per event (rules 6-8) with every event the engine feeds
    back arriving one event late — the router slower than the operator: a module joining,
    re-sorting or moving in slices meets applies, reports, ticks, commands, relabels and
    rollbacks between its slices. The invariants hold after every event (nothing moves to
    the target of a module re-sorting, a rollback's re-sort leaves every member it passed on
    stable), every rollout completes, a refold after a restart before every event decides
    the same, and a suffix redelivered changes nothing."""
    fleet = Fleet(moves_per_event=2)
    fleet.late_feedback = True
    late = Run(scenario, fleet=fleet)
    fleet.late_feedback = False  # what is held back now arrives with the next event
    late.finish(new_revision=True)
    journal = late.journal
    again = refold(journal, restart=True, moves_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes]
    expected = fleet.snapshot()
    for start in range(0, len(journal), 7):
        for position in range(start, len(journal)):
            assert serialize(fleet.engine.handle(journal[position])) == serialize(Outcome())
        assert fleet.snapshot() == expected, f"suffix from {start} changed the state"


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_clusters=20, max_steps=60))
def test_mass_lease_expiries_sliced_at_two_keep_the_invariants_and_replay(scenario: dict[str, Any]) -> None:
    """Lease expiries taken two clusters an event (leases.py "Mass expiries in slices"), the
    fleet's holders and own leases running out, coming back and going again between the
    slices, each slice's LeasesContinued fed back as the router would: the invariants hold
    after every event (a tick or a continuation takes at most a slice), every rollout
    completes, a refold after a restart before every event decides the same (the
    continuations are in the journal), and a suffix redelivered changes nothing."""
    fleet = Fleet()
    fleet.expiries_per_event = fleet.engine.leases.expiries_per_event = 2
    sliced = Run(scenario, fleet=fleet)
    sliced.finish(new_revision=True)
    journal = sliced.journal
    again = refold(journal, restart=True, expiries_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes]
    assert again.snapshot() == fleet.snapshot()
    expected = fleet.snapshot()
    for start in range(0, len(journal), 5):
        for position in range(start, len(journal)):
            assert serialize(fleet.engine.handle(journal[position])) == serialize(Outcome())
        assert fleet.snapshot() == expected, f"suffix from {start} changed the state"


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_clusters=20, max_steps=60))
def test_mass_lease_expiries_continued_one_event_late_keep_the_invariants_and_replay(scenario: dict[str, Any]) -> None:
    """The same, with every event the engine feeds back — LeasesContinued among them —
    arriving one event late (the router slower than the ticks, beats and claims): ticks,
    beats, claims and reports fall between a mass expiry's or a return's slices, a tick
    takes a slice while a continuation is outstanding. The invariants hold after every
    event, every rollout completes, a refold after a restart before every event decides the
    same, and a suffix redelivered changes nothing."""
    fleet = Fleet()
    fleet.expiries_per_event = fleet.engine.leases.expiries_per_event = 2
    fleet.late_feedback = True
    late = Run(scenario, fleet=fleet)
    fleet.late_feedback = False
    late.finish(new_revision=True)
    journal = late.journal
    again = refold(journal, restart=True, expiries_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes]
    expected = fleet.snapshot()
    for start in range(0, len(journal), 7):
        for position in range(start, len(journal)):
            assert serialize(fleet.engine.handle(journal[position])) == serialize(Outcome())
        assert fleet.snapshot() == expected, f"suffix from {start} changed the state"


@st.composite
def plain_rollouts(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.integers(1, 40))
    return {
        "clusters": draw(st.lists(cluster_specs(), min_size=size, max_size=size)),
        "strategies": [draw(strategies())],
        "selector": draw(st.sampled_from([{}, {"env": "prod"}])),
        "first_tick": draw(st.booleans()),
        "steps": draw(st.lists(st.tuples(st.just("ready"), st.integers(0, 99)), max_size=5)),
        "graph": draw(graph_shapes),  # drawn last: every other draw is what it was
    }


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plain_rollouts())
def test_every_rollout_completes_when_clusters_succeed(scenario: dict[str, Any]) -> None:
    checked = Run(scenario)
    checked.finish(new_revision=False)
    for found in checked.fleet.targets.values():
        if found.stage_index is None:
            assert found.assigned is None, f"unstaged {found.cluster} was rolled out"


CHURN = st.one_of(
    OPERATIONS["join"],
    OPERATIONS["leave"],
    OPERATIONS["ready"],
    OPERATIONS["relabel"],
    OPERATIONS["participate"],
    OPERATIONS["heartbeat"],
    OPERATIONS["holder"],
    OPERATIONS["hold"],
    OPERATIONS["ticking"],
)
"""What happens to a fleet by itself: clusters joining, removed, relabelled, not ready,
leaving and joining, leases renewed and running out (the engine ticking, or a gap in its
clock), owners holding them."""


@st.composite
def churning_runs(draw: st.DrawFn) -> dict[str, Any]:
    """One module's run with every cluster succeeding (no deadline: nothing fails by
    itself), the fleet churning between its moves."""
    size = draw(st.integers(1, 30))
    strategy = {**draw(strategies()), "deadline": None}
    progress = st.one_of(
        st.tuples(st.just("settle"), st.just("app"), st.integers(1, 8), st.just(0)),
        OPERATIONS["tick"],
        st.tuples(st.just("command"), st.just("approve"), st.just("app"), st.integers(0, 99)),
    )
    scenario = {
        "clusters": draw(st.lists(cluster_specs(), min_size=size, max_size=size)),
        "strategies": [strategy],
        "selector": draw(st.sampled_from([{}, {"env": "prod"}])),
        "first_tick": True,
        "steps": draw(st.lists(st.one_of(CHURN, progress), min_size=10, max_size=60)),
        "rejections": False,  # an operator's rejection halts a run on purpose: not churn
        "graph": draw(graph_shapes),  # drawn last: every other draw is what it was
        "late_joiners": draw(LATE_JOINERS),  # drawn after it: the draws above are as they were
        "offline": draw(OFFLINE_POLICIES),
    }
    # or app and base move as one Release, with its one strategy, each settling in turn —
    # drawn last, so that every other part of a scenario is drawn as before
    if draw(st.booleans()):
        steps = [
            item
            for step in scenario["steps"]
            for item in ([step, ("settle", "base", *step[2:])] if step[0] == "settle" else [step])
        ]
        scenario.update(strategies=[strategy, strategy], release=True, steps=steps)
    return scenario


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(churning_runs())
def test_random_fleet_churn_during_a_run_never_aborts_or_stalls_it(scenario: dict[str, Any]) -> None:
    """Whatever the fleet does during a run, the run is the one that started (no new run,
    never halted, aborted or rolled back), each stage's fixed set only grows by joiners,
    and once its clusters succeed it completes — but for members still offline, which
    keep it Progressing — with every member in an explicit, settled state (for a
    Release's modules, none still AwaitingRelease)."""
    checked = Run(scenario)
    for outcome in checked.fleet.outcomes:
        for decision in outcome.decisions:
            assert decision.action not in ("halted", "aborted", "rollback", "failed"), decision.reason
    names = list(MODULES) if scenario.get("release") else ["app"]
    for name in names:
        run = checked.fleet.run(name)
        # the only other run churn starts: a follow-up for NextRun joiners, once the run's stages passed
        assert (run["number"], run["generation"]) in ((1, 1), (2, 1)), f"churn started another run of {name}"
        assert run["number"] == 1 or (run.get("followUp") and scenario["late_joiners"] == "NextRun")
    checked.finish(new_revision=False)
    for name in names:
        run = checked.fleet.run(name)
        assert run["generation"] == 1
        assert run["number"] == 1 or (run.get("followUp") and run["number"] == 2)
        states = checked.fleet.run_members(name)
        for cluster_name, (state, why) in states.items():
            assert state in SETTLED_RUN_STATES, f"{name}: {cluster_name} is still {state}: {why}"
            if state in ("SkippedOffline", "Left"):
                assert why, f"{name}: {cluster_name} is {state} without a reason"


@st.composite
def auto_promoted_releases(draw: st.DrawFn) -> dict[str, Any]:
    """A scenario whose two modules are one Release auto-promoted as a unit, with at least
    three promotion steps (observations of either member at the leader, holds and resumes
    at either member, the manifest's hold toggled) among the other operations (relabels
    too: one out of a soaking stage once let the next start before the soak ended —
    test_a_member_relabelled_out_of_its_stage_during_the_soak_does_not_cut_it_short)."""
    scenario = draw(scenarios(max_clusters=12, max_steps=30))
    strategy = scenario["strategies"][0]
    steps = draw(st.lists(PROMOTION_STEPS, min_size=3, max_size=10))
    scenario.update(release=True, strategies=[strategy, strategy], promotions=steps)
    return scenario


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(auto_promoted_releases())
def test_an_auto_promoted_release_moves_as_one_and_replays_the_same(scenario: dict[str, Any]) -> None:
    """Every combination its leader decides goes up, in range, never while held, with every
    member on its version of it after the event (`check_release_promotions`, after every
    event); from wherever it stands the release completes; and a refold — with restarts
    before every event — decides the same."""
    checked = Run(scenario)
    checked.finish(new_revision=True)
    expected = [serialize(o) for o in checked.fleet.outcomes]
    restarted = refold(checked.journal, restart=True)
    assert [serialize(o) for o in restarted.outcomes] == expected
    assert restarted.snapshot() == checked.fleet.snapshot()


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plain_rollouts())
def test_sliced_plain_rollouts_decide_what_unbounded_folds_decide(scenario: dict[str, Any]) -> None:
    """Where an event does nothing but move (a rollout, readiness changes, completions),
    slices of two moves make the same decisions in the same order and the same assignments."""
    unbounded = Run(scenario)
    unbounded.finish(new_revision=False)
    sliced = Run(scenario, fleet=Fleet(moves_per_event=2))
    sliced.finish(new_revision=False)
    assert [(d.module, d.action, d.cluster, d.because) for d in sliced.fleet.decisions] == [
        (d.module, d.action, d.cluster, d.because) for d in unbounded.fleet.decisions
    ]
    assert sliced.fleet.assemblages == unbounded.fleet.assemblages


@st.composite
def plain_reapplies(draw: st.DrawFn) -> dict[str, Any]:
    """A plain rollout, then its module applied again under another strategy (and selector),
    a new revision, another one and a rollback of it (or not)."""
    scenario = draw(plain_rollouts())
    scenario["respec"] = draw(strategies())
    scenario["respec_selector"] = draw(st.sampled_from(["keep", "all", "prod"]))
    scenario["rollback"] = draw(st.booleans())
    return scenario


def reapplied(scenario: dict[str, Any], fleet: Fleet) -> Run:
    """`scenario` (plain_reapplies) run on `fleet`: completed, respecified and completed
    under a new revision, given another revision and (perhaps) rolled back, settled."""
    run = Run(scenario, fleet=fleet)
    run.finish(new_revision=False)
    (name,) = run.world.modules()
    respec = run.world.event_for(("respec", name, scenario["respec"], scenario["respec_selector"]))
    run.feed(respec)  # every member re-sorted under the new strategy (rule 8)
    run.finish(new_revision=True)  # a new revision re-sorted, then rolled out to Complete
    for event in run.world.events_for(("revision", name)):
        run.feed(event)
    if scenario["rollback"]:
        run.feed(command(name, "rollback"))  # re-sorted in rollback mode, each member moved back as reached
    while settled := run.world.settle(name, 1_000, 0):
        for event in settled:
            run.feed(event)
    run.feed(tick(run.fleet.now + 600))
    return run


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plain_reapplies())
def test_re_applies_and_rollbacks_sliced_at_two_decide_what_unbounded_folds_decide(scenario: dict[str, Any]) -> None:
    """Re-sorts per event (rule 8): a respec, new revisions and a rollback of a fleet larger
    than the slice re-sort their members over several events — with the checker's
    invariants after each — and decide what one unbounded fold decides, in the same order;
    a refold after a restart before every event decides the same again."""
    unbounded = reapplied(scenario, Fleet())
    sliced = reapplied(scenario, Fleet(moves_per_event=2))
    assert [(d.module, d.action, d.cluster, d.because) for d in sliced.fleet.decisions] == [
        (d.module, d.action, d.cluster, d.because) for d in unbounded.fleet.decisions
    ]
    assert sliced.fleet.assemblages == unbounded.fleet.assemblages
    (name,) = sliced.world.modules()
    assert sliced.fleet.record(name).phase == unbounded.fleet.record(name).phase
    assert sliced.fleet.record(name).resorting is None
    again = refold(sliced.journal, restart=True, moves_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in sliced.fleet.outcomes]


def test_outcomes_do_not_depend_on_the_hash_seed() -> None:
    """Set iteration order changes with PYTHONHASHSEED; decisions must not."""
    script = (
        "import hashlib, json\n"
        "from tests.rollout.builders import serialize\n"
        "from tests.rollout.scenarios import fixed_scenario\n"
        "from tests.rollout.test_properties import Run\n"
        "run = Run(fixed_scenario())\n"
        "data = json.dumps([serialize(o) for o in run.fleet.outcomes], sort_keys=True)\n"
        "print(len(run.journal), hashlib.sha256(data.encode()).hexdigest())\n"
    )
    root = Path(__file__).resolve().parents[2]
    results = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        results.add(done.stdout.strip())
    assert len(results) == 1, results
    events = int(next(iter(results)).split()[0])
    assert events > 100


@st.composite
def plain_deletes(draw: st.DrawFn) -> dict[str, Any]:
    """A plain rollout, then its module deleted — and applied again, or not."""
    scenario = draw(plain_rollouts())
    scenario["again"] = draw(st.booleans())
    return scenario


def deleted_after_rollout(scenario: dict[str, Any], fleet: Fleet) -> Run:
    """`scenario` (plain_deletes) run on `fleet`: completed, deleted, perhaps applied again
    (held while the deletion removes syncs, when sliced), then a tick."""
    run = Run(scenario, fleet=fleet)
    run.finish(new_revision=False)
    (name,) = run.world.modules()
    run.feed(run.world.event_for(("delete", name)))  # every member's sync removed (rule 9)
    if scenario["again"]:
        for event in run.world.events_for(("revision", name)):
            run.feed(event)
    run.feed(tick(run.fleet.now + 600))
    return run


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plain_deletes())
def test_deletes_sliced_at_two_decide_what_unbounded_folds_decide(scenario: dict[str, Any]) -> None:
    """Deletes per event (rule 9): a module deleted from a fleet larger than the slice
    removes its members' syncs over several events — the checker's invariants after each —
    and decides what one unbounded fold decides, in the same order, whether or not it is
    applied again after; a refold after a restart before every event decides the same."""
    unbounded = deleted_after_rollout(scenario, Fleet())
    sliced = deleted_after_rollout(scenario, Fleet(moves_per_event=2))
    assert [(d.module, d.action, d.cluster, d.because) for d in sliced.fleet.decisions] == [
        (d.module, d.action, d.cluster, d.because) for d in unbounded.fleet.decisions
    ]
    assert sliced.fleet.assemblages == unbounded.fleet.assemblages
    assert sliced.fleet.snapshot()["targets"] == unbounded.fleet.snapshot()["targets"]
    again = refold(sliced.journal, restart=True, moves_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in sliced.fleet.outcomes]


@st.composite
def plain_first_tells(draw: st.DrawFn) -> dict[str, Any]:
    """A plain rollout, then a module depending on it applied — alone, or together with a
    new revision of it (waiting for its answer) — and both settled."""
    scenario = draw(plain_rollouts())
    scenario["dependent_selector"] = draw(st.sampled_from([{}, {"env": "prod"}]))
    scenario["with_revision"] = draw(st.booleans())
    return scenario


def told_after_rollout(scenario: dict[str, Any], fleet: Fleet) -> Run:
    """`scenario` (plain_first_tells) run on `fleet`: completed, then `dep` (dependsOn the
    module) applied — its first DependentLinked tells it where the module is ready, in
    slices when sliced (dependencies.py "First tells in slices") — then every update of
    either succeeding, time passing, until nothing moves."""
    run = Run(scenario, fleet=fleet)
    run.finish(new_revision=False)
    (name,) = run.world.modules()
    after: dict[str, str] = {}
    if scenario["with_revision"]:
        for event in run.world.events_for(("revision", name)):
            run.feed(event)
            if isinstance(event, ModuleApplied):
                after = {name: event.id}
    manifest = module("dep", scenario["dependent_selector"], "d1", stage("all", None), depends_on=[name])
    run.feed(applied(manifest, after=after))
    for _ in range(40):
        settled = [*run.world.settle(name, 1_000, 0)]
        settled += [
            reported("dep", t.cluster, "d1", "succeeded")
            for t in sorted(run.fleet.targets.values(), key=lambda t: t.cluster)
            if t.module == "dep" and t.status == "updating"
        ]
        if not settled and run.fleet.record("dep").phase == "Complete":
            break
        for event in settled:
            run.feed(event)
        run.feed(tick(run.fleet.now + 600))
    return run


@settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plain_first_tells())
def test_first_tells_sliced_at_two_decide_what_unbounded_folds_decide(scenario: dict[str, Any]) -> None:
    """First tells per event (rule 10): a dependent linked anew is told where its dependency
    is ready over several events, two clusters each — with the checker's invariants after
    each — and both modules decide what one unbounded fold decides, in the same order; the
    dependent hears the answer it awaits only after the last slice; a refold after a restart
    before every event decides the same."""
    unbounded = told_after_rollout(scenario, Fleet())
    sliced = told_after_rollout(scenario, Fleet(moves_per_event=2))
    assert [(d.module, d.action, d.cluster, d.because) for d in sliced.fleet.decisions] == [
        (d.module, d.action, d.cluster, d.because) for d in unbounded.fleet.decisions
    ]
    assert sliced.fleet.assemblages == unbounded.fleet.assemblages
    assert sliced.fleet.snapshot()["upstream"] == unbounded.fleet.snapshot()["upstream"]
    assert sliced.fleet.record("dep").phase == unbounded.fleet.record("dep").phase
    assert all(link.telling is None for link in sliced.fleet.state["dependents"]["app"].links.values())
    again = refold(sliced.journal, restart=True, moves_per_event=2)
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in sliced.fleet.outcomes]
