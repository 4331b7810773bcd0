"""Journal retention tied to snapshots, on the real broker (streams/snapshots.py).

One stack, in order, like an operator's week: the example fleet rolls out, a snapshot is
taken, the fleet moves on, `rollout snapshot retain` deletes the journal below the snapshot
(Kafka's DeleteRecords) — then a full replay is refused and says where the journal starts,
a replay from the snapshot refolds only the tail and agrees with the topics, the worker
restarts on the truncated journal and goes on, a tail decision altered on the topic is a
difference, and a decider whose state does not cover the journal's new start refuses to
resume rather than skip the deleted records.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition
from click.testing import CliRunner, Result

from infra import client
from infra.topics import delete_records_below, log_start_offsets
from rollout_cli.main import cli
from streams import snapshots
from tests.integration.stack import EXAMPLES, Stack, wait_for
from tests.integration.test_walking_skeleton import cluster_event

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("retention"))
    stack.start_worker()
    stack.start_applier("--simulate-status")
    stack.apply(EXAMPLES)
    wait_for("the example fleet's files", lambda: "proxy/prod-eu-1/podinfo.yaml" in stack.files())
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def snapshot_dir(stack: Stack) -> Path:
    return stack.workdir / "snapshots"


def cli_run(stack: Stack, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=stack.env, catch_exceptions=False)


def journal_records(stack: Stack) -> int:
    return len(stack.records("journal"))


def decided_positions(stack: Stack) -> dict[int, int]:
    """The decider's committed position per journal partition, from decide-state."""
    captured = asyncio.run(snapshots.capture(stack.bootstrap, stack.topics))
    return captured.decide.positions()


def test_a_snapshot_records_the_decider_state_at_its_committed_positions(stack: Stack, snapshot_dir: Path) -> None:
    result = cli_run(stack, "snapshot", "take", "--dir", str(snapshot_dir))
    assert result.exit_code == 0, result.output
    [path] = snapshots.listed(snapshot_dir)
    taken = snapshots.load(path)
    assert all(position > 0 for position in taken.decide.positions().values())
    assert all(part.records for part in taken.decide.partitions.values())
    assert any("chain:head" in part.records for part in taken.decide.partitions.values())
    # the fleet moves on past the snapshot: a cluster turns ready, time passes
    stack.send("clusters", "prod-ap-6", cluster_event("prod-ap-6", ready=True))
    wait_for("prod-ap-6's files", lambda: "proxy/prod-ap-6/monitoring.yaml" in stack.files())
    now = decided_positions(stack)  # a cluster's observation goes to every journal partition
    assert all(now[p] > position for p, position in taken.decide.positions().items())


def test_retention_deletes_the_journal_below_the_snapshot_only(stack: Stack, snapshot_dir: Path) -> None:
    taken = snapshots.load(snapshot_dir)
    before = journal_records(stack)
    listing = cli_run(stack, "snapshot", "list", "--dir", str(snapshot_dir))
    assert listing.exit_code == 0 and f"journal {{0: {taken.decide.positions()[0]}" in listing.output, listing.output
    dry = cli_run(stack, "snapshot", "retain", "--dir", str(snapshot_dir), "--keep", "0s", "--dry-run")
    assert dry.exit_code == 0 and "would delete offsets 0.." in dry.output, dry.output
    assert set(asyncio.run(log_start_offsets(stack.bootstrap, stack.topics.journal)).values()) == {0}
    result = cli_run(stack, "snapshot", "retain", "--dir", str(snapshot_dir), "--keep", "0s")
    assert result.exit_code == 0, result.output
    starts = asyncio.run(log_start_offsets(stack.bootstrap, stack.topics.journal))
    assert starts == taken.decide.positions(), result.output
    # the assignments below what the snapshot's replay reads of them
    assigned = asyncio.run(log_start_offsets(stack.bootstrap, stack.topics.assignments))
    needed = {p: min(taken.assignments_from[p], taken.assemble.positions()[p]) for p in assigned}
    assert assigned == needed and any(needed.values()), result.output
    assert journal_records(stack) < before
    assert snapshots.listed(snapshot_dir), "the only snapshot is kept"
    # sync-status and ticks: below what the router had routed when the snapshot was taken
    routed = asyncio.run(client.committed_offsets(stack.bootstrap, f"{stack.prefix}rollout-worker.route"))
    (taken_path,) = snapshots.listed(snapshot_dir)
    for role in snapshots.ROUTED_INPUTS:
        topic = stack.topics.name(role)
        starts = asyncio.run(log_start_offsets(stack.bootstrap, topic))
        at_snapshot = asyncio.run(client.offsets_at(stack.bootstrap, topic, snapshots.taken_at(taken_path)))
        assert any(starts.values()), f"{topic} was not cut: {result.output}"
        for partition, start in starts.items():
            assert start <= min(routed.get(TopicPartition(topic, partition), 0), at_snapshot[partition])
    assert "sync-status partition" in result.output and "ticks partition" in result.output, result.output
    # again: nothing more to delete
    again = cli_run(stack, "snapshot", "retain", "--dir", str(snapshot_dir), "--keep", "0s")
    assert again.exit_code == 0 and "nothing to delete" in again.output, again.output


