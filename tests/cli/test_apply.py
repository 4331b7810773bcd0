"""`rollout apply` on a real broker: all or nothing, sizes checked first, created /
configured / unchanged, and warnings before a surprise.

No worker runs here (`--no-wait`): these are facts about what reaches the topics, read
back as the engine reads them (`read_committed`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from click.testing import CliRunner, Result

from infra import client, transactions
from infra.topics import TopicNames, ensure_topics
from rollout_cli.main import cli
from rollout_cli.publishing.intents import intents_for, publish_intents
from rollout_cli.publishing.manifest_files import load_manifest_files

pytestmark = pytest.mark.integration
API = "rollout.dev/v1alpha1"
PARTITIONS = 2


def a_cluster(name: str, ring: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "fleet", "labels": {"ring": ring}},
        "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
    }


def a_module(name: str, *, selector: dict[str, str], substitute: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Module",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": selector},
            "sync": {
                "source": {"git": {"url": "https://github.com/example/app", "version": {"tag": "v1"}}},
                "package": {"kustomize": {"path": "./deploy", "substitute": substitute or {}}},
            },
            "rollout": {"stages": [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}]},
        },
    }


@pytest.fixture
def topics(kafka_bootstrap: str) -> TopicNames:
    prefix = f"apply-{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, prefix, PARTITIONS))
    return TopicNames(prefix)


def apply(bootstrap: str, topics: TopicNames, path: Path) -> Result:
    args = ["apply", "-f", str(path), "--no-wait", "--bootstrap-servers", bootstrap, "--topic-prefix", topics.prefix]
    return CliRunner().invoke(cli, args)


def write(path: Path, *documents: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(documents))
    return path


def committed(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [record.json() for record in asyncio.run(client.read_all(bootstrap, topic))]


def raw_ends(bootstrap: str, topic: str) -> int:
    """The sum of the partitions' log end offsets (aborted records count: read_uncommitted)."""

    async def ends() -> int:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
        await consumer.start()
        try:
            partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            return sum((await consumer.end_offsets(partitions)).values())
        finally:
            await consumer.stop()

    return asyncio.run(ends())


def limit_topic(bootstrap: str, topic: str, max_bytes: int) -> None:
    async def alter() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": str(max_bytes)})
            await admin.alter_configs([resource])
        finally:
            await admin.close()

    asyncio.run(alter())
    deadline = time.monotonic() + 30  # the broker applies a topic's new config asynchronously
    while asyncio.run(transactions.message_limits(bootstrap, [topic]))[topic].max_bytes != max_bytes:
        assert time.monotonic() < deadline, f"{topic} never got max.message.bytes={max_bytes}"
        time.sleep(0.2)


