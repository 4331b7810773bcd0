"""What `rollout watch-modules` writes on Module objects from the engine's module-status
document (projections/module_status.py `resource_status`, pure): Flux-style conditions per
phase, lastTransitionTime kept while a condition holds, the Refused and InvalidSpec statuses."""

from __future__ import annotations

from typing import Any

import pytest

from projections.module_status import resource_status
from rollout.api.resources import conditions_for, invalid_status
from rollout.wire.status import ModuleStatus

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"


def view(phase: str, stage: str | None = "canary", **extra: Any) -> ModuleStatus:
    """A module-status document as the engine writes it (rollout/engine/views.py), read."""
    document: dict[str, Any] = {
        "module": "web",
        "targetRevision": "6.7.0",
        "stableRevision": "6.6.0",
        "phase": phase,
        "currentStage": stage,
        "stages": [
            {"name": "canary", "state": "Running", "counts": {"members": 2, "succeeded": 1, "updating": 1}},
            {"name": "prod", "state": "Pending", "counts": {"members": 3, "pending": 2, "not_ready": 1}},
        ],
    }
    document.update(extra)
    return ModuleStatus.read(document)


def condition_statuses(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def since(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}


# --- conditions per phase -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "ready", "progressing", "stalled"),
    [
        ("Pending", "Unknown", "True", "False"),
        ("Progressing", "False", "True", "False"),
        ("Soaking", "False", "True", "False"),
        ("AwaitingApproval", "False", "True", "False"),
        ("RollingBack", "False", "True", "False"),
        ("Paused", "False", "False", "False"),
        ("Complete", "True", "False", "False"),
        ("Halted", "False", "False", "True"),
        ("RolledBack", "False", "False", "True"),
        ("Aborted", "False", "False", "True"),
        ("SomethingNew", "Unknown", "True", "False"),  # a phase this version does not know
    ],
)
def test_each_phase_sets_ready_progressing_and_stalled_like_flux(
    phase: str, ready: str, progressing: str, stalled: str
) -> None:
    status = resource_status(view(phase), generation=3, previous=None, now=T0)
    assert status["phase"] == phase
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Progressing", "Stalled"]
    assert condition_statuses(status) == {"Ready": ready, "Progressing": progressing, "Stalled": stalled}
    for condition in status["conditions"]:
        assert condition["reason"] == phase
        assert condition["observedGeneration"] == 3
        assert condition["lastTransitionTime"] == T0


def test_conditions_tell_which_stage_waits_for_approval_and_what_completed() -> None:
    waiting = resource_status(view("AwaitingApproval", "prod"), generation=1, previous=None, now=T0)
    assert {c["message"] for c in waiting["conditions"]} == {
        "stage prod waits for approval (a RolloutApproval with stage: prod)"
    }
    done = resource_status(view("Complete", None), generation=1, previous=None, now=T0)
    assert {c["message"] for c in done["conditions"]} == {"6.7.0 rolled out to every stage"}
    halted = resource_status(view("Halted", lastDecision="canary failed on c1"), generation=1, previous=None, now=T0)
    assert {c["message"] for c in halted["conditions"]} == {"Halted: canary failed on c1"}


# --- lastTransitionTime --------------------------------------------------------------------------


def test_last_transition_time_is_kept_while_a_condition_holds() -> None:
    first = resource_status(view("Progressing"), generation=1, previous=None, now=T0)
    soaking = resource_status(view("Soaking"), generation=1, previous=first, now=T1)
    # Progressing -> Soaking changes no condition's status: every time stays T0
    assert since(soaking) == {"Ready": T0, "Progressing": T0, "Stalled": T0}
    assert {c["reason"] for c in soaking["conditions"]} == {"Soaking"}  # the reason follows the phase


def test_only_the_conditions_that_flip_get_a_new_transition_time() -> None:
    first = resource_status(view("Progressing"), generation=1, previous=None, now=T0)
    complete = resource_status(view("Complete", None), generation=1, previous=first, now=T1)
    assert since(complete) == {"Ready": T1, "Progressing": T1, "Stalled": T0}
    halted = resource_status(view("Halted"), generation=2, previous=complete, now=T2)
    assert since(halted) == {"Ready": T2, "Progressing": T1, "Stalled": T2}


