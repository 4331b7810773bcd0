"""The dashboard's fold and pages as pure functions: given these records, the pages show this."""

from __future__ import annotations

import json
from typing import Any

import pytest

from projections.dashboard import pages
from projections.dashboard.commands import CommandRefused, command_event, required_permission
from projections.dashboard.fleet import FleetView, ProjectionRecord, absorb
from rollout.wire.decision_reasons import ValuesRefused
from rollout.wire.status import StageGate


def record(key: str | None, document: Any, at: float | None = None) -> ProjectionRecord:
    return ProjectionRecord(key, None if document is None else json.dumps(document).encode(), at)


def stage(name: str, state: str, **extra: Any) -> dict[str, Any]:
    counts = {"members": 4, "pending": 0, "updating": 0, "succeeded": 4, "failed": 0, "not_ready": 0, "pinned": 0}
    return {
        "name": name,
        "state": state,
        "maxConcurrency": 1,
        "maxFailures": 0,
        "minSuccessTime": extra.pop("soak", None),
        "requireApproval": extra.pop("approval", False),
        "approved": False,
        "counts": counts | extra,
    }


def status(module: str, *stages: dict[str, Any], phase: str = "Progressing") -> dict[str, Any]:
    return {
        "module": module,
        "kind": "Module",
        "phase": phase,
        "paused": False,
        "generation": 2,
        "targetRevision": "2.0.0",
        "stableRevision": "1.0.0",
        "currentStage": stages[-1]["name"],
        "stages": list(stages),
    }


def target(module: str, cluster: str, stage_name: str, state: str) -> dict[str, Any]:
    return {"module": module, "cluster": cluster, "stage": stage_name, "state": state, "revision": "2.0.0"}


def test_module_status_tombstone_removes_the_module_from_the_list() -> None:
    view = FleetView()
    changes = absorb(view, "module_status", record("shop", status("shop", stage("canary", "Running"))))
    assert changes.modules == {"shop"}
    assert [row["name"] for row in pages.module_list(view)] == ["shop"]
    absorb(view, "module_status", record("shop", None))
    assert pages.module_list(view) == []


def test_module_row_sums_progress_over_stages() -> None:
    view = FleetView()
    doc = status("shop", stage("canary", "Succeeded"), stage("wave-1", "Running", succeeded=1, updating=3))
    absorb(view, "module_status", record("shop", doc))
    row = pages.module_list(view)[0]
    assert (row["members"], row["succeeded"], row["currentStage"]) == (8, 5, "wave-1")
    assert [s["state"] for s in row["stages"]] == ["Succeeded", "Running"]


def test_soak_countdown_ends_min_success_time_after_the_stage_succeeded() -> None:
    view = FleetView()
    absorb(view, "module_status", record("shop", status("shop", stage("canary", "Soaking", soak="90s"))))
    decision = {
        "id": "0-7-0",
        "module": "shop",
        "action": "stage-succeeded",
        "reason": "stage canary succeeded: 4 succeeded",
        "stage": "canary",
        "at": 1000,
    }
    absorb(view, "decisions", record("shop", decision))
    page = pages.module_page(view, "shop")
    assert page is not None
    assert page["status"]["stages"][0]["soakEndsAt"] == 1090.0


def test_awaiting_approval_counts_from_the_end_of_the_previous_stages_soak() -> None:
    view = FleetView()
    gated = stage("wave-2", "AwaitingApproval", approval=True)
    doc = status("shop", stage("wave-1", "Succeeded", soak="1m"), gated, phase="AwaitingApproval")
    absorb(view, "module_status", record("shop", doc))
    for name, at in (("wave-1", 500), ("canary", 900)):
        succeeded = {"id": f"0-{at}-0", "action": "stage-succeeded", "reason": f"stage {name} succeeded", "stage": name}
        succeeded["at"] = at
        absorb(view, "decisions", record("shop", {"module": "shop", **succeeded}))
    page = pages.module_page(view, "shop")
    assert page is not None
    assert page["status"]["stages"][1]["awaitingApprovalSince"] == 560.0
    assert "awaitingApprovalSince" not in page["status"]["stages"][0]


def test_redelivered_decisions_are_shown_once_newest_first() -> None:
    view = FleetView()
    first = {"id": "d1", "module": "shop", "action": "assigned", "reason": "a", "at": 1}
    second = {"id": "d2", "module": "shop", "action": "complete", "reason": "b", "at": 2}
    for decision in (first, second, first):
        absorb(view, "decisions", record("shop", decision))
    page = pages.module_page(view, "shop")
    assert page is not None
    assert [d["id"] for d in page["decisions"]] == ["d2", "d1"]


