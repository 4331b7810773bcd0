"""Churn-proof runs end to end on the real broker (docs/rollout-semantics.md, "Churn-proof
runs"): a real worker (ticks every second) and a real directory-sink applier (simulating
success, claiming the clusters it writes and beating with a 3 s lease).

While the run waits for the wave's approval the fleet churns: a cluster whose only
heartbeat's lease runs out goes offline, one is removed, one leaves the fleet (`rollout
cluster leave`), one joins, and one is held by its owner (`rollout.dev/hold`). Approved, the
wave runs without them and is done: the run never halts or stalls, every member ends in an
explicit state, and `rollout status` (text and `-o json`) says who was skipped, held and
left, and why. Lifting the hold lets the held cluster move, and the module completes.

A second module over the same clusters has `lateJoiners: NextRun` and `offline: {wait: 90s,
then: Skip}`: the joiner is not taken into its run — DeferredToNextRun, its wave's members
and budget unchanged; approved, its wave waits for the offline cluster (AwaitingReturn,
until when) instead of passing at once, then skips it; its run passes its stages, and the
next run starts for the joiner and moves it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterHeartbeat, ClusterObserved, ClusterRemoved, ModuleApplied, RolloutCommanded
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration

HOLD = {"rollout.dev/hold": "true", "rollout.dev/hold-reason": "store opening hours"}


def cluster(name: str, ring: str, annotations: dict[str, str] | None = None) -> ClusterObserved:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {
                "name": name,
                "namespace": "fleet",
                "labels": {"app": "churned", "ring": ring},
                "annotations": annotations or {},
            },
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest)


def module(
    tag: str, name: str = "churned", late_joiners: str = "Include", offline: dict[str, str] | None = None
) -> ModuleApplied:
    strategy: dict[str, Any] = {"offline": offline} if offline is not None else {}
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": "churned"}},
                "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": tag}}}},
                "rollout": {
                    "stages": [
                        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
                        {"name": "wave", "maxConcurrency": "30%", "requireApproval": True},
                    ],
                    "lateJoiners": late_joiners,
                    **strategy,
                },
            },
        }
    )
    return ModuleApplied(module=manifest)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(
        kafka_bootstrap,
        tmp_path_factory.mktemp("churn"),
        partitions=2,
        applier=(
            "--simulate-status",
            "--lease-seconds",
            "3",
        ),
    ) as stack:
        yield stack


def status(stack: Stack, name: str = "churned") -> dict[str, Any]:
    return stack.latest("module_status").get(name) or {}


def target(stack: Stack, name: str, module: str = "churned") -> dict[str, Any]:
    return stack.latest("targets").get(f"{module}/{name}") or {}


def members(stack: Stack, module: str = "churned") -> dict[str, tuple[str, str]]:
    """Every member of the run in its explicit state, as `rollout status -o json` says it."""
    code, output = stack.rollout("status", module, "-o", "json")
    assert code == 0, output
    return {m["cluster"]: (m["state"], m["why"]) for m in json.loads(output).get("members", [])}


def test_a_run_goes_on_through_fleet_churn_and_every_member_ends_in_an_explicit_state(stack: Stack) -> None:
    for name, ring in [("c1", "canary"), ("w1", "wave"), ("w2", "wave"), ("w3", "wave"), ("o1", "wave")]:
        stack.send("clusters", name, cluster(name, ring))
    stack.send("clusters", "l1", cluster("l1", "wave"))
    stack.send("clusters", "h1", cluster("h1", "wave", HOLD))
    stack.send("intents", "churned", module("1.0.0"))
    patient = {"wait": "90s", "then": "Skip"}  # long enough to be seen under load
    stack.send("intents", "tardy", module("1.0.0", "tardy", late_joiners="NextRun", offline=patient))
    wait_for("the wave awaiting approval", lambda: status(stack).get("phase") == "AwaitingApproval", timeout=240)
    wait_for("tardy's wave awaiting approval", lambda: status(stack, "tardy").get("phase") == "AwaitingApproval")
    run = status(stack)["run"]
    assert (run["number"], run["generation"]) == (1, 1)
    assert run["stages"] == {"canary": {"members": 1, "left": 0}, "wave": {"members": 6, "left": 0}}

    # the fleet churns while the run waits: o1's only heartbeat runs out (nothing it was
    # assigned, so no applier claims it), l1 is removed, w2 leaves the fleet, j1 joins
    stack.send("heartbeats", "o1", ClusterHeartbeat(cluster="o1", lease_seconds=2.0))
    wait_for("o1 offline", lambda: target(stack, "o1").get("offline") == "lease", timeout=60)
    # (tardy may be another journal partition's: its own ticks expire the lease there)
    wait_for("o1 offline for tardy", lambda: target(stack, "o1", "tardy").get("offline") == "lease", timeout=60)
    stack.send("clusters", "l1", ClusterRemoved(name="l1"))
    code, output = stack.rollout("cluster", "leave", "w2")
    assert code == 0, output
    stack.send("clusters", "j1", cluster("j1", "wave"))
    wait_for("j1 in the run", lambda: status(stack)["run"]["stages"]["wave"] == {"members": 7, "left": 1}, timeout=60)
    # tardy (lateJoiners: NextRun) does not take j1 into its run: deferred, its wave's set unchanged
    wait_for("j1 deferred by tardy", lambda: target(stack, "j1", "tardy").get("state") == "deferred", timeout=60)
    assert members(stack, "tardy")["j1"] == (
        "DeferredToNextRun",
        "joined mid-run (lateJoiners: NextRun): the next run moves it",
    )
    assert status(stack, "tardy")["run"]["stages"]["wave"] == {"members": 6, "left": 1}
    assert target(stack, "j1", "tardy").get("revision") is None  # the module's first run: no stable to run

    stack.send("intents", "churned", RolloutCommanded(module="churned", command="approve", stage="wave"))
    stack.send("intents", "tardy", RolloutCommanded(module="tardy", command="approve", stage="wave"))
    # tardy's wave waits for o1, offline before it moved, up to its offline.wait
    wait_for("o1 awaited by tardy", lambda: target(stack, "o1", "tardy").get("state") == "awaited", timeout=85)
    state, why = members(stack, "tardy")["o1"]
    assert state == "AwaitingReturn" and "stage wave waits for it until" in why, why
    assert target(stack, "o1", "tardy")["offlineUntil"] > 0
    wait_for(
        "the run's stages passed, waiting for the held and offline members",
        lambda: status(stack).get("stableRevision") == "1.0.0" and bool(status(stack).get("waiting")),
        timeout=120,
    )
    assert status(stack)["phase"] == "Progressing"  # the truth: not every member runs 1.0.0
    assert status(stack)["waiting"] == "2 clusters not ready; 1 cluster held by its owner"
    assert "halted" not in json.dumps(status(stack)).lower()
    wave = next(stage for stage in status(stack)["stages"] if stage["name"] == "wave")
    assert wave["maxConcurrency"] == 2  # 30 % of the 6 fixed at its start and the joiner; of the 6 left, 1
    assert members(stack) == {
        "c1": ("Succeeded", ""),
        "w1": ("Succeeded", ""),
        "w3": ("Succeeded", ""),
        "j1": ("Succeeded", ""),
        "o1": ("SkippedOffline", "its lease expired (no heartbeat from its applier)"),
        "h1": ("Held", "held by its owner: store opening hours"),
        "w2": ("Left", "it left the fleet (rollout cluster leave)"),
        "l1": ("Left", "removed from the fleet"),
    }
    code, output = stack.rollout("status", "churned")
    assert code == 0, output
    assert "SkippedOffline (1):" in output and "o1 (stage wave): its lease expired" in output, output
    assert "Held (1):" in output and "h1 (stage wave): held by its owner: store opening hours" in output, output
    assert "l1 (stage wave): removed from the fleet" in output, output

    # the owner lifts the hold: h1 moves; w2 joins the fleet again: it moves too
    stack.send("clusters", "h1", cluster("h1", "wave"))
    code, output = stack.rollout("cluster", "join", "w2")
    assert code == 0, output
    wait_for("h1 on 1.0.0", lambda: target(stack, "h1").get("state") == "succeeded", timeout=60)
    wait_for("w2 on 1.0.0", lambda: target(stack, "w2").get("state") == "succeeded", timeout=60)
    assert status(stack)["waiting"] == "1 cluster not ready"  # o1 only: its applier never came back
    assert status(stack)["run"]["number"] == 1  # the same run all along

    # tardy's wait for o1 ran out: skipped; its run passed its stages with j1 deferred — the
    # next run started for j1 and moved it
    wait_for("j1 on 1.0.0 in tardy", lambda: target(stack, "j1", "tardy").get("state") == "succeeded", timeout=240)
    run = status(stack, "tardy")["run"]
    assert (run["number"], run["generation"], run["followUp"], run["joiners"]) == (2, 1, True, 1)
    assert members(stack, "tardy")["j1"] == ("Succeeded", "")
    assert members(stack, "tardy")["o1"][0] == "SkippedOffline"
    code, output = stack.rollout("status", "tardy")
    assert code == 0, output
    assert "the next run for the 1 late joiner(s) deferred by the run before" in output, output
