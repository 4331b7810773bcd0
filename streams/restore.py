"""Rebuilding a partition's state from its stage's state topic, when a worker takes the
partition over (streams/delivery.py).

    state topic partition p ──(read_committed, from `start` to the end offset)──► PartitionState.restore

One `StateReader` per stateful stage, reading one partition at a time: what the previous
owner committed is folded, then the reader pauses the partition. Why its long poll is short
and why it pauses: the broker answers a connection's requests in order, so the next
take-over's requests (the end offset, the first fetch of the next partition) wait until the
last fetch of the previous partition returns — with aiokafka's default 500 ms long poll,
every take-over after the first waited ~0.5 s (four partitions of the throughput benchmark:
1.9 s instead of 0.6 s). Paused, the partition is not polled while the reader is idle.
(Not `unsubscribe()`: a `stop()` right after it hung in our tests, aiokafka's fetcher task
cancelled but still waiting for the next assignment.) A catch-up is bounded by its progress
(`STALL_TIMEOUT` without a record), not by its length: a large partition's state under load
takes what it takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.state import PartitionState

READ_WAIT_MS = 10
"""The reader's long poll: it only ever waits at the end of what a take-over reads."""

STALL_TIMEOUT = 30.0
"""A catch-up fails once no record came for this long (the broker not answering): it may take
as long as its records take to fold — not a bound on the whole read, which cut the decider's
1.2 million records of one 100,000-cluster partition short at 30 s under load, and its repair
read them all again from the start (issue 22)."""


class StateReader:
    """Reads a stage's compacted state topic (`read_committed`) for take-overs."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        client_id: str,
        client_options: dict[str, Any],
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None:
        self.topic = topic
        self.stall_timeout = stall_timeout
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            client_id=client_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=4 * 1024 * 1024,
            fetch_max_wait_ms=READ_WAIT_MS,
            **client_options,
        )

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()

    async def catch_up(self, state: PartitionState, partition: int, start: int) -> tuple[int, int]:
        """Fold into `state` the records of `partition` from offset `start` to the end;
        (records folded, the end offset: where the next catch-up starts)."""
        tp = TopicPartition(self.topic, partition)
        self.consumer.assign([tp])
        try:
            end = (await self.consumer.end_offsets([tp]))[tp]
            if end <= start:
                return 0, start
            self.consumer.seek(tp, start)
            folded = 0
            clock = asyncio.get_running_loop().time
            moved = clock()
            while (position := await self.consumer.position(tp)) < end:
                batch = await self.consumer.getmany(tp, timeout_ms=1000, max_records=20000)
                if batch.get(tp):
                    moved = clock()
                elif clock() - moved > self.stall_timeout:
                    raise TimeoutError(
                        f"{self.topic}-{partition}: no state records for {self.stall_timeout:.0f} s at offset "
                        f"{position} (reading up to {end})"
                    )
                folded += state.restore((r.key, r.value) for r in batch.get(tp, []) if r.offset < end)
            return folded, end
        finally:
            self.consumer.pause(tp)  # not polled while idle (see the module doc)
