"""What one Kafka transaction costs the worker's client (prints figures; asserts nothing).

    .venv/bin/python benchmarks/transaction_cost.py            # 300 transactions per variant
    .venv/bin/python benchmarks/transaction_cost.py --transactions 1000

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`). Fresh topics
(a random prefix), deleted at the end.

Every stage commits one transaction per owned input partition per batch
(streams/delivery.py): begin → send the batch's records → send the input offsets → commit.
This measures that loop alone, with aiokafka's transactional producer as the worker
configures it, one transaction after another: the CPU this process spends per transaction
(aiokafka's request building, its sender task and the event loop: every step is a broker
round trip) and the wall time per transaction. Variants:

* **as the stages do**: two transactional ids used in turn, input offsets sent;
* **one transactional id**: the next transaction of the same id asks before the broker
  has written the previous one's commit markers — "concurrent transactions", retried by
  aiokafka after a fixed 20 ms (why the worker uses two ids, docs/architecture.md);
* **without input offsets**: what AddOffsetsToTxn + TxnOffsetCommit add.

Each with 1 and with 100 records of 200 bytes per transaction. The per-transaction CPU,
times the transactions a workload needs, is the part of the worker's CPU per event that
does not depend on the events themselves (benchmarks/throughput.py measures the whole).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra import client
from infra.localkafka import discover_bootstrap
from infra.settings import kafka_client_options
from infra.topics import delete_topics
from streams.delivery import transactional_producer

WARM_UP = 20  # transactions per variant before timing (connections, coordinators, JIT on the broker)
VALUE = b"x" * 200


@dataclass(frozen=True)
class Variant:
    name: str
    ids: int  # transactional ids used in turn
    offsets: bool  # send input offsets in each transaction


VARIANTS = (
    Variant("as the stages do (2 ids, offsets)", 2, True),
    Variant("one transactional id", 1, True),
    Variant("without input offsets", 2, False),
)


async def transactions(
    producers: list[AIOKafkaProducer], count: int, records: int, offsets: bool, sink: str, source: str, group: str
) -> None:
    for n in range(count):
        current = producers[n % len(producers)]
        await current.begin_transaction()
        batch = current.create_batch()
        for _ in range(records):
            batch.append(key=b"k", value=VALUE, timestamp=None)
        await current.send_batch(batch, sink, partition=0)
        if offsets:
            await current.send_offsets_to_transaction({TopicPartition(source, 0): n + 1}, group)
        await current.commit_transaction()


async def measure(bootstrap: str, prefix: str, variant: Variant, records: int, count: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per transaction."""
    sink, source, group = f"{prefix}sink", f"{prefix}source", f"{prefix}group"
    tag = uuid.uuid4().hex[:6]
    producers = [
        transactional_producer(bootstrap, f"{prefix}{tag}.{i}", kafka_client_options()) for i in range(variant.ids)
    ]
    for p in producers:
        await p.start()
    try:
        await transactions(producers, WARM_UP, records, variant.offsets, sink, source, group)
        cpu, wall = time.process_time(), time.perf_counter()
        await transactions(producers, count, records, variant.offsets, sink, source, group)
        return (time.process_time() - cpu) / count * 1e3, (time.perf_counter() - wall) / count * 1e3
    finally:
        for p in producers:
            await p.stop()


async def main(count: int) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        sys.exit("no broker: run `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    # a produce to a topic this young can be answered "not enough replicas" once or twice;
    # aiokafka retries it and warns each time: not what this measures
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    prefix = f"txcost-{uuid.uuid4().hex[:6]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}{t}", 1, 1) for t in ("sink", "source")])
    finally:
        await admin.close()
    await client.require_topics(bootstrap, [f"{prefix}sink", f"{prefix}source"])
    print(f"broker {bootstrap}, {count} transactions per variant, one after another", flush=True)
    print(f"{'variant':38} {'records':>7} {'CPU ms/txn':>11} {'wall ms/txn':>12}")
    try:
        for variant in VARIANTS:
            for records in (1, 100):
                cpu, wall = await measure(bootstrap, prefix, variant, records, count)
                print(f"{variant.name:38} {records:7d} {cpu:11.2f} {wall:12.2f}", flush=True)
    finally:
        await delete_topics(bootstrap, prefix)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transactions", type=int, default=300, help="timed transactions per variant")
    asyncio.run(main(parser.parse_args().transactions))
