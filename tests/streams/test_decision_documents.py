"""The decider writes a decision's fields as they are (its __dict__), its reason model as
JSON: that must stay its model_dump(mode="json") — a field with an alias, or another nested
model, added to Decision would break the documents — and read back as the decision document
every reader parses (rollout/wire/decisions.py)."""

from __future__ import annotations

import orjson

from rollout.engine.outcome import Decision
from rollout.wire.decision_reasons import ModuleCreated, MovedToTarget, Paused, StageSucceeded, render
from rollout.wire.decisions import DecisionDocument
from streams.chain import DecisionChain, decision_body


def decision(because: object, **fields: object) -> Decision:
    return Decision(reason=render(because), because=because, **fields)  # type: ignore[arg-type]


def test_a_decision_document_holds_exactly_what_model_dump_gives() -> None:
    succeeded = StageSucceeded(stage="canary", succeeded=2, failed=0, not_ready=0, pinned=0)
    made = decision(
        succeeded,
        module="podinfo",
        action="stage-succeeded",
        cluster="prod-eu-1",
        revision="6.5.0",
        generation=3,
        at=120.5,
        stage="canary",
        stage_seconds=300.0,
    )
    body = decision_body(0, 7, 0, made)
    assert body == {"id": "0-7-0", **made.model_dump(mode="json", exclude={"user", "via"})}
    assert body["because"] == {
        "code": "stage-succeeded",
        "stage": "canary",
        "succeeded": 2,
        "failed": 0,
        "not_ready": 0,
        "pinned": 0,
    }


def test_defaults_are_in_the_document_too() -> None:
    made = decision(ModuleCreated(kind="Module", module="m", revision="v1"), module="m", action="created")
    assert set(decision_body(0, 1, 0, made)) == {"id", *Decision.model_fields} - {"user", "via"}


def test_a_decision_record_carries_user_and_via_only_when_a_command_made_it() -> None:
    moved = decision_body(
        0,
        7,
        0,
        decision(
            MovedToTarget(cluster="c1", revision="v2", stage="all", slot=1, movable=1),
            module="m",
            action="assign",
            cluster="c1",
        ),
    )
    assert "user" not in moved and "via" not in moved and moved["id"] == "0-7-0"
    paused = Paused(user="alice", via="cli")
    body = decision_body(1, 9, 2, decision(paused, module="m", action="paused", user="alice", via="cli"))
    assert (body["user"], body["via"], body["id"], body["reason"]) == (
        "alice",
        "cli",
        "1-9-2",
        "paused by alice via cli: no new moves until resume",
    )


def test_a_linked_record_reads_back_as_the_decision_document_with_its_reason_model() -> None:
    paused = Paused(user="alice", via="cli")
    made = decision(paused, module="m", action="paused", user="alice", via="cli", at=5.0)
    stored = DecisionChain(1, {}).link(decision_body(1, 9, 0, made))
    read = DecisionDocument.read(stored)
    assert read.because == paused and read.reason == made.reason and (read.user, read.via) == ("alice", "cli")
    assert (read.id, read.chain, read.seq) == ("1-9-0", 1, 0)
    fields = read.model_dump(include=set(Decision.model_fields))
    assert Decision.model_validate(fields) == made  # readers lose nothing
    assert orjson.loads(stored)["because"] == {"code": "paused", "user": "alice", "via": "cli"}


def test_every_reason_is_written_as_its_json_whether_plain_or_not() -> None:
    from tests.rollout.test_decision_reasons import EXAMPLES

    for because, _ in EXAMPLES:
        body = decision_body(0, 1, 0, decision(because, module="m", action="held"))
        assert body["because"] == because.model_dump(mode="json")
        assert orjson.loads(orjson.dumps(body["because"])) == because.model_dump(mode="json")
