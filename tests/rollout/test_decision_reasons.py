"""A decision's reason is a model (rollout/wire/decision_reasons.py): every `ReasonCode` has
one, renders its sentence from its fields — the sentences the engine wrote as f-strings before
the reasons were structured, word for word — and reads back from its JSON as it was, alone and
inside a decision record. Every top-level code belongs to an action (tests/rollout/reasons.py),
and a code this release does not know (a newer worker's) reads without failing."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.values.layers import ValuesLayers, merge_values
from rollout.wire.decision_reasons import (
    REASON_ADAPTER,
    Aborted,
    Approved,
    AwaitingApproval,
    AwaitingFreeze,
    AwaitingWindow,
    BreakGlassEnded,
    BrokeGlass,
    ClusterJoined,
    ClusterNotAllowed,
    ClusterUnselected,
    ClusterWasRemoved,
    DeleteCancelled,
    DeleteWaitsForDependents,
    EdgeSoaking,
    FailureBudgetExceeded,
    GateAnalysisCounts,
    GateFailed,
    GateInconclusive,
    GatePassed,
    Halted,
    HeldBehindIntents,
    HeldForDeletion,
    HeldForFleet,
    LiveValuesChanged,
    MemberVersion,
    ModuleCreated,
    ModuleWasDeleted,
    MovedToTarget,
    NewRevision,
    OfflineWait,
    OfflineWaitOver,
    Outstanding,
    Paused,
    Pinned,
    ProgressDeadlineExceeded,
    Promoted,
    PromotionHeld,
    PromotionHoldSet,
    PromotionResumed,
    ReadinessChanged,
    Reason,
    ReasonCode,
    Rejected,
    ReleaseApproved,
    ReleaseCombinationHeld,
    ReleaseCombinationPromoted,
    RestrictionBroken,
    RestrictionMet,
    Resumed,
    RollbackRequested,
    RollbackStarted,
    RolledBack,
    RolloutComplete,
    StableUntilStage,
    StageSkipped,
    StagesPassed,
    StageStarted,
    StageSucceeded,
    StageWaiting,
    StoredSpecRefused,
    SyncFailed,
    SyncSucceeded,
    Unpinned,
    UnrecognisedReason,
    ValuesRefused,
    WaveStarted,
    WindowWait,
    render,
)
from rollout.wire.decisions import DecisionDocument
from tests.rollout.reasons import REASONS_OF

BUDGET = FailureBudgetExceeded(stage="wave", failed=2, max_failures=1)
GATE = GateFailed(gate="errors", stage="canary", message="error rate 7% > 5%")
COUNTS = GateAnalysisCounts(
    run=1, count=5, successful=1, failed=0, inconclusive=2, failure_limit=1, inconclusive_limit=1
)
BROKEN = RestrictionBroken(
    restriction="tenant/lane",
    rule="allowedSourcePatterns",
    value="https://evil.example/x.git",
    why="'https://evil.example/x.git' matches none of ['https://github\\\\.com/.*']",
)
REQUESTED = RollbackRequested(user="bob", via="dashboard")

EXAMPLES: list[tuple[Reason, str]] = [
    (MovedToTarget(cluster="eu-1", revision="v2", stage="wave", slot=3, movable=8), "eu-1 → v2: stage wave 3/8"),
    (RolledBack(cluster="eu-1", revision="v1"), "eu-1 → v1: rollback"),
    (RolledBack(cluster="eu-1", revision=None), "eu-1 → nothing: rollback"),
    (
        StableUntilStage(cluster="eu-1", revision="v1", stage="wave"),
        "eu-1 → v1: stage wave has not started, it runs the stable revision",
    ),
    (ClusterWasRemoved(cluster="eu-1"), "eu-1: cluster removed"),
    (ClusterUnselected(cluster="eu-1"), "eu-1: cluster no longer matches the selector"),
    (
        ClusterNotAllowed(cluster="eu-1"),
        "eu-1: cluster is outside allowedClusters of its namespace's ModuleRestriction",
    ),
    (
        ValuesRefused(cluster="eu-1", path="/seed", current="on-cluster", wanted="abc", layer="module"),
        "eu-1: /seed is readOnly: the cluster has 'on-cluster', the module layer wants 'abc'; "
        "the change is refused and the cluster's value stays",
    ),
    (LiveValuesChanged(cluster="eu-1"), "eu-1: values observed on the cluster changed its merged values"),
    (SyncSucceeded(cluster="eu-1", revision="v2"), "eu-1 runs v2"),
    (SyncFailed(cluster="eu-1", revision="v2", message="ImagePullBackOff"), "eu-1 failed on v2: ImagePullBackOff"),
    (SyncFailed(cluster="eu-1", revision="v2"), "eu-1 failed on v2"),
    (ProgressDeadlineExceeded(cluster="eu-1", deadline="10m"), "eu-1: updating for longer than progressDeadline 10m"),
    (ClusterJoined(cluster="eu-1", stage="wave", ready=True), "eu-1 matches the selector (stage wave)"),
    (
        ClusterJoined(cluster="eu-1", stage="-", ready=False),
        "eu-1 matches the selector (stage -); not ready, skipped until it is",
    ),
    (
        ClusterJoined(cluster="eu-1", stage="wave", ready=True, late="next-run", run=2),
        "eu-1 matches the selector (stage wave) after run 2 started: deferred to the next run (lateJoiners: NextRun)",
    ),
    (
        ClusterJoined(cluster="eu-1", stage="wave", ready=True, late="excluded", run=2),
        "eu-1 matches the selector (stage wave) after run 2 started: excluded from it (lateJoiners: Exclude)",
    ),
    (
        StableUntilStage(cluster="eu-1", revision="v1", stage="wave", deferred=True),
        "eu-1 → v1: joined mid-run, deferred to the next run; it runs the stable revision",
    ),
    (ReadinessChanged(cluster="eu-1", ready=True), "eu-1 is ready"),
    (
        OfflineWait(cluster="eu-1", stage="wave", until=1_000_000.0, then="Fail"),
        "eu-1 is offline: stage wave waits for it until 1970-01-12T13:46:40Z, then fails it",
    ),
    (
        OfflineWait(cluster="eu-1", stage="wave", until=1_000_000.0),
        "eu-1 is offline: stage wave waits for it until 1970-01-12T13:46:40Z, then skips it",
    ),
    (OfflineWaitOver(cluster="eu-1", stage="wave", wait="10m"), "eu-1 stayed offline for offline.wait 10m: skipped"),
    (
        OfflineWaitOver(cluster="eu-1", stage="wave", wait="10m", then="Fail"),
        "eu-1 stayed offline for offline.wait 10m: failed",
    ),
    (ReadinessChanged(cluster="eu-1", ready=False), "eu-1 is not ready"),
    (
        ReadinessChanged(cluster="eu-1", ready=False, left=True),
        "eu-1 is not ready: it left the fleet (rollout cluster leave)",
    ),
    (
        ReadinessChanged(cluster="eu-1", ready=False, lease_seconds=30.0),
        "eu-1 is not ready: its lease expired (no heartbeat for 30s)",
    ),
    (ModuleCreated(kind="Module", module="podinfo", revision="v1"), "Module podinfo created at v1"),
    (
        NewRevision(revision="v3", generation=3, supersedes="v2"),
        "target v3 (generation 3) (supersedes the rollout of v2); starting again from the first stage",
    ),
    (NewRevision(revision="v3", generation=3), "target v3 (generation 3); starting again from the first stage"),
    (ModuleWasDeleted(kind="BootstrapModule", module="cni"), "BootstrapModule cni deleted"),
    (
        DeleteWaitsForDependents(kind="Module", module="db", dependents=["api", "web"]),
        "Module db is deleted once the modules depending on it are: api, web (reverse dependency order)",
    ),
    (DeleteCancelled(kind="Module", module="db"), "Module db applied again: not deleted"),
    (
        HeldForFleet(intent="ModuleApplied", positions={1: 40, 0: 12}),
        "ModuleApplied held: waiting for cluster observations up to partition 0 offset 12, partition 1 offset 40",
    ),
    (
        HeldForFleet(intent="ModuleApplied", positions={}),
        "ModuleApplied held: waiting for cluster observations up to nothing",
    ),
    (
        HeldForDeletion(intent="ModuleApplied", module="api", members=4000),
        "ModuleApplied held: module api is still being deleted (4000 members' syncs left to remove)",
    ),
    (
        HeldBehindIntents(intent="RolloutCommanded", earlier=2, module="api"),
        "RolloutCommanded held behind 2 earlier intent(s) of api",
    ),
    (
        StageStarted(stage="wave", pending=6, not_ready=1, pinned=1),
        "stage wave started: 6 to move, 1 not ready, 1 pinned",
    ),
    (StageSkipped(stage="wave"), "stage wave has no members: skipped"),
    (
        StageSucceeded(stage="wave", succeeded=7, failed=1, not_ready=0, pinned=0),
        "stage wave succeeded: 7 succeeded, 1 failed, 0 not ready, 0 pinned",
    ),
    (
        WaveStarted(
            stage="wave",
            wave=2,
            waves=4,
            size=2,
            order="Random",
            seed=7,
            clusters=["eu-3", "eu-1"],
            members=2,
            digest="0123456789abcdef",
        ),
        "stage wave wave 2/4 started (seed 7, size 2): eu-3, eu-1",
    ),
    (
        WaveStarted(
            stage="wave",
            wave=1,
            waves=3,
            size=2,
            order="Sorted",
            seed=None,
            clusters=["a"],
            members=3,
            digest="0123456789abcdef",
        ),
        "stage wave wave 1/3 started (sorted, size 2): a and 2 more",
    ),
    (
        StageWaiting(
            stage="prod",
            quorum="All",
            needed=2,
            counting=[],
            missing=["us"],
            soaking=[EdgeSoaking(upstream="eu", until=1_700_000_000.0, until_at="2023-11-14T22:13:20Z")],
        ),
        "stage prod waits for its upstream stages (All: 0 of 2 needed): waiting for us; "
        "after eu soaking until 2023-11-14T22:13:20Z",
    ),
    (
        StageWaiting(
            stage="prod", quorum="OneOf", needed=1, counting=[], missing=[], soaking=[EdgeSoaking(upstream="eu")]
        ),
        "stage prod waits for its upstream stages (OneOf: 0 of 1 needed): after eu soaking until the first tick",
    ),
    (AwaitingApproval(stage="prod"), "stage prod waits for approval"),
    (
        AwaitingWindow(stage="prod", next_open=1_700_000_000.0),
        "stage prod waits for a maintenance window: next opens at 2023-11-14T22:13:20Z",
    ),
    (AwaitingWindow(stage="prod"), "stage prod waits for a maintenance window: no window ahead"),
    (
        AwaitingWindow(stage="prod", ticked=False),
        "stage prod waits for a maintenance window: the engine has seen no tick yet",
    ),
    (
        AwaitingFreeze(calendars=["year-end", "team-a/weekends"], until=1_700_000_000.0),
        "frozen by calendar year-end, team-a/weekends: until 2023-11-14T22:13:20Z",
    ),
    (
        AwaitingFreeze(calendars=["year-end"], ticked=False),
        "frozen by calendar year-end: the engine has seen no tick yet",
    ),
    (
        BrokeGlass(until=1_700_000_000.0, reason="sev-1 fix", user="alice", via="cli"),
        "break-glass by alice via cli: every freeze calendar overridden until 2023-11-14T22:13:20Z: sev-1 fix",
    ),
    (
        BrokeGlass(calendar="year-end", until=1_700_000_000.0, reason="sev-1 fix"),
        "break-glass: freeze calendar year-end overridden until 2023-11-14T22:13:20Z: sev-1 fix",
    ),
    (
        BreakGlassEnded(calendar="year-end", until=1_700_000_000.0),
        "break-glass of freeze calendar year-end ended at 2023-11-14T22:13:20Z: freezes hold again",
    ),
    (BreakGlassEnded(until=1_700_000_000.0), "break-glass ended at 2023-11-14T22:13:20Z: freezes hold again"),
    (GatePassed(gate="errors", stage="canary"), "gate errors of stage canary passes"),
    (GATE, "gate errors of stage canary failed: error rate 7% > 5%"),
    (
        GateInconclusive(gate="errors", stage="canary", analysis=COUNTS, message="no samples"),
        "gate errors of stage canary inconclusive — 1 passed, 0 failed (failureLimit 1), 2 inconclusive "
        "(inconclusiveLimit 1) of 5 measurements: no samples; paused until resume",
    ),
    (
        GateFailed(gate="latency", stage="canary", analysis=COUNTS, dry_run=True),
        "gate latency of stage canary failed (dry run: it holds nothing) — 1 passed, 0 failed (failureLimit 1), "
        "2 inconclusive (inconclusiveLimit 1) of 5 measurements",
    ),
    (RolloutComplete(revision="v2"), "rollout of v2 complete; it is the stable revision"),
    (
        StagesPassed(
            revision="v2",
            outstanding=Outstanding(
                not_ready=2,
                moving=1,
                windows=[WindowWait(stage="prod", next_open=1_700_000_000.0), WindowWait(stage="dr")],
            ),
        ),
        "every stage of v2 passed; it is the stable revision, not yet on every cluster: 2 clusters not ready; "
        "1 cluster not on the target yet; stage prod waits for a maintenance window, next opens at "
        "2023-11-14T22:13:20Z; stage dr waits for a maintenance window",
    ),
    (Halted(cause=BUDGET), "halted: stage wave failures 2 > maxFailures 1"),
    (Halted(cause=GATE), "halted: gate errors of stage canary failed: error rate 7% > 5%"),
    (
        Halted(cause=BROKEN),
        "halted: refused by ModuleRestriction tenant/lane: allowedSourcePatterns: "
        "'https://evil.example/x.git' matches none of ['https://github\\\\.com/.*']",
    ),
    (
        StoredSpecRefused(problems=["sync.source.git.url: not a URL", "rollout.stages: empty"]),
        "halted (StoredSpecRefused): the spec stored by an earlier release breaks this release's rules — "
        "sync.source.git.url: not a URL; rollout.stages: empty — re-apply the module with a spec this release "
        "accepts (rollout resume does not lift this)",
    ),
    (
        RollbackStarted(cause=BUDGET, stable="v1"),
        "stage wave failures 2 > maxFailures 1: every cluster on the target returns to v1",
    ),
    (
        RollbackStarted(cause=GATE, stable=None),
        "gate errors of stage canary failed: error rate 7% > 5%: every cluster on the target returns to nothing",
    ),
    (
        RollbackStarted(cause=REQUESTED, stable="v1"),
        "rollback requested by bob via dashboard: every cluster on the target returns to v1",
    ),
    (RestrictionMet(), "the module complies with its namespace's restriction"),
    (
        Paused(user="alice@example.com", via="dashboard"),
        "paused by alice@example.com via dashboard: no new moves until resume",
    ),
    (Paused(), "paused: no new moves until resume"),
    (Resumed(via="crd"), "resumed via crd"),
    (Aborted(user="alice"), "aborted by alice: the rollout stops where it stands"),
    (Approved(stage="prod", user="alice", via="cli"), "stage prod approved by alice via cli"),
    (
        Approved(stage="prod", user="alice@example.com", via="dashboard", approvals=1, required=2),
        "stage prod approved by alice@example.com via dashboard (1 of 2)",
    ),
    (
        AwaitingApproval(stage="prod", required=2, groups=["sre", "release-managers"]),
        "stage prod waits for approval by 2 distinct approvers from sre or release-managers",
    ),
    (
        Halted(cause=Rejected(stage="prod", reason="p99 doubled", user="carol", via="dashboard")),
        "halted: stage prod rejected by carol via dashboard: p99 doubled",
    ),
    (
        RollbackStarted(cause=Rejected(stage="prod", reason="bad build", user="carol", via="crd"), stable="v1"),
        "stage prod rejected by carol via crd: bad build: every cluster on the target returns to v1",
    ),
    (Pinned(cluster="eu-1", user="alice"), "eu-1 pinned at its current revision by alice"),
    (Unpinned(cluster="eu-1"), "eu-1 unpinned"),
    (
        Promoted(version="1.5.0", previous="1.4.0", source="oci oci://registry/app", promoter="promoter-0"),
        "promoted 1.4.0 → 1.5.0 from oci oci://registry/app, seen by promoter-0",
    ),
    (
        Promoted(
            version="1.5.0", previous="1.4.0", source="helm https://charts app", promoter="p", user="bob", via="cli"
        ),
        "promoted 1.4.0 → 1.5.0 from helm https://charts app, seen by p, resumed by bob via cli",
    ),
    (
        PromotionHeld(version="1.5.0", current="1.4.0", by="manifest", promoter="p"),
        "1.5.0 available, held (autoPromote.hold); the target stays 1.4.0",
    ),
    (
        PromotionHoldSet(reason="incident 42", user="alice", via="cli"),
        "promotion held by alice via cli: incident 42",
    ),
    (PromotionResumed(user="alice", via="dashboard"), "promotion resumed by alice via dashboard"),
    (
        Promoted(version="2.2.0", previous="2.1.0", source="oci oci://registry/web", promoter="p", release="shop"),
        "promoted 2.1.0 → 2.2.0 from oci oci://registry/web with release shop, seen by p",
    ),
    (
        ReleaseCombinationPromoted(
            release="shop",
            members=[
                MemberVersion(module="api", version="1.5.0", previous="1.4.0"),
                MemberVersion(module="web", version="2.1.0", previous="2.1.0"),
            ],
            promoter="p",
        ),
        "release shop promoted as one: api 1.4.0 → 1.5.0, web 2.1.0, seen by p",
    ),
    (
        ReleaseApproved(release="shop", stage="wave", members=["api", "web"], user="alice", via="dashboard"),
        "stage wave of release shop approved by alice via dashboard for api, web",
    ),
    (
        ReleaseCombinationHeld(
            release="shop", members=[MemberVersion(module="api", version="1.5.0", previous="1.4.0")], by="command"
        ),
        "release shop: api 1.4.0 → 1.5.0 available, held (rollout promotion hold)",
    ),
]
CAUSES = {
    ReasonCode.FAILURE_BUDGET_EXCEEDED,
    ReasonCode.RESTRICTION_BROKEN,
    ReasonCode.ROLLBACK_REQUESTED,
    ReasonCode.REJECTED,
}
"""The codes that only say why a rollout halted or rolled back: inside `Halted` / `RollbackStarted`."""


def every_reason() -> list[Reason]:
    """The examples and the causes inside them."""
    reasons = [reason for reason, _ in EXAMPLES]
    return reasons + [cause for reason in reasons if (cause := getattr(reason, "cause", None)) is not None]


def test_every_reason_code_has_an_example() -> None:
    assert {reason.code for reason in every_reason()} == set(ReasonCode)


@pytest.mark.parametrize(("because", "sentence"), EXAMPLES, ids=lambda v: getattr(v, "code", None))
def test_each_reason_renders_the_sentence_the_engine_has_always_written(because: Any, sentence: str) -> None:
    assert render(because) == sentence


@pytest.mark.parametrize("because", [reason for reason, _ in EXAMPLES], ids=lambda v: str(v.code))
def test_each_reason_round_trips_through_json_alone_and_in_a_decision_record(because: Any) -> None:
    assert REASON_ADAPTER.validate_json(because.model_dump_json()) == because
    assert REASON_ADAPTER.validate_python(because.model_dump(mode="json")) == because
    record = {
        "id": "0-1-0",
        "module": "m",
        "action": "x",
        "reason": render(because),
        "because": because.model_dump(mode="json"),
    }
    read = DecisionDocument.read(record)
    assert read.because == because and read.as_json() == record


def test_every_decision_reason_belongs_to_an_action_and_the_causes_to_none() -> None:
    possible = set().union(*REASONS_OF.values())
    assert possible == set(ReasonCode) - CAUSES


def test_a_values_refusal_says_what_the_values_layers_say() -> None:
    merged = merge_values(
        ValuesLayers(module={"seed": "abc", "deep": {"a": list(range(30))}}, live={"seed": "x", "deep": {"a": [1]}}),
        {"/seed": "readOnly", "/deep": "readOnly"},
    )
    assert len(merged.refusals) == 2
    for refusal in merged.refusals:
        because = ValuesRefused(
            cluster="c1", path=refusal.path, current=refusal.current, wanted=refusal.wanted, layer=refusal.layer
        )
        assert render(because) == f"c1: {refusal.reason}"


def test_a_reason_of_a_code_this_release_does_not_know_reads_and_keeps_its_sentence() -> None:
    record = {
        "id": "0-1-0",
        "module": "m",
        "action": "drained",
        "reason": "eu-1 drained by the new scheduler",
        "because": {"code": "cluster-drained", "cluster": "eu-1"},
    }
    read = DecisionDocument.read(record)
    assert isinstance(read.because, UnrecognisedReason) and read.because.code == "cluster-drained"
    assert read.reason == "eu-1 drained by the new scheduler" and read.as_json() == record
