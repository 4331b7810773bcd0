"""The project's Kafka topics: names, retention and compaction, and their creation.

    inputs ──► router ──► journal ──► decider ──► assignments ──► assembler ──► projections
                 │                       ├──► decisions, module-status, rollout-targets
                 └──► dead-letters ◄─────┘

* Inputs keep everything (retention -1): they are the source of truth users write to —
  but cluster heartbeats, compacted (the latest per cluster; the journal keeps them all).
* The journal is the engine's own totally ordered log per partition: every decision is a
  pure function of it (`rollout replay` refolds it). Kafka never deletes from it on its own
  (retention -1): a time or size limit would delete records the decider may not have read
  yet. `rollout snapshot retain` deletes what a kept snapshot covers (`delete_records`,
  never past the decider's committed position: streams/snapshots.py).
* Assignments are the decider's per-(cluster, module) output, the assembler's input; cut
  by `rollout snapshot retain` too, below what the oldest kept snapshot's replay reads.
* Projections (RemoteAssemblage/ProxyAssemblage), module status and rollout targets are
  compacted: the latest document per key, tombstones when gone.
* Decisions are append-only history; dead letters keep every rejected input with a reason.
* Dependencies carry what the decider of one module tells the partition of another
  (DependentLinked, DependencyReported, DependencyCurrent; key: the receiving module),
  back through the router; kept 7 days: the journal keeps them for good.
* Verdicts answer each intent (keyed by its event id) for the CLI that waits for them: kept
  7 days, not compacted (each key is written once).
* The stages' state topics (`decide-state`, `assemble-state`) are compacted changelogs,
  written in the same transactions as the stages' outputs; partition p holds the state of
  input partition p.

Every name carries a configurable prefix. All partitioned topics share one partition
count: the journal, the assignments and the state topics are co-partitioned.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, TopicAuthorizationFailedError
from aiokafka.protocol.offset import OffsetRequest

from infra.settings import kafka_client_options

KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": "3600000"}
APPEND_ONLY = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
LEADERS_TIMEOUT = 30.0  # seconds ensure_topics waits for the partitions it created to be served
LATEST = -1  # ListOffsets: the end offset
READ_UNCOMMITTED = 0
ANSWERS = {"retention.ms": str(7 * 24 * 3600 * 1000), "cleanup.policy": "delete"}  # read within seconds


@dataclass(frozen=True)
class TopicSpec:
    role: str
    suffix: str
    config: dict[str, str] = field(default_factory=dict)
    single_partition: bool = False
    description: str = ""


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("intents", "intents", KEEP_FOREVER, description="Module/BootstrapModule applied/deleted, commands"),
    TopicSpec("clusters", "cluster-observations", KEEP_FOREVER, description="cluster applied/removed, readiness"),
    TopicSpec("status", "sync-status", KEEP_FOREVER, description="sync status reported by appliers"),
    TopicSpec("ticks", "ticks", KEEP_FOREVER, single_partition=True, description="time, as events"),
    TopicSpec("heartbeats", "cluster-heartbeats", COMPACTED, description="applier heartbeats: cluster leases"),
    TopicSpec(
        "dependencies",
        "dependencies",
        ANSWERS,
        description="one module's state for another's partition (dependsOn); a module's continued moves",
    ),
    TopicSpec("journal", "journal", KEEP_FOREVER, description="the engine's ordered input log"),
    TopicSpec("assignments", "assignments", KEEP_FOREVER, description="per cluster+module sync assignments"),
    TopicSpec("remote", "remote-assemblages", COMPACTED, description="RemoteAssemblage snapshots"),
    TopicSpec("proxy", "proxy-assemblages", COMPACTED, description="ProxyAssemblage snapshots"),
    TopicSpec("module_status", "module-status", COMPACTED, description="per-module rollout status"),
    TopicSpec("targets", "rollout-targets", COMPACTED, description="per module+cluster rollout state"),
    TopicSpec("decide_state", "decide-state", COMPACTED, description="the decider's state, per journal partition"),
    TopicSpec("assemble_state", "assemble-state", COMPACTED, description="the assembler's state, per partition"),
    TopicSpec("decisions", "decisions", APPEND_ONLY, description="every decision with its reason"),
    TopicSpec("dead_letters", "dead-letters", APPEND_ONLY, description="rejected inputs with the reason"),
    TopicSpec("verdicts", "verdicts", ANSWERS, description="the engine's answer to each intent, keyed by event id"),
)


SUFFIXES: dict[str, str] = {spec.role: spec.suffix for spec in TOPICS}


@dataclass(frozen=True)
class TopicNames:
    """The topic names under `prefix`; each role's name computed once (read per record sent)."""

    prefix: str

    def name(self, role: str) -> str:
        """The topic of `role` (a `TopicSpec.role`), e.g. "journal" → "rollout.journal"."""
        return self.prefix + SUFFIXES[role]

    @cached_property
    def intents(self) -> str:
        return self.name("intents")

    @cached_property
    def clusters(self) -> str:
        return self.name("clusters")

    @cached_property
    def status(self) -> str:
        return self.name("status")

    @cached_property
    def ticks(self) -> str:
        return self.name("ticks")

    @cached_property
    def heartbeats(self) -> str:
        return self.name("heartbeats")

    @cached_property
    def dependencies(self) -> str:
        return self.name("dependencies")

    @cached_property
    def journal(self) -> str:
        return self.name("journal")

    @cached_property
    def assignments(self) -> str:
        return self.name("assignments")

    @cached_property
    def remote(self) -> str:
        return self.name("remote")

    @cached_property
    def proxy(self) -> str:
        return self.name("proxy")

    @cached_property
    def module_status(self) -> str:
        return self.name("module_status")

    @cached_property
    def targets(self) -> str:
        return self.name("targets")

    @cached_property
    def decisions(self) -> str:
        return self.name("decisions")

    @cached_property
    def dead_letters(self) -> str:
        return self.name("dead_letters")

    @cached_property
    def verdicts(self) -> str:
        return self.name("verdicts")


