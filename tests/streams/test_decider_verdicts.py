"""The decider ships the engine's verdicts: one document per answered event on the verdicts
topic (keyed by the event's id), and a refusal's dead letter names the refused event."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import ClusterObserved, ModuleApplied, RolloutCommanded, SyncStatusReported
from streams.decider import DecidePartition
from streams.outputs import Outputs
from tests.rollout.builders import cluster, module, stage

TOPICS = TopicNames("t.")


def decide(*events: Any) -> Outputs:
    decider = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    out = Outputs(TOPICS.dead_letters)
    records = [
        SimpleNamespace(topic=TOPICS.journal, partition=0, offset=offset, key=b"k", value=event.to_bytes())
        for offset, event in enumerate(events)
    ]
    decider.process(records, len(records), out)  # type: ignore[arg-type]
    return out


def documents(out: Outputs, topic: str) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in out.all() if r.topic == topic and r.value is not None]


def test_refused_and_accepted_commands_each_get_a_verdict_keyed_by_event_id() -> None:
    podinfo = module("podinfo", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave-1"))
    wrong = RolloutCommanded(module="podinfo", command="approve", stage="no-such-stage")
    pause = RolloutCommanded(module="podinfo", command="pause")
    out = decide(
        ClusterObserved(cluster=cluster("c1", {"ring": "canary"})), ModuleApplied(module=podinfo), wrong, pause
    )

    verdicts = [r for r in out.all() if r.topic == TOPICS.verdicts]
    assert [json.loads(r.value)["event"].encode() for r in verdicts] == [r.key for r in verdicts]  # type: ignore[arg-type]
    created, refused, paused = documents(out, TOPICS.verdicts)
    assert (created["verdict"], created["reason"]) == ("accepted", "Module podinfo created at v1")
    assert created["decisionCount"] >= 2 and created["decisions"][0]["id"] == "0-1-0"
    assert refused == {
        "schemaVersion": 1,
        "event": wrong.id,
        "verdict": "refused",
        "reason": "module podinfo has no stage 'no-such-stage' (stages: canary, wave-1)",
        "module": "podinfo",
        "decisions": [],
        "decisionCount": 0,
    }
    assert paused["verdict"] == "accepted" and paused["decisions"][0]["action"] == "paused"
    (letter,) = documents(out, TOPICS.dead_letters)
    assert (letter["event"], letter["reason"]) == (wrong.id, refused["reason"])


def test_status_reports_are_answered_only_when_they_ask() -> None:
    silent = SyncStatusReported(cluster="nosuchcluster", module="podinfo", revision="v1", state="succeeded")
    asking = silent.model_copy(update={"id": "asking", "reply": True})
    out = decide(silent, asking)
    (answer,) = documents(out, TOPICS.verdicts)
    assert (answer["event"], answer["verdict"], answer["reason"]) == (
        "asking",
        "refused",
        "cluster 'nosuchcluster' not found",
    )
