"""Properties of the decision core over random fleets, strategies and event interleavings.

Hypothesis draws a fleet (up to ~40 clusters), one or two modules with random strategies
(1-3 stages, int/% limits, soak, approval, onFailure, deadlines, sorting) and a sequence of
operations — status reports for the assigned revision, readiness flips, joins, leaves and
relabels, ticks, commands, new revisions, strategy changes and redeliveries. After every
event it checks:

* the stored state is consistent (counters = a recount of the targets, categories follow
  the rules, assemblages agree with the targets — `builders.check_consistency`);
* moves never take a stage over `maxConcurrency` (counted from the targets), and no event
  but an unpin, a relabel or a strategy change makes a stage exceed it;
* no member of stage k+1 gets the target before stage k was done, soaked and approved
  (tracked from the decisions alone);
* once over the failure budget with `Halt`, the target is assigned nowhere until a resume
  (that is not over budget any more) or a new revision;
* a rolled-back module has every unpinned member on stable (or nothing without one);
* a pinned cluster's assignment never changes while it stays pinned;
* a redelivered event emits nothing and changes nothing.

Then it refolds the same journal into a fresh engine (determinism: identical outcomes) and
into one restarted — JSON round trip, cold indexes — at random points (identical outcomes
and final state). A second property drives random rollouts to the end: with every cluster
succeeding and every stage approved, each one completes with every ready staged member
on the target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.engine import Outcome, resolve_count, stages_of
from rollout.events import ClusterObserved, ModuleApplied, RolloutCommanded
from rollout.manifests import parse_duration
from rollout.state import ModuleRecord, target_key
from tests.rollout.builders import (
    Fleet,
    applied,
    cluster,
    command,
    module,
    observed,
    removed,
    reported,
    serialize,
    stage,
    tick,
)

ORDER = "rollout.dev/order"
RINGS = ["canary", "wave", None]
STAGE_SELECTORS = [{"ring": "canary"}, {"ring": "wave"}, {"ring": "late"}]
MODULES = ["app", "base"]

# --- what to draw -------------------------------------------------------------------------

limits = st.one_of(st.none(), st.integers(1, 5), st.sampled_from(["1%", "10%", "25%", "50%", "100%"]))
failure_limits = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["0%", "10%", "50%"]))


@st.composite
def strategies(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    stages = []
    for index in range(count):
        last = index == count - 1
        labels = None if last and draw(st.booleans()) else STAGE_SELECTORS[index]
        stages.append(
            stage(
                f"s{index}",
                labels,
                concurrency=draw(limits),
                failures=draw(failure_limits),
                soak=draw(st.sampled_from([None, None, "30s", "5m"])),
                approval=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    return {
        "stages": stages,
        "on_failure": draw(st.sampled_from([None, "Halt", "Rollback"])),
        "deadline": draw(st.sampled_from([None, None, "2m", "10m"])),
        "sorting": draw(st.sampled_from([None, ORDER])),
    }


@st.composite
def cluster_specs(draw: st.DrawFn) -> dict[str, Any]:
    labels: dict[str, str] = {"env": draw(st.sampled_from(["prod", "prod", "prod", "dev"]))}
    ring = draw(st.sampled_from(RINGS))
    if ring is not None:
        labels["ring"] = ring
    if draw(st.booleans()):
        labels[ORDER] = str(draw(st.integers(0, 20)))
    return {"labels": labels, "ready": draw(st.integers(0, 4)) > 0}


operations = st.one_of(
    st.tuples(st.just("report"), st.integers(0, 99), st.sampled_from(MODULES), st.sampled_from(
        ["succeeded", "succeeded", "succeeded", "failed", "updating", "stale"]
    )),
    st.tuples(st.just("ready"), st.integers(0, 99)),
    st.tuples(st.just("leave"), st.integers(0, 99)),
    st.tuples(st.just("join"), st.integers(0, 99), cluster_specs()),
    st.tuples(st.just("relabel"), st.integers(0, 99), st.sampled_from(RINGS)),
    st.tuples(st.just("tick"), st.sampled_from([1, 10, 30, 60, 120, 300, 900])),
    st.tuples(
        st.just("command"),
        st.sampled_from(["pause", "resume", "approve", "approve", "pin", "unpin", "rollback", "abort"]),
        st.sampled_from(MODULES),
        st.integers(0, 99),
    ),
    st.tuples(st.just("revision"), st.sampled_from(MODULES)),
    st.tuples(st.just("respec"), st.sampled_from(MODULES), strategies()),
    st.tuples(st.just("dup")),
    st.tuples(st.just("settle"), st.sampled_from(MODULES), st.integers(1, 8), st.integers(0, 3)),
)


@st.composite
def scenarios(draw: st.DrawFn, max_clusters: int = 40, max_steps: int = 60) -> dict[str, Any]:
    size = draw(st.integers(1, max_clusters))
    clusters = draw(st.lists(cluster_specs(), min_size=size, max_size=size))
    specs = [draw(strategies())]
    if draw(st.booleans()):
        specs.append(draw(strategies()))
    return {
        "clusters": clusters,
        "strategies": specs,
        "selector": draw(st.sampled_from([{}, {"env": "prod"}])),
        "first_tick": draw(st.booleans()),
        "steps": draw(st.lists(operations, min_size=max_steps // 3, max_size=max_steps)),
        "restarts": draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=3)),
    }


# --- turning operations into events -------------------------------------------------------


@dataclass
class World:
    """What the scenario knows about the fleet it drives, to turn operations into events."""

    fleet: Fleet
    scenario: dict[str, Any]
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)  # present clusters
    gone: dict[str, dict[str, Any]] = field(default_factory=dict)  # removed clusters
    tags: dict[str, int] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    previous: Any = None

    def manifest(self, index: int, spec: dict[str, Any], tag: int) -> Any:
        name = MODULES[index]
        return module(
            name,
            self.scenario["selector"],
            f"v{tag}",
            *spec["stages"],
            kind="Module" if index == 0 else "BootstrapModule",
            on_failure=spec["on_failure"],
            deadline=spec["deadline"],
            sorting=spec["sorting"],
        )

    def modules(self) -> list[str]:
        return [m for m in MODULES if m in self.specs]

    def setup_events(self) -> list[Any]:
        events: list[Any] = []
        if self.scenario["first_tick"]:
            events.append(tick(1_000.0))
        for number, spec in enumerate(self.scenario["clusters"]):
            name = f"c{number:02d}"
            self.clusters[name] = spec
            events.append(observed(cluster(name, spec["labels"], ready=spec["ready"])))
        for index, spec in enumerate(self.scenario["strategies"]):
            self.tags[MODULES[index]] = 1
            self.specs[MODULES[index]] = spec
            events.append(applied(self.manifest(index, spec, 1)))
        return events

    def events_for(self, step: tuple[Any, ...]) -> list[Any]:
        if step[0] == "settle":
            return self.settle(*step[1:])
        event = self.event_for(step)
        return [] if event is None else [event]

    def settle(self, name: str, count: int, failures: int) -> list[Any]:
        """Up to `count` clusters updating on `name` report: `failures` of them fail."""
        if name not in self.specs:
            return []
        record = self.fleet.record(name)
        events = []
        for key in sorted(self.fleet.targets):
            found = self.fleet.targets[key]
            if found.module == name and found.status == "updating" and found.assigned is not None:
                state = "failed" if len(events) < failures else "succeeded"
                events.append(reported(name, found.cluster, record.revisions[found.assigned].revision, state))
                if len(events) == count:
                    break
        return events

    def event_for(self, step: tuple[Any, ...]) -> Any:
        kind = step[0]
        names = sorted(self.clusters)
        fleet = self.fleet
        if kind == "dup":
            return self.previous  # None before any event: nothing to redeliver
        if kind == "tick":
            return tick(max(fleet.now, 1_000.0) + step[1])
        if kind == "report":
            _, number, name, state = step
            if name not in self.specs:
                return None
            holding = [t for t in sorted(fleet.targets) if t.startswith(f"{name}/") and fleet.targets[t].assigned]
            if not holding:
                return None
            found = fleet.targets[holding[number % len(holding)]]
            label = fleet.record(name).revisions[found.assigned].revision
            if state == "stale":
                return reported(name, found.cluster, "v0", "failed")
            return reported(name, found.cluster, label, state)
        if kind in ("ready", "leave", "relabel"):
            if not names:
                return None
            name = names[step[1] % len(names)]
            spec = self.clusters[name]
            if kind == "leave":
                self.gone[name] = self.clusters.pop(name)
                return removed(name)
            if kind == "ready":
                spec = {**spec, "ready": not spec["ready"]}
            else:
                labels = {k: v for k, v in spec["labels"].items() if k != "ring"}
                if step[2] is not None:
                    labels["ring"] = step[2]
                spec = {**spec, "labels": labels}
            self.clusters[name] = spec
            return observed(cluster(name, spec["labels"], ready=spec["ready"]))
        if kind == "join":
            _, number, spec = step
            if self.gone and number % 2 == 0:
                name = sorted(self.gone)[number % len(self.gone)]
                spec = self.gone.pop(name)
            else:
                name = f"j{number:02d}"
                if name in self.clusters:
                    return None
                self.gone.pop(name, None)
            self.clusters[name] = spec
            return observed(cluster(name, spec["labels"], ready=spec["ready"]))
        if kind == "command":
            _, what, name, number = step
            if name not in self.specs:
                return None
            if what == "approve":
                stages = [s["name"] for s in self.specs[name]["stages"]]
                return command(name, "approve", stage=stages[number % len(stages)])
            if what == "unpin" and fleet.record(name).pinned:
                pinned = fleet.record(name).pinned
                return command(name, "unpin", cluster=pinned[number % len(pinned)])
            if what in ("pin", "unpin"):
                return command(name, what, cluster=names[number % len(names)]) if names else None
            return command(name, what)
        if kind == "revision":
            name = step[1]
            if name not in self.specs:
                return None
            self.tags[name] += 1
            return applied(self.manifest(MODULES.index(name), self.specs[name], self.tags[name]))
        if kind == "respec":
            _, name, spec = step
            if name not in self.specs:
                return None
            self.specs[name] = spec
            return applied(self.manifest(MODULES.index(name), spec, self.tags[name]))
        raise AssertionError(kind)


# --- the invariants -----------------------------------------------------------------------

_STARTED = re.compile(r"^stage (\S+) started")
_SUCCEEDED = re.compile(r"^stage (\S+) succeeded: (\d+) succeeded")
_APPROVED = re.compile(r"^stage (\S+) approved")


@dataclass
class StageTracker:
    """One module's stage progress for its current target, learnt from decisions alone."""

    generation: int = 1
    mode: str = "rollout"
    trusted: bool = True  # False after a strategy change: stage identities moved
    started: set[str] = field(default_factory=set)
    succeeded: dict[str, tuple[float, int]] = field(default_factory=dict)  # stage -> (at, succeeded)
    approved: set[str] = field(default_factory=set)

    def reset(self, generation: int) -> None:
        self.generation = generation
        self.mode = "rollout"
        self.trusted = True
        self.started.clear()
        self.succeeded.clear()
        self.approved.clear()