class TopicMismatch(Exception):
    pass


async def ensure_topics(bootstrap: str, prefix: str, partitions: int, *, replication: int = 1) -> list[str]:
    """Create every topic that does not exist yet; return the names created.

    An existing topic with a different partition count is an error: the journal, the
    assignments and the changelogs must stay co-partitioned.
    """
    from infra.denials import explained  # infra.denials builds on this module: imported late
    from infra.kafka_acls import Operation, PatternType, ResourceType

    names = TopicNames(prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="rollout-topics", **kafka_client_options())
    try:
        async with explained(Operation.DESCRIBE, ResourceType.TOPIC, prefix, bootstrap, pattern=PatternType.PREFIXED):
            await admin.start()
        existing = set(await admin.list_topics())  # those we may describe: the others are "missing"
        wanted = [
            NewTopic(
                name=names.name(spec.role),
                num_partitions=1 if spec.single_partition else partitions,
                replication_factor=replication,
                topic_configs=dict(spec.config),
            )
            for spec in TOPICS
        ]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            try:
                response = await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # another process created them in between
            else:
                _refused_creations(response)
        described = await _until_led(admin, [t.name for t in wanted])
        if missing:
            await _until_serving(bootstrap, [d for d in described if d["topic"] in {t.name for t in missing}])
        for description in described:
            want = next(t for t in wanted if t.name == description["topic"])
            have = len(description.get("partitions", []))
            if have and have != want.num_partitions:
                raise TopicMismatch(
                    f"topic {want.name} has {have} partitions, expected {want.num_partitions}; "
                    "use the same --partitions as when the topics were created, or a new --topic-prefix"
                )
        return [t.name for t in missing]
    finally:
        await admin.close()


def _refused_creations(response: Any) -> None:
    """`NotAuthorized` for the first topic the broker would not create for us (or, existing,
    would not even describe to us): aiokafka returns the per-topic errors without raising."""
    from infra.denials import NotAuthorized, current_principal
    from infra.kafka_acls import Operation, ResourceType

    for name, error_code, *_ in response.topic_errors:
        if error_code == TopicAuthorizationFailedError.errno:
            raise NotAuthorized(current_principal(), Operation.CREATE, ResourceType.TOPIC, name)