def test_apply_says_created_configured_unchanged_per_cluster_and_stamps_modules_past_them(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    fleet = [a_cluster("c1", "canary"), a_cluster("w1", "wave")]
    path = write(tmp_path / "fleet.yaml", *fleet, a_module("app", selector={}))
    first = apply(kafka_bootstrap, topics, path)
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[:2] == ["cluster/c1 created", "cluster/w1 created"]
    assert first.stderr == ""
    again = apply(kafka_bootstrap, topics, path)
    assert again.stdout.splitlines()[:2] == ["cluster/c1 unchanged", "cluster/w1 unchanged"]
    fleet[1]["metadata"]["labels"]["ring"] = "wave-2"
    changed = apply(kafka_bootstrap, topics, write(path, *fleet, a_module("app", selector={})))
    assert changed.stdout.splitlines()[:2] == ["cluster/c1 unchanged", "cluster/w1 configured"]
    clusters = asyncio.run(client.read_all(kafka_bootstrap, topics.clusters))
    modules = committed(kafka_bootstrap, topics.intents)
    assert len(clusters) == 6 and len(modules) == 3
    for module in modules:  # each stamp covers every cluster record committed with or before it
        assert module["fleet"]
    last = {p: max(r.offset for r in clusters if r.partition == p) + 1 for p in {r.partition for r in clusters}}
    assert {int(p): o for p, o in modules[-1]["fleet"].items()} == last


def test_an_event_over_its_topic_limit_is_named_and_nothing_is_published(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    limit_topic(kafka_bootstrap, topics.intents, 4000)
    big = a_module("big", selector={}, substitute={"PAYLOAD": "x" * 5000})
    path = write(tmp_path / "fleet.yaml", a_cluster("c1", "canary"), a_module("small", selector={}), big)
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {path}: document 3 (Module/big): encoded event is 5.8 kB, over the 4.0 kB limit of topic "
        f"{topics.intents} (max.message.bytes)",
        "error: nothing was applied (1 problem(s))",
    ]
    assert raw_ends(kafka_bootstrap, topics.clusters) == raw_ends(kafka_bootstrap, topics.intents) == 0


def test_a_failure_inside_the_transaction_leaves_nothing_visible_to_committed_readers(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    """Past the checks (publish_intents called directly, the producer allowed 1 MB), the
    broker refuses the module over the topic's limit after the cluster was written: the
    transaction aborts, and a read_committed reader sees neither."""
    limit_topic(kafka_bootstrap, topics.intents, 4000)
    big = a_module("big", selector={}, substitute={"PAYLOAD": "x" * 5000})
    intents = intents_for(load_manifest_files([write(tmp_path / "fleet.yaml", a_cluster("c1", "canary"), big)]))
    with pytest.raises(Exception, match=r"(?i)too ?large"):
        asyncio.run(publish_intents(kafka_bootstrap, topics, intents, max_bytes=1_000_000))
    assert raw_ends(kafka_bootstrap, topics.clusters) > 0  # the cluster record was written, then aborted
    assert committed(kafka_bootstrap, topics.clusters) == []
    assert committed(kafka_bootstrap, topics.intents) == []


def test_a_module_or_stage_matching_no_known_cluster_is_applied_with_a_warning(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(
        tmp_path / "fleet.yaml",
        a_cluster("w1", "wave"),
        a_module("lonely", selector={"env": "nowhere"}),
        a_module("staged", selector={}),
    )
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: module/lonely: its selector matches none of the 1 known cluster(s); "
        "it completes at once, deploying nothing, until a matching cluster appears",
        "warning: module/staged: stage canary gets none of the module's 1 cluster(s); it will pass with nothing to do",
    ]
    assert sorted(m["module"]["metadata"]["name"] for m in committed(kafka_bootstrap, topics.intents)) == [
        "lonely",
        "staged",
    ]
    planned = CliRunner().invoke(
        cli,
        ["plan", "-f", str(path), "--bootstrap-servers", kafka_bootstrap, "--topic-prefix", topics.prefix],
    )
    assert planned.exit_code == 0, planned.output
    assert planned.stderr == result.stderr


def test_an_object_twice_is_an_error_naming_both_places(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(tmp_path / "fleet.yaml", a_cluster("c1", "canary"), a_cluster("c1", "wave"))
    result = apply(kafka_bootstrap, topics, path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {path}: document 2 (Cluster/c1): Cluster/c1 is already in {path}: document 1 (Cluster/c1); "
        "apply each object once"
    )
    assert json.dumps(committed(kafka_bootstrap, topics.clusters)) == "[]"


def depending(name: str, *depends_on: str) -> dict[str, Any]:
    module = a_module(name, selector={"ring": "canary"})
    module["spec"]["dependsOn"] = list(depends_on)
    return module


def plan(bootstrap: str, topics: TopicNames, path: Path) -> Result:
    return CliRunner().invoke(
        cli, ["plan", "-f", str(path), "--bootstrap-servers", bootstrap, "--topic-prefix", topics.prefix]
    )


def test_plan_refuses_a_dependency_cycle_as_apply_does(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(tmp_path / "cycle.yaml", a_cluster("c1", "canary"), depending("a", "b"), depending("b", "a"))
    planned = plan(kafka_bootstrap, topics, path)
    applied = apply(kafka_bootstrap, topics, path)
    assert planned.exit_code == applied.exit_code == 2
    cycle = f"error: {path}: document 2 (Module/a): dependency cycle: a → b → a"
    assert planned.stderr.startswith(cycle) and applied.stderr.startswith(cycle), (planned.stderr, applied.stderr)
    assert "nothing was planned" in planned.stderr and "nothing was applied" in applied.stderr
    assert committed(kafka_bootstrap, topics.intents) == []


def test_a_dependency_that_exists_nowhere_is_applied_and_planned_with_a_warning(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    path = write(tmp_path / "app.yaml", a_cluster("c1", "canary"), depending("app", "base"), depending("web", "app"))
    warning = (
        f"warning: {path}: document 2 (Module/app): dependsOn base: no module base exists (not in these files, "
        "not known to the engine); app stays BLOCKED on every cluster until base is applied"
    )
    applied = apply(kafka_bootstrap, topics, path)
    assert applied.exit_code == 0, applied.output
    assert applied.stderr.splitlines() == [warning]  # web depends on app, applied with it: no warning
    assert sorted(m["module"]["metadata"]["name"] for m in committed(kafka_bootstrap, topics.intents)) == ["app", "web"]
    planned = plan(kafka_bootstrap, topics, path)  # against the fleet just applied; no worker knows base either
    assert planned.exit_code == 0, planned.output
    assert planned.stderr.splitlines() == [warning]
