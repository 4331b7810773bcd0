"""Cluster leases end to end on the real broker: a real worker (ticks every second) and a
real directory-sink applier (simulating success, heartbeating with a 3 s lease).

The applier claims the clusters it writes and beats for itself; `rollout get clusters` shows the lease
age; `rollout cluster leave` keeps a cluster out of a rollout without blocking it and
`join` brings it back; with the applier stopped the leases expire and nothing moves;
with it back (it replays its partitions, so it names its clusters again) they move. A
cluster whose only module is deleted keeps being heartbeated (the applier still serves it),
so the next module reaches it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import CLAIM_CHUNKS, ClusterObserved, ModuleApplied, ModuleDeleted
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration

LEASE = "3"


def cluster(name: str, ring: str, app: str = "leased") -> ClusterObserved:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": app, "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest)


def module(tag: str, name: str = "leased", app: str = "leased") -> ModuleApplied:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": app}},
                "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": tag}}}},
                "rollout": {
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
                        {"name": "wave", "selector": {"matchLabels": {"ring": "wave"}}},
                    ]
                },
            },
        }
    )
    return ModuleApplied(module=manifest)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(
        kafka_bootstrap,
        tmp_path_factory.mktemp("leases"),
        partitions=2,
        applier=(
            "--simulate-status",
            "--lease-seconds",
            LEASE,
        ),
    ) as stack:
        yield stack


def targets(stack: Stack) -> dict[str, dict[str, Any]]:
    return {k.split("/", 1)[1]: v for k, v in stack.latest("targets").items() if k.startswith("leased/") and v}


def phase(stack: Stack, tag: str) -> str | None:
    status = stack.latest("module_status").get("leased") or {}
    return status.get("phase") if status.get("targetRevision") == tag else None


def waiting(stack: Stack, tag: str) -> str | None:
    """Why `leased` at `tag`, every stage passed, is not Complete (rollout/engine/views.py)."""
    status = stack.latest("module_status").get("leased") or {}
    return status.get("waiting") if status.get("stableRevision") == tag else None


def beating(stack: Stack) -> set[str]:
    """The clusters the applier's latest claims name."""
    records = stack.latest("heartbeats").values()
    return {name for claim in records if claim and claim["type"] == "HolderClaims" for name in claim["clusters"]}


def test_leases_follow_heartbeats_and_leave_join(stack: Stack) -> None:
    stack.send("clusters", "c1", cluster("c1", "canary"))
    stack.send("clusters", "w1", cluster("w1", "wave"))
    stack.send("intents", "leased", module("1.0.0"))
    wait_for("1.0.0 complete", lambda: phase(stack, "1.0.0") == "Complete")

    # the applier claims both clusters (a claim per chunk, keyed `<holder>/<chunk>`) and beats
    # for itself, in one event per beat (keyed by the holder); get clusters shows the lease age
    wait_for("heartbeats", lambda: {"c1", "w1"} <= beating(stack))
    records = stack.latest("heartbeats")
    beats = [key for key, beat in records.items() if beat and beat["type"] == "HolderHeartbeat"]
    assert len(beats) == 1 and len(records) == CLAIM_CHUNKS + 1, records.keys()
    code, output = stack.rollout("get", "clusters", "-o", "json")
    assert code == 0, output
    leases = {doc["metadata"]["name"]: doc["fleet"]["lease"] for doc in json.loads(output)}
    assert leases["c1"]["leaseSeconds"] == 3.0 and leases["c1"]["ageSeconds"] < 30
    code, output = stack.rollout("get", "clusters")
    assert "LEASE" in output.splitlines()[0] and "expired" not in output

    # w1 leaves: the rollout of 1.1.0 passes it by and completes; join brings it along
    code, output = stack.rollout("cluster", "leave", "w1")
    assert code == 0 and output.startswith("cluster/w1: leave accepted"), output
    code, output = stack.rollout("get", "clusters", "w1")
    assert " left " in output, output
    stack.send("intents", "leased", module("1.1.0"))
    wait_for("1.1.0 stable, waiting for w1", lambda: waiting(stack, "1.1.0") == "1 cluster not ready")
    assert phase(stack, "1.1.0") == "Progressing"  # not Complete: w1 does not run it
    assert targets(stack)["w1"]["revision"] == "1.0.0" and targets(stack)["w1"]["state"] == "not_ready"
    code, output = stack.rollout("cluster", "join", "w1")
    assert code == 0, output
    wait_for("w1 on 1.1.0", lambda: targets(stack)["w1"]["state"] == "succeeded" and targets(stack)["w1"])
    assert targets(stack)["w1"]["revision"] == "1.1.0"
    wait_for("1.1.0 complete", lambda: phase(stack, "1.1.0") == "Complete")
    code, output = stack.rollout("cluster", "leave", "nosuchcluster")
    assert (code, output) == (1, "error: cluster/nosuchcluster: leave refused: cluster 'nosuchcluster' not found\n")

    # the applier stops: leases expire, nothing moves; it comes back: the clusters move
    stack._stop(stack.applier)
    wait_for("leases expired", lambda: not any(t["ready"] for t in targets(stack).values()), timeout=30)
    stack.send("intents", "leased", module("1.2.0"))
    wait_for("1.2.0 passes the unready fleet", lambda: waiting(stack, "1.2.0") == "2 clusters not ready")
    assert phase(stack, "1.2.0") == "Progressing"  # nothing deployed: not Complete
    assert {t["revision"] for t in targets(stack).values()} == {"1.1.0"}
    stack.start_applier("--simulate-status", "--lease-seconds", LEASE)
    wait_for(
        "clusters back on 1.2.0",
        lambda: all(t["revision"] == "1.2.0" and t["state"] == "succeeded" for t in targets(stack).values()),
        timeout=90,
    )


def test_a_cluster_whose_only_module_was_deleted_stays_ready_for_the_next(stack: Stack) -> None:
    stack.send("clusters", "e1", cluster("e1", "canary", app="emptied"))
    stack.send("intents", "first", module("1.0.0", "first", app="emptied"))
    wait_for("first on e1", lambda: (stack.latest("targets").get("first/e1") or {}).get("state") == "succeeded")
    wait_for("e1 heartbeated", lambda: "e1" in beating(stack))

    # its only module deleted: its assemblage is a tombstone; the applier still serves e1
    stack.send("intents", "first", ModuleDeleted(kind="Module", name="first"))
    wait_for("e1's assemblage emptied", lambda: "e1" not in stack.latest("proxy") or None)
    time.sleep(3 * float(LEASE))  # three leases: one without heartbeats would have expired
    code, output = stack.rollout("get", "clusters", "e1", "-o", "json")
    assert code == 0 and not json.loads(output)["fleet"]["lease"]["expired"], output

    # the next module reaches it: e1 is ready, so it is assigned, written and reported
    stack.send("intents", "second", module("2.0.0", "second", app="emptied"))
    second = lambda: stack.latest("targets").get("second/e1") or {}  # noqa: E731
    wait_for("second on e1", lambda: second().get("state") == "succeeded", timeout=30)
    assert second()["ready"] and second()["revision"] == "2.0.0"
    code, output = stack.rollout("get", "clusters", "e1")
    assert code == 0 and "expired" not in output and " True " in output, output
