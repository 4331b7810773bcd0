"""Runs: a rollout's membership fixed when it starts, so fleet churn never moves its budgets.

    StageMachine.advance ──► Runs.ensure: a new run when the module drives a new generation
                             (a new target, or a rollback to stable), its members per stage
                             fixed from the stage counters — O(stages), never O(clusters)
    Membership.refresh_membership ──► Runs.joined / moved / departed: the run's set follows
                             only what the rules below say

A **run** is one pass of a module over its clusters toward one generation: one per target
generation, and one per rollback. It is recorded beside the module (`runs[module]`, a
`RunRecord`: a mapping of its own, so that the module's record stays byte for byte what the
release before wrote and reads): its number, what it drives, when it started and, per stage, the members it
covers (`RunStage.members`) and how many of them left (`left`). A stage's `maxConcurrency`
and `maxFailures` percentages are resolved against `members` — fixed at the start, grown
only by the late joiners the run takes in — so a cluster leaving, or a whole rack going
offline, never changes what 25 % means mid-run (kubefleet #733: a stage whose cluster count
changed aborted its run). The engine never aborts or stalls a run because the fleet changed:

* a member that goes **offline** (not ready: lease expired, observed not ready) is skipped —
  `SkippedOffline`, never a failure, never blocking its stage (AKS #5655, fleet #594) — and
  gets the revision its stage is at when it comes back, like any member back from not-ready
  — or, with `rollout.offline: {wait, then}`, its stage waits for it first, then skips or
  fails it (offline_waits.py);
* a member that **leaves** the run — removed, unselected, or outside its namespace's
  ModuleRestriction — drops out of every count but its stage's `members` with the state
  `Left`, and is listed (`RunRecord.departed`: the latest DEPARTURES_KEPT, newest last; the
  count per stage is exact). A cluster that left the fleet (`rollout cluster leave`) is
  still a member: `Left` too, with its Target kept (its document's `offline`: `left`);
* a cluster that **joins** mid-run is taken into the run in the stage it matches (its
  `members` grows by one) and moves like any member of that stage; one that left the run
  and comes back is the member it was (`left` drops by one) while it is still listed.
  That is `lateJoiners: Include`, the default. With `NextRun` a joiner (`late`) is kept out
  of the run — not counted, given the stable revision, `deferred` — and the next run takes
  it in: a new revision's when it starts, or, when this run passes its stages with such
  joiners waiting, a *follow-up* run for the same generation started then (`follow_up`),
  so none stays off the revision silently. With `Exclude` it is kept out and left alone
  (`excluded`: not even stable, not waited for) until the next revision's run;
* a member **held** by its owner (`rollout.dev/hold: "true"` on its Cluster; `hold-until`,
  an RFC 3339 time, ends it by itself; `hold-reason` says why) is not moved — `Held`, not a
  failure, not blocking its stage — and, like a member not ready, keeps the module from
  `Complete` until it is released (`Outstanding.held`).

Every member of the run is in one explicit state (rollout/wire/status.py `RUN_STATES`,
`run_state`): Succeeded, Failed, SkippedOffline, DeferredByWindow, Pinned, Held, Left — or,
while the run is going, Pending, Updating, Blocked; a late joiner it kept out is Excluded
or DeferredToNextRun.

Memory: a run is one record of O(stages) plus DEPARTURES_KEPT names; the members' states
live on their Targets (one record per member, as before). Only the module's latest run is
kept: a new run replaces it, and deleting the module deletes it.

Upgrades: the runs are a mapping of their own, which the release before skips (v0.26 refuses
a record with a field it does not know: the module records stay as it wrote them); a
Target's `hold`, `late`, `offline_until` and `offline_failed`, a stage's `held`, `deferred`,
`excluded` and `awaited` counts and a run's
`joiners` and `follow_up` are written only when set — so are the `held`
category and counts: set holds, and `lateJoiners` and `offline` (spec fields v0.26
refuses), once every worker runs this release. Why a member is offline
is read from its cluster's facts when its document is written, not stored. A module stored
before runs existed has no run; the first advance after the new release **adopts** one
(`adopted`), fixing the members it has then — so a rollout in progress when the release
changes goes on where it was.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from rollout.engine.state import (
    DEPARTURES_KEPT,
    ClusterFacts,
    Departure,
    LateJoin,
    ModuleRecord,
    RunRecord,
    RunStage,
    StageCounts,
    Target,
)
from rollout.engine.strategy import stages_of
from rollout.engine.tables import StateTables

HOLD_ANNOTATION = "rollout.dev/hold"
HOLD_UNTIL_ANNOTATION = "rollout.dev/hold-until"
HOLD_REASON_ANNOTATION = "rollout.dev/hold-reason"
HOLD_REASON_KEPT = 200  # characters of a hold's reason kept on its Targets

Offline = Literal["lease", "left", "not-ready"]
DepartureReason = Literal["removed", "unselected", "not-allowed"]


def hold_until(annotations: dict[str, str]) -> float | None:
    """The end of a cluster's hold (`rollout.dev/hold-until`, RFC 3339) in seconds since the
    epoch; None: none given, or not a time (then the hold lasts until the annotation goes)."""
    value = annotations.get(HOLD_UNTIL_ANNOTATION)
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def hold_reason(facts: ClusterFacts, now: float) -> str | None:
    """The reason the cluster's owner holds it now ("" when none is given; None: not held)."""
    return owner_hold(facts.annotations, now)


