"""The previous release's decide-state, restored into this release, and its rollout finished.

tests/upgrade/fixtures/v0.26 was written by release v0.26 (make_fixture.py, run on its
tree): a partition mid-rollout — `app` at v2 with the canary done and the wave waiting for
approval, `infra` Complete, `old` deleted (its tombstone), c6 removed (its tombstone),
leases from heartbeats, a namespace restriction, the clock. The records go through the
worker's decode path (streams/state.PartitionState.restore) into the worker's decider.
"""

from __future__ import annotations

import json

from rollout.api.manifests import ModuleSpec, Sync
from rollout.engine import stored
from rollout.engine.applied_documents import RefusedSpec
from rollout.wire.events import ClusterHeartbeats, RolloutCommanded, SyncStatusReported, Tick
from streams.decider import state_mappings
from streams.state import PartitionState
from tests.upgrade.release_fixture import (
    PREVIOUS_RELEASE,
    TOPICS,
    PreviousTarget,
    RestoredDecider,
    journal_values,
    release_info,
    state_documents,
    state_records,
    without_previous_defaults,
)

FLEET = ["c1", "c2", "c3", "c4", "c5"]
WAVE = ["c2", "c3", "c4", "c5"]


def restored() -> RestoredDecider:
    return RestoredDecider(state_documents(), journal_length=len(journal_values()))


def succeeded(cluster: str, module: str, revision: str, generation: int) -> SyncStatusReported:
    return SyncStatusReported(
        cluster=cluster, module=module, revision=revision, state="succeeded", generation=generation
    )


def test_the_fixture_is_the_previous_release() -> None:
    info = release_info()
    assert info["release"] == PREVIOUS_RELEASE and len(info["commit"]) == 40
    assert info["records"] == len(state_documents())
    assert info["modules"] == {"app": "AwaitingApproval", "infra": "Complete"}


def test_the_previous_release_state_restores_as_it_was_left() -> None:
    decider = restored()
    modules, targets, clusters = decider.table("modules"), decider.table("targets"), decider.table("clusters")
    assert decider.restored == len(state_documents())

    app, infra = modules["app"], modules["infra"]
    assert (app.phase, app.generation, app.target, app.stable, app.stage_index) == ("AwaitingApproval", 2, 2, 1, 1)
    assert type(app.spec) is ModuleSpec and not isinstance(app.spec, RefusedSpec)
    assert [s.name for s in app.spec.rollout.stages] == ["canary", "wave"]  # type: ignore[union-attr]
    assert {g: (r.revision, r.assigned) for g, r in app.revisions.items()} == {1: ("v1", 4), 2: ("v2", 1)}
    assert all(type(r.sync) is Sync for r in app.revisions.values())
    assert (infra.phase, infra.stable, infra.target) == ("Complete", 1, 1)
    assert "old" not in modules and decider.table("deleted_modules")["old"].generation == 1

    assert targets["app/c1"].assigned == 2 and targets["app/c1"].status == "succeeded"
    assert {c: targets[f"app/{c}"].assigned for c in WAVE} == dict.fromkeys(WAVE, 1)
    assert {c: targets[f"app/{c}"].category for c in WAVE} == dict.fromkeys(WAVE, "pending")
    assert sorted(k for k in targets if k.startswith("infra/")) == [f"infra/{c}" for c in WAVE]

    assert sorted(clusters) == FLEET and all(clusters[c].ready for c in FLEET)
    assert all(clusters[c].lease.expires_at == 1600.0 for c in FLEET)
    assert "c6" in decider.table("removed_clusters")
    restriction = decider.table("restrictions")["fleet"].restriction
    assert restriction.spec.allowed_source_patterns == ["https://github\\.com/.*"]
    assert decider.table("clock")["now"] == 1030.0


