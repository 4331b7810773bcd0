"""Who gets what: membership, stages, readiness, joins and leaves, pins, status reports,
bindings, kinds, and idempotence under redelivery — one test per rule of
docs/rollout-semantics.md, in given/when/then form."""

from __future__ import annotations

import pytest

from rollout.engine.core import Outcome, resolve_count
from tests.rollout.builders import (
    Fleet,
    applied,
    cluster,
    command,
    deleted,
    given,
    module,
    observed,
    removed,
    reported,
    serialize,
    stage,
    tick,
)

# --- membership ---------------------------------------------------------------------------


def test_module_without_selector_gets_no_cluster() -> None:
    fleet = given(cluster("a"), cluster("b"), module("app", None, "v1"))
    assert fleet.assigned("app") == {}
    assert fleet.status("app")["stages"][0]["counts"]["members"] == 0


def test_empty_selector_assigns_every_ready_cluster() -> None:
    fleet = given(cluster("a"), cluster("b", {"env": "dev"}), module("app", {}, "v1"))
    assert fleet.assigned("app") == {"a": "v1", "b": "v1"}


def test_selector_picks_members() -> None:
    fleet = given(
        cluster("a", {"env": "prod"}),
        cluster("b", {"env": "dev"}),
        module("app", {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}, "v1"),
    )
    assert fleet.assigned("app") == {"a": "v1"}


def test_no_rollout_block_is_one_stage_all_at_once() -> None:
    fleet = given(*[cluster(f"c{i}") for i in range(7)], module("app", {}, "v1"))
    assert len(fleet.on("app", "v1")) == 7
    assert [s["name"] for s in fleet.status("app")["stages"]] == ["all"]


def test_member_belongs_to_first_matching_stage() -> None:
    fleet = given(
        cluster("a", {"ring": "canary", "zone": "1"}),
        cluster("b", {"zone": "1"}),
        cluster("c"),
        module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("zone-1", {"zone": "1"}), stage("rest")),
    )
    assert [fleet.target("app", c).stage for c in "abc"] == ["canary", "zone-1", "rest"]


def test_unstaged_clusters_are_reported_not_rolled_out() -> None:
    fleet = given(
        cluster("canary-1", {"ring": "canary"}),
        cluster("stray"),
        module("app", {}, "v1", stage("canary", {"ring": "canary"})),
    )
    fleet.succeed("app", "canary-1")
    assert fleet.phase("app") == "Complete"
    assert fleet.revision("app", "stray") is None
    assert fleet.counts("app", "-")["members"] == 1
    assert fleet.target_status["app/stray"]["stage"] == "-"


def test_cluster_matching_selector_later_joins_and_leaving_selector_unassigns() -> None:
    fleet = given(cluster("a", {"env": "dev"}), module("app", {"env": "prod"}, "v1"))
    assert fleet.revision("app", "a") is None
    fleet.apply(cluster("a", {"env": "prod"}))
    assert fleet.revision("app", "a") == "v1"
    fleet.apply(cluster("a", {"env": "dev"}))
    assert fleet.revision("app", "a") is None
    assert fleet.moved() == [("a", None)]


# --- readiness ----------------------------------------------------------------------------


def test_not_ready_cluster_gets_nothing_until_ready() -> None:
    fleet = given(cluster("a", ready=False), cluster("b"), module("app", {}, "v1"))
    assert fleet.assigned("app") == {"a": None, "b": "v1"}
    assert fleet.category("app", "a") == "not_ready"
    fleet.succeed("app", "b")
    assert fleet.phase("app") == "Progressing"  # not ready: skipped, never a failure, but not Complete
    assert fleet.record("app").stable == 1  # its stage did not wait for it
    fleet.apply(cluster("a"))
    assert fleet.revision("app", "a") == "v1"


def test_cluster_becoming_not_ready_while_updating_stays_updating() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.apply(cluster("a", ready=False))
    assert fleet.category("app", "a") == "updating"
    assert fleet.revision("app", "a") == "v1"


# --- leaving ------------------------------------------------------------------------------


def test_cluster_leaving_drops_out_of_counts() -> None:
    fleet = given(
        cluster("a"),
        cluster("b"),
        cluster("c"),
        module("app", {}, "v1", stage("all", concurrency=1)),
    )
    assert fleet.counts("app", "all")["members"] == 3
    [moving] = fleet.on("app", "v1")
    fleet.remove(moving)
    counts = fleet.counts("app", "all")
    assert counts["members"] == 2
    assert counts["updating"] == 1  # the slot freed by the leaver went to the next cluster
    assert fleet.moved()[0] == (moving, None)  # its sync is removed from its assemblage
    assert moving not in fleet.assigned("app")


