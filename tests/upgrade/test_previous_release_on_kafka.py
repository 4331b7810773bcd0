"""The previous release's partition taken over by a real worker of this release.

What a rolling upgrade does to a partition: v0.26's `decide-state` records (the fixture,
tests/upgrade/fixtures/v0.26) and the journal they were folded from are on the session
broker, with the tracked position (`tracking:position`) where v0.26 stopped; a `rollout
worker` of this release (a process, as the CLI starts it) is assigned the partition,
restores it and resumes there. The rollout v0.26 left waiting for approval is approved,
reported on, ticked — and completes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from infra import client
from rollout.wire.events import ClusterHeartbeats, RolloutCommanded, SyncStatusReported, parse_journal_event
from streams.router import journal_key
from tests.integration.stack import Stack, wait_for
from tests.upgrade.release_fixture import journal_values, state_documents

pytestmark = pytest.mark.integration

FLEET = ["c1", "c2", "c3", "c4", "c5"]
WAVE = FLEET[1:]


def seed(stack: Stack) -> int:
    """v0.26's journal and decide-state on the broker (journal partition 0), then what came
    after the upgrade began: heartbeats whose leases outlast the test (each worker tick moves
    the engine's clock an hour: the fixture's clock is 1970's). The number of state records."""
    journal = journal_values()
    after = [ClusterHeartbeats(clusters=FLEET, lease_seconds=86_400.0).to_bytes()]
    messages = [(journal_key(parse_journal_event(value)), value) for value in [*journal, *after]]
    asyncio.run(client.publish(stack.bootstrap, stack.topics.journal, messages))
    tracking = {"offset": len(journal), "events": len(journal)}  # where v0.26 stopped
    records: list[tuple[str, bytes | None]] = [
        (doc["key"], None if doc["value"] is None else json.dumps(doc["value"]).encode()) for doc in state_documents()
    ]
    records.append(("tracking:position", json.dumps(tracking).encode()))
    asyncio.run(client.publish(stack.bootstrap, stack.topics.name("decide_state"), records))
    return len(records)


def app_targets(stack: Stack) -> dict[str, dict[str, Any]]:
    return {key.split("/", 1)[1]: doc for key, doc in stack.latest("targets").items() if key.startswith("app/") and doc}


def test_a_worker_of_this_release_takes_over_the_previous_releases_partition_and_completes_its_rollout(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    stack = Stack(kafka_bootstrap, tmp_path, partitions=1, tick_interval=5.0)
    try:
        restored = seed(stack)
        stack.start_worker()
        wait_for(
            "the decide partition restored",
            lambda: f"state restored ({restored} records" in stack.log("worker") or None,
            timeout=60,
        )

        stack.send("intents", "app", RolloutCommanded(module="app", command="approve", stage="wave", user="upgrader"))
        reported: set[str] = set()

        def complete() -> bool:
            status = stack.latest("module_status").get("app") or {}
            if status.get("phase") == "Complete":
                return True
            for cluster, target in app_targets(stack).items():
                if target["revision"] == "v2" and target["state"] == "updating" and cluster not in reported:
                    report = SyncStatusReported(
                        cluster=cluster, module="app", revision="v2", state="succeeded", generation=2
                    )
                    stack.send("status", "app", report)
                    reported.add(cluster)
            return False

        wait_for("app Complete", complete, timeout=120, interval=1.0)
        status = stack.latest("module_status")["app"]
        assert (status["targetRevision"], status["stableRevision"]) == ("v2", "v2")
        assert reported == set(WAVE)  # the canary (c1) was done under v0.26
        targets = app_targets(stack)  # the wave's documents: published by this release
        assert {
            cluster: (targets[cluster]["revision"], targets[cluster]["state"]) for cluster in WAVE
        } == dict.fromkeys(WAVE, ("v2", "succeeded"))
        actions = [json.loads(r.value)["action"] for r in stack.records("decisions") if r.value]
        assert "stage-started" in actions and "complete" in actions
        assert stack.records("dead_letters") == []
        assert "Traceback" not in stack.log("worker")
    finally:
        stack.stop()