def test_this_release_writes_the_restored_records_as_the_previous_release_did() -> None:
    """The same JSON: a record this release rewrites during a rolling upgrade, or before a
    rollback, is one the previous release reads as its own. v0.26 forbids unknown fields, so
    while it is the previous release a field added to a stored record breaks both; once the
    previous release is one that drops unknown fields (stored.py), this may allow additions."""
    state = PartitionState(state_mappings())
    state.restore(state_records(state_documents()))
    for document in state_documents():
        if document["value"] is None:
            continue
        mapping, _, key = document["key"].partition(":")
        written = stored.encode(state.mappings[mapping].committed[key], state.versions.get(mapping, 1))
        expected = document["value"]
        if mapping == "targets":  # stored without its defaults, v0.26's: it reads them back the same (below)
            expected = without_previous_defaults(expected)
        assert json.loads(written) == expected, (
            f"{document['key']}: this release writes it differently from {PREVIOUS_RELEASE}, which could not read "
            "it during a rolling upgrade or after a rollback (README: Upgrading a running engine); a field added "
            "to a stored record is declared with rollout.engine.state.added_field, left out while at its default"
        )
        assert not written.startswith(b'{"_v"'), "version 1 records carry no version marker"


def test_the_previous_release_reads_a_target_written_without_its_defaults_as_the_one_it_wrote() -> None:
    """Targets are stored without their defaults (stored.py `encode`: a fleet-sized table);
    v0.26 reads what this release writes as the very record it wrote in full."""
    state = PartitionState(state_mappings())
    state.restore(state_records(state_documents()))
    targets = [d for d in state_documents() if d["key"].startswith("targets:") and d["value"] is not None]
    assert len(targets) >= 9
    for document in targets:
        written = stored.encode(state.mappings["targets"].committed[document["key"].partition(":")[2]])
        assert len(written) < len(json.dumps(document["value"], separators=(",", ":")))
        assert PreviousTarget.model_validate_json(written) == PreviousTarget.model_validate(document["value"])


def test_the_previous_release_journal_delivered_again_changes_nothing() -> None:
    """The redelivery windows it stored (event ids per module, cluster, target) hold."""
    decider = restored()
    out = decider.send(*journal_values())
    assert decider.moved(out) == {} and decider.decisions(out) == [] and decider.dead_letters(out) == []
    assert decider.table("modules")["app"].phase == "AwaitingApproval"
    assert "old" not in decider.table("modules")


def test_the_rollout_the_previous_release_left_awaiting_approval_goes_on_to_complete() -> None:
    decider = restored()
    decider.send(Tick(now=1_040.0), ClusterHeartbeats(clusters=FLEET, lease_seconds=600.0))

    out = decider.send(RolloutCommanded(module="app", command="approve", stage="wave", user="upgrader"))
    first = decider.moved(out)
    assert len(first) == 2 and set(first.values()) == {"v2"} and {k.split("/")[1] for k in first} <= set(WAVE)
    assert "stage-started" in [d["action"] for d in decider.decisions(out)]

    out = decider.send(*(succeeded(key.split("/")[1], "app", "v2", 2) for key in first), Tick(now=1_050.0))
    second = decider.moved(out)
    assert len(second) == 2 and set(second.values()) == {"v2"} and not set(second) & set(first)

    out = decider.send(*(succeeded(key.split("/")[1], "app", "v2", 2) for key in second), Tick(now=1_060.0))
    app = decider.table("modules")["app"]
    assert (app.phase, app.stable, app.target) == ("Complete", 2, 2)
    assert "complete" in [d["action"] for d in decider.decisions(out)]
    status = decider.module_status["app"]
    assert status is not None
    assert (status["phase"], status["targetRevision"], status["stableRevision"]) == ("Complete", "v2", "v2")
    assert decider.table("modules")["infra"].phase == "Complete"
    assert decider.dead_letters() == []

    # what this release wrote reads back: the fixture and the changelog, restored again
    again = PartitionState(state_mappings())
    again.restore([*state_records(state_documents()), *decider.changelog])
    assert again.mappings["modules"].committed["app"] == app
    assert again.mappings["targets"].committed == decider.table("targets").committed  # type: ignore[attr-defined]
    assert TOPICS.journal.startswith("upgrade.")
