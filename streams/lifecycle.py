"""The lifecycle of an input partition a stage holds: its phases, and the only ways between them.

               assign                      a batch's transaction begins
  SUSPENDED ─────────► TAKING_OVER ─────► READY ────────────────────► COMMITTING
      ▲                  ▲      │           │  ◄───── it committed ─────  │
      │                  │      │ failed    │ processing failed           │ it failed
      │   repair, after  │      ▼           ▼                             │
      │   a backoff      └──── BROKEN ◄─────┴─────────────────────────────┘
      │
      └──── revoked: from every other phase

* **SUSPENDED** — held but not owned: a partition just created for an assignment, or one
  revoked and kept with its state in case it comes back (a returning owner folds only the
  state records written since its own last commit). Nothing is processed.
* **TAKING_OVER** — fencing the previous owner's transactional ids, folding the state it
  committed, seeking to the tracked position (streams/delivery.py). Every take-over ends
  READY or BROKEN before the stage's lock is released (unless a stop cancels it).
* **READY** — owned, caught up, no transaction in flight: the next batch may begin one.
* **COMMITTING** — a batch's transaction is in flight. The next batch may meanwhile be
  folded on the state that transaction writes (streams/slots.py: pipelining), but its own
  transaction begins only once this one committed (back to READY, then COMMITTING again).
* **BROKEN** — something failed (a transaction, processing, a take-over): nothing is
  processed until the stage repairs the partition — a new take-over — after a backoff that
  doubles while it keeps failing (`RepairSchedule`). What the failure dropped is redone
  from the tracked position: nothing is lost or applied twice.

Why an explicit table: the delivery's status used to be implicit — which of the stage's
dicts held the partition, whether a transaction task or a failure reason was set — and
states nobody had named were reached without anybody noticing (a partition broken while it
still had a transaction in flight, a revoked partition marked broken by its late
transaction). Now every change goes through `Slot.enter` (streams/slots.py), which refuses
one the table does not list (`IllegalTransition`): a bug in the delivery fails loudly at
the step that made it, and the state-machine tests (tests/streams/test_delivery_machine.py)
hold the table to every interleaving of batches, failures and rebalances they find.

A transaction that ends after its partition left COMMITTING — revoked, or taken over again,
because waiting for it timed out — moves no phase: its outcome only reaches the state (a
commit commits its sealed layer, a failure drops it), and the next take-over reads the state
topic from where this owner last knew it committed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

FIRST_REPAIR_BACKOFF = 0.2
MAX_REPAIR_BACKOFF = 5.0


class PartitionPhase(enum.Enum):
    SUSPENDED = "suspended"
    TAKING_OVER = "taking over"
    READY = "ready"
    COMMITTING = "committing"
    BROKEN = "broken"

    @property
    def owned(self) -> bool:
        """Whether the stage owns the partition now (the group assigned it here)."""
        return self is not PartitionPhase.SUSPENDED

    @property
    def delivering(self) -> bool:
        """Whether a batch of the partition may be delivered (folded and committed)."""
        return self is PartitionPhase.READY or self is PartitionPhase.COMMITTING


_P = PartitionPhase
TRANSITIONS: Mapping[PartitionPhase, frozenset[PartitionPhase]] = {
    _P.SUSPENDED: frozenset({_P.TAKING_OVER}),
    _P.TAKING_OVER: frozenset({_P.READY, _P.BROKEN, _P.SUSPENDED}),
    _P.READY: frozenset({_P.COMMITTING, _P.BROKEN, _P.SUSPENDED}),
    _P.COMMITTING: frozenset({_P.READY, _P.BROKEN, _P.SUSPENDED}),
    _P.BROKEN: frozenset({_P.TAKING_OVER, _P.SUSPENDED}),
}
"""phase → the phases it may change to (see the module doc). TAKING_OVER → SUSPENDED: a
take-over cancelled (a stop) and then revoked; COMMITTING → SUSPENDED: revoked while its
transaction was still in flight (waiting for it timed out)."""


class IllegalTransition(RuntimeError):
    """A phase change the lifecycle does not allow: a bug in the delivery."""


def checked(current: PartitionPhase, new: PartitionPhase, *, what: str) -> PartitionPhase:
    """`new`, if `current` may change to it; else `IllegalTransition` naming `what`."""
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(f"{what}: {current.value} cannot become {new.value}")
    return new


@dataclass
class RepairSchedule:
    """When a broken partition is repaired: after a backoff that doubles while it keeps
    failing (up to `MAX_REPAIR_BACKOFF` seconds), back to the first once a take-over works."""

    backoff: float = FIRST_REPAIR_BACKOFF
    retry_at: float = 0.0

    def failed(self, now: float) -> None:
        self.retry_at = now + self.backoff
        self.backoff = min(self.backoff * 2, MAX_REPAIR_BACKOFF)

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def succeeded(self) -> None:
        self.backoff = FIRST_REPAIR_BACKOFF
