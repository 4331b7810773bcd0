"""Poison never stops a stream.

A real `rollout worker` gets ≥ 1,000 generated bad values on every input topic
(`tests/integration/poison.py`, seeded: `ROLLOUT_POISON_SEED` replays another run), with
valid events interleaved — clusters and a module between the first and second third of
the poison, status reports, one more cluster and one more module after the last third —
while its own ticker keeps writing real ticks. Then:

* the worker never exited;
* every bad input is exactly one dead letter — one per (topic, partition, offset), all from
  the router, none for a valid event — each a bounded document with the reason, where the
  input was, its size and a truncated payload;
* every valid event took effect: the module's snapshots exist for the valid clusters, the
  status reports completed its rollout, the late cluster and module were staged;
* no Infinity/NaN anywhere in module-status, and the engine's clock is the wall clock: the
  NaN/1e400/-1/1e12 ticks moved nothing, and the real ticks after them still count.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from infra import client
from tests.integration.poison import (
    ROLES,
    Poison,
    Published,
    cluster_dict,
    dumps,
    generate,
    module_dict,
    publish,
    read_values,
)
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("ROLLOUT_POISON_SEED", "20250611"))
PER_TOPIC = 1000
MAX_DEAD_LETTER_BYTES = 10 * 1024
CLUSTERS = ["poison-ok-1", "poison-ok-2", "poison-ok-3", "poison-ok-4"]
LATE_CLUSTER = "poison-ok-5"
MODULE, LATE_MODULE = "fuzz-app", "fuzz-late"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("poison"), partitions=2, tick_interval=1.0)
    stack.start_worker()
    yield stack
    stack.stop()


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} in a JSON document")


class Publisher:
    """Publishes to the stack's input topics and remembers where each bad value landed."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.bad: dict[tuple[str, int, int], Poison] = {}

    async def _poison(self, chunks: dict[str, list[Poison]]) -> None:
        async def one(role: str, values: list[Poison]) -> None:
            topic = self.stack.topics.name(role)
            landed = await publish(self.stack.bootstrap, topic, [(p.key, p.value) for p in values])
            for poison, where in zip(values, landed, strict=True):
                self.bad[(where.topic, where.partition, where.offset)] = poison

        await asyncio.gather(*(one(role, values) for role, values in chunks.items() if values))

    def poison(self, chunks: dict[str, list[Poison]]) -> None:
        asyncio.run(self._poison(chunks))

    def valid(self, role: str, events: list[tuple[str, dict[str, Any]]]) -> list[Published]:
        topic = self.stack.topics.name(role)
        return asyncio.run(publish(self.stack.bootstrap, topic, [(k.encode(), dumps(e)) for k, e in events]))

    def module(self, name: str) -> None:
        """A ModuleApplied stamped with the cluster positions published so far (as `rollout apply`)."""
        fleet = asyncio.run(client.end_offsets(self.stack.bootstrap, self.stack.topics.clusters))
        event = {"type": "ModuleApplied", "module": module_dict(name), "fleet": {p: o for p, o in fleet.items() if o}}
        self.valid("intents", [(name, event)])


