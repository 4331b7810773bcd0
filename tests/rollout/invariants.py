"""The invariants the property tests check after every event (test_properties.py has the
list): `Checker` compares the fleet before and after each event. What it learns from the
decisions it reads from their reasons' fields (rollout/wire/decision_reasons.py), never from
the sentences; and every decision's reason is one its action may have, renders to the
decision's `reason` and reads back from JSON as it was (`check_reasons`, reasons.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout.api.freezes import frozen_until
from rollout.api.manifests import CLUSTER_SCOPE, calendar_identity, parse_duration, stage_upstreams
from rollout.api.windows import stage_window_state
from rollout.engine.core import Outcome, resolve_count, stages_of
from rollout.engine.leases import EXPIRIES_PER_EVENT
from rollout.engine.state import ModuleRecord, target_key
from rollout.engine.strategy import wave_size
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import (
    Approved,
    MovedToTarget,
    Rejected,
    StageSkipped,
    StageStarted,
    StageSucceeded,
    WaveStarted,
)
from rollout.wire.events import ClusterObserved, ModuleApplied, RolloutCommanded
from tests.rollout.builders import (
    Fleet,
    serialize,
)
from tests.rollout.reasons import check_reasons

# --- the invariants -----------------------------------------------------------------------


def running(record: ModuleRecord) -> list[int]:
    """The stages a rollout moves now: a chain's current stage; every started stage of a
    stage graph not passed."""
    stages = stages_of(record)
    if record.graph:
        return [i for i, s in enumerate(stages) if (p := record.graph.get(s.name)) and p.started and not p.passed]
    return [min(record.stage_index, len(stages) - 1)]


@dataclass
class StageTracker:
    """One module's stage progress for its current target, learnt from decisions alone."""

    generation: int = 1
    mode: str = "rollout"
    trusted: bool = True  # False after a strategy change: stage identities moved
    started: set[str] = field(default_factory=set)
    succeeded: dict[str, tuple[float, int]] = field(default_factory=dict)  # stage -> (at, succeeded)
    approved: set[str] = field(default_factory=set)  # stages with the approvals their policy asks for
    rejected: bool = False  # the target was rejected (approvals.py): no stage of it may start

    def reset(self, generation: int) -> None:
        self.generation = generation
        self.mode = "rollout"
        self.trusted = True
        self.started.clear()
        self.succeeded.clear()
        self.approved.clear()
        self.rejected = False


def stage_limits(fleet: Fleet, record: ModuleRecord) -> list[tuple[str, int, int, int, int]]:
    """Per stage: name, members, updating on the target, concurrency, max failures —
    counted from the targets, not from the engine's counters; the limits resolved against
    the run's fixed set of the stage (runs.py), never fewer than the members there now
    (but the late joiners the run kept out: lateJoiners)."""
    rows = []
    run = fleet.state["runs"].get(record.name)
    for index, spec in enumerate(stages_of(record)):
        members = [t for t in fleet.targets.values() if t.module == record.name and t.stage_index == index]
        updating = sum(1 for t in members if not t.pinned and t.assigned == record.target and t.status == "updating")
        failed = sum(
            1
            for t in members
            if not t.pinned
            and (
                (t.assigned == record.target and t.status == "failed")
                or (t.offline_failed and not t.ready and t.hold is None and t.late is None)
            )
        )  # a sync failed on the target, or a member offline past its stage's offline.wait (then: Fail)
        in_run = [t for t in members if t.late is None]  # late joiners kept out of the run are not counted
        fixed = max(run.stages[spec.name].members if run is not None and spec.name in run.stages else 0, len(in_run))
        concurrency = max(resolve_count(spec.max_concurrency, total=fixed, default=max(fixed, 1)), 1)
        failures = resolve_count(spec.max_failures, total=fixed, default=0)
        rows.append((spec.name, updating, concurrency, failed, failures))
    return rows


def over_budget(fleet: Fleet, record: ModuleRecord) -> bool:
    """A started stage has more failed members than its maxFailures (recounted)."""
    if record.mode != "rollout" or record.stable == record.target or record.aborted:
        return False
    stages = stages_of(record)
    for index, (_, _, _, failed, failures) in enumerate(stage_limits(fleet, record)):
        if record.graph:  # a stage graph (stage_graph.py): every started stage counts
            found = record.graph.get(stages[index].name)
            started = found is not None and found.started
        else:
            started = index < record.stage_index or (index == record.stage_index and record.stage_started)
        if started and failed > failures:
            return True
    return False


