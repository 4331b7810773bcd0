"""The decider writes a decision's fields as they are (its __dict__): that must stay its
model_dump — a nested model or an alias added to Decision would break the documents."""

from __future__ import annotations

from rollout.engine.outcome import Decision


def test_a_decision_document_holds_exactly_what_model_dump_gives() -> None:
    decision = Decision(
        module="podinfo",
        action="stage-succeeded",
        reason="canary: 2/2 succeeded",
        cluster="prod-eu-1",
        revision="6.5.0",
        generation=3,
        at=120.5,
        stage="canary",
        stage_seconds=300.0,
    )
    assert decision.__dict__ == decision.model_dump()
    assert decision.__dict__ == decision.model_dump(mode="json")


def test_defaults_are_in_the_document_too() -> None:
    decision = Decision(module="m", action="held", reason="waiting")
    assert set(decision.__dict__) == set(Decision.model_fields)


def test_a_decision_record_carries_user_and_via_only_when_a_command_made_it() -> None:
    from streams.chain import decision_body

    decision = Decision(module="m", action="assign", reason="c1 → v2", cluster="c1")
    moved = decision_body(0, 7, 0, decision)
    assert "user" not in moved and "via" not in moved and moved["id"] == "0-7-0"
    assert Decision.model_validate({k: v for k, v in moved.items() if k != "id"}) == decision  # readers lose nothing
    commanded = Decision(module="m", action="paused", reason="paused by alice via cli", user="alice", via="cli")
    body = decision_body(1, 9, 2, commanded)
    assert (body["user"], body["via"], body["id"]) == ("alice", "cli", "1-9-2")
