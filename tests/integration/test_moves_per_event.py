"""Moves per event on the real broker and the real worker (rollout/engine/stages.py): a module
applied to more clusters than one fold may join joins them in slices (membership.py), and a
stage of more clusters than one fold may move starts in the event that opens it; both carry
on in RolloutContinued events the decider sends itself through the dependencies topic and the
router. Every member is moved exactly once, the slices are in the journal, and `rollout
replay --check` refolds the same decisions from it. A mass lease expiry larger than one fold
(rollout/engine/leases.py) continues itself the same way, with a LeasesContinued the router
writes into the journal partition it names.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from infra import client
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.engine.stages import MOVES_PER_EVENT
from rollout.wire.events import ClusterObserved, HolderClaims, HolderHeartbeat, ModuleApplied, claim_chunk
from rollout_cli.main import cli
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration

CLUSTERS = MOVES_PER_EVENT + 300


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("slices"), partitions=2) as stack:
        yield stack


def observed(name: str) -> bytes:
    cluster = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "fleet", "labels": {"ring": "all"}},
        "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
    }
    return ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)).to_bytes()


def test_a_stage_larger_than_one_fold_moves_every_member_once_in_slices_and_replays(stack: Stack) -> None:
    names = [f"edge-{i:05d}" for i in range(CLUSTERS)]
    asyncio.run(client.publish(stack.bootstrap, stack.topics.clusters, [(n, observed(n)) for n in names]))

    def folded() -> int:  # (partition, cluster) pairs in the decider's state: every cluster in both
        keys = {(r.partition, r.key) for r in stack.records("decide_state") if (r.key or "").startswith("clusters:")}
        return len(keys)

    # the whole fleet folded first, so that the apply joins all of it in slices
    wait_for("the fleet folded", lambda: folded() == 2 * CLUSTERS or None, timeout=180, interval=2)
    module = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": "fleetwide", "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"ring": "all"}},
            "sync": {"source": {"git": {"url": "https://example.com/fleetwide", "version": {"tag": "v1"}}}},
            "rollout": {"stages": [{"name": "everyone", "maxConcurrency": "100%"}]},
        },
    }
    stack.send("intents", "fleetwide", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(module)))

    def moved() -> int:
        return sum(1 for d in stack.records("decisions") if (d.json() or {}).get("action") == "assign")

    wait_for(f"{CLUSTERS} clusters moved", lambda: moved() == CLUSTERS or None, timeout=180, interval=2)

    assigns = [d.json() for d in stack.records("decisions") if (d.json() or {}).get("action") == "assign"]
    assert sorted(a["cluster"] for a in assigns) == names  # each member once
    by_event = Counter(a["id"].rsplit("-", 1)[0] for a in assigns)  # "<partition>-<offset>": the event's
    assert len(by_event) >= 2 and max(by_event.values()) <= MOVES_PER_EVENT, by_event

    def answered() -> dict[str, int] | None:  # every continuation the module asked for folded
        records = [r.json() for r in stack.records("decide_state") if r.key == "modules:fleetwide" and r.value]
        last = records[-1] if records else {}
        asked = last.get("continuations", 0)
        return {"asked": asked} if asked and last.get("continued", 0) == asked else None

    asked = wait_for("the module's continuations folded", answered, timeout=60)["asked"]
    continued = [r.json() for r in stack.records("journal") if b'"RolloutContinued"' in (r.value or b"")]
    # slice 1: the apply considered 2,000 clusters (joins per event); what considers the last
    # 300 — slice 1, or a tick folded before it came back through the router — moves 1,700
    # too and, if it was slice 1, asks for slice 2 (a tick does not: slice 1 is outstanding)
    assert [c["slice"] for c in continued] == list(range(1, asked + 1)) and asked in (1, 2)
    assert {c["module"] for c in continued} == {"fleetwide"}
    joins = Counter(
        d["id"].rsplit("-", 1)[0] for d in (r.json() for r in stack.records("decisions")) if d["action"] == "joined"
    )
    assert sorted(joins.values()) == [300, 2000], joins  # 2,000 in the apply's event, 300 in the next

    replay = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
    assert replay.exit_code == 0, replay.output


def test_a_mass_lease_expiry_larger_than_one_fold_continues_itself_in_each_partition_and_replays(
    stack: Stack,
) -> None:
    names = [f"edge-{i:05d}" for i in range(CLUSTERS)]
    asyncio.run(client.publish(stack.bootstrap, stack.topics.clusters, [(n, observed(n)) for n in names]))
    holder = "applier-gone"
    for chunk in sorted({claim_chunk(name) for name in names}):
        claimed = [name for name in names if claim_chunk(name) == chunk]
        stack.send(
            "heartbeats",
            f"{holder}/{chunk}",
            HolderClaims(holder=holder, chunk=chunk, clusters=claimed, lease_seconds=5),
        )
    stack.send("heartbeats", holder, HolderHeartbeat(holder=holder, lease_seconds=5))  # then it dies: no more beats

    def settled() -> list[dict[str, object]] | None:  # both partitions expired it and took every cluster
        latest = {}
        for r in stack.records("decide_state"):
            if r.key == f"holders:{holder}":
                latest[r.partition] = r.json() or {}
        done = [h for h in latest.values() if h.get("expired") and h.get("settling") is None]
        return done if len(done) == 2 else None

    wait_for("the holder's clusters taken offline in both partitions", settled, timeout=180, interval=2)
    continued = [(r.partition, r.json()) for r in stack.records("journal") if b'"LeasesContinued"' in (r.value or b"")]
    # 2,300 clusters, 2,000 an event: each partition asked for the next slice, to itself
    assert {partition for partition, _ in continued} == {0, 1}
    assert all(event["partition"] == partition for partition, event in continued), continued
    facts = {}
    for r in stack.records("decide_state"):
        if (r.key or "").startswith("clusters:edge-"):
            facts[(r.partition, r.key)] = r.json() or {}
    assert len(facts) == 2 * CLUSTERS
    assert all(not f.get("ready", False) and (f.get("lease") or {}).get("expired") for f in facts.values())

    replay = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
    assert replay.exit_code == 0, replay.output
