"""The rollout-targets document the engine writes directly (`views.target_view`, on the path
of every status report) is exactly the model's JSON (`views.target_status(...).as_json()`),
for every state a target can be in, and reads back through the model unchanged."""

from __future__ import annotations

from rollout.engine.views import target_status, target_view
from rollout.wire.status import TargetStatus
from tests.rollout.builders import applied, cluster, given, module, stage


def test_the_directly_written_target_document_is_the_models_json_in_every_state() -> None:
    fleet = given(
        cluster("c1", {"ring": "canary"}),
        cluster("w1", {"ring": "wave"}),
        cluster("w2", {"ring": "wave"}),
        cluster("w3", {"ring": "wave"}),
        cluster("off", {"ring": "wave"}, ready=False),
        cluster("edge", {"ring": "edge"}),
        cluster("kept", {"ring": "wave"}, annotations={"rollout.dev/hold": "true", "rollout.dev/hold-reason": "peak"}),
    )
    fleet.send(applied(module("base", {"ring": "wave"}, "v1")))
    fleet.send(
        applied(
            module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave", {"ring": "wave"}, failures=1))
        )
    )
    fleet.succeed("app", "c1")
    fleet.fail("app", "w1")
    fleet.pin("app", "w3")
    fleet.send(applied(module("front", {"ring": "wave"}, "v1", depends_on=["base"])))
    # late joiners kept out (lateJoiners), an offline member waited for and one failed by its wait
    fleet.send(cluster("l0", {"ring": "late"}))  # updating: the runs below go on while l1 joins
    fleet.send(applied(module("tardy", {"ring": "late"}, "v1", stage("all"), late_joiners="NextRun")))
    fleet.send(applied(module("strict", {"ring": "late"}, "v1", stage("all"), late_joiners="Exclude")))
    fleet.send(cluster("l1", {"ring": "late"}))
    fleet.send(applied(module("patient", {"ring": "wave"}, "v1", stage("all"), offline={"wait": "10m"})))
    fleet.send(applied(module("stern", {"ring": "wave"}, "v1", stage("all"), offline={"wait": "0s", "then": "Fail"})))
    seen = set()
    for target in fleet.targets.values():
        record = fleet.modules[target.module]
        offline = fleet.engine.book.offline(target)
        written = target_view(record, target, offline)
        assert written == target_status(record, target, offline).as_json()
        assert TargetStatus.read(written).as_json() == written
        seen.add(target.category)
    every = {"pending", "updating", "succeeded", "failed", "not_ready", "pinned", "blocked", "held"}
    assert every | {"deferred", "excluded", "awaited"} <= seen, seen
    assert fleet.targets["stern/off"].offline_failed