def test_removed_cluster_rejoining_starts_afresh() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.succeed("app", "a")
    fleet.remove("a")
    fleet.apply(cluster("a"))
    assert fleet.revision("app", "a") == "v1"
    assert fleet.category("app", "a") == "updating"


# --- status reports -----------------------------------------------------------------------


def test_report_for_other_revision_is_ignored() -> None:
    fleet = given(cluster("a"), module("app", {}, "v2"))
    outcome = fleet.report("app", "a", "succeeded", revision="v1")
    assert serialize(outcome) == serialize(type(outcome)())
    assert fleet.category("app", "a") == "updating"
    fleet.report("app", "a", "succeeded", revision="v2")
    assert fleet.category("app", "a") == "succeeded"


def test_report_about_unknown_module_or_cluster_is_ignored() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    before = fleet.snapshot()
    fleet.send(reported("nope", "a", "v1", "failed"), reported("app", "zzz", "v1", "failed"))
    after = fleet.snapshot()
    after["clusters"]["a"]["report_ids"] = []  # only the report's id is remembered (redelivery)
    assert after == before
    assert serialize(fleet.last) == serialize(Outcome())


def test_succeeded_then_updating_same_revision_stays_succeeded() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.report("app", "a", "succeeded")
    outcome = fleet.report("app", "a", "updating")
    assert fleet.category("app", "a") == "succeeded"
    assert outcome.decisions == [] and outcome.assignments == []


def test_failed_then_updating_same_revision_stays_failed() -> None:
    fleet = given(cluster("a"), cluster("b"), module("app", {}, "v1", stage("all", failures=1)))
    fleet.report("app", "a", "failed")
    fleet.report("app", "a", "updating")  # Flux retrying: still failed until it succeeds
    assert fleet.category("app", "a") == "failed"
    fleet.report("app", "a", "succeeded")
    assert fleet.category("app", "a") == "succeeded"


def test_succeeded_then_failed_counts_as_failed() -> None:
    fleet = given(cluster("a"), cluster("b"), module("app", {}, "v1", stage("all", failures=1)))
    fleet.succeed("app", "a")
    fleet.fail("app", "a")
    assert fleet.category("app", "a") == "failed"
    assert fleet.counts("app", "all")["failed"] == 1


# --- pins ---------------------------------------------------------------------------------


def test_pinned_cluster_never_moves() -> None:
    fleet = given(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.succeed("app", "a", "b")
    fleet.pin("app", "a")
    fleet.apply(module("app", {}, "v2"))
    assert fleet.assigned("app") == {"a": "v1", "b": "v2"}
    fleet.succeed("app", "b")
    assert fleet.phase("app") == "Complete"
    assert fleet.category("app", "a") == "pinned"
    fleet.rollback("app")
    assert fleet.revision("app", "a") == "v1"
    fleet.unpin("app", "a")
    assert fleet.revision("app", "a") == "v2"  # it follows again: v2 is now stable


def test_pinned_cluster_is_not_rolled_back() -> None:
    fleet = given(cluster("a"), cluster("b"), module("app", {}, "v1"))
    fleet.succeed_all("app", "v1")
    fleet.apply(module("app", {}, "v2"))
    fleet.pin("app", "a")
    fleet.rollback("app")
    assert fleet.assigned("app") == {"a": "v2", "b": "v1"}


def test_unpinned_cluster_follows_its_stage_revision_at_once() -> None:
    fleet = given(cluster("c1", {"ring": "canary"}), module("app", {}, "v1", stage("canary", {"ring": "canary"})))
    fleet.succeed("app", "c1")
    fleet.apply(cluster("w1", {"ring": "wave"}))  # a member in no stage: nothing assigned
    fleet.pin("app", "w1")
    fleet.apply(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("wave")))
    fleet.apply(module("app", {}, "v2", stage("canary", {"ring": "canary"}), stage("wave")))
    assert fleet.revision("app", "w1") is None
    fleet.unpin("app", "w1")
    assert fleet.revision("app", "w1") == "v1"  # its stage has not started: it runs stable


def test_pin_of_a_cluster_the_fleet_does_not_know_is_refused() -> None:
    fleet = given(module("app", {}, "v1"))
    fleet.pin("app", "late")
    assert fleet.rejections == ["cluster 'late' not found"]
    assert fleet.record("app").pinned == []
    fleet.apply(cluster("late"))
    assert fleet.revision("app", "late") == "v1"


def test_pin_needs_a_cluster() -> None:
    fleet = given(module("app", {}, "v1"))
    fleet.send(command("app", "pin"))
    assert fleet.rejections == ["pin app: a cluster is required"]


