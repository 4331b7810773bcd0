"""Health gate results: what a GateEvaluated does to a module's rollout.

    GateEvaluated ──► ModuleRecord.gates["<stage>/<gate>"] ──► advance
                      (a failure: halt or rollback, as onFailure says)

A result counts when it is about the stage running now (started, current, in a rollout
that is not complete), for the current target generation, and a gate that stage has;
anything else — a late result for an earlier stage or generation — changes nothing. A
passing result starts (or continues) the gate's run of passes (`since`); an inconclusive
one (`passed: null`) or a failure ends it. A failure while the module is
not halted is decided `gate-failed` and handled like too many failed clusters: `Halt`
halts (a `resume` lifts it; the gate must then pass again for the soak), `Rollback` rolls
back. Whether the stage may pass is `stages.gates_passed`, asked as the stage settles.
"""

from __future__ import annotations

from rollout.api.gates import gate_key
from rollout.api.manifests import Stage
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stages import StageMachine
from rollout.engine.state import GATE_IDS_KEPT, GateState, ModuleRecord, remember
from rollout.engine.strategy import stages_of
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import GateFailed, GatePassed, Halted
from rollout.wire.events import GateEvaluated


class GateResults:
    """Folds health gate results into the module's record."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages

    def on_gate_evaluated(self, event: GateEvaluated, out: Outcome) -> None:
        tables, book = self.tables, self.book
        stored = tables.modules.get(event.module)
        if stored is None or stored.partition != tables.partition or event.id in stored.gate_ids:
            return  # unknown module, or redelivered
        if self._gated_stage(stored, event) is None:
            return  # about another stage, gate or generation (a late result): it changes nothing
        record = stored.working_copy()
        record.gate_ids = remember(record.gate_ids, event.id, GATE_IDS_KEPT)
        key = gate_key(event.stage, event.gate)
        old = record.gates.get(key)
        continuing = old is not None and old.generation == record.target and old.passed is True
        since = (old.since if continuing and old is not None else tables.now) if event.passed else None
        record.gates = {
            **record.gates,
            key: GateState(
                stage=event.stage,
                gate=event.gate,
                generation=record.target,
                passed=event.passed,
                since=since,
                message=event.message,
            ),
        }
        message = event.message or None
        if event.passed is False and not record.halted:
            failed = GateFailed(gate=event.gate, stage=event.stage, message=message)
            book.decide(record, DecisionAction.GATE_FAILED, failed, out, stage=event.stage)
            self._gate_failure(record, failed, out)
        elif event.passed is True and not continuing:
            passed = GatePassed(gate=event.gate, stage=event.stage, message=message)
            book.decide(record, DecisionAction.GATE_PASSED, passed, out, stage=event.stage)
        self.stages.advance(record, out)
        book.save_module(record, out)

    def _gated_stage(self, record: ModuleRecord, event: GateEvaluated) -> Stage | None:
        """The stage running now, if `event` is about one of its gates for the target."""
        if record.mode != "rollout" or self.stages.completed(record) or not record.stage_started:
            return None
        stage = stages_of(record)[min(record.stage_index, len(stages_of(record)) - 1)]
        if event.generation != record.target or event.stage != stage.name:
            return None
        return stage if any(gate.name == event.gate for gate in stage.gates) else None

    def _gate_failure(self, record: ModuleRecord, failed: GateFailed, out: Outcome) -> None:
        """A failing gate counts as a failure for onFailure."""
        on_failure = record.spec.rollout.on_failure if record.spec.rollout else "Halt"
        if on_failure == "Rollback":
            self.stages.start_rollback(record, failed, out)
        else:
            record.halted = True
            self.book.decide(record, DecisionAction.HALTED, Halted(cause=failed), out)