def stage_limits(fleet: Fleet, record: ModuleRecord) -> list[tuple[str, int, int, int, int]]:
    """Per stage: name, members, updating on the target, concurrency, max failures —
    all counted from the targets, not from the engine's counters."""
    rows = []
    for index, spec in enumerate(stages_of(record)):
        members = [t for t in fleet.targets.values() if t.module == record.name and t.stage_index == index]
        updating = sum(
            1 for t in members if not t.pinned and t.assigned == record.target and t.status == "updating"
        )
        failed = sum(1 for t in members if not t.pinned and t.assigned == record.target and t.status == "failed")
        concurrency = max(resolve_count(spec.max_concurrency, total=len(members), default=max(len(members), 1)), 1)
        failures = resolve_count(spec.max_failures, total=len(members), default=0)
        rows.append((spec.name, updating, concurrency, failed, failures))
    return rows


def over_budget(fleet: Fleet, record: ModuleRecord) -> bool:
    """A started stage has more failed members than its maxFailures (recounted)."""
    if record.mode != "rollout" or record.stable == record.target or record.aborted:
        return False
    for index, (_, _, _, failed, failures) in enumerate(stage_limits(fleet, record)):
        started = index < record.stage_index or (index == record.stage_index and record.stage_started)
        if started and failed > failures:
            return True
    return False