def test_module_page_lists_the_latest_values_refusal_per_cluster_and_path() -> None:
    view = FleetView()
    refusals = [
        ValuesRefused(cluster="c1", path="/seed", current="x", wanted="a", layer="module"),
        ValuesRefused(cluster="c1", path="/seed", current="x", wanted="b", layer="module"),
        ValuesRefused(cluster="c1", path="/logo", current="l", wanted="m", layer="module"),
        ValuesRefused(cluster="c2", path="/seed", current="y", wanted="b", layer="module"),
    ]
    for index, because in enumerate(refusals):
        decision = {
            "id": f"d{index}",
            "module": "web",
            "action": "values-refused",
            "cluster": because.cluster,
            "reason": because.sentence(),
            "because": because.model_dump(mode="json"),  # the readOnly path: read, never parsed out of the reason
        }
        absorb(view, "decisions", record("web", decision))
    absorb(view, "decisions", record("web", {"id": "x", "module": "web", "action": "values", "reason": "kept"}))
    page = pages.module_page(view, "web")
    assert page is not None
    assert [(r["cluster"], r["path"]) for r in page["valuesRefused"]] == [
        ("c1", "/logo"),
        ("c1", "/seed"),
        ("c2", "/seed"),
    ]
    assert page["valuesRefused"][1]["reason"] == refusals[1].sentence()  # the latest for c1's /seed


def test_stage_clusters_filter_by_stage_state_and_name_then_paginate() -> None:
    view = FleetView()
    for i in range(30):
        state = "succeeded" if i % 3 else "updating"
        absorb(view, "targets", record(f"shop/c-{i:02d}", target("shop", f"c-{i:02d}", "wave-1", state)))
    absorb(view, "targets", record("shop/canary-0", target("shop", "canary-0", "canary", "succeeded")))
    updating = pages.stage_clusters(view, "shop", pages.Query(stage="wave-1", state="updating", limit=4))
    assert updating["total"] == 10
    assert [t["cluster"] for t in updating["items"]] == ["c-00", "c-03", "c-06", "c-09"]
    second = pages.stage_clusters(view, "shop", pages.Query(stage="wave-1", state="updating", offset=8, limit=4))
    assert [t["cluster"] for t in second["items"]] == ["c-24", "c-27"]
    named = pages.stage_clusters(view, "shop", pages.Query(text="canary"))
    assert [t["cluster"] for t in named["items"]] == ["canary-0"]


def test_target_tombstone_leaves_the_module_and_the_cluster_pages() -> None:
    view = FleetView()
    absorb(view, "targets", record("shop/eu-1", target("shop", "eu-1", "canary", "updating")))
    page = pages.cluster_page(view, "eu-1")
    assert page is not None and [m["module"] for m in page["modules"]] == ["shop"]
    changes = absorb(view, "targets", record("shop/eu-1", None))
    assert changes.modules == {"shop"} and changes.clusters == {"eu-1"}
    assert pages.cluster_page(view, "eu-1") is None
    assert pages.stage_clusters(view, "shop", pages.Query())["total"] == 0


def cluster_event(name: str, labels: dict[str, str], ready: bool = True) -> dict[str, Any]:
    manifest = {
        "metadata": {"name": name, "namespace": "fleet", "labels": labels},
        "status": {"controlPlaneReady": ready, "kubeconfigSecret": True},
    }
    return {"type": "ClusterObserved", "cluster": manifest}


def test_cluster_list_filters_by_label_text_and_forgets_removed_clusters() -> None:
    view = FleetView()
    absorb(view, "clusters", record("eu-1", cluster_event("eu-1", {"ring": "canary"})))
    absorb(view, "clusters", record("us-1", cluster_event("us-1", {"ring": "wave-1"}, ready=False)))
    canary = pages.cluster_list(view, pages.Query(text="ring=canary"))
    assert [(c["name"], c["ready"]) for c in canary["items"]] == [("eu-1", True)]
    absorb(view, "clusters", record("eu-1", {"type": "ClusterRemoved", "name": "eu-1"}))
    assert [c["name"] for c in pages.cluster_list(view, pages.Query())["items"]] == ["us-1"]