def test_a_full_replay_of_a_truncated_journal_says_where_it_starts(stack: Stack) -> None:
    result = cli_run(stack, "replay", "--check")
    assert result.exit_code == 2
    assert "no longer starts at offset 0" in result.output
    assert "--from-snapshot" in result.output
    assert "identical" not in result.output
    with pytest.raises(client.RecordsDeleted, match="the records between were deleted"):
        asyncio.run(client.read_from(stack.bootstrap, stack.topics.journal, {0: 0}))  # never a silent jump


def test_a_replay_from_the_snapshot_refolds_only_the_tail_and_agrees(stack: Stack, snapshot_dir: Path) -> None:
    assert stack.stop_worker() == 0  # everything it decided committed, nothing moving
    taken = snapshots.load(snapshot_dir)
    ends = asyncio.run(client.end_offsets(stack.bootstrap, stack.topics.journal))
    result = cli_run(stack, "replay", "--check", "--from-snapshot", str(snapshot_dir))
    assert result.exit_code == 0, result.output
    assert "identical" in result.output
    assert "decider state compared in journal partitions [0, 1]" in result.output
    replayed = int(re.search(r"replayed (\d+) journal events", result.output).group(1))  # type: ignore[union-attr]
    tail = sum(ends[p] - taken.decide.positions()[p] for p in ends)
    assert 0 < replayed <= tail  # the tail only (transaction markers take offsets too)
    assert replayed == journal_records(stack)


def test_the_worker_restarted_on_the_truncated_journal_resumes_where_it_was(stack: Stack, snapshot_dir: Path) -> None:
    positions = decided_positions(stack)
    stack.start_worker()
    for partition, position in positions.items():
        restored = (
            rf"decide {re.escape(stack.topics.journal)}-{partition}: state restored .* resuming at offset {position}\n"
        )
        assert re.search(restored, stack.log("worker")), (partition, position)
    stack.send("clusters", "staging-eu-4", cluster_event("staging-eu-4", ready=True))
    wait_for("staging-eu-4's files", lambda: "proxy/staging-eu-4/monitoring.yaml" in stack.files())
    assert stack.stop_worker() == 0
    result = cli_run(stack, "replay", "--check", "--from-snapshot", str(snapshot_dir))
    assert result.exit_code == 0, result.output
    assert "identical" in result.output


def test_a_tail_decision_altered_on_the_topic_is_a_replay_difference(stack: Stack, snapshot_dir: Path) -> None:
    taken = snapshots.load(snapshot_dir)
    tail = []
    for record in stack.records("decisions"):
        document = orjson.loads(record.value or b"null")
        chain, offset, _ = document["id"].split("-")
        if int(offset) >= taken.decide.positions()[int(chain)]:
            tail.append(document)
    assert tail, "the fleet decided something after the snapshot"
    altered = {**tail[-1], "reason": "a reason the engine never gave"}
    stack.send("decisions", altered["module"], orjson.dumps(altered))
    result = cli_run(stack, "replay", "--check", "--from-snapshot", str(snapshot_dir))
    assert result.exit_code == 1, result.output
    assert f"decision {altered['id']}: replayed" in result.output


def test_a_decider_whose_state_does_not_cover_the_journal_start_refuses_to_resume(stack: Stack) -> None:
    """Journal records the decider never folded are deleted (by hand: `rollout snapshot
    retain` never deletes past its committed position): it must not skip them."""
    positions = decided_positions(stack)
    router = stack.start_worker_process("router", "--stages", "route")
    stack.wait_ready(router, name="router")
    stack.send("clusters", "prod-ap-6", cluster_event("prod-ap-6", ready=False))

    def routed() -> dict[int, int] | None:
        ends = asyncio.run(client.end_offsets(stack.bootstrap, stack.topics.journal))
        return ends if all(ends[p] > positions[p] for p in ends) else None

    ends = wait_for("the router to journal the event", routed)
    stack._stop(router)
    asyncio.run(delete_records_below(stack.bootstrap, stack.topics.journal, ends))
    decider = stack.start_worker_process("decider", "--stages", "decide")
    try:
        wait_for(
            "the decider to refuse",
            lambda: "were deleted before they were folded" in stack.log("decider"),
            timeout=90,
        )
        assert decided_positions(stack) == positions
    finally:
        stack._stop(decider)