@dataclass
class Checker:
    fleet: Fleet
    trackers: dict[str, StageTracker] = field(default_factory=dict)
    halted: set[str] = field(default_factory=set)

    def before(self) -> dict[str, Any]:
        fleet = self.fleet
        return {
            "snapshot": fleet.snapshot(),
            "updating": {
                name: {row[0]: row[1] for row in stage_limits(fleet, record)} for name, record in fleet.modules.items()
            },
            "pinned": {key: t.assigned for key, t in fleet.targets.items() if t.pinned},
            "targets": {name: record.target for name, record in fleet.modules.items()},
            "over": {name for name, record in fleet.modules.items() if over_budget(fleet, record)},
        }

    def after(self, event: Any, outcome: Outcome, before: dict[str, Any], duplicate: bool) -> None:
        fleet = self.fleet
        if duplicate:
            assert serialize(outcome) == serialize(Outcome()), f"redelivered {event.type} emitted {serialize(outcome)}"
            assert fleet.snapshot() == before["snapshot"], f"redelivered {event.type} changed the state"
        self.check_stage_order(outcome)
        self.check_halt(event, outcome, before)
        for name, record in fleet.modules.items():
            self.check_concurrency(event, outcome, before, record)
            if record.mode == "rollback" and record.phase == "RolledBack":
                for t in fleet.targets.values():
                    if t.module == name and not t.pinned:
                        assert t.assigned == record.stable, f"rolled back, but {t.cluster} holds {t.assigned}"
        for key, assigned in before["pinned"].items():
            now = fleet.targets.get(key)
            if now is not None and now.pinned:
                assert now.assigned == assigned, f"pinned {key} moved from {assigned} to {now.assigned}"

    def check_concurrency(self, event: Any, outcome: Outcome, before: dict[str, Any], record: ModuleRecord) -> None:
        if record.mode != "rollout":
            return
        moved_to = {
            self.fleet.targets[target_key(record.name, d.cluster)].stage
            for d in outcome.decisions
            if d.module == record.name
            and d.action == "assign"
            and d.generation == record.target
            and target_key(record.name, d.cluster or "") in self.fleet.targets
        }
        exempt = (isinstance(event, RolloutCommanded) and event.command == "unpin") or isinstance(
            event, ModuleApplied | ClusterObserved
        )
        previously = before["updating"].get(record.name, {})
        for name, updating, concurrency, _, _ in stage_limits(self.fleet, record):
            if name in moved_to:
                assert updating <= concurrency, f"{record.name} stage {name}: moved to {updating} > {concurrency}"
            if not exempt and before["targets"].get(record.name) == record.target:
                assert updating <= max(concurrency, previously.get(name, 0)), (
                    f"{record.name} stage {name}: {updating} updating > maxConcurrency {concurrency}"
                )

    def check_halt(self, event: Any, outcome: Outcome, before: dict[str, Any]) -> None:
        for name in list(self.halted):
            record = self.fleet.modules.get(name)
            new_target = record is None or record.target != before["targets"].get(name)
            resumed = isinstance(event, RolloutCommanded) and event.module == name and event.command == "resume"
            if new_target or (resumed and name not in before["over"]):
                self.halted.discard(name)
                continue
            target = before["targets"][name]
            moves = [d for d in outcome.decisions if d.module == name and d.action == "assign" and d.generation == target]
            assert not moves, f"{name} over its failure budget, yet {moves[0].reason}"
        for name, record in self.fleet.modules.items():
            on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
            if on_failure == "Halt" and over_budget(self.fleet, record):
                self.halted.add(name)

    def check_stage_order(self, outcome: Outcome) -> None:
        for decision in outcome.decisions:
            name = decision.module
            record = self.fleet.modules.get(name)
            tracker = self.trackers.setdefault(name, StageTracker())
            if decision.action == "created":
                tracker.reset(1)
            elif decision.action == "new-revision":
                tracker.reset(decision.generation or 0)
            elif decision.action == "rollback":
                tracker.mode = "rollback"
            elif record is None or not tracker.trusted:
                continue
            elif decision.action == "approved":
                tracker.approved.add(_APPROVED.match(decision.reason).group(1))  # type: ignore[union-attr]
            elif decision.action == "stage-succeeded":
                match = _SUCCEEDED.match(decision.reason)
                assert match is not None
                tracker.succeeded[match.group(1)] = (decision.at, int(match.group(2)))
            elif decision.action == "stage-started":
                started = _STARTED.match(decision.reason).group(1)  # type: ignore[union-attr]
                stages = stages_of(record)
                index = [s.name for s in stages].index(started)
                if stages[index].require_approval:
                    assert started in tracker.approved, f"{name}: stage {started} started unapproved"
                if index > 0:
                    previous = stages[index - 1]
                    assert previous.name in tracker.started, f"{name}: {started} started before {previous.name}"
                    assert previous.name in tracker.succeeded, f"{name}: {started} started, {previous.name} not done"
                    done_at, succeeded = tracker.succeeded[previous.name]
                    if previous.min_success_time and succeeded:
                        soak = parse_duration(previous.min_success_time)
                        assert decision.at >= done_at + soak, f"{name}: {started} started before the soak ended"
                tracker.started.add(started)
            elif decision.action == "assign" and tracker.mode == "rollout" and decision.generation == tracker.generation:
                found = self.fleet.targets.get(target_key(name, decision.cluster or ""))
                if found is not None and found.stage_index is not None:
                    assert found.stage in tracker.started, f"{name}: {decision.reason} before its stage started"

    def note_respec(self, event: Any, before: dict[str, Any]) -> None:
        if isinstance(event, ModuleApplied):
            name = event.module.metadata.name
            record = self.fleet.modules.get(name)
            if record is not None and record.target == before["targets"].get(name):
                tracker = self.trackers.get(name)
                if tracker is not None and record.spec.rollout != _spec_before(before, name):
                    tracker.trusted = False