async def _until_led(admin: AIOKafkaAdminClient, names: list[str]) -> list[Any]:
    """The topics' descriptions once every partition has a leader (or after
    LEADERS_TIMEOUT, as they are): a topic just created is not known to every client at
    once ("topic … does not exist" to a new client asking right away)."""
    deadline = asyncio.get_running_loop().time() + LEADERS_TIMEOUT
    while True:
        described = await admin.describe_topics(names)
        led = all(
            not topic.get("error_code") and all(p.get("leader", -1) >= 0 for p in topic.get("partitions", []))
            for topic in described
        )
        if led or asyncio.get_running_loop().time() >= deadline:
            return list(described)
        await asyncio.sleep(0.1)


async def _until_serving(bootstrap: str, described: list[Any]) -> None:
    """Until the leader of every partition of `described` answers a ListOffsets for it (or
    LEADERS_TIMEOUT passed). The broker names a new partition's leader a moment before that
    leader serves it: a client asking for offsets meanwhile is told NOT_LEADER_OR_FOLLOWER
    and retries, and aiokafka logs an ERROR line per try — a dozen on `rollout up`'s first
    publish. Asked here with a request of our own, nothing is logged."""
    pending: dict[int, set[tuple[str, int]]] = {}
    for topic in described:
        for partition in topic.get("partitions", []):
            if partition.get("leader", -1) >= 0:  # none after LEADERS_TIMEOUT: nothing to ask
                pending.setdefault(partition["leader"], set()).add((topic["topic"], partition["partition"]))
    kafka = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="rollout-topics", **kafka_client_options())
    await kafka.bootstrap()
    try:
        deadline = asyncio.get_running_loop().time() + LEADERS_TIMEOUT
        while any(pending.values()) and asyncio.get_running_loop().time() < deadline:
            for leader, partitions in pending.items():
                if not partitions:
                    continue
                by_topic: dict[str, list[tuple[int, int]]] = {}
                for topic, partition in sorted(partitions):
                    by_topic.setdefault(topic, []).append((partition, LATEST))
                try:
                    response = await kafka.send(leader, OffsetRequest(-1, READ_UNCOMMITTED, list(by_topic.items())))
                except KafkaError:  # the leader not reachable yet: asked again below
                    continue
                for topic, answers in response.topics:
                    for partition, error_code, *_ in answers:
                        if error_code == 0:
                            partitions.discard((topic, partition))
            if any(pending.values()):
                await asyncio.sleep(0.1)
    finally:
        await kafka.close()


async def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic whose name starts with `prefix` (a benchmark's or a test stack's
    own topics on a long-lived broker); return the names deleted."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="rollout-topics", **kafka_client_options())
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(prefix))
        if names:
            await admin.delete_topics(names)
        return names
    finally:
        await admin.close()


async def log_start_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition → the first offset `topic` still holds (0 unless records were deleted)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **kafka_client_options())
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        starts = await consumer.beginning_offsets([TopicPartition(topic, p) for p in sorted(partitions)])
        return {tp.partition: offset for tp, offset in starts.items()}
    finally:
        await consumer.stop()


async def delete_records_below(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
    """Delete the records of each partition below its offset (Kafka's DeleteRecords: the
    partition's log start moves there); partition → its new log start offset."""
    from aiokafka import TopicPartition
    from aiokafka.admin import RecordsToDelete

    from infra.client import require_topic
    from infra.denials import explained  # infra.denials builds on this module: imported late
    from infra.kafka_acls import Operation, ResourceType

    wanted = {TopicPartition(topic, p): RecordsToDelete(before_offset=o) for p, o in offsets.items() if o > 0}
    if not wanted:
        return {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="rollout-retention", **kafka_client_options())
    try:
        async with explained(Operation.DELETE, ResourceType.TOPIC, topic, bootstrap):
            await admin.start()
            # a topic we may not even describe has no leader in aiokafka's metadata: it would
            # raise NotLeaderForPartition; asked first, the refusal is named as one
            await require_topic(admin._client, topic)
            starts = await admin.delete_records(wanted)
        return {tp.partition: offset for tp, offset in starts.items()}
    finally:
        await admin.close()


def ensure_topics_sync(bootstrap: str, prefix: str, partitions: int, *, replication: int = 1) -> list[str]:
    return asyncio.run(ensure_topics(bootstrap, prefix, partitions, replication=replication))
