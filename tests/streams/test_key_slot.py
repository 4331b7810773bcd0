"""Outputs sent as record batches land on the partition Kafka's default partitioner picks."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as kafka_murmur2

from streams.outputs import key_slot, murmur2


def test_keyed_outputs_land_where_the_default_partitioner_puts_them() -> None:
    rng = random.Random(3)
    partitioner = DefaultPartitioner()
    for count in (1, 3, 4, 12):
        partitions = list(range(count))
        for _ in range(500):
            key = rng.randbytes(rng.randint(0, 40))
            assert partitions[key_slot(key, count)] == partitioner(key, partitions, partitions)


def test_a_known_key_keeps_its_partition() -> None:
    # murmur2 of b"podinfo", as every Kafka client computes it: stable across processes
    assert key_slot(b"podinfo", 4) == key_slot(b"podinfo", 4) == DefaultPartitioner()(b"podinfo", [0, 1, 2, 3], [0])


def test_an_unkeyed_output_goes_to_the_first_partition() -> None:
    assert key_slot(None, 4) == 0


def test_murmur2_is_kafkas_for_keys_of_every_length_and_byte() -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(length) for length in range(0, 70) for _ in range(20)]
    keys += [f"app-{i % 20}/cluster-{i:06d}".encode() for i in range(2_000)] + [bytes([255] * 9), bytes(8)]
    assert [murmur2(key) for key in keys] == [kafka_murmur2(key) for key in keys]
