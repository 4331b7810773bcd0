"""A stored spec this release's rules refuse (rollout/engine/applied_documents.py): the
partition loads, the module halts with `StoredSpecRefused` until it is applied again, and
the spec is kept — and written back — exactly as stored, so nothing is lost and the release
before reads it as its own.

The rule is tightened for real: the Git URL check the API calls (`check_url`, looked up by
rollout/api/manifests.py when it validates) is replaced by a stricter one, as a later
release might: a Git URL must name its repository with `.git`. v0.26's modules use
https://github.com/example/app.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from rollout.api import manifests
from rollout.api.manifests import ModuleManifest, ModuleSpec, Sync
from rollout.engine import stored
from rollout.engine.applied_documents import (
    STORED_SPEC_REFUSED,
    RefusedRestriction,
    RefusedSpec,
    RefusedSync,
    spec_refusal,
)
from rollout.engine.state import ModuleRecord
from rollout.wire.events import (
    ClusterHeartbeats,
    ClusterObserved,
    ModuleApplied,
    RolloutCommanded,
    SyncStatusReported,
    Tick,
)
from tests.rollout.builders import cluster
from tests.upgrade.release_fixture import RestoredDecider, journal_values, state_documents

FLEET = ["c1", "c2", "c3", "c4", "c5"]
WAVE = ["c2", "c3", "c4", "c5"]


@pytest.fixture
def tightened(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This release's rules, tightened since v0.26: a Git URL must end in `.git`."""
    lenient = manifests.check_url

    def check_url(value: str, *, schemes: tuple[str, ...], what: str) -> str:
        if what == "Git" and not value.endswith(".git"):
            raise ValueError(f"{value!r}: a Git URL must name its repository with .git")
        return lenient(value, schemes=schemes, what=what)

    monkeypatch.setattr(manifests, "check_url", check_url)
    yield
    monkeypatch.setattr(manifests, "check_url", lenient)


def restored(documents: list[dict[str, Any]] | None = None) -> RestoredDecider:
    return RestoredDecider(documents or state_documents(), journal_length=len(journal_values()))


def stored_spec(module: str) -> dict[str, Any]:
    return next(doc["value"]["spec"] for doc in state_documents() if doc["key"] == f"modules:{module}")


def app_manifest(url: str, tag: str) -> ModuleManifest:
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "wave", "selector": {"matchLabels": {"ring": "wave"}}, "maxConcurrency": 2, "requireApproval": True},
    ]
    return ModuleManifest.model_validate(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "app", "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {}},
                "sync": {
                    "source": {"git": {"url": url, "version": {"tag": tag}}},
                    "package": {"kustomize": {"path": "./deploy"}},
                },
                "rollout": {"stages": stages},
            },
        }
    )


def succeeded(clusters: list[str], tag: str, generation: int) -> list[SyncStatusReported]:
    return [
        SyncStatusReported(cluster=c, module="app", revision=tag, state="succeeded", generation=generation)
        for c in clusters
    ]


def moved_clusters(moved: dict[str, str | None]) -> list[str]:
    return sorted(key.split("/", 1)[1] for key in moved)


def test_a_spec_a_tightened_rule_refuses_restores_kept_as_stored(
    tightened: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rollout.state"):
        decider = restored()
    assert decider.restored == len(state_documents())  # the partition loads
    app, infra = decider.table("modules")["app"], decider.table("modules")["infra"]
    assert isinstance(app.spec, RefusedSpec) and isinstance(infra.spec, RefusedSpec)
    assert all(isinstance(revision.sync, RefusedSync) for revision in app.revisions.values())
    refusal = spec_refusal(app.spec)
    assert refusal is not None and refusal.document == "spec"
    (problem,) = refusal.problems
    assert problem.startswith("sync.source.git.url: Value error, 'https://github.com/example/app'")
    assert problem.endswith("a Git URL must name its repository with .git")
    # the engine reads the spec as stored
    assert app.spec.sync.source.git.url == "https://github.com/example/app"  # type: ignore[union-attr]
    assert [stage.name for stage in app.spec.rollout.stages] == ["canary", "wave"]  # type: ignore[union-attr]
    assert app.revisions[2].sync.revision == "v2"
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("modules:app: kept as stored")]
    assert len(warned) == 3, warned  # its spec and its two generations' syncs
    assert "the module is halted until it is applied again" in warned[0]


