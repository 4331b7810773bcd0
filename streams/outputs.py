"""What a stage's batch produces, before the delivery policy (streams/delivery.py) sends it
inside the batch's transaction.

`Outputs` keeps records in the order they were made, and compacted-topic records coalesced
to the last value per key (sent after the ordered ones: a reader of a compacted topic only
ever keeps the last value). `key_slot` is the partition a keyed record goes to.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from aiokafka.partitioner import murmur2
from aiokafka.structs import ConsumerRecord

from streams.deadletters import dead_letter


class OutRecord(NamedTuple):
    """One record to send (a tuple: a batch makes several per input event)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None


class Outputs:
    """What one batch produces: records in order, and compacted-topic records coalesced
    to the last value per key (sent after the ordered ones)."""

    def __init__(self, dead_letter_topic: str) -> None:
        self.dead_letter_topic = dead_letter_topic
        self.records: list[OutRecord] = []
        self.latest: dict[tuple[str, bytes], OutRecord] = {}
        self.dead_letters = 0

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None) -> None:
        self.records.append(OutRecord(topic, key, value, partition))

    def send_latest(self, topic: str, key: bytes, value: bytes | None) -> None:
        self.latest.pop((topic, key), None)  # keep the order of last writes
        self.latest[(topic, key)] = OutRecord(topic, key, value)

    def reject(self, reason: str, record: ConsumerRecord, stage: str, *, event: str | None = None) -> None:
        """A dead letter for `record`; `event`: the id of the event refused, when the record
        is not that event itself (a held intent released by a FleetSeen)."""
        self.dead_letters += 1
        letter = dead_letter(reason, record, stage, event=event)
        self.records.append(OutRecord(self.dead_letter_topic, record.key, letter))

    def extend(self, other: Outputs) -> None:
        """Append what `other` produced, as if it had been sent here after what is here."""
        self.records.extend(other.records)
        for key, record in other.latest.items():
            self.latest.pop(key, None)
            self.latest[key] = record
        self.dead_letters += other.dead_letters

    def all(self) -> list[OutRecord]:
        return [*self.records, *self.latest.values()]


@functools.lru_cache(maxsize=1 << 16)
def key_slot(key: bytes | None, count: int) -> int:
    """Index of the partition Kafka's default partitioner picks for `key` among `count`
    (murmur2, as the Java client and aiokafka's `send` do). aiokafka computes murmur2 in
    Python; outputs repeat their keys (a module's decisions, a target's status), so the
    bounded cache spares most of it. An unkeyed record goes to the first partition (the
    default partitioner would pick one at random)."""
    if key is None:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % count
