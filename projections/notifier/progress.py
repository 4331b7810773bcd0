"""Which offsets of the decisions topic the notifier may commit: every webhook is done below them.

    record at offset o of partition p, for k webhooks ──► Progress.add(p, o, k)
    each webhook accepted it (2xx) or dead-lettered it ──► Progress.done(p, o)   (k times)
    Progress.committable() ──► {p: first offset some webhook still owes} ──► consumer.commit

Webhooks finish in their own time (each delivers its own queue, in order), so partition p's
offsets finish out of order across webhooks; the offset committed is the first one not
finished by all — the consumer group's committed offset says "everything before this has
been accepted or dead-lettered by every webhook". A SIGKILL at any point loses nothing: what
was not committed is read again and sent again (receivers deduplicate on the event's id).

Cost: O(1) amortised per record and webhook (a deque of the offsets in flight per partition,
popped from the left as they finish); memory bounded by the webhooks' queues.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class PartitionProgress:
    """One partition: the offsets read and how many webhooks still owe each."""

    def __init__(self, position: int, epoch: int = 0) -> None:
        self.epoch = epoch  # which assignment of the partition this is (see Progress.done)
        self.next = position  # the offset after the last record read
        self.owed: dict[int, int] = {}
        self.order: deque[int] = deque()

    def add(self, offset: int, webhooks: int) -> None:
        if webhooks > 0:
            self.owed[offset] = webhooks
            self.order.append(offset)
        self.next = max(self.next, offset + 1)

    def advance(self, position: int) -> None:
        """Everything below `position` was read (records, transaction markers, aborted records)."""
        self.next = max(self.next, position)

    def done(self, offset: int) -> None:
        left = self.owed.get(offset)
        if left is None:
            return
        self.owed[offset] = left - 1
        while self.order and self.owed[self.order[0]] == 0:
            del self.owed[self.order.popleft()]

    def committable(self) -> int:
        return self.order[0] if self.order else self.next

    @property
    def in_flight(self) -> int:
        return len(self.order)


class Progress:
    """Every assigned partition's progress, keyed by the consumer's TopicPartition."""

    def __init__(self) -> None:
        self.partitions: dict[Hashable, PartitionProgress] = {}
        self.committed: dict[Hashable, int] = {}

    def start(self, tp: Hashable, position: int, epoch: int = 0) -> None:
        self.partitions[tp] = PartitionProgress(position, epoch)
        self.committed[tp] = position

    def drop(self, tp: Hashable) -> None:
        self.partitions.pop(tp, None)
        self.committed.pop(tp, None)

    def add(self, tp: Hashable, offset: int, webhooks: int) -> None:
        self.partitions[tp].add(offset, webhooks)

    def done(self, tp: Hashable, offset: int, epoch: int = 0) -> None:
        """A webhook is done with `offset` of `tp`, read in assignment `epoch`: ignored when
        the partition was revoked since (another replica sends it again) — even if it came
        back meanwhile, where this webhook's copy read again counts for itself."""
        partition = self.partitions.get(tp)
        if partition is not None and partition.epoch == epoch:
            partition.done(offset)

    def to_commit(self) -> dict[Hashable, int]:
        """The partitions whose committable offset moved since `committed` was last set."""
        return {
            tp: partition.committable()
            for tp, partition in self.partitions.items()
            if partition.committable() != self.committed.get(tp)
        }

    def mark_committed(self, offsets: dict[Hashable, int]) -> None:
        for tp, offset in offsets.items():
            if tp in self.partitions:
                self.committed[tp] = offset
