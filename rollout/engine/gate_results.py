"""Health gate results: what a GateEvaluated does to a module's rollout.

    GateEvaluated ──► ModuleRecord.gates["<stage>/<gate>"] ──► advance
                      (a failure: halt or rollback, as onFailure says;
                       an analysis inconclusive: pause, until `rollout resume`)

A result counts when it is about the stage running now (started, current, in a rollout
that is not complete), for the current target generation, and a gate that stage has;
anything else — a late result for an earlier stage or generation — changes nothing.

A gate without `count` watches its latest result: a passing result starts (or continues)
the gate's run of passes (`since`); an inconclusive one (`passed: null`) or a failure ends
it. A failure while the module is not halted is decided `gate-failed` and handled like too
many failed clusters: `Halt` halts (a `resume` lifts it; the gate must then pass again for
the soak), `Rollback` rolls back.

A gate with `count` is an analysis (Argo Rollouts' AnalysisTemplate `count`,
`failureLimit`, `inconclusiveLimit`): measurement n of run r (the event's `measurement`,
`run`) counts once, when n is one more than the measurements the run has counted —
redelivered, duplicated (two runners) or out-of-order measurements change nothing, and no
time is read: the runner spaces them by `interval`. After each counted measurement, in
this order:

* failed > failureLimit → the run is `Failed`: `gate-failed`, then onFailure (halt or
  roll back) — as soon as it happens, not after `count`;
* inconclusive > inconclusiveLimit → `Inconclusive`: `gate-inconclusive`, and the module
  pauses (`paused`, phase Paused) until `rollout resume`;
* `count` measurements counted → `Successful`: `gate-passed`; the stage may pass;
* otherwise the run goes on (`Running`).

A run that failed or was inconclusive is over; once the module is resumed (neither halted
nor paused) measurement 1 of run r+1 starts a new one from zero. A `dryRun` gate is
measured and its verdicts decided the same way, but it never halts, rolls back or pauses,
and the stage never waits for it (`stages.gates_passed`). Whether the stage may pass is
`stages.gates_passed`, asked as the stage settles.
"""

from __future__ import annotations

from rollout.api.gates import HealthGate, gate_key
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stages import StageMachine
from rollout.engine.state import GATE_IDS_KEPT, AnalysisPhase, GateAnalysis, GateState, ModuleRecord, remember
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import GateAnalysisCounts, GateFailed, GateInconclusive, GatePassed, Halted
from rollout.wire.events import GateEvaluated