def test_cluster_page_shows_its_assemblages() -> None:
    view = FleetView()
    snapshot = {"version": 3, "spec": {"syncs": [{"module": "shop", "revision": "2.0.0"}]}}
    absorb(view, "proxy", record("eu-1", snapshot))
    page = pages.cluster_page(view, "eu-1")
    assert page is not None and page["proxy"]["version"] == 3 and page["remote"] is None


def dead_letter(event: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"reason": reason, "stage": "decide", "topic": "intents", "partition": 0, "offset": 7, "key": "shop"} | {
        "value": json.dumps(event)
    }


def test_a_dead_letter_is_the_refusal_of_the_event_it_carries() -> None:
    view = FleetView()
    assert pages.verdict(view, "e1") == {"eventId": "e1", "state": "pending"}
    command = {"type": "RolloutCommanded", "id": "e1", "module": "shop", "command": "approve", "stage": "nope"}
    changes = absorb(view, "dead_letters", record("shop", dead_letter(command, "approve shop: no stage 'nope'"), 9.0))
    assert changes.verdicts == {"e1"} and changes.dead_letters
    assert pages.verdict(view, "e1") == {
        "eventId": "e1",
        "state": "refused",
        "reason": "approve shop: no stage 'nope'",
        "source": "dead-letters",
    }
    letters = pages.dead_letter_page(view, pages.Query(text="no stage"))
    assert letters["total"] == 1 and "value" not in letters["items"][0] and letters["items"][0]["at"] == 9.0


def test_verdicts_topic_says_accepted_with_the_decisions_or_refused() -> None:
    view = FleetView()
    decisions = [{"id": "p-1-0", "action": "approved", "reason": "stage wave-2 approved by dashboard"}]
    accepted = {"event": "e2", "verdict": "accepted", "reason": "approve shop", "decisions": decisions}
    absorb(view, "verdicts", record("e2", accepted))
    absorb(view, "verdicts", record("e3", {"event": "e3", "verdict": "refused", "reason": "pause x: no such module"}))
    assert pages.verdict(view, "e2")["decisions"] == ["stage wave-2 approved by dashboard"]
    assert pages.verdict(view, "e3") | {"source": "-"} == {
        "eventId": "e3",
        "state": "refused",
        "reason": "pause x: no such module",
        "source": "-",
    }


def test_a_dead_letter_naming_its_event_refuses_that_event() -> None:
    view = FleetView()
    letter = {"reason": "pause x: no such module", "stage": "decide", "event": "e4", "value": "{}"}
    absorb(view, "dead_letters", record("x", letter))
    assert pages.verdict(view, "e4")["state"] == "refused"


def test_unreadable_records_are_skipped_not_fatal() -> None:
    view = FleetView()
    assert not absorb(view, "decisions", ProjectionRecord("shop", b"\xff not json"))
    assert not absorb(view, "targets", record("no-slash", target("shop", "x", "s", "updating")))
    absorb(view, "dead_letters", ProjectionRecord("k", b"[1, 2"))
    assert pages.dead_letter_page(view, pages.Query())["items"][0]["reason"] == "unreadable dead letter"


