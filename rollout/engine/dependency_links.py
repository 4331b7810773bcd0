"""What a module tells the modules that depend on it: its readiness per cluster.

    TargetBook.store_target(A, cluster) ──► Target.dependents_ready changed? ──► DependencyReported
                                            (to every dependent of A, on the dependencies topic)

A dependency is *ready* on a cluster when its sync is on its target there and succeeded
(`Target.dependents_ready`, kept by every `TargetBook.store_target` through
`dependents_ready` below). When that changes, one `DependencyReported` per module that ever
declared `dependsOn: [A]` (`Dependents`, kept by `DependentLinked`, dependencies.py) goes
into `Outcome.dependency_events`; the decider publishes them on the dependencies topic keyed
by the dependent, and the router puts them into the dependent's journal partition. So each
partition stays a pure fold of its own journal: another partition's state only ever
arrives as events in it.

Every event sent carries `seq`, the partition's own counter (`sequences`), and a
deterministic id built from it: the receiver keeps the highest `seq` per key, so a stale
or redelivered event changes nothing, and a replay of the journal sends the same events.
"""

from __future__ import annotations

from typing import Any

from rollout.api.windows import iso
from rollout.engine.outcome import Outcome
from rollout.engine.state import Category, ModuleRecord, Sequence, Target
from rollout.engine.tables import StateTables
from rollout.wire.events import DependencyCurrent, DependencyReported, DependentLinked

SEQUENCE = "dependencies"


def dependents_ready(record: ModuleRecord, target: Target) -> bool:
    """Whether dependents may count on `record`'s module on `target`'s cluster."""
    return record.mode == "rollout" and target.assigned == record.target and target.status == "succeeded"


def release_failed(record: ModuleRecord, target: Target) -> bool:
    """Whether `record`'s module, a Release member, failed on its target on `target`'s
    cluster — its own report or deadline, never a peer's failure echoed back."""
    return (
        record.spec.release is not None
        and record.mode == "rollout"
        and not target.pinned
        and target.assigned == record.target
        and target.status == "failed"
    )


def release_skipped(record: ModuleRecord, category: Category) -> bool:
    """Whether `record`'s module, a Release member, is skipped on a cluster where its
    target is in `category`: pinned (held where it is, as a module does not wait for its
    own pinned members) or not ready and not on its target (its run skips it there, offline
    — a member that went offline while updating is still waited for: its report counts).
    Its peers do not wait for it there: else one on its target there would wait for a
    member its run went on without, and keep its stage from passing for as long as the
    cluster is away."""
    return record.spec.release is not None and category in ("pinned", "not_ready")


class DependencyLinks:
    """Tells a module's dependents where it is ready; numbers what it sends."""

    def __init__(self, tables: StateTables) -> None:
        self.tables = tables

    def readiness_stored(self, module: str, old: Target | None, new: Target | None, out: Outcome) -> None:
        """A target of `module` was stored (or dropped): if its `dependents_ready` changed,
        every dependent is told."""
        was = (old.dependents_ready, old.release_failed, old.release_skipped) if old else (False, False, False)
        now = (new.dependents_ready, new.release_failed, new.release_skipped) if new else (False, False, False)
        if now != was:
            cluster = new.cluster if new is not None else old.cluster  # type: ignore[union-attr]
            self.tell_dependents(module, cluster, *now, out, only=None)

    def tell_dependents(
        self, module: str, cluster: str, ready: bool, failed: bool, skipped: bool, out: Outcome, *, only: str | None
    ) -> None:
        """DependencyReported to every dependent (and Release peer) of `module` (or to `only`)."""
        links = self.tables.dependents.get(module)
        if links is None:
            return
        for dependent in sorted(links.links) if only is None else [only]:
            fields = {"module": module, "cluster": cluster, "ready": ready, "failed": failed, "skipped": skipped}
            self.send(DependencyReported, out, dependent=dependent, **fields)

    def send(
        self,
        kind: type[DependentLinked] | type[DependencyReported] | type[DependencyCurrent],
        out: Outcome,
        **fields: Any,
    ) -> None:
        """An event for another module's partition, numbered by this partition's sequence."""
        tables = self.tables
        counter = tables.sequences.get(SEQUENCE) or Sequence()
        tables.sequences[SEQUENCE] = Sequence(next=counter.next + 1)
        event_id = f"dep-{tables.partition}-{counter.next}"
        out.dependency_events.append(kind(id=event_id, at=iso(tables.now) or "", seq=counter.next, **fields))

    def reserve(self, count: int) -> list[str]:
        """`count` ids of events this partition sends (numbered as `send` numbers them), for
        events that name each other (a release's ReleasePromoted: promotions.py)."""
        tables = self.tables
        counter = tables.sequences.get(SEQUENCE) or Sequence()
        tables.sequences[SEQUENCE] = Sequence(next=counter.next + count)
        return [f"dep-{tables.partition}-{counter.next + index}" for index in range(count)]