class GateResults:
    """Folds health gate results into the module's record."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages

    def on_gate_evaluated(self, event: GateEvaluated, out: Outcome) -> None:
        tables = self.tables
        stored = tables.modules.get(event.module)
        if stored is None or stored.partition != tables.partition or event.id in stored.gate_ids:
            return  # unknown module, or redelivered
        gate = self._gate(stored, event)
        if gate is None:
            return  # about another stage, gate or generation (a late result): it changes nothing
        old = stored.gates.get(gate_key(event.stage, event.gate))
        old = old if old is not None and old.generation == stored.target else None
        analysis = self._counted(stored, gate, old, event) if gate.analysis else None
        if gate.analysis and analysis is None:
            return  # not the next measurement of a run that may count it (see the docstring)
        record = stored.working_copy()
        record.gate_ids = remember(record.gate_ids, event.id, GATE_IDS_KEPT)
        if analysis is not None:
            self._measure(record, gate, analysis, event, out)
        else:
            self._latest(record, gate, old, event, out)
        self.stages.advance(record, out)
        self.book.save_module(record, out)

    def _gate(self, record: ModuleRecord, event: GateEvaluated) -> HealthGate | None:
        """The gate of the stage running now `event` is about, if it is for the target."""
        stage = self.stages.gated_stage(record, event.stage)  # started, not passed (stages.py)
        if stage is None or event.generation != record.target:
            return None
        return next((gate for gate in stage.gates if gate.name == event.gate), None)

    def _latest(
        self, record: ModuleRecord, gate: HealthGate, old: GateState | None, event: GateEvaluated, out: Outcome
    ) -> None:
        """A gate without an analysis: its latest result is what counts."""
        continuing = old is not None and old.passed is True
        failing = old is not None and old.passed is False
        since = (old.since if continuing and old is not None else self.tables.now) if event.passed else None
        self._store(record, event, since=since, analysis=None)
        message = event.message or None
        if event.passed is False and gate.dry_run:
            if not failing:  # a dry run holds nothing: its failures are decided as they start
                failed = GateFailed(gate=event.gate, stage=event.stage, message=message, dry_run=True)
                self.book.decide(record, DecisionAction.GATE_FAILED, failed, out, stage=event.stage)
        elif event.passed is False and not record.halted:
            failed = GateFailed(gate=event.gate, stage=event.stage, message=message)
            self.book.decide(record, DecisionAction.GATE_FAILED, failed, out, stage=event.stage)
            self._gate_failure(record, failed, out)
        elif event.passed is True and not continuing:
            passed = GatePassed(gate=event.gate, stage=event.stage, message=message, dry_run=gate.dry_run)
            self.book.decide(record, DecisionAction.GATE_PASSED, passed, out, stage=event.stage)

    def _counted(
        self, record: ModuleRecord, gate: HealthGate, old: GateState | None, event: GateEvaluated
    ) -> GateAnalysis | None:
        """The analysis run `event` is the next measurement of, before counting it (a new
        run when it starts one); None when it does not count."""
        if event.run is None or event.measurement is None:
            return None  # a result without a measurement's identity cannot be counted once
        current = old.analysis if old is not None else None
        if current is None:
            return GateAnalysis(run=1) if (event.run, event.measurement) == (1, 1) else None
        if current.phase == "Running":
            return current if (event.run, event.measurement) == (current.run, current.measured + 1) else None
        restartable = current.phase in ("Failed", "Inconclusive") and not gate.dry_run
        if (
            restartable
            and not record.halted
            and not record.paused
            and (event.run, event.measurement)
            == (
                current.run + 1,
                1,
            )
        ):
            return GateAnalysis(run=current.run + 1)  # resumed: a new run, from zero
        return None

    def _measure(
        self, record: ModuleRecord, gate: HealthGate, before: GateAnalysis, event: GateEvaluated, out: Outcome
    ) -> None:
        """Count one measurement of an analysis and conclude the run when it may."""
        successful = before.successful + (event.passed is True)
        failed = before.failed + (event.passed is False)
        inconclusive = before.inconclusive + (event.passed is None)
        count = gate.count or 1
        phase: AnalysisPhase = (
            "Failed"
            if failed > gate.failures_allowed
            else "Inconclusive"
            if inconclusive > gate.inconclusives_allowed
            else "Successful"
            if successful + failed + inconclusive >= count
            else "Running"
        )
        analysis = GateAnalysis(
            run=before.run, successful=successful, failed=failed, inconclusive=inconclusive, phase=phase
        )
        self._store(record, event, since=self.tables.now if phase == "Successful" else None, analysis=analysis)
        if phase == "Running":
            return
        counts = GateAnalysisCounts(
            run=analysis.run,
            count=count,
            successful=successful,
            failed=failed,
            inconclusive=inconclusive,
            failure_limit=gate.failures_allowed,
            inconclusive_limit=gate.inconclusives_allowed,
        )
        book, stage, message, dry = self.book, event.stage, event.message or None, gate.dry_run
        if phase == "Successful":
            passed = GatePassed(gate=gate.name, stage=stage, message=message, analysis=counts, dry_run=dry)
            book.decide(record, DecisionAction.GATE_PASSED, passed, out, stage=stage)
        elif phase == "Failed":
            failure = GateFailed(gate=gate.name, stage=stage, message=message, analysis=counts, dry_run=dry)
            book.decide(record, DecisionAction.GATE_FAILED, failure, out, stage=stage)
            if not dry and not record.halted:
                self._gate_failure(record, failure, out)
        else:
            unsure = GateInconclusive(gate=gate.name, stage=stage, message=message, analysis=counts, dry_run=dry)
            book.decide(record, DecisionAction.GATE_INCONCLUSIVE, unsure, out, stage=stage)
            if not dry:
                record.paused = True  # until `rollout resume` (intents.py); phase Paused, said in status

    def _store(
        self, record: ModuleRecord, event: GateEvaluated, *, since: float | None, analysis: GateAnalysis | None
    ) -> None:
        record.gates = {
            **record.gates,
            gate_key(event.stage, event.gate): GateState(
                stage=event.stage,
                gate=event.gate,
                generation=record.target,
                passed=event.passed,
                since=since,
                message=event.message,
                analysis=analysis,
            ),
        }

    def _gate_failure(self, record: ModuleRecord, failed: GateFailed, out: Outcome) -> None:
        """A failing gate counts as a failure for onFailure."""
        on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
        if on_failure == "Rollback":
            self.stages.start_rollback(record, failed, out)
        else:
            record.halted = True
            self.book.decide(record, DecisionAction.HALTED, Halted(cause=failed), out)
