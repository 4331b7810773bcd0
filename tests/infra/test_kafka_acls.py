"""The ACL catalogue (infra/kafka_acls.py) read as rules: who may write what, names derived
from the topic prefix and from the code that uses them, and `rollout kafka acls` printing
exactly the catalogue. (tests/integration/test_kafka_acls.py applies it to a real broker.)"""

from __future__ import annotations

import shlex

from aiokafka import TopicPartition
from click.testing import CliRunner

from infra.kafka_acls import COMPONENTS, Operation, PatternType, ResourceType, principal, principals, router_group
from infra.observability import Metrics
from infra.settings import Settings
from infra.topics import TOPICS, TopicNames
from rollout_cli.main import cli
from streams import snapshots
from streams.app import stage_specs
from streams.delivery import StageRunner

PREFIX = "fleet-a."
NAMES = TopicNames(PREFIX)
TOPIC = ResourceType.TOPIC


def writers(role: str) -> set[str]:
    return {p.component for p in principals(PREFIX) if p.allows(Operation.WRITE, TOPIC, NAMES.name(role))}


def test_only_the_worker_writes_the_engines_own_topics() -> None:
    engine_topics = ("journal", "assignments", "remote", "proxy", "module_status", "targets", "decisions")
    for role in (*engine_topics, "verdicts", "decide_state", "assemble_state", "ticks"):
        assert writers(role) == {"worker"}, role
    assert writers("dead_letters") == {"worker", "notifier"}  # what a webhook never accepted


def test_the_notifier_reads_the_decisions_and_writes_only_dead_letters() -> None:
    notifier = principal("notifier", PREFIX)
    readable = {spec.role for spec in TOPICS if notifier.allows(Operation.READ, TOPIC, NAMES.name(spec.role))}
    writable = {spec.role for spec in TOPICS if notifier.allows(Operation.WRITE, TOPIC, NAMES.name(spec.role))}
    assert readable == {"decisions"}
    assert writable == {"dead_letters"}
    assert notifier.allows(Operation.READ, ResourceType.GROUP, f"{PREFIX}rollout-notifier")
    assert not notifier.allows(Operation.READ, ResourceType.GROUP, f"{PREFIX}rollout-worker.decide")


def test_the_snapshotter_deletes_exactly_what_retain_cuts_and_writes_nothing() -> None:
    """Delete (DeleteRecords) on the journal, the assignments and ROUTED_INPUTS — the topics
    `snapshot retain` cuts (streams/snapshots.py) — and no Write, no transactional id, no
    group it could join: it can change no rollout."""
    snapshotter = principal("snapshotter", PREFIX)
    deletable = {spec.role for spec in TOPICS if snapshotter.allows(Operation.DELETE, TOPIC, NAMES.name(spec.role))}
    assert deletable == {"journal", "assignments", *snapshots.ROUTED_INPUTS}
    assert not any(Operation.WRITE in grant.operations for grant in snapshotter.grants)
    assert {g.resource_type for g in snapshotter.grants} == {TOPIC, ResourceType.GROUP}
    assert not snapshotter.allows(Operation.READ, ResourceType.GROUP, router_group(PREFIX))  # describe only
    for spec in TOPICS:
        assert not snapshotter.allows(Operation.DELETE, TOPIC, NAMES.name(spec.role)) or spec.role in deletable
    # the deleters of each topic: the snapshotter alone
    for role in deletable:
        assert {p.component for p in principals(PREFIX) if p.allows(Operation.DELETE, TOPIC, NAMES.name(role))} == {
            "snapshotter"
        }


def test_the_snapshotter_reads_the_state_and_describes_the_group_retain_reads() -> None:
    snapshotter = principal("snapshotter", PREFIX)
    readable = {spec.role for spec in TOPICS if snapshotter.allows(Operation.READ, TOPIC, NAMES.name(spec.role))}
    # take: both state topics (and the decisions' and assignments' end offsets); replay
    # --from-snapshot: the journal's tail, the assignments, decisions, status, assemblages
    assert {"decide_state", "assemble_state", "decisions", "assignments", "journal"} <= readable
    assert not readable & {"intents", "clusters", "status", "heartbeats", "dead_letters", "verdicts"}
    router = f"{Settings(bootstrap_servers='x:1', topic_prefix=PREFIX).group_id}.route"  # as retain names it
    assert router_group(PREFIX) == router
    assert snapshotter.allows(Operation.DESCRIBE, ResourceType.GROUP, router)
    assert not snapshotter.allows(Operation.DESCRIBE, ResourceType.GROUP, f"{PREFIX}rollout-worker.decide")
    for role in snapshots.ROUTED_INPUTS:  # their committed offsets and log starts: Delete implies Describe
        assert snapshotter.allows(Operation.DESCRIBE, TOPIC, NAMES.name(role))