def test_an_unknown_topic_role_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="does not read topic role 'journal'; it reads"):
        absorb(FleetView(), "journal", record("k", {}))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "limit 0: must be between 1 and 1000"),
        ({"offset": "-1"}, "offset -1: must be 0 or more"),
        ({"offset": "ten"}, "offset 'ten': expected a whole number"),
        ({"state": "green"}, "state 'green': expected one of pending"),
    ],
)
def test_bad_page_parameters_are_named(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pages.Query.parse(params)


def test_commands_are_the_clis_rollout_commanded_events_in_the_users_name_via_the_dashboard() -> None:
    event = command_event("shop", {"command": "approve", "stage": "wave-2"}, user="alice@example.com")
    assert (event.module, event.command, event.stage, event.user, event.via) == (
        "shop",
        "approve",
        "wave-2",
        "alice@example.com",
        "dashboard",
    )
    assert required_permission(event) == "rolloutapprovals"
    pause = command_event("shop", {"command": "pause"}, user="alice@example.com")
    assert pause.stage is None and required_permission(pause) == "rolloutcommands"


def test_a_rejection_carries_the_reason_and_an_approval_the_verified_identitys_groups() -> None:
    body = {"command": "reject", "stage": "wave-2", "reason": "p99 doubled"}
    reject = command_event("shop", body, user="carol@example.com", groups=("sre",))
    assert (reject.command, reject.stage, reject.reason, reject.groups) == ("reject", "wave-2", "p99 doubled", ["sre"])
    assert required_permission(reject) == "rolloutapprovals"  # whoever may approve may reject
    claimed = {"command": "approve", "stage": "wave-2", "groups": ["release-managers"]}
    approve = command_event("shop", claimed, user="bob", groups=("sre", "ops"))
    assert approve.groups == ["ops", "sre"]  # the verified identity's; the request's claim is not read


def test_a_break_glass_lasts_for_what_the_user_asked_and_needs_its_own_permission() -> None:
    body = {"command": "break-glass", "reason": "sev-1", "for": "2h", "calendar": "team-a/weekends"}
    glass = command_event("shop", body, user="alice@example.com", now=1_800_000_000.0)
    assert (glass.command, glass.reason, glass.until, glass.calendar, glass.via) == (
        "break-glass",
        "sev-1",
        1_800_007_200.0,
        "team-a/weekends",
        "dashboard",
    )
    assert required_permission(glass) == "rolloutbreakglasses"  # neither rolloutcommands nor rolloutapprovals


@pytest.mark.parametrize(
    ("module", "body", "message"),
    [
        ("shop", {"command": "break-glass", "for": "1h"}, "break-glass needs a reason"),
        ("shop", {"command": "break-glass", "reason": "sev-1"}, "break-glass needs 'for'"),
        ("shop", {"command": "break-glass", "reason": "sev-1", "for": "30d"}, "for: '30d' is not a duration"),
        ("shop", {"command": "break-glass", "reason": "sev-1", "for": "200h"}, "at most a week"),
        ("shop", {"command": "pause", "for": "1h"}, "pause takes no 'for'"),
        ("shop", {"command": "approve"}, "approve needs the stage"),
        ("shop", {"command": "reject", "stage": "wave-2"}, "reject needs a reason"),
        ("shop", {"command": "reject", "stage": "wave-2", "reason": "  "}, "reject needs a reason"),
        ("shop", {"command": "approve", "stage": "wave-2", "reason": "why"}, "approve takes no reason"),
        ("shop", {"command": "hold-promotion"}, "hold-promotion needs a reason"),
        ("shop", {"command": "hold-promotion", "stage": "wave-2", "reason": "freeze"}, "hold-promotion takes no stage"),
        ("shop", {"command": "reject", "stage": "wave-2", "reason": "x" * 1001}, "a reason of 1 to 1000"),
        ("shop", {"command": "delete"}, "command 'delete': expected one of approve"),
        ("shop", {"command": "pause", "stage": "x"}, "pause takes no stage"),
        ("Shop!", {"command": "pause"}, "module:"),
        ("shop", ["pause"], "expected a JSON object"),
    ],
)
def test_bad_command_requests_are_refused_before_publishing(module: str, body: Any, message: str) -> None:
    with pytest.raises(CommandRefused, match=message):
        command_event(module, body, user="alice@example.com")


def test_a_stage_that_succeeded_before_the_engines_first_tick_shows_no_soak_clock() -> None:
    view = FleetView()
    absorb(view, "module_status", record("shop", status("shop", stage("canary", "Soaking", soak="90s"))))
    decision = {"module": "shop", "action": "stage-succeeded", "reason": "stage canary succeeded", "at": 0.0}
    absorb(view, "decisions", record("shop", decision))  # engine time 0: no Tick yet
    page = pages.module_page(view, "shop")
    assert page is not None
    assert "soakEndsAt" not in page["status"]["stages"][0]  # not "soak over" 90 s after the epoch


def test_a_gate_passing_since_before_the_engines_first_tick_has_no_soak_time() -> None:
    gate = pages.gate_state(StageGate(name="errors", passed=True, passing_since=0.0), 60.0)
    assert (gate["state"], gate["passingSince"], gate["soakedAt"]) == ("pass", None, None)


def test_a_promotion_hold_carries_its_reason_and_needs_the_permission_of_a_rollout_command() -> None:
    hold = command_event("shop", {"command": "hold-promotion", "reason": "freeze"}, user="alice@example.com")
    assert (hold.command, hold.reason, hold.via) == ("hold-promotion", "freeze", "dashboard")
    assert required_permission(hold) == "rolloutcommands"
    resume = command_event("shop", {"command": "resume-promotion", "reason": ""}, user="alice@example.com")
    assert resume.reason is None  # optional: an empty box is no reason
