"""Every module-status document shape the engine emits, produced by the real engine (the
`Fleet` harness of tests/rollout/builders.py) and encoded as the decider publishes it — for
the tests that feed them through every reader.

    every_shape() ──► [Shape(label, module, value, record, targets)], in the order emitted

The shapes (rollout/wire/status.py): each phase of a staged module — Progressing (one
with a closed maintenance window, one with members not ready: `waiting`), Soaking (with a
health gate), AwaitingApproval, Paused, Halted, RollingBack, RolledBack, Complete, Aborted
— a staged module with a later apply held back for cluster observations (`held`), a
pending one (its first apply held: no record, no stages), one deleting (waiting for its
dependents) and a deleted one (a tombstone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.engine.state import ModuleRecord
from rollout.wire.status import ROLLOUT_PHASES
from streams.decider import document
from tests.rollout.builders import (
    Fleet,
    applied,
    cluster,
    command,
    deleted,
    freeze_calendar,
    gate_result,
    given,
    module,
    stage,
)

ERRORS_GATE = {"name": "errors", "prometheus": {"url": "http://prometheus:9090", "query": "error_rate", "max": 0.05}}
STAGED = {"matchExpressions": [{"key": "ring", "operator": "In", "values": ["canary", "wave"]}]}
CLOSED_WINDOW = {"schedule": "0 3 * * *", "duration": "1h"}  # 03:00-04:00 UTC; the fleet's clock is elsewhere


@dataclass(frozen=True)
class Shape:
    """One module-status record as published: `value` its bytes (None: a tombstone),
    `record` the engine's record behind it (None: pending or deleted), `targets` the
    rollout-target records of the module then (key `module/cluster` → bytes)."""

    label: str
    module: str
    value: bytes | None
    record: ModuleRecord | None
    targets: dict[str, bytes] = field(default_factory=dict)


class Shapes:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.emitted: list[Shape] = []

    def publish(self, label: str, name: str) -> None:
        status = self.fleet.module_status.get(name)
        record = self.fleet.modules.get(name)
        targets = {
            key: document(target)
            for key, target in sorted(self.fleet.target_status.items())
            if key.startswith(f"{name}/") and target is not None
        }
        value = None if status is None else document(status)
        self.emitted.append(Shape(label, name, value, record.model_copy(deep=True) if record else None, targets))


def every_shape() -> list[Shape]:
    """Every shape, in the order the engine emitted them (several modules interleaved)."""
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        cluster("w2", {"ring": "wave"}),
        cluster("off", {"ring": "edge"}, ready=False),
    )
    shapes = Shapes(fleet)
    canary = {**stage("canary", {"ring": "canary"}, soak="1m"), "gates": [ERRORS_GATE]}
    wave = stage("wave", {"ring": "wave"}, approval=True)
    fleet.send(applied(module("podinfo", STAGED, "v1", canary, wave)))
    shapes.publish("Progressing", "podinfo")
    fleet.succeed("podinfo", "c1")
    shapes.publish("Soaking", "podinfo")  # its gate not evaluated yet
    fleet.send(gate_result("podinfo", "canary", "errors", True, message="1 sample(s) within [-∞, 0.05]"))
    fleet.wait(61)
    shapes.publish("AwaitingApproval", "podinfo")
    fleet.send(command("podinfo", "approve", stage="wave"))
    fleet.succeed("podinfo", "w1", "w2")
    shapes.publish("Complete", "podinfo")
    fleet.send(applied(module("podinfo", STAGED, "v2", canary, wave)))
    fleet.send(command("podinfo", "pause"))
    shapes.publish("Paused", "podinfo")
    fleet.send(applied(module("podinfo", STAGED, "v3", canary, wave), fleet={0: 5}))
    shapes.publish("held", "podinfo")  # its status, a later apply held behind it
    fleet.send(applied(module("app", {}, "v1"), fleet={0: 5}))
    shapes.publish("pending", "app")  # its first apply held: not staged yet

    fleet.send(applied(module("shop", {"ring": "wave"}, "v1", stage("all"))))
    fleet.fail("shop", "w1")
    shapes.publish("Halted", "shop")

    fleet.send(applied(module("web", {"ring": "wave"}, "v1", stage("all"))))
    fleet.succeed_all("web", "v1")
    fleet.send(applied(module("web", {"ring": "wave"}, "v2", stage("all"))))
    fleet.send(command("web", "rollback"))
    shapes.publish("RollingBack", "web")
    fleet.succeed_all("web", "v1")
    shapes.publish("RolledBack", "web")

    fleet.send(applied(module("api", {"ring": "wave"}, "v1", stage("all"))))
    fleet.send(command("api", "abort"))
    shapes.publish("Aborted", "api")

    fleet.send(applied(module("batch", {"ring": "wave"}, "v1", stage("all"), windows=[CLOSED_WINDOW])))
    shapes.publish("Progressing, window closed", "batch")
    always = {"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}
    fleet.send(freeze_calendar("always", always, namespace="ice"))
    fleet.send(applied(module("frosty", {"ring": "wave"}, "v1", stage("all"), namespace="ice")))
    shapes.publish("Progressing, frozen", "frosty")  # a freeze calendar holds it
    glass = command("frosty", "break-glass", reason="sev-1", until=fleet.now + 600, user="alice", via="cli")
    fleet.send(glass)
    shapes.publish("Progressing, break-glass", "frosty")  # moving despite the freeze, until its end
    fleet.send(applied(module("edge", {"ring": "edge"}, "v1", stage("all"))))
    shapes.publish("Progressing, waiting", "edge")  # every stage passed, its member not ready

    fleet.send(applied(module("base", {}, "v1")), applied(module("front", {}, "v1", depends_on=["base"])))
    fleet.send(deleted("base"))
    shapes.publish("deleting", "base")  # waits for front
    fleet.send(deleted("front"))
    shapes.publish("deleted", "front")
    return shapes.emitted


PHASES_COVERED = ROLLOUT_PHASES