# --- kinds, names and deletion ------------------------------------------------------------


def test_bootstrap_module_goes_to_remote_assemblage() -> None:
    fleet = given(cluster("a"), module("flux", {}, "v2.4.0", kind="BootstrapModule"), module("app", {}, "v1"))
    assert fleet.assemblage_kind[("a", "flux")] == "RemoteAssemblage"
    assert fleet.assemblage_kind[("a", "app")] == "ProxyAssemblage"


def test_module_name_used_by_other_kind_is_rejected() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    before = fleet.snapshot()
    outcome = fleet.apply(module("app", {}, "v9", kind="BootstrapModule"))
    assert len(outcome.rejections) == 1
    assert "already used by Module app" in outcome.rejections[0]
    after = fleet.snapshot()
    after["modules"]["app"]["handled_intents"] = before["modules"]["app"]["handled_intents"]  # its id, remembered
    assert after == before
    fleet.delete("app", "BootstrapModule")  # deleting the other kind does not touch it
    after = fleet.snapshot()
    assert after["modules"]["app"]["handled_intents"][-2:] == [fleet.journal[-2].id, fleet.journal[-1].id]
    after["modules"]["app"]["handled_intents"] = before["modules"]["app"]["handled_intents"]
    assert after == before


def test_module_deleted_unassigns_everywhere() -> None:
    fleet = given(cluster("a"), cluster("b", ready=False), cluster("c"), module("app", {}, "v1"))
    fleet.pin("app", "c")
    fleet.delete("app")
    assert fleet.assemblages == {}
    assert fleet.targets == {}
    assert "app" not in fleet.modules
    assert fleet.module_status["app"] is None
    assert sorted(fleet.moved()) == [("a", None), ("c", None)]


def test_command_for_unknown_module_is_rejected() -> None:
    fleet = given(cluster("a"))
    fleet.send(command("ghost", "pause"))
    assert fleet.rejections == ["module 'ghost' not found"]


def test_approve_unknown_stage_is_rejected() -> None:
    fleet = given(module("app", {}, "v1", stage("canary")))
    fleet.approve("app", "wave-9")
    assert fleet.rejections == ["module app has no stage 'wave-9' (stages: canary)"]


# --- bindings -----------------------------------------------------------------------------


def test_assigned_sync_has_bindings_expanded_per_cluster() -> None:
    fleet = given(
        cluster("eu-1", {"region": "eu"}, annotations={"owner": "team-a"}),
        cluster("us-1", {"region": "us"}),
        module(
            "app",
            {},
            "v1",
            bindings=[{"name": "REGION", "fromLabel": "region"}, {"name": "OWNER", "fromAnnotation": "owner"}],
            substitute={"NAME": "$(CLUSTER_NAME)", "REGION": "$(REGION)", "OWNER": "$(OWNER)", "KEEP": "$$(X)"},
        ),
    )
    eu = fleet.assemblages[("eu-1", "app")].sync.package.kustomize.substitute
    us = fleet.assemblages[("us-1", "app")].sync.package.kustomize.substitute
    assert eu == {"NAME": "eu-1", "REGION": "eu", "OWNER": "team-a", "KEEP": "$(X)"}
    assert us == {"NAME": "us-1", "REGION": "us", "OWNER": "$(OWNER)", "KEEP": "$(X)"}


def test_label_change_re_expands_bindings_of_the_assigned_revision() -> None:
    fleet = given(
        cluster("a", {"region": "eu"}),
        module("app", {}, "v1", bindings=[{"name": "REGION", "fromLabel": "region"}], substitute={"R": "$(REGION)"}),
    )
    fleet.apply(cluster("a", {"region": "us"}))
    assert fleet.assemblages[("a", "app")].sync.package.kustomize.substitute == {"R": "us"}
    assert fleet.revision("app", "a") == "v1"


def test_cluster_namespace_change_re_sends_its_syncs() -> None:
    fleet = given(cluster("a", namespace="fleet"), module("app", {}, "v1", substitute={"NS": "$(CLUSTER_NAMESPACE)"}))
    fleet.apply(cluster("a", namespace="moved"))
    assert fleet.assemblage_namespace[("a", "app")] == "moved"
    assert fleet.assemblages[("a", "app")].sync.package.kustomize.substitute == {"NS": "moved"}


def test_changing_bindings_is_a_new_generation() -> None:
    fleet = given(
        cluster("a"), module("app", {}, "v1", bindings=[{"name": "X", "value": "1"}], substitute={"X": "$(X)"})
    )
    fleet.succeed("app", "a")
    fleet.apply(module("app", {}, "v1", bindings=[{"name": "X", "value": "2"}], substitute={"X": "$(X)"}))
    assert fleet.record("app").target == 2
    assert fleet.assemblages[("a", "app")].sync.package.kustomize.substitute == {"X": "2"}