def test_what_users_and_clusters_say_is_written_by_them_not_by_the_engine() -> None:
    assert writers("intents") == {"module-watcher", "dashboard", "cli-operator"}
    assert writers("clusters") == {"watcher", "module-watcher", "cli-operator"}  # restrictions travel there
    assert writers("status") == {"applier", "gate-runner", "promoter"}  # promoter: PromotionObserved
    assert writers("heartbeats") == {"applier"}


def test_the_cli_reader_writes_nothing_and_reads_everything_but_the_assemblers_state() -> None:
    """decide-state too: `rollout history --verify` compares each chain's tip with its head."""
    reader = principal("cli-reader", PREFIX)
    assert all(grant.operations == (Operation.READ,) for grant in reader.grants)
    readable = {spec.role for spec in TOPICS if reader.allows(Operation.READ, TOPIC, NAMES.name(spec.role))}
    assert readable == {spec.role for spec in TOPICS} - {"assemble_state"}


def test_the_dashboard_writes_only_the_intents_topic() -> None:
    dashboard = principal("dashboard", PREFIX)
    written = [name for g in dashboard.grants if Operation.WRITE in g.operations for name in g.names]
    assert written == [NAMES.intents]
    assert {g.resource_type for g in dashboard.grants} == {TOPIC}  # no group, no transactions


def test_every_name_is_the_engines_own() -> None:
    """Two engines (two prefixes) on one cluster: neither's principals reach the other's."""
    for each in principals(PREFIX):
        for grant in each.grants:
            for name in grant.names:
                assert name.startswith(PREFIX) or name.endswith(f".{PREFIX}"), (each.component, name)
    other = TopicNames("fleet-b.")
    for each in principals(PREFIX):
        for spec in TOPICS:
            for operation in Operation:
                assert not each.allows(operation, TOPIC, other.name(spec.role)), (each.component, spec.role)


def test_the_worker_may_use_the_groups_and_transactional_ids_its_stages_use() -> None:
    worker = principal("worker", PREFIX)
    for spec in stage_specs(Settings(bootstrap_servers="x:1", topic_prefix=PREFIX), Metrics()):
        assert worker.allows(Operation.READ, ResourceType.GROUP, spec.group_id)
        for topic in (*spec.topics, *([spec.state_topic] if spec.state_topic else [])):
            assert worker.allows(Operation.READ, TOPIC, topic), topic
        assert worker.allows(Operation.WRITE, TOPIC, spec.dead_letter_topic)
        runner = StageRunner.__new__(StageRunner)  # only its naming: no clients
        runner.spec = spec
        for transactional_id in runner.transactional_ids(TopicPartition(spec.topics[0], 3)):
            assert worker.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def test_rollout_kafka_acls_prints_one_kafka_acls_line_per_grant() -> None:
    result = CliRunner().invoke(cli, ["kafka", "acls", "--topic-prefix", PREFIX, "--bootstrap-server", "b:9092"])
    assert result.exit_code == 0, result.output
    lines = [shlex.split(line) for line in result.output.splitlines() if line.startswith("kafka-acls.sh")]
    expected = [(p.name, g) for p in principals(PREFIX) for g in p.grants]
    assert len(lines) == len(expected)
    for words, (name, grant) in zip(lines, expected, strict=True):
        assert words[1:5] == ["--bootstrap-server", "b:9092", "--command-config", "admin.properties"]
        assert words[words.index("--allow-principal") + 1] == name
        flag = {TOPIC: "--topic", ResourceType.GROUP: "--group", ResourceType.TRANSACTIONAL_ID: "--transactional-id"}
        assert [words[i + 1] for i, w in enumerate(words) if w == flag[grant.resource_type]] == list(grant.names)
        assert [words[i + 1] for i, w in enumerate(words) if w == "--operation"] == [o.value for o in grant.operations]
        assert words[-1] == grant.pattern.value
    assert {p.component for p in principals(PREFIX)} == set(COMPONENTS)


def test_prefixed_grants_are_few_and_named() -> None:
    prefixed = {
        (p.component, g.resource_type, name)
        for p in principals(PREFIX)
        for g in p.grants
        if g.pattern is PatternType.PREFIXED
        for name in g.names
    }
    assert prefixed == {
        ("topics", TOPIC, PREFIX),
        ("worker", ResourceType.GROUP, f"{PREFIX}rollout-worker."),
        ("worker", ResourceType.TRANSACTIONAL_ID, f"{PREFIX}rollout-worker."),
        ("applier", ResourceType.GROUP, f"{PREFIX}rollout-applier"),
        ("notifier", ResourceType.GROUP, f"{PREFIX}rollout-notifier"),
        ("cli-operator", ResourceType.TRANSACTIONAL_ID, f"{PREFIX}rollout-apply-"),
    }
