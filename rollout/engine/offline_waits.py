"""Offline waits: how long a stage waits for a member offline before it moved (`rollout.offline`).

    Membership.refresh_membership ──► OfflineWaits.begin / clear: a member of the started
                                      stage found offline is waited for; one back is not
    StageMachine._start_stage     ──► OfflineWaits.start_stage: the stage's members offline
                                      when it starts are waited for
    ModuleTimers (a Tick)         ──► OfflineWaits.expire: waits that ran out end — the
                                      member skipped (`then: Skip`) or failed (`then: Fail`)
    StageMachine.advance          ──► OfflineWaits.reset_run: a new run starts with no wait

Without `offline`, a member offline (lease expired, observed not ready) before it moved is
skipped at once — SkippedOffline, the run goes on (runs.py). With `offline: {wait, then}`,
its stage waits for it: while the member's stage runs (started, not passed: the current
stage of a chain, any such stage of a graph — StageMachine.stage_running) and it
is offline, not on the target, not pinned, held or a late joiner kept out, its Target has
`offline_until` = the engine time it was found so (or its stage started) + `wait`, and its
category is `awaited` — the stage is not done while it has one (StageMachine._pass_stage).
Back before then, it moves like any member back from offline. At `offline_until` (a Tick:
engine time, never a clock) the wait ends: `Skip` makes it `not_ready` (SkippedOffline, the
stage may be done without it), `Fail` makes it `failed` (`offline_failed`), counted against
the stage's maxFailures — over them the run halts or rolls back, as `onFailure` says. A
failed one that comes back is a member back from offline (its failure cleared): it moves.
A cluster that left the fleet (`rollout cluster leave`) is not waited for: it is Left.
`wait: 0s` with `Skip` is the default; with `Fail` it fails the member at once.

Each start and end of a wait is a decision (`offline-wait`, `offline-wait-over`: structured
reasons with the member, its stage, until when, what then). Waits started before the
engine saw its first tick run from that tick (`expire`, `first`).

Cost: the members waited for and those failed by a wait are an in-memory index of the
TargetBook (`waited_clusters`, rebuilt lazily like the held one); a tick visits only those,
a stage start only its module's not-ready members (`not_ready_clusters`), a new run only
the waited ones.
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.manifests import OfflinePolicy, parse_duration
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.runs import offline_reason
from rollout.engine.state import ModuleRecord, Target, target_key
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import OfflineWait, OfflineWaitOver


def offline_policy(record: ModuleRecord) -> OfflinePolicy | None:
    """The module's `rollout.offline` (None: none — offline members are skipped at once)."""
    strategy = record.spec.rollout
    return strategy.offline if strategy is not None else None


class OfflineWaits:
    """Starts, ends and clears the waits of a module's stages for their offline members."""

    def __init__(self, tables: StateTables, book: TargetBook, running: Callable[[ModuleRecord, int], bool]) -> None:
        self.tables = tables
        self.book = book
        # whether a stage (index) has started for the target and not passed (StageMachine.stage_running)
        self.running = running

    def waits_for(self, record: ModuleRecord, target: Target) -> bool:
        """Whether the current stage waits for `target`, offline before it moved."""
        if offline_policy(record) is None or record.mode != "rollout" or record.stable == record.target:
            return False
        if target.ready or target.pinned or target.hold is not None or target.late is not None:
            return False
        if target.assigned == record.target or target.stage_index is None:
            return False
        if not self.running(record, target.stage_index):
            return False
        facts = self.tables.clusters.get(target.cluster)
        return facts is not None and offline_reason(facts) != "left"

    def begin(self, record: ModuleRecord, target: Target, out: Outcome) -> Target:
        """`target` (the caller's copy) found offline: waited for, if its stage waits for it."""
        policy = offline_policy(record)
        if policy is None or target.offline_until is not None or not self.waits_for(record, target):
            return target
        wait = parse_duration(policy.wait)
        if wait <= 0:
            return self.over(record, target, out) if policy.then == "Fail" else target
        until = self.tables.now + wait
        because = OfflineWait(cluster=target.cluster, stage=target.stage, until=until, then=policy.then)
        self.book.decide(record, DecisionAction.READINESS, because, out, cluster=target.cluster)
        return target.model_copy(update={"offline_until": until})

    def over(self, record: ModuleRecord, target: Target, out: Outcome) -> Target:
        """The wait for `target` ran out: skipped, or failed (`then: Fail`)."""
        policy = offline_policy(record)
        then = policy.then if policy is not None else "Skip"
        wait = policy.wait if policy is not None else "0s"
        because = OfflineWaitOver(cluster=target.cluster, stage=target.stage, wait=wait, then=then)
        action = DecisionAction.FAILED if then == "Fail" else DecisionAction.READINESS
        self.book.decide(record, action, because, out, cluster=target.cluster)
        return target.model_copy(update={"offline_until": None, "offline_failed": then == "Fail"})

    @staticmethod
    def clear(target: Target) -> Target:
        """`target` back (or in a new run): no wait, no failure by one."""
        if target.offline_until is None and not target.offline_failed:
            return target
        return target.model_copy(update={"offline_until": None, "offline_failed": False})

    def start_stage(self, record: ModuleRecord, index: int, out: Outcome) -> None:
        """Stage `index` started: its members offline now are waited for."""
        if offline_policy(record) is None:
            return
        book, targets = self.book, self.tables.targets
        for cluster in sorted(book.not_ready_clusters(record.name)):
            target = targets[target_key(record.name, cluster)]
            if target.stage_index == index:
                book.store_target(record, target, self.begin(record, target.model_copy(), out), out)

    def expire(self, record: ModuleRecord, first: bool, out: Outcome) -> None:
        """Clock step: waits that ran out end; waits started before the first tick run from it."""
        book, targets, now = self.book, self.tables.targets, self.tables.now
        policy = offline_policy(record)
        for cluster in sorted(book.waited_clusters(record.name)):
            target = targets[target_key(record.name, cluster)]
            if target.offline_until is None:
                continue  # failed by its wait: it stays so until it is back
            if first and policy is not None:
                restarted = target.model_copy(update={"offline_until": now + parse_duration(policy.wait)})
                book.store_target(record, target, restarted, out)
            elif now >= target.offline_until:
                book.store_target(record, target, self.over(record, target, out), out)

    def reset_run(self, record: ModuleRecord, out: Outcome) -> None:
        """A new run: no member is waited for, nor failed by a wait of the run before."""
        book, targets = self.book, self.tables.targets
        for cluster in sorted(book.waited_clusters(record.name)):
            target = targets[target_key(record.name, cluster)]
            book.store_target(record, target, self.clear(target), out)