def test_a_previous_condition_without_a_time_gets_now() -> None:
    previous = [{"type": "Ready", "status": "False", "reason": "Progressing", "message": ""}]
    (ready, *_) = conditions_for("Progressing", "m", generation=None, previous=previous, now=T1)
    assert ready["lastTransitionTime"] == T1
    assert "observedGeneration" not in ready  # no generation known: left out, not null


# --- the rest of the status ------------------------------------------------------------------------


def test_status_carries_revisions_stage_counts_and_progress_by_their_kubernetes_names() -> None:
    status = resource_status(view("Progressing", unstaged={"members": 1}), generation=4, previous=None, now=T0)
    assert status["observedGeneration"] == 4
    assert (status["targetRevision"], status["stableRevision"], status["currentStage"]) == ("6.7.0", "6.6.0", "canary")
    assert status["stages"] == [
        {"name": "canary", "state": "Running", "members": 2, "succeeded": 1, "updating": 1, "failed": 0, "pending": 0},
        {"name": "prod", "state": "Pending", "members": 3, "succeeded": 0, "updating": 0, "failed": 0, "pending": 3},
    ]
    assert status["progress"] == "1/6"  # succeeded / every selected cluster, unstaged ones included
    assert "lastDecision" not in status  # nothing null is written


def test_a_module_the_engine_has_not_staged_yet_is_pending_without_progress() -> None:
    status = resource_status(None, generation=1, previous=None, now=T0)
    assert status["phase"] == "Pending"
    assert "progress" not in status and status["stages"] == []
    assert {c["message"] for c in status["conditions"]} == {"Pending: not staged by the engine yet"}


def test_a_generation_the_engine_refused_is_stalled_with_its_reason() -> None:
    status = resource_status(view("Progressing"), generation=5, previous=None, now=T0, refusal="stage prod is unknown")
    assert status["phase"] == "Refused"
    assert condition_statuses(status) == {"Ready": "False", "Progressing": "False", "Stalled": "True"}
    assert {c["reason"] for c in status["conditions"]} == {"Refused"}
    assert {c["message"] for c in status["conditions"]} == {"the engine refused generation 5: stage prod is unknown"}
    assert status["targetRevision"] == "6.7.0"  # what the engine still rolls out is shown


def test_an_invalid_spec_is_stalled_and_keeps_what_was_known() -> None:
    before = resource_status(view("Progressing"), generation=1, previous=None, now=T0)
    status = invalid_status("spec.rollout.stages: Field required", generation=2, previous=before, now=T1)
    assert (status["phase"], status["observedGeneration"]) == ("Invalid", 2)
    assert condition_statuses(status) == {"Ready": "False", "Progressing": "False", "Stalled": "True"}
    assert {c["reason"] for c in status["conditions"]} == {"InvalidSpec"}
    assert {c["message"] for c in status["conditions"]} == {"spec.rollout.stages: Field required"}
    assert status["targetRevision"] == "6.7.0" and status["stages"] == before["stages"]
    assert since(status) == {"Ready": T0, "Progressing": T1, "Stalled": T1}  # Ready was already False


def test_an_object_that_stays_invalid_keeps_its_transition_times() -> None:
    first = invalid_status("bad", generation=2, previous=None, now=T1)
    again = invalid_status("bad", generation=2, previous=first, now=T2)
    assert again == first  # unchanged: the status writer has nothing to write


def test_every_stage_running_at_once_is_listed_beside_the_current_stage() -> None:
    from tests.rollout.test_stage_graph import fleet_of, graph

    fleet = fleet_of(graph())  # eu and us both follow the canary
    fleet.succeed("app", "can-1")
    status = resource_status(ModuleStatus.read(fleet.status("app")), generation=1, previous=None, now=T0)
    assert status["currentStage"] == "eu" and status["currentStages"] == ["eu", "us"]
    chain = resource_status(view("Progressing"), generation=1, previous=None, now=T0)
    assert chain["currentStages"] == ["canary"]  # a chain: its one current stage
    assert "currentStages" not in resource_status(None, generation=1, previous=None, now=T0)  # not staged: none