def test_a_module_whose_stored_spec_is_refused_halts_until_it_is_applied_again(tightened: None) -> None:
    decider = restored()
    out = decider.send(Tick(now=1_040.0))
    (halted,) = [d for d in decider.decisions(out) if d["module"] == "app"]
    assert halted["action"] == "halted"
    assert f"halted ({STORED_SPEC_REFUSED})" in halted["reason"] and "re-apply the module" in halted["reason"]
    status = decider.module_status["app"]
    assert status is not None and (status["phase"], status["lastDecision"]) == ("Halted", halted["reason"])

    # nothing moves: an approval does not lift it, and resume is refused saying why
    for command in ("approve", "resume"):
        out = decider.send(
            RolloutCommanded(module="app", command=command, stage="wave" if command == "approve" else None)
        )
        assert decider.moved(out) == {} and decider.table("modules")["app"].phase == "Halted"
    (refusal,) = decider.dead_letters()
    assert "module app stays halted: the spec an earlier release stored breaks this release's rules" in str(refusal)
    assert "apply the module again" in str(refusal)

    # the record written meanwhile keeps the spec exactly as stored (nothing lost)
    record = decider.written("modules:app")
    assert record is not None and record["spec"] == stored_spec("app") and record["phase"] == "Halted"
    assert [r["sync"] for r in record["revisions"].values()] == [
        doc["value"]["revisions"][g]["sync"]
        for doc in state_documents()
        if doc["key"] == "modules:app"
        for g in ("1", "2")
    ]

    # applied again, with a URL this release accepts: a new generation, rolled out to Complete
    out = decider.send(ModuleApplied(module=app_manifest("https://github.com/example/app.git", "v3")))
    assert "new-revision" in [d["action"] for d in decider.decisions(out)]
    assert decider.moved(out) == {"app/c1": "v3"}
    app = decider.table("modules")["app"]
    assert spec_refusal(app.spec) is None and type(app.spec) is ModuleSpec and app.target == 3
    decider.send(ClusterHeartbeats(clusters=FLEET, lease_seconds=600.0), *succeeded(["c1"], "v3", 3))
    assert decider.table("modules")["app"].phase == "AwaitingApproval"
    out = decider.send(RolloutCommanded(module="app", command="approve", stage="wave"))
    first = moved_clusters(decider.moved(out))
    out = decider.send(*succeeded(first, "v3", 3))
    second = moved_clusters(decider.moved(out))
    assert len(first) == len(second) == 2 and sorted(first + second) == WAVE
    decider.send(*succeeded(second, "v3", 3), Tick(now=1_050.0))
    app = decider.table("modules")["app"]
    assert (app.phase, app.stable, app.target) == ("Complete", 3, 3)
    assert [type(r.sync) for r in app.revisions.values()] == [Sync]  # the refused generations pruned
    assert decider.dead_letters() == [refusal]  # the refused resume's, nothing since


def test_the_release_before_reads_a_record_this_release_wrote_while_its_spec_was_refused(
    tightened: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback: the previous release's rules accept the spec it stored; the module stays
    Halted (`rollout resume` or re-applying it lifts that there)."""
    decider = restored()
    decider.send(Tick(now=1_040.0))
    written = [value for key, value in decider.changelog if key == b"modules:app"][-1]
    assert written is not None
    monkeypatch.undo()  # the rules as the release before had them
    record = stored.decode("modules", "app", ModuleRecord, written)
    assert type(record.spec) is ModuleSpec and record.spec.sync.source.git.url == "https://github.com/example/app"  # type: ignore[union-attr]
    assert all(type(r.sync) is Sync for r in record.revisions.values())
    assert (record.phase, record.halted) == ("Halted", False)


def test_a_spec_field_this_release_no_longer_knows_halts_the_module_not_the_partition() -> None:
    """A field removed from the API (the stored spec has it, this release forbids it), with
    no migration for it: the module's spec is refused, kept with the field, and it halts."""
    documents = copy.deepcopy(state_documents())
    infra = next(doc for doc in documents if doc["key"] == "modules:infra")
    infra["value"]["spec"]["sync"]["package"]["kustomize"]["prune_orphans"] = True
    decider = restored(documents)
    refusal = spec_refusal(decider.table("modules")["infra"].spec)
    assert refusal is not None
    assert refusal.problems == ("sync.package.kustomize.prune_orphans: Extra inputs are not permitted",)
    assert spec_refusal(decider.table("modules")["app"].spec) is None

    # a cluster joining its selector touches it: it halts (and the joiner gets what the fleet runs)
    out = decider.send(ClusterObserved(cluster=cluster("c7", {"ring": "wave"})))
    assert [d["action"] for d in decider.decisions(out) if d["module"] == "infra" and d["action"] == "halted"] == [
        "halted"
    ]
    assert decider.table("modules")["infra"].phase == "Halted"
    assert decider.written("modules:infra")["spec"] == infra["value"]["spec"]  # type: ignore[index]
    assert decider.dead_letters() == []


def test_a_restriction_this_release_refuses_still_restricts_as_stored() -> None:
    documents = copy.deepcopy(state_documents())
    record = next(doc for doc in documents if doc["key"] == "restrictions:fleet")
    record["value"]["restriction"]["spec"]["allowed_chart_repositories"] = ["https://charts\\.example/.*"]
    decider = restored(documents)
    restriction = decider.table("restrictions")["fleet"].restriction
    assert isinstance(restriction, RefusedRestriction)
    assert restriction.refusal.problems == ("spec.allowed_chart_repositories: Extra inputs are not permitted",)

    out = decider.send(ModuleApplied(module=app_manifest("https://gitlab.example/app.git", "v3")))
    (refused,) = decider.dead_letters(out)
    assert "https://github\\.com/.*" in refused["reason"]
    assert decider.table("modules")["app"].target == 2
