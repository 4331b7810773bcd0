"""Which clusters the applier heartbeats for (projections/applier.py, projections/heartbeats.py):
every cluster it serves — one whose assemblage it wrote, even the tombstone of an emptied
one — not only those with syncs assigned."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from aiokafka import TopicPartition

from infra.observability import Health, Metrics
from infra.topics import TopicNames
from projections.applier import Applier
from projections.heartbeats import Heartbeats
from projections.render import FluxRenderer
from projections.sinks.directory import DirectorySink
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