def observed(name: str, labels: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    return name, {"type": "ClusterObserved", "cluster": cluster_dict(name, labels=labels)}


def syncs(stack: Stack, cluster: str) -> dict[str, dict[str, Any]]:
    snapshot = stack.latest("proxy").get(cluster)
    return {s["module"]: s for s in snapshot["spec"]["syncs"]} if snapshot else {}


def test_poison_never_stops_a_stream(stack: Stack) -> None:
    started = time.time()
    poison = generate(SEED, PER_TOPIC)
    assert all(len(poison[role]) >= 1000 for role in ROLES)
    thirds = {role: [values[i::3] for i in range(3)] for role, values in poison.items()}
    publisher = Publisher(stack)

    # 1. a third of the poison, then the fleet and a module; another third behind them
    publisher.poison({role: parts[0] for role, parts in thirds.items()})
    publisher.valid("clusters", [observed(name) for name in CLUSTERS])
    publisher.module(MODULE)
    publisher.poison({role: parts[1] for role, parts in thirds.items()})
    assigned = wait_for(
        f"{MODULE} in the snapshots of {CLUSTERS}",
        lambda: all(MODULE in syncs(stack, c) for c in CLUSTERS) and {c: syncs(stack, c)[MODULE] for c in CLUSTERS},
        timeout=60,
    )

    # 2. the last third, then status reports, a late cluster and a late module behind it
    publisher.poison({role: parts[2] for role, parts in thirds.items()})
    reports = [
        (
            cluster,
            {
                "type": "SyncStatusReported",
                "cluster": cluster,
                "module": MODULE,
                "revision": sync["revision"],
                "generation": sync["generation"],
                "state": "succeeded",
            },
        )
        for cluster, sync in assigned.items()
    ]
    publisher.valid("status", reports)
    publisher.valid("clusters", [observed(LATE_CLUSTER)])
    publisher.module(LATE_MODULE)
    total = sum(len(values) for values in poison.values())
    assert len(publisher.bad) == total

    # every bad input: exactly one dead letter, and nothing else is one
    def dead_letters() -> list[bytes | None]:
        return asyncio.run(read_values(stack.bootstrap, stack.topics.dead_letters))

    def all_dead_letters() -> list[bytes | None] | None:
        letters = dead_letters()
        return letters if len(letters) >= total else None

    try:
        wait_for(f"{total} dead letters", all_dead_letters, timeout=60, interval=1.0)
    finally:
        assert stack.worker is not None and stack.worker.poll() is None, (
            f"the worker exited with {stack.worker and stack.worker.returncode}:\n{stack.log('worker')[-4000:]}"
        )
    time.sleep(2.0)  # anything extra (a second letter for one input, a letter for a valid event) shows up now
    letters = dead_letters()
    documents = []
    too_big = []
    for value in letters:
        assert value is not None
        if len(value) > MAX_DEAD_LETTER_BYTES:
            too_big.append((len(value), value[:200]))
        documents.append(json.loads(value, parse_constant=_no_constants))
    positions = Counter((d["topic"], d["partition"], d["offset"]) for d in documents)
    twice = {where: n for where, n in positions.items() if n > 1}
    unknown = [d for d in documents if (d["topic"], d["partition"], d["offset"]) not in publisher.bad]
    missing = [publisher.bad[where].describe() for where in publisher.bad if where not in positions]
    assert not missing, (
        f"{len(missing)} bad inputs without a dead letter (silently dropped or accepted): {missing[:10]}"
    )
    assert not twice, f"inputs with more than one dead letter: {list(twice.items())[:10]}"
    assert not unknown, f"dead letters for inputs that were not bad: {unknown[:5]}"
    assert len(letters) == total
    assert not too_big, f"{len(too_big)} dead letters over {MAX_DEAD_LETTER_BYTES} bytes: {too_big[:3]}"
    for document in documents:
        where = (document["topic"], document["partition"], document["offset"])
        bad = publisher.bad[where]
        size = 0 if bad.value is None else len(bad.value)
        assert document["stage"] == "route", document
        assert isinstance(document["reason"], str) and 0 < len(document["reason"]) <= 1100, document
        assert document["size"] == size, (document, bad.describe())
        if bad.value is not None:
            assert document["truncated"] == (size > 4096), document
            assert "value" in document or "valueBase64" in document, document
    categories = Counter(publisher.bad[(d["topic"], d["partition"], d["offset"])].category for d in documents)
    assert categories["huge"] == 4 * len(ROLES) and categories["tombstone"] > 0

    # every valid event took effect, the ones behind the last poison included
    def succeeded() -> int:
        status = stack.latest("module_status").get(MODULE)
        return sum(stage["counts"]["succeeded"] for stage in status["stages"]) if status else 0

    # (the late cluster may join before the reports are in: then it is still updating)
    wait_for(f"the status reports of {MODULE} to count", lambda: succeeded() == len(CLUSTERS), timeout=30)
    wait_for(
        f"{LATE_MODULE} on every valid cluster, {LATE_CLUSTER} included",
        lambda: all(LATE_MODULE in syncs(stack, c) for c in [*CLUSTERS, LATE_CLUSTER]),
        timeout=30,
    )
    assert MODULE in syncs(stack, LATE_CLUSTER)

    # no Infinity/NaN in module status; the engine's clock is the wall clock, not 1e12 or inf
    for record in stack.records("module_status"):
        if record.value is not None:
            json.loads(record.value, parse_constant=_no_constants)
    status = stack.latest("module_status")[LATE_MODULE]
    assert started - 5 <= status["observedAt"] <= time.time() + 5, status

    assert stack.worker.poll() is None, f"the worker exited:\n{stack.log('worker')[-4000:]}"
    log = stack.log("worker")
    assert "Traceback" not in log and " is poison" not in log, log[-4000:]