def wave_key(record: ModuleRecord, index: int) -> tuple[str, int, str, str] | None:
    """The identity of stage `index`'s waves for the module's current target (None: the
    stage has none): its waves' spec is part of it, so a respec starts a new one."""
    spec = stages_of(record)[index]
    if spec.waves is None:
        return None
    return (record.name, record.target, spec.name, spec.waves.model_dump_json())


@dataclass
class WaveTracker:
    """One stage's waves for one target, learnt from the decisions and the targets alone."""

    opened: int = 0  # the highest wave a wave-started decision opened
    size: int = 0  # the members per wave it said
    busy_at: float | None = None  # the latest engine time a member of the stage was seen updating


@dataclass
class Checker:
    fleet: Fleet
    trackers: dict[str, StageTracker] = field(default_factory=dict)
    halted: set[str] = field(default_factory=set)
    waves: dict[tuple[str, int, str, str], WaveTracker] = field(default_factory=dict)

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
            "resorting": {name for name, record in fleet.modules.items() if record.resorting is not None},
            "clock": dict(fleet.clock),
            "journal": len(fleet.journal),
        }

    def after(self, event: Any, outcome: Outcome, before: dict[str, Any], duplicate: bool) -> None:
        fleet = self.fleet
        if duplicate:
            assert serialize(outcome) == serialize(Outcome()), f"redelivered {event.type} emitted {serialize(outcome)}"
            assert fleet.snapshot() == before["snapshot"], f"redelivered {event.type} changed the state"
        check_reasons(outcome)
        self.check_stage_order(outcome)
        self.check_halt(event, outcome, before)
        self.check_windows(outcome)
        self.check_freezes(outcome)
        self.check_resorts(outcome, before)
        self.check_leases(event, outcome, before)
        for name, record in fleet.modules.items():
            self.check_concurrency(event, outcome, before, record)
            self.check_waves(outcome, record)
            if record.mode == "rollback" and record.phase == "RolledBack":
                for t in fleet.targets.values():
                    never_given = t.stage_index is None and t.assigned is None  # a rollback undoes nothing
                    if t.module == name and not t.pinned and not never_given:
                        assert t.assigned == record.stable, f"rolled back, but {t.cluster} holds {t.assigned}"
        for key, assigned in before["pinned"].items():
            now = fleet.targets.get(key)
            if now is not None and now.pinned:
                assert now.assigned == assigned, f"pinned {key} moved from {assigned} to {now.assigned}"

    def check_leases(self, event: Any, outcome: Outcome, before: dict[str, Any]) -> None:
        """Live time (clock.py LEASE_TICK_STEP) moves with the engine's, at most a step an
        event and never back; and no lease it passed is left unexpired — the clusters' own
        and the holders' (leases.py "The engine's own silence") — unless expiries are sliced
        below the fleet's size, when a tick takes at most a slice ("Mass expiries in slices")."""
        fleet, clock = self.fleet, before["clock"]
        live_before = clock.get("now", 0.0) - clock.get("paused", 0.0)
        live = fleet.now - fleet.clock.get("paused", 0.0)
        assert fleet.clock.get("paused", 0.0) >= clock.get("paused", 0.0), "paused time went back"
        assert live >= live_before and live <= fleet.now, (live_before, live, fleet.now)
        if clock.get("now", 0.0) > 0:
            assert live - live_before <= fleet.engine.ticks.lease_tick_step, (
                f"a tick counted {live - live_before} s toward leases"
            )
        sliced = fleet.engine.leases.expiries_per_event < EXPIRIES_PER_EVENT
        if sliced:  # a mass expiry may take several events: never more than a slice an event
            # (the LeasesContinued fed back within the same send take one more slice each)
            slices = [e for e in fleet.journal[before["journal"] :] if e.type in ("Tick", "LeasesContinued")]
            if event.type in ("Tick", "LeasesContinued"):
                was = before["snapshot"]["clusters"]
                taken = [n for n, facts in fleet.clusters.items() if n in was and was[n]["ready"] != facts.ready]
                assert len(taken) <= fleet.engine.leases.expiries_per_event * len(slices), (
                    f"{taken} taken offline in {len(slices)} ticks and continuations"
                )
            return
        for name, facts in fleet.clusters.items():
            lease = facts.lease
            if lease is None or lease.claimed or lease.expired or lease.live_expiry() is None:
                continue
            assert lease.live_expiry() > live, f"{name}'s lease ran out at {lease.live_expiry()} (live {live})"
        for holder in fleet.state["holders"].values():
            expiry = holder.live_expiry()
            if not holder.expired and expiry is not None:
                assert expiry > live, f"{holder.holder}'s lease ran out at {expiry} (live {live})"
            assert holder.settling is None, f"{holder.holder}'s clusters left to take after a whole slice"

    def check_resorts(self, outcome: Outcome, before: dict[str, Any]) -> None:
        """While a module re-sorts its members (membership.py "Re-sorts per event") no member
        moves to its target — or, in a rollback, to anything but stable; and every member a
        rollback's re-sort passed is back on stable (or pinned, or never given anything)."""
        fleet = self.fleet
        for name, record in fleet.modules.items():
            if record.resorting is None or name not in before["resorting"]:
                continue  # not re-sorting after the event, or only from it (its apply moved nothing before)
            for decision in outcome.decisions:
                if decision.module != name or decision.action != DecisionAction.ASSIGN:
                    continue
                if record.mode == "rollback":
                    assert decision.generation == record.stable, f"{name} re-sorting a rollback: {decision.reason}"
                else:
                    assert decision.generation != record.target or record.stable == record.target, (
                        f"{name} moved while re-sorting: {decision.reason}"
                    )
            if record.mode == "rollback":
                for found in fleet.targets.values():
                    if found.module != name or found.cluster > record.resorting or found.pinned:
                        continue
                    never_given = found.stage_index is None and found.assigned is None
                    assert found.assigned == record.stable or never_given, (
                        f"{name} re-sorting a rollback passed {found.cluster}, which holds {found.assigned}"
                    )

    def check_concurrency(self, event: Any, outcome: Outcome, before: dict[str, Any], record: ModuleRecord) -> None:
        if record.mode != "rollout":
            return
        moved_to = {
            self.fleet.targets[target_key(record.name, d.cluster)].stage
            for d in outcome.decisions
            if d.module == record.name
            and d.action == DecisionAction.ASSIGN
            and d.generation == record.target
            and target_key(record.name, d.cluster or "") in self.fleet.targets
        }
        exempt = (
            (isinstance(event, RolloutCommanded) and event.command == "unpin")
            or isinstance(event, ModuleApplied | ClusterObserved)
            # a re-sort moves members between stages, as the apply that started it did at once
            or record.name in before["resorting"]
        )
        previously = before["updating"].get(record.name, {})
        for name, updating, concurrency, _, _ in stage_limits(self.fleet, record):
            if name in moved_to:
                assert updating <= concurrency, f"{record.name} stage {name}: moved to {updating} > {concurrency}"
            if not exempt and before["targets"].get(record.name) == record.target:
                assert updating <= max(concurrency, previously.get(name, 0)), (
                    f"{record.name} stage {name}: {updating} updating > maxConcurrency {concurrency}"
                )

    def check_waves(self, outcome: Outcome, record: ModuleRecord) -> None:
        """In the current stage of a rollout, moves never start more members than the waves
        opened allow, and a wave follows the one before only `delay` after the stage last
        had a member updating (waves.py)."""
        if record.mode != "rollout" or record.stable == record.target:
            return
        stages = stages_of(record)
        for decision in outcome.decisions:  # each about its own stage: one may pass in the event
            if decision.module != record.name or decision.action != DecisionAction.WAVE_STARTED:
                continue
            because = decision.because
            assert isinstance(because, WaveStarted)
            index = [stage.name for stage in stages].index(because.stage)
            key, waves = wave_key(record, index), stages[index].waves
            assert key is not None and waves is not None, f"{record.name}: {decision.reason} in a stage without waves"
            tracker = self.waves.setdefault(key, WaveTracker())
            if because.wave == tracker.opened + 1 and tracker.opened > 0 and tracker.busy_at is not None:
                delay = parse_duration(waves.delay) if waves.delay else 0.0
                assert decision.at >= tracker.busy_at + delay, (
                    f"{record.name}: wave {because.wave} at {decision.at}, the one before busy at {tracker.busy_at}"
                )
            tracker.opened, tracker.size = because.wave, because.size
        for index in running(record):
            self.check_stage_waves(outcome, record, index)

    def check_stage_waves(self, outcome: Outcome, record: ModuleRecord, index: int) -> None:
        """A running stage's moves stay within the waves opened for it."""
        stages = stages_of(record)
        key, waves = wave_key(record, index), stages[index].waves
        if key is None or waves is None:
            return
        tracker = self.waves.setdefault(key, WaveTracker())
        members = [t for t in self.fleet.targets.values() if t.module == record.name and t.stage_index == index]
        on_target = [t for t in members if t.assigned == record.target and not t.pinned]
        names = {t.cluster for t in members}
        moved = any(
            d.module == record.name
            and d.action == DecisionAction.ASSIGN
            and d.generation == record.target
            and d.cluster in names
            for d in outcome.decisions
        )
        if moved and tracker.opened:
            # the size as resolved when the wave opened, or now: a percentage grows with the stage
            size = max(tracker.size, wave_size(waves, len(members)))
            assert len(on_target) <= tracker.opened * size, (
                f"{record.name}: {len(on_target)} members moved with {tracker.opened} wave(s) of {size} open"
            )
        if any(t.status == "updating" for t in on_target):
            tracker.busy_at = self.fleet.now

    def check_gates_passed(self, record: ModuleRecord, stage: Any, at: float, generation: int) -> None:
        """A stage with health gates passed only after each passed for its soak."""
        soak = parse_duration(stage.min_success_time) if stage.min_success_time else 0.0
        for gate in stage.gates:
            if gate.dry_run:
                continue  # measured, never holding the stage
            state = record.gates.get(f"{stage.name}/{gate.name}")
            if gate.count is not None:  # an analysis: its run succeeded
                assert state is not None and state.generation == generation and state.analysis is not None, (
                    f"{record.name}: stage {stage.name} passed without analysis {gate.name}: {state}"
                )
                assert state.analysis.phase == "Successful", f"{record.name}: analysis {gate.name}: {state.analysis}"
                assert state.analysis.measured == gate.count and state.analysis.failed <= gate.failures_allowed
                continue
            assert state is not None and state.passed and state.generation == generation, (
                f"{record.name}: stage {stage.name} passed without gate {gate.name}: {state}"
            )
            assert state.since is not None and at - state.since >= soak, f"{record.name}: gate not passed for {soak}s"

    def check_windows(self, outcome: Outcome) -> None:
        """No cluster is moved to the target outside its stage's maintenance windows."""
        for decision in outcome.decisions:
            record = self.fleet.modules.get(decision.module)
            if decision.action != DecisionAction.ASSIGN or record is None or record.mode != "rollout":
                continue
            found = self.fleet.targets.get(target_key(decision.module, decision.cluster or ""))
            if decision.generation != record.target or found is None or found.stage_index is None:
                continue
            state = stage_window_state(record.spec, stages_of(record)[found.stage_index], decision.at)
            assert state is None or state.open, f"{decision.module}: {decision.reason} outside its windows"

    def check_freezes(self, outcome: Outcome) -> None:
        """No cluster starts moving to the target while a freeze calendar governing its
        module holds the engine's time (or before the first tick, when one governs it) — but
        one its break-glass overrides then, or the calendar's own break-glass (kept on its
        scope: every module it governs) in force then."""
        for decision in outcome.decisions:
            record = self.fleet.modules.get(decision.module)
            if not isinstance(decision.because, MovedToTarget) or record is None:
                continue
            glass = record.break_glass if record.break_glass and decision.at < record.break_glass.until else None
            for scope in (CLUSTER_SCOPE, record.namespace):
                kept = self.fleet.state["freezes"].get(scope)
                for name, spec in sorted(kept.calendars.items()) if kept is not None else []:
                    if glass is not None and glass.calendar in (None, calendar_identity(scope, name)):
                        continue  # overridden by an operator's break-glass
                    scoped = kept.break_glass.get(name) if kept is not None else None
                    if scoped is not None and decision.at < scoped.until:
                        continue  # the calendar's own break-glass, in force
                    held = decision.at <= 0 or frozen_until(spec.windows, decision.at) is not None
                    assert not held, f"{decision.module}: {decision.reason} inside freeze calendar {scope}/{name}"

    def check_halt(self, event: Any, outcome: Outcome, before: dict[str, Any]) -> None:
        for name in list(self.halted):
            record = self.fleet.modules.get(name)
            new_target = record is None or record.target != before["targets"].get(name)
            resumed = isinstance(event, RolloutCommanded) and event.module == name and event.command == "resume"
            if new_target or (resumed and name not in before["over"]):
                self.halted.discard(name)
                continue
            target = before["targets"][name]
            moves = [
                d
                for d in outcome.decisions
                if d.module == name and d.action == DecisionAction.ASSIGN and d.generation == target
            ]
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
            if decision.action == DecisionAction.CREATED:
                tracker.reset(1)
            elif decision.action == DecisionAction.NEW_REVISION:
                tracker.reset(decision.generation or 0)
            elif decision.action == DecisionAction.ROLLBACK:
                tracker.mode = "rollback"
            elif record is None or not tracker.trusted:
                continue
            elif decision.action == DecisionAction.APPROVED:
                assert isinstance(decision.because, Approved)
                given, required = decision.because.approvals, decision.because.required
                if required is None or (given is not None and given >= required):
                    tracker.approved.add(decision.because.stage)
            elif decision.action == DecisionAction.HALTED and isinstance(
                getattr(decision.because, "cause", None), Rejected
            ):
                tracker.rejected = True
            elif decision.action == DecisionAction.STAGE_SUCCEEDED:
                assert isinstance(decision.because, StageSucceeded)
                tracker.succeeded[decision.because.stage] = (decision.at, decision.because.succeeded)
            elif decision.action in (DecisionAction.STAGE_STARTED, DecisionAction.STAGE_SKIPPED):
                assert isinstance(decision.because, StageStarted | StageSkipped)
                started = decision.because.stage
                stages = stages_of(record)
                index = [s.name for s in stages].index(started)
                if stages[index].needs_approval:
                    assert started in tracker.approved, f"{name}: stage {started} started unapproved"
                assert not tracker.rejected, f"{name}: stage {started} started after the target was rejected"
                if record.graph or any(s.after is not None for s in stages):
                    self.check_upstreams(record, stages[index], decision.at, tracker)
                elif index > 0:
                    previous = stages[index - 1]
                    assert previous.name in tracker.started, f"{name}: {started} started before {previous.name}"
                    assert previous.name in tracker.succeeded, f"{name}: {started} started, {previous.name} not done"
                    self.check_gates_passed(record, previous, decision.at, tracker.generation)
                    done_at, succeeded = tracker.succeeded[previous.name]
                    if previous.min_success_time and succeeded:
                        soak = parse_duration(previous.min_success_time)
                        assert decision.at >= done_at + soak, f"{name}: {started} started before the soak ended"
                tracker.started.add(started)
                if decision.action == DecisionAction.STAGE_SKIPPED:  # passed at once, nothing to soak
                    tracker.succeeded[started] = (decision.at, 0)
            elif (
                decision.action == DecisionAction.ASSIGN
                and tracker.mode == "rollout"
                and decision.generation == tracker.generation
            ):
                found = self.fleet.targets.get(target_key(name, decision.cluster or ""))
                if found is not None and found.stage_index is not None:
                    assert found.stage in tracker.started, f"{name}: {decision.reason} before its stage started"

    def check_upstreams(self, record: ModuleRecord, stage: Any, at: float, tracker: StageTracker) -> None:
        """A stage of a stage graph starts only once its quorum of upstream edges counts:
        each such upstream started, succeeded, soaked its minSuccessTime and then the edge's
        soak (recounted from the decisions; the quorum rounded up); with quorum All, every
        upstream's gates passed."""
        stages = stages_of(record)
        edges = stage_upstreams(stages)[stage.name]
        counting = []
        for edge in edges:
            upstream = next(s for s in stages if s.name == edge.stage)
            if edge.stage not in tracker.started or edge.stage not in tracker.succeeded:
                continue
            done_at, succeeded = tracker.succeeded[edge.stage]
            soak = parse_duration(upstream.min_success_time) if upstream.min_success_time and succeeded else 0.0
            if at >= done_at + soak + (parse_duration(edge.soak) if edge.soak else 0.0):
                counting.append(upstream)
        quorum = stage.quorum or "All"
        need = len(edges) if quorum == "All" else 1 if quorum == "OneOf" else -(-len(edges) * int(quorum[:-1]) // 100)
        assert len(counting) >= need, f"{record.name}: {stage.name} started with {len(counting)} of {need} upstreams"
        if quorum == "All":
            for upstream in counting:
                self.check_gates_passed(record, upstream, at, tracker.generation)

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