def _spec_before(before: dict[str, Any], name: str) -> Any:
    stored = before["snapshot"]["modules"].get(name)
    if stored is None:
        return None
    return ModuleRecord.model_validate(stored).spec.rollout


# --- the properties -----------------------------------------------------------------------


def run(scenario: dict[str, Any]) -> tuple[Fleet, list[Any]]:
    fleet = Fleet()
    world = World(fleet, scenario)
    checker = Checker(fleet)
    items: list[Any] = [*world.setup_events(), *scenario["steps"]]
    journal: list[Any] = []
    for item in items:
        duplicate = isinstance(item, tuple) and item[0] == "dup"
        events = world.events_for(item) if isinstance(item, tuple) else [item]
        for event in events:
            before = checker.before()
            outcome = fleet.send(event)
            checker.note_respec(event, before)
            checker.after(event, outcome, before, duplicate)
            journal.append(event)
            world.previous = event
    return fleet, journal


def refold(journal: list[Any], restarts: set[int]) -> Fleet:
    fleet = Fleet()
    fleet.check_each_event = False
    for position, event in enumerate(journal):
        if position in restarts:
            fleet.restart()
        fleet.send(event)
    return fleet


PROPERTY_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(scenarios())
def test_invariants_hold_after_every_event(scenario: dict[str, Any]) -> None:
    fleet, journal = run(scenario)

    again = refold(journal, set())
    assert [serialize(o) for o in again.outcomes] == [serialize(o) for o in fleet.outcomes], "not deterministic"

    restarts = {r % len(journal) for r in scenario["restarts"]}
    restarted = refold(journal, restarts)
    for position, (expected, got) in enumerate(zip(fleet.outcomes, restarted.outcomes, strict=True)):
        assert serialize(got) == serialize(expected), f"after restarts at {sorted(restarts)}: event {position} differs"
    assert restarted.snapshot() == fleet.snapshot()


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(cluster_specs(), min_size=1, max_size=40),
    strategies(),
    st.lists(st.tuples(st.just("ready"), st.integers(0, 99)), max_size=5),
)
def test_every_rollout_completes_when_clusters_succeed(
    clusters: list[dict[str, Any]], spec: dict[str, Any], flips: list[tuple[str, int]]
) -> None:
    spec = {**spec, "deadline": None}  # nobody fails here, not even by being slow
    scenario = {"clusters": clusters, "strategies": [spec], "selector": {}, "first_tick": True, "steps": flips}
    fleet, _ = run({**scenario, "restarts": []})
    for _ in range(4 * len(clusters) + 10):
        if fleet.phase("app") == "Complete":
            break
        for name in [s["name"] for s in spec["stages"]]:
            if name not in fleet.record("app").approvals:
                fleet.approve("app", name)
        updating = [t.cluster for t in fleet.targets.values() if t.module == "app" and t.category == "updating"]
        fleet.succeed("app", *updating[:5])
        fleet.wait(600)
    assert fleet.phase("app") == "Complete"
    record = fleet.record("app")
    for t in fleet.targets.values():
        if t.stage_index is not None and t.ready:
            assert t.assigned == record.target, f"{t.cluster} missed the rollout"
        if t.stage_index is None:
            assert t.assigned is None, f"unstaged {t.cluster} was rolled out"