def test_changing_only_the_selector_is_not_a_new_generation() -> None:
    fleet = given(cluster("a", {"env": "prod"}), cluster("b"), module("app", {"env": "prod"}, "v1"))
    fleet.succeed("app", "a")
    fleet.apply(module("app", {}, "v1"))
    assert fleet.record("app").target == 1
    assert fleet.assigned("app") == {"a": "v1", "b": "v1"}


# --- limits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [
        (None, 10, 10),
        (3, 10, 3),
        (30, 10, 30),
        ("25%", 10, 2),  # rounds down
        ("1%", 10, 1),  # but a percentage above 0 of a non-empty stage is at least 1
        ("0%", 10, 0),
        ("50%", 0, 0),
        ("100%", 7, 7),
        ("99%", 7, 6),
    ],
)
def test_limits_resolve_int_or_percent(value: int | str | None, total: int, expected: int) -> None:
    assert resolve_count(value, total=total, default=total) == expected


# --- idempotence --------------------------------------------------------------------------


def busy_fleet() -> Fleet:
    fleet = given(
        cluster("a", {"ring": "canary"}),
        cluster("b"),
        cluster("c", ready=False),
        module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("rest", concurrency=1)),
    )
    fleet.succeed("app", "a")
    return fleet


REDELIVERED = {
    "module applied": lambda: applied(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("rest"))),
    "new revision": lambda: applied(module("app", {}, "v2", stage("canary", {"ring": "canary"}), stage("rest"))),
    "module deleted": lambda: deleted("app"),
    "cluster observed": lambda: observed(cluster("c")),
    "cluster joined": lambda: observed(cluster("d")),
    "cluster removed": lambda: removed("b"),
    "status succeeded": lambda: reported("app", "b", "v1", "succeeded"),
    "status failed": lambda: reported("app", "b", "v1", "failed", "boom"),
    "tick": lambda: tick(5_000),
    "pause": lambda: command("app", "pause"),
    "resume": lambda: command("app", "resume"),
    "abort": lambda: command("app", "abort"),
    "rollback": lambda: command("app", "rollback"),
    "approve": lambda: command("app", "approve", stage="rest"),
    "pin": lambda: command("app", "pin", cluster="b"),
    "unpin": lambda: command("app", "unpin", cluster="a"),
}


@pytest.mark.parametrize("kind", sorted(REDELIVERED))
def test_every_event_delivered_twice_changes_nothing_the_second_time(kind: str) -> None:
    fleet = busy_fleet()
    event = REDELIVERED[kind]()
    fleet.send(event)
    before = fleet.snapshot()
    again = fleet.send(event)
    assert serialize(again) == serialize(type(again)()), f"{kind} redelivered emitted {serialize(again)}"
    assert fleet.snapshot() == before


@pytest.mark.parametrize("kind", sorted(REDELIVERED))
def test_every_event_redelivered_after_a_restart_changes_nothing(kind: str) -> None:
    fleet = busy_fleet()
    event = REDELIVERED[kind]()
    fleet.send(event)
    before = fleet.snapshot()
    fleet.restart()
    again = fleet.send(event)
    assert serialize(again) == serialize(type(again)())
    assert fleet.snapshot() == before


def test_old_tick_changes_nothing() -> None:
    fleet = busy_fleet()
    before = fleet.snapshot()
    outcome = fleet.tick(10.0)
    assert serialize(outcome) == serialize(type(outcome)())
    assert fleet.snapshot() == before


def test_module_whose_members_are_all_not_ready_is_not_complete() -> None:
    fleet = given(cluster("a", ready=False), cluster("b", ready=False), module("app", {}, "v1"))
    assert fleet.phase("app") == "Progressing"  # nothing deployed: a CI gate must not pass
    assert fleet.status("app")["waiting"] == "2 clusters not ready"
    fleet.apply(cluster("a"), cluster("b"))
    assert fleet.on("app", "v1") == ["a", "b"]
    assert fleet.phase("app") == "Progressing"
    fleet.succeed("app", "a", "b")
    assert fleet.phase("app") == "Complete"
    assert "waiting" not in fleet.status("app")


def test_complete_module_goes_back_to_progressing_when_a_not_ready_member_joins() -> None:
    fleet = given(cluster("a"), module("app", {}, "v1"))
    fleet.succeed("app", "a")
    assert fleet.phase("app") == "Complete"
    fleet.apply(cluster("b", ready=False))
    assert fleet.phase("app") == "Progressing"
    assert fleet.status("app")["waiting"] == "1 cluster not ready"
