"""What a stage's batch produces, before the delivery policy (streams/delivery.py) sends it
inside the batch's transaction.

`Outputs` keeps records in the order they were made, and compacted-topic records coalesced
to the last value per key (sent after the ordered ones: a reader of a compacted topic only
ever keeps the last value). `key_slot` is the partition a keyed record goes to.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

from aiokafka.structs import ConsumerRecord

from streams.deadletters import dead_letter


def exact(encoded: bytes) -> bytes:
    """`encoded` in a bytes object of its own size. orjson (3.13) returns its output in the
    buffer it wrote it into — at least 4 KiB whatever the length (its bytes object is not
    shrunk): 100,000 documents of ~550 bytes held 393 MiB of RSS, copied 54 MiB. A batch holds
    its outputs until its transaction commits (two batches a partition, `BATCH_WRITES` records
    each), the assembler its state records too, so every orjson document a stage writes goes
    through here (a copy: ~1 µs). pydantic's `to_json` and aiokafka's records are of their size."""
    return bytes(memoryview(encoded))


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
        self.size = 0  # bytes of the keys and values held (a coalesced record counts its last value)

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None) -> None:
        self.records.append(OutRecord(topic, key, value, partition))
        # `_size` inline, here and below: a decider's batch sends a few records per event
        self.size += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)

    def send_latest(self, topic: str, key: bytes, value: bytes | None) -> None:
        replaced = self.latest.pop((topic, key), None)  # keep the order of last writes
        if replaced is not None:
            self.size -= len(key) + (len(replaced.value) if replaced.value is not None else 0)
        self.latest[(topic, key)] = OutRecord(topic, key, value)
        self.size += len(key) + (len(value) if value is not None else 0)

    def reject(self, reason: str, record: ConsumerRecord, stage: str, *, event: str | None = None) -> None:
        """A dead letter for `record`; `event`: the id of the event refused, when the record
        is not that event itself (a held intent released by a FleetSeen)."""
        self.dead_letters += 1
        letter = dead_letter(reason, record, stage, event=event)
        self.records.append(OutRecord(self.dead_letter_topic, record.key, letter))
        self.size += _size(record.key, letter)

    def extend(self, other: Outputs) -> None:
        """Append what `other` produced, as if it had been sent here after what is here."""
        self.records.extend(other.records)
        if not self.latest:  # a stage's batch into its fresh outputs: `other`'s as they are
            self.latest.update(other.latest)
            self.size += other.size  # its records' and its latest records' bytes
        else:
            self.size += sum(_size(record.key, record.value) for record in other.records)
            for key, record in other.latest.items():
                self.send_latest(record.topic, key[1], record.value)
        self.dead_letters += other.dead_letters

    def all(self) -> list[OutRecord]:
        return [*self.records, *self.latest.values()]


def _size(key: bytes | None, value: bytes | None) -> int:
    return (len(key) if key is not None else 0) + (len(value) if value is not None else 0)


_M = 0x5BD1E995  # murmur2's mixing constant
_WORD = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's `Utils.murmur2`, aiokafka's `partitioner.murmur2`),
    the same numbers in two thirds of the time: the 4-byte words unpacked at once (`struct`) instead
    of byte by byte, each step masked once. `key_slot` on a miss, 100,000 16-byte target keys:
    4.6-5.0 µs with aiokafka's, 2.7-3.4 µs with this (load 4-5; tests/streams/test_key_slot.py
    holds the two equal)."""
    length = len(data)
    h = 0x9747B28C ^ length
    words = length >> 2
    for k in struct.unpack_from(f"<{words}I", data) if words else ():
        k = (k * _M) & _WORD
        k ^= k >> 24
        h = ((h * _M) & _WORD) ^ ((k * _M) & _WORD)
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _WORD
    h ^= h >> 13
    h = (h * _M) & _WORD
    return h ^ (h >> 15)


@functools.lru_cache(maxsize=1 << 16)
def key_slot(key: bytes | None, count: int) -> int:
    """Index of the partition Kafka's default partitioner picks for `key` among `count`
    (murmur2, as the Java client and aiokafka's `send` do). Outputs repeat their keys (a
    module's decisions and status, a target's status while it moves), so the bounded cache
    spares most of the hashing; a key seen once a rollout (a target's first move, a cluster's
    assignment) misses whatever its size at 100,000 target keys, so a miss is made cheap
    (`murmur2` above). An unkeyed record goes to the first partition (the default
    partitioner would pick one at random)."""
    if key is None:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % count