def owner_hold(annotations: dict[str, str], now: float) -> str | None:
    """The hold a Cluster's `annotations` put on it at `now` — its reason, "" when none is
    given; None: not held: `rollout.dev/hold: "true"` and, with a `hold-until`, the time
    before it (before the first tick: held). `rollout plan` reads it too."""
    if annotations.get(HOLD_ANNOTATION, "").strip().lower() != "true":
        return None
    until = hold_until(annotations)
    if until is not None and now > 0.0 and now >= until:
        return None
    return annotations.get(HOLD_REASON_ANNOTATION, "")[:HOLD_REASON_KEPT]


def offline_reason(facts: ClusterFacts) -> Offline | None:
    """Why a cluster is not ready (None: it is)."""
    if facts.ready:
        return None
    if facts.left:
        return "left"
    if facts.lease is not None and facts.lease.expired:
        return "lease"
    return "not-ready"


def run_members_now(counts: StageCounts) -> int:
    """A stage's members that are members of the run: all but the late joiners it kept out."""
    return counts.members - counts.deferred - counts.excluded


def budget_members(run: RunRecord | None, stage: str, present: int) -> int:
    """The members stage `stage`'s budgets are resolved against: the run's fixed set
    (`present`, the stage's members now, when no run covers it yet)."""
    if run is None or stage not in run.stages:
        return present
    return max(run.stages[stage].members, present)


