"""The notifications' table and document (rollout/wire/notifications.py): which decisions
become which CloudEvents, and what a receiver reads in one."""

from __future__ import annotations

from datetime import datetime

from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import AwaitingApproval, GateFailed, Halted, ModuleCreated, StageStarted
from rollout.wire.decisions import DecisionDocument
from rollout.wire.notifications import EVENT_TYPES, TYPE_PATTERN, DecisionCloudEvent, cloud_event, event_type

SOURCE = "/rollout/prod"


def test_every_notified_action_is_a_decision_action_on_the_wire() -> None:
    wire = {action.value for action in DecisionAction}
    for action in EVENT_TYPES:
        assert isinstance(action, DecisionAction)
        assert action.value in wire, action
        assert event_type(action.value) == EVENT_TYPES[action]


def test_every_notification_type_is_distinct_and_reverse_dns() -> None:
    types = list(EVENT_TYPES.values())
    assert len(set(types)) == len(types)
    assert all(TYPE_PATTERN.match(kind) for kind in types), types


def test_the_issues_notifications_are_sent() -> None:
    """Stage started, waiting for approval, gate inconclusive, halted, rolled back, complete
    (issue 23, item 4)."""
    for action in (
        DecisionAction.STAGE_STARTED,
        DecisionAction.AWAITING_APPROVAL,
        DecisionAction.GATE_INCONCLUSIVE,
        DecisionAction.HALTED,
        DecisionAction.ROLLBACK,
        DecisionAction.COMPLETE,
    ):
        assert action in EVENT_TYPES, action


def test_a_decision_not_notified_is_not_sent() -> None:
    assign = DecisionDocument(id="0-1-0", module="shop", action="assign", reason="c1 → 1.0: stage canary 1/1")
    assert cloud_event(assign, SOURCE) is None
    assert event_type("an-action-of-a-newer-worker") is None


def test_a_halt_becomes_an_event_with_the_decisions_id_module_time_and_typed_facts() -> None:
    because = Halted(cause=GateFailed(gate="errors", stage="canary", message="0.2 outside [0, 0.01]"))
    decision = DecisionDocument(
        id="2-41-0",
        module="shop",
        action="halted",
        reason=because.sentence(),
        because=because,
        stage="canary",
        revision="2.0.0",
        generation=3,
        at=1_790_000_000.5,
    )
    event = cloud_event(decision, SOURCE)
    assert event is not None
    assert (event.id, event.source, event.type, event.subject) == (
        "2-41-0",
        SOURCE,
        "dev.rollout.module.halted",
        "shop",
    )
    assert event.time is not None
    assert datetime.fromisoformat(event.time).timestamp() == 1_790_000_000.5
    read = DecisionCloudEvent.model_validate_json(event.body())  # what a receiver reads
    assert read == event
    assert isinstance(read.data.because, Halted)
    assert isinstance(read.data.because.cause, GateFailed) and read.data.because.cause.gate == "errors"
    assert (read.data.stage, read.data.revision, read.data.generation) == ("canary", "2.0.0", 3)
    assert read.data.summary == decision.reason


def test_the_body_is_a_structured_cloud_event_1_0() -> None:
    because = StageStarted(stage="canary", pending=3, not_ready=0, pinned=1)
    decision = DecisionDocument(
        id="0-7-1", module="pay", action="stage-started", reason=because.sentence(), because=because, at=60.0
    )
    event = cloud_event(decision, SOURCE)
    assert event is not None
    body = event.as_json()
    assert body["specversion"] == "1.0" and body["datacontenttype"] == "application/json"
    assert {"id", "source", "type", "subject", "time", "data"} <= set(body)
    assert body["time"] == "1970-01-01T00:01:00Z"
    assert body["data"]["because"]["code"] == "stage-started" and body["data"]["because"]["pending"] == 3


def test_a_stage_succeeded_says_how_long_the_stage_took() -> None:
    decision = DecisionDocument(
        id="0-9-0", module="pay", action="stage-succeeded", reason="stage canary succeeded", stage="canary",
        stage_seconds=95.0, at=300.0,
    )  # fmt: skip
    event = cloud_event(decision, SOURCE)
    assert event is not None and event.type == "dev.rollout.stage.succeeded"
    assert event.data.stage_seconds == 95.0 and event.data.stage == "canary"


def test_a_decision_before_the_engines_first_tick_has_no_time() -> None:
    because = AwaitingApproval(stage="wave")
    decision = DecisionDocument(
        id="0-3-0", module="pay", action="awaiting-approval", reason=because.sentence(), because=because
    )
    event = cloud_event(decision, SOURCE)
    assert event is not None and event.time is None
    assert "time" not in event.as_json()


def test_a_reason_of_a_newer_worker_travels_as_it_was() -> None:
    record = {
        "id": "1-2-0",
        "module": "pay",
        "action": "complete",
        "reason": "rollout of 2 complete",
        "because": {"code": "a-code-of-tomorrow", "revision": "2"},
    }
    event = cloud_event(DecisionDocument.read(record), SOURCE)
    assert event is not None
    assert event.as_json()["data"]["because"] == {"code": "a-code-of-tomorrow", "revision": "2"}
    unrelated = ModuleCreated(kind="Module", module="pay", revision="1")
    assert (
        cloud_event(DecisionDocument(id="1-1-0", module="pay", action="created", reason=unrelated.sentence()), SOURCE)
        is None
    )
