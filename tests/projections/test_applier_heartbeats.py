"""Which clusters the applier heartbeats for (projections/applier.py, projections/heartbeats.py):
every cluster it serves — one whose assemblage it wrote, even the tombstone of an emptied
one — not only those with syncs assigned; and what it publishes: its claims when they change,
one beat for itself."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from infra.observability import Health, Metrics
from infra.topics import TopicNames
from projections.applier import Applier
from projections.heartbeats import Heartbeats
from projections.render import FluxRenderer
from projections.sinks.directory import DirectorySink
from rollout.wire.events import CLAIM_CHUNKS, claim_chunk
from tests.projections.test_directory_sink import snapshot, sync

NAMES = TopicNames("test")


def applier(root: Path, heartbeats: Heartbeats) -> Applier:
    return Applier(
        bootstrap="unused:9092",
        names=NAMES,
        sink=DirectorySink(root, FluxRenderer()),
        group_id="appliers",
        report=False,
        on_result=None,
        metrics=Metrics(),
        health=Health(),
        heartbeats=heartbeats,
    )


def write(applier: Applier, cluster: str, document: bytes | None, offset: int) -> None:
    tp = TopicPartition(NAMES.proxy, 0)
    message = SimpleNamespace(key=cluster.encode(), value=document, offset=offset, timestamp=0)
    asyncio.run(applier._apply(tp, message, None))


async def _publish(key: str, value: bytes) -> None:
    return None


def test_a_cluster_whose_last_module_was_deleted_is_still_heartbeated(tmp_path: Path) -> None:
    heartbeats = Heartbeats(_publish, lease_seconds=60, holder="applier-0")
    served = applier(tmp_path, heartbeats)
    write(served, "prod-eu-1", snapshot(1, sync("podinfo")).model_dump_json(by_alias=True).encode(), 0)
    assert heartbeats.reached() == ["prod-eu-1"]
    write(served, "prod-eu-1", None, 1)  # its only module deleted: the assemblage's tombstone
    assert heartbeats.reached() == ["prod-eu-1"]  # still served: its lease must not run out


def test_a_cluster_handed_to_another_replica_is_no_longer_heartbeated(tmp_path: Path) -> None:
    heartbeats = Heartbeats(_publish, lease_seconds=60, holder="applier-0")
    served = applier(tmp_path, heartbeats)
    write(served, "prod-eu-1", None, 0)
    served.forget([TopicPartition(NAMES.proxy, 0)])
    assert heartbeats.reached() == []


class Recorded:
    """A publish that keeps what it was given (and can refuse keys)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, object]]] = []
        self.refused: set[str] = set()

    async def __call__(self, key: str, value: bytes) -> None:
        if key in self.refused:
            raise OSError("broker away")
        self.sent.append((key, json.loads(value)))

    def take(self) -> list[tuple[str, dict[str, object]]]:
        sent, self.sent = self.sent, []
        return sent


def test_a_replica_claims_every_chunk_at_first_then_only_chunks_that_change_and_beats_once() -> None:
    published = Recorded()
    heartbeats = Heartbeats(published, lease_seconds=60, holder="applier-0")
    for name in ("c1", "c2"):
        heartbeats.written("ProxyAssemblage", name)
    asyncio.run(heartbeats.beat())
    first = published.take()
    assert len(first) == CLAIM_CHUNKS + 1 and first[-1] == ("applier-0", first[-1][1])
    assert first[-1][1]["type"] == "HolderHeartbeat" and first[-1][1]["leaseSeconds"] == 60
    claimed = {name for _, event in first[:-1] for name in event["clusters"]}  # type: ignore[attr-defined]
    assert claimed == {"c1", "c2"}
    asyncio.run(heartbeats.beat())
    assert [event["type"] for _, event in published.take()] == ["HolderHeartbeat"]  # nothing changed
    heartbeats.failed("ProxyAssemblage", "c2")
    asyncio.run(heartbeats.beat())
    again = published.take()
    assert [key for key, _ in again] == [f"applier-0/{claim_chunk('c2')}", "applier-0"]
    assert "c2" not in again[0][1]["clusters"]  # type: ignore[operator]


def test_a_claim_that_failed_to_publish_is_sent_again_at_the_next_beat() -> None:
    published = Recorded()
    heartbeats = Heartbeats(published, lease_seconds=60, holder="applier-0")
    asyncio.run(heartbeats.beat())
    published.take()
    heartbeats.written("ProxyAssemblage", "c1")
    key = f"applier-0/{claim_chunk('c1')}"
    published.refused = {key}
    with pytest.raises(OSError):
        asyncio.run(heartbeats.beat())
    assert [k for k, _ in published.take()] == ["applier-0"]  # the beat went out all the same
    published.refused = set()
    asyncio.run(heartbeats.beat())
    assert [k for k, _ in published.take()] == [key, "applier-0"]


def test_a_replica_without_a_successful_beat_for_a_whole_lease_claims_every_chunk_again() -> None:
    """Cut off, or suspended, for longer than a lease: the engine may have forgotten the
    holder and its claims (a horizon after its lease ran out), so all of them go out again."""
    published, now = Recorded(), [1_000.0]
    heartbeats = Heartbeats(published, lease_seconds=60, holder="applier-0", clock=lambda: now[0])
    heartbeats.written("ProxyAssemblage", "c1")
    asyncio.run(heartbeats.beat())
    assert len(published.take()) == CLAIM_CHUNKS + 1
    now[0] += 59  # within the lease: only the beat
    asyncio.run(heartbeats.beat())
    assert [event["type"] for _, event in published.take()] == ["HolderHeartbeat"]
    published.refused = {"applier-0"}  # the broker is away: beats fail for days
    for _ in range(3):
        now[0] += 3 * 24 * 3600
        with pytest.raises(OSError):
            asyncio.run(heartbeats.beat())
    published.refused = set()
    published.take()
    asyncio.run(heartbeats.beat())
    back = published.take()
    assert len(back) == CLAIM_CHUNKS + 1 and {n for _, e in back[:-1] for n in e["clusters"]} == {"c1"}  # type: ignore[attr-defined]
    now[0] += 20
    asyncio.run(heartbeats.beat())
    assert [event["type"] for _, event in published.take()] == ["HolderHeartbeat"]


def test_two_replicas_on_one_host_are_two_lease_holders() -> None:
    import subprocess
    import sys

    from projections.heartbeats import default_holder

    command = [sys.executable, "-c", "from projections.heartbeats import default_holder; print(default_holder())"]
    others = {subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip() for _ in range(2)}
    assert len(others | {default_holder()}) == 3
    assert all(name.startswith(socket.gethostname()[:240]) for name in others)
    assert Heartbeats(_publish, lease_seconds=60).holder == default_holder()