class Runs:
    """Starts a module's runs and keeps each run's fixed membership as the fleet churns."""

    def __init__(self, tables: StateTables) -> None:
        self.tables = tables

    def goal(self, record: ModuleRecord) -> int | None:
        return record.target if record.mode == "rollout" else record.stable

    def current(self, record: ModuleRecord) -> RunRecord | None:
        return self.tables.runs.get(record.name)

    def ensure(self, record: ModuleRecord) -> RunRecord:
        """The module's current run; a new one when it drives another generation (or mode)."""
        run = self.current(record)
        goal = self.goal(record)
        if run is not None and run.mode == record.mode and run.generation == goal:
            return run
        adopted = run is None and (record.stage_index + int(record.stage_started) > 0 or bool(record.graph))
        run = self._new_run(record, run.number + 1 if run is not None else 1, adopted=adopted)
        self.tables.runs[record.name] = run
        return run

    def members(self, record: ModuleRecord, stage: str, present: int) -> int:
        return budget_members(self.tables.runs.get(record.name), stage, present)  # `current`, asked per budget

    def late(self, record: ModuleRecord, cluster: str) -> LateJoin | None:
        """Where a cluster that became a member just now stands under the module's
        `lateJoiners` (None: taken into the run, `Include`): it joins *late* when the run
        driving the module's target has started and not passed its stages — and it was not
        a member of that run that left and is listed as such (then it is the member it was)."""
        strategy = record.spec.rollout
        policy = strategy.late_joiners if strategy is not None else "Include"
        if policy == "Include" or record.mode != "rollout" or record.stable == record.target:
            return None
        run = self.current(record)
        if run is None or run.mode != "rollout" or run.generation != record.target:
            return None  # no run drives this target yet: the one that starts will fix it as a member
        if any(departure.cluster == cluster for departure in run.departed):
            return None
        return "next-run" if policy == "NextRun" else "excluded"

    def follow_up(self, record: ModuleRecord, joiners: int) -> RunRecord:
        """The run passed its stages with `joiners` NextRun joiners waiting: the next run
        starts at once, for the same generation, to move them — its members the module's
        now (every other one already runs the target)."""
        run = self.current(record)
        number = run.number + 1 if run is not None else 1
        started = self._new_run(record, number, adopted=False)
        started = started.model_copy(update={"joiners": joiners, "follow_up": True})
        self.tables.runs[record.name] = started
        return started

    def took_in(self, record: ModuleRecord, joiners: int) -> None:
        """The run that just started took in `joiners` late joiners of the run before."""
        run = self.current(record)
        if run is not None and joiners:
            self.tables.runs[record.name] = run.model_copy(update={"joiners": joiners})

    def _new_run(self, record: ModuleRecord, number: int, *, adopted: bool) -> RunRecord:
        return RunRecord(
            number=number,
            mode=record.mode,
            generation=self.goal(record),
            started_at=self.tables.now,
            adopted=adopted,
            stages={
                stage.name: RunStage(members=record.counts[stage.name].members)
                for stage in stages_of(record)
                if stage.name in record.counts and record.counts[stage.name].members
            },
        )

    def ran(self, record: ModuleRecord, stage: str) -> bool:
        """Whether a member of `stage` that succeeded or failed in this run has left it: the
        stage ran, and its soak is not skipped because that member is gone."""
        run = self.current(record)
        return run is not None and stage in run.stages and run.stages[stage].ran

    def joined(self, record: ModuleRecord, stage: str, cluster: str) -> None:
        """A cluster joined the module mid-run in `stage`: taken into the run (or back, if
        it left it and is still listed)."""
        run = self.current(record)
        if run is None or stage == "-":
            return
        back = next((d for d in run.departed if d.cluster == cluster), None)
        stages = dict(run.stages)
        counts = stages.get(stage, RunStage())
        if back is not None and back.stage == stage and counts.left > 0:
            stages[stage] = counts.model_copy(update={"left": counts.left - 1})
        else:
            if back is not None and back.stage in stages and stages[back.stage].left > 0:
                earlier = stages[back.stage]
                stages[back.stage] = earlier.model_copy(update={"left": earlier.left - 1})
                counts = stages.get(stage, RunStage())
            stages[stage] = counts.model_copy(update={"members": counts.members + 1})
        departed = [d for d in run.departed if d.cluster != cluster]
        self.tables.runs[record.name] = run.model_copy(update={"stages": stages, "departed": departed})

    def moved(self, record: ModuleRecord, old: str, new: str, *, ran: bool = False) -> None:
        """A member relabelled from stage `old` into stage `new`: still a member of the
        run, now counted in the stage it matches. `ran`: it had succeeded or failed in `old`
        — that stage ran, and its soak is not skipped because the member is gone from it."""
        run = self.current(record)
        if run is None or old == new:
            return
        stages = dict(run.stages)
        if old in stages and stages[old].members > 0:
            stages[old] = stages[old].model_copy(
                update={"members": stages[old].members - 1, "ran": stages[old].ran or ran}
            )
        elif ran and old != "-":
            stages[old] = stages.get(old, RunStage()).model_copy(update={"ran": True})
        if new != "-":
            counts = stages.get(new, RunStage())
            stages[new] = counts.model_copy(update={"members": counts.members + 1})
        self.tables.runs[record.name] = run.model_copy(update={"stages": stages})

    def departed(self, record: ModuleRecord, target: Target, reason: DepartureReason) -> None:
        """A member left the run: listed as Left, still counted in its stage's `members`."""
        run = self.current(record)
        if run is None or target.stage == "-":
            return
        stages = dict(run.stages)
        counts = stages.get(target.stage, RunStage())
        ran = counts.ran or target.category in ("succeeded", "failed", "awaiting_release")
        stages[target.stage] = counts.model_copy(update={"left": counts.left + 1, "ran": ran})
        departure = Departure(
            cluster=target.cluster, stage=target.stage, reason=reason, at=self.tables.now, generation=target.assigned
        )
        departed = [*(d for d in run.departed if d.cluster != target.cluster), departure][-DEPARTURES_KEPT:]
        self.tables.runs[record.name] = run.model_copy(update={"stages": stages, "departed": departed})
