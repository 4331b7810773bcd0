"""Staged rollouts on the real broker, driven the way appliers drive them: by sync status
reports. A real `rollout worker` (ticks every second) runs the engine; the test plays the
appliers, reporting `succeeded` (or `failed`) for every cluster the engine moved, and
checks from the topics what users would see: stages in order, concurrency limits, the
approval gate, pause/resume, clusters joining and going not-ready mid-rollout, a failing
canary halting a rollout or rolling it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied, RolloutCommanded, SyncStatusReported
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration


def cluster(name: str, *, labels: dict[str, str], ready: bool = True) -> ClusterObserved:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": labels},
            "status": {"controlPlaneReady": ready, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest)


def module(name: str, *, app: str, tag: str, stages: list[dict[str, Any]], on_failure: str = "Halt") -> ModuleApplied:
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": app}},
                "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": tag}}}},
                "rollout": {
                    "stages": stages,
                    "onFailure": on_failure,
                    "sortingLabelKey": "order",
                    "progressDeadline": "10m",
                },
            },
        }
    )
    return ModuleApplied(module=manifest)


class Driver:
    """Plays the appliers for one module: reports a state for every cluster moved."""

    def __init__(self, stack: Stack, module: str, verdict: Callable[[str, str], str] = lambda c, r: "succeeded"):
        self.stack = stack
        self.module = module
        self.verdict = verdict
        self.reported: set[tuple[str, str]] = set()
        self.max_updating: dict[str, int] = {}

    def targets(self) -> dict[str, dict[str, Any]]:
        prefix = f"{self.module}/"
        return {k[len(prefix) :]: v for k, v in self.stack.latest("targets").items() if k.startswith(prefix)}

    def status(self) -> dict[str, Any]:
        return self.stack.latest("module_status").get(self.module, {})

    def step(self) -> dict[str, dict[str, Any]]:
        targets = self.targets()
        updating: dict[str, int] = {}
        for name, target in sorted(targets.items()):
            if target["state"] == "updating":
                updating[target["stage"]] = updating.get(target["stage"], 0) + 1
                if (name, target["revision"]) not in self.reported:
                    self.reported.add((name, target["revision"]))
                    state = self.verdict(name, target["revision"])
                    self.stack.send(
                        "status",
                        name,
                        SyncStatusReported(cluster=name, module=self.module, revision=target["revision"], state=state),
                    )
        for stage, count in updating.items():
            self.max_updating[stage] = max(self.max_updating.get(stage, 0), count)
        return targets

    def until(self, phase: str, timeout: float = 240.0, *, stable: str | None = None) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            self.step()
            status = self.status()
            if stable is not None and status.get("stableRevision") != stable:
                return None
            return status if status.get("phase") == phase else None

        try:
            return wait_for(f"{self.module} to reach {phase}", reached, timeout=timeout, interval=0.3)
        except AssertionError as error:
            raise AssertionError(f"{error}\nstatus: {self.status()}\ntargets: {self.targets()}") from None


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("staged"), partitions=3, tick_interval=1.0)
    stack.start_worker()
    yield stack
    stack.stop()


def on_target(targets: dict[str, dict[str, Any]], revision: str) -> set[str]:
    return {name for name, t in targets.items() if t["revision"] == revision}


def test_three_stage_rollout_over_sixty_clusters(stack: Stack) -> None:
    ring = {0: "canary", 1: "canary"} | {i: "wave-1" for i in range(2, 22)}
    for i in range(60):
        labels = {"app": "shop", "ring": ring.get(i, "wave-2"), "order": str(60 - i)}
        stack.send("clusters", f"shop-{i:02d}", cluster(f"shop-{i:02d}", labels=labels))
    stages = [
        {
            "name": "canary",
            "selector": {"matchLabels": {"ring": "canary"}},
            "maxConcurrency": 1,
            "minSuccessTime": "2s",
        },
        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "25%"},
        {"name": "wave-2", "maxConcurrency": "50%", "requireApproval": True},
    ]
    stack.send("intents", "shop", module("shop", app="shop", tag="2.0.0", stages=stages))
    driver = Driver(stack, "shop")

    # canary: one at a time, in sorting-label order (shop-01 has order 59 < shop-00's 60)
    first = wait_for("the first canary move", lambda: on_target(driver.targets(), "2.0.0"))
    assert first == {"shop-01"}
    # mid-rollout: a wave-1 cluster goes not ready; a new cluster joins wave-2
    stack.send(
        "clusters", "shop-05", cluster("shop-05", labels={"app": "shop", "ring": "wave-1", "order": "55"}, ready=False)
    )
    status = driver.until("AwaitingApproval")
    stack.send("clusters", "shop-60", cluster("shop-60", labels={"app": "shop", "ring": "wave-2", "order": "0"}))
    time.sleep(3)
    targets = driver.step()
    wave_2 = {n for n, t in targets.items() if t["stage"] == "wave-2"}
    assert not on_target(targets, "2.0.0") & wave_2, "wave-2 moved before its approval"
    assert "shop-05" not in on_target(targets, "2.0.0") and targets["shop-05"]["state"] == "not_ready"
    wave_1 = next(s for s in status["stages"] if s["name"] == "wave-1")
    assert wave_1["counts"] | {"members": 20} == {
        "members": 20, "pending": 0, "updating": 0, "succeeded": 19, "failed": 0, "not_ready": 1, "pinned": 0,
        "blocked": 0, "held": 0, "awaiting_release": 0, "awaited": 0, "deferred": 0, "excluded": 0,
    }  # fmt: skip

    stack.send("intents", "shop", RolloutCommanded(module="shop", command="approve", stage="wave-2"))
    # pause right after the approval: the stage starts, then no new moves until resume
    stack.send("intents", "shop", RolloutCommanded(module="shop", command="pause"))
    driver.until("Paused")
    frozen = on_target(driver.targets(), "2.0.0")
    time.sleep(3)
    driver.step()
    time.sleep(1)
    assert on_target(driver.targets(), "2.0.0") == frozen, "clusters moved while paused"
    stack.send("intents", "shop", RolloutCommanded(module="shop", command="resume"))
    # every stage passes without shop-05, but it does not run 2.0.0: Progressing, not Complete
    final = driver.until("Progressing", stable="2.0.0")
    assert final["waiting"] == "1 cluster not ready"

    targets = driver.targets()
    assert on_target(targets, "2.0.0") == {f"shop-{i:02d}" for i in range(61)} - {"shop-05"}
    assert driver.max_updating["canary"] == 1
    assert driver.max_updating["wave-1"] <= 5  # 25% of 20
    assert driver.max_updating["wave-2"] <= 20  # 50% of 39 (+ the joiner)
    # the not-ready cluster gets the target as soon as it is ready again
    stack.send("clusters", "shop-05", cluster("shop-05", labels={"app": "shop", "ring": "wave-1", "order": "55"}))
    wait_for("shop-05 to get 2.0.0", lambda: "shop-05" in on_target(driver.targets(), "2.0.0"))


def small_fleet(stack: Stack, app: str) -> None:
    for i in range(6):
        labels = {"app": app, "ring": "canary" if i == 0 else "wave", "order": str(i)}
        stack.send("clusters", f"{app}-{i}", cluster(f"{app}-{i}", labels=labels))


TWO_STAGES = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 1},
    {"name": "wave", "maxConcurrency": 2},
]


def test_failing_canary_halts_the_rollout_before_wave(stack: Stack) -> None:
    small_fleet(stack, "halt")
    stack.send("intents", "halt", module("halt", app="halt", tag="1.0.0", stages=TWO_STAGES))
    driver = Driver(stack, "halt", verdict=lambda c, r: "failed")
    status = driver.until("Halted")
    assert "canary failures 1 > maxFailures 0" in status["lastDecision"]
    time.sleep(2)
    assert on_target(driver.targets(), "1.0.0") == {"halt-0"}


def test_failing_canary_with_on_failure_rollback_returns_it_to_stable(stack: Stack) -> None:
    small_fleet(stack, "undo")
    stack.send("intents", "undo", module("undo", app="undo", tag="1.0.0", stages=TWO_STAGES, on_failure="Rollback"))
    Driver(stack, "undo").until("Complete")
    stack.send("intents", "undo", module("undo", app="undo", tag="1.1.0", stages=TWO_STAGES, on_failure="Rollback"))
    driver = Driver(stack, "undo", verdict=lambda c, r: "failed" if r == "1.1.0" else "succeeded")
    status = driver.until("RolledBack")
    targets = driver.targets()
    assert on_target(targets, "1.0.0") == {f"undo-{i}" for i in range(6)}
    assert status["stableRevision"] == "1.0.0" and status["targetRevision"] == "1.1.0"
