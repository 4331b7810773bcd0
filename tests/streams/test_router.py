"""The router: validated inputs to the journal (broadcast where every partition needs them),
everything else to dead letters, and FleetSeen marks after cluster observations."""

from __future__ import annotations

import json

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.topics import TopicNames
from rollout.wire.events import (
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    FleetSeen,
    HolderClaims,
    HolderHeartbeat,
    LeasesContinued,
    SyncStatusReported,
    Tick,
    claim_chunk,
)
from streams.outputs import Outputs
from streams.router import RoutePartition
from tests.integration.chaos import cluster

TOPICS = TopicNames("t.")
PARTITIONS = 3


def record(topic: str, offset: int, value: bytes | None, partition: int = 0) -> ConsumerRecord:
    return ConsumerRecord(topic, partition, offset, 0, 0, b"k", value, None, 0, len(value or b""), [])


def route(topic: str, *values: bytes | None, position: int | None = None) -> Outputs:
    router = RoutePartition(TopicPartition(topic, 0), TOPICS, PARTITIONS)
    records = [record(topic, offset, value) for offset, value in enumerate(values)]
    out = Outputs(TOPICS.dead_letters)
    router.process(records, len(values) if position is None else position, out)
    return out


def test_cluster_observations_are_broadcast_and_followed_by_a_fleet_mark_everywhere() -> None:
    out = route(TOPICS.clusters, cluster(1).to_bytes(), cluster(2).to_bytes(), position=5)
    journal = [r for r in out.all() if r.topic == TOPICS.journal]
    assert [r.partition for r in journal] == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    marks = [json.loads(r.value or b"") for r in journal[-PARTITIONS:]]
    assert all(m["type"] == "FleetSeen" and m["partition"] == 0 and m["position"] == 5 for m in marks)


def test_a_module_scoped_event_goes_to_one_partition_by_module() -> None:
    report = SyncStatusReported(cluster="c", module="m", revision="1", state="succeeded").to_bytes()
    out = route(TOPICS.status, report)
    assert [(r.topic, r.key, r.partition) for r in out.all()] == [(TOPICS.journal, b"m", None)]


def test_bad_inputs_and_events_on_the_wrong_topic_become_one_dead_letter_each() -> None:
    fleet_seen = FleetSeen(partition=0, position=1).to_bytes()
    out = route(TOPICS.intents, b"{not json", Tick(now=1_700_000_000).to_bytes(), fleet_seen, None)
    assert out.dead_letters == 4
    reasons = [json.loads(r.value or b"")["reason"] for r in out.all()]
    assert "not JSON" in reasons[0]
    assert "belong on t.ticks" in reasons[1]
    assert "written by the engine" in reasons[2]
    assert "tombstone" in reasons[3]
    assert all(r.topic == TOPICS.dead_letters for r in out.all())


def test_no_fleet_mark_when_the_position_did_not_move() -> None:
    router = RoutePartition(TopicPartition(TOPICS.clusters, 0), TOPICS, PARTITIONS)
    first = Outputs(TOPICS.dead_letters)
    router.process([], 4, first)
    again = Outputs(TOPICS.dead_letters)
    router.process([], 4, again)
    assert len(first.all()) == PARTITIONS and again.all() == []


def test_heartbeats_are_broadcast_keyed_by_cluster_without_a_fleet_mark() -> None:
    beat = ClusterHeartbeat(cluster="c1", lease_seconds=30).to_bytes()
    out = route(TOPICS.heartbeats, beat)
    assert [(r.topic, r.key, r.partition) for r in out.all()] == [(TOPICS.journal, b"c1", p) for p in range(3)]


def test_a_heartbeats_event_is_broadcast_keyed_by_its_applier() -> None:
    beat = ClusterHeartbeats(clusters=["c1", "c2"], lease_seconds=30, holder="applier-0").to_bytes()
    out = route(TOPICS.heartbeats, beat)
    assert [(r.topic, r.key, r.partition) for r in out.all()] == [(TOPICS.journal, b"applier-0", p) for p in range(3)]
    assert all(r.value == beat for r in out.all())


def test_a_holders_beat_and_claims_are_broadcast_keyed_by_holder_and_chunk() -> None:
    beat = HolderHeartbeat(holder="applier-0", lease_seconds=30).to_bytes()
    claims = HolderClaims(holder="applier-0", chunk=claim_chunk("c1"), clusters=["c1"]).to_bytes()
    out = route(TOPICS.heartbeats, beat, claims)
    chunk_key = f"applier-0/{claim_chunk('c1')}".encode()
    expected = [(b"applier-0", p, beat) for p in range(3)] + [(chunk_key, p, claims) for p in range(3)]
    assert [(r.key, r.partition, r.value) for r in out.all() if r.topic == TOPICS.journal] == expected


def test_leave_and_join_travel_with_the_cluster_observations_to_every_partition() -> None:
    leave = ClusterCommanded(cluster="c1", command="leave").to_bytes()
    journal = [r for r in route(TOPICS.clusters, leave).all() if r.key == b"c1"]
    assert [r.partition for r in journal] == [0, 1, 2]
    misplaced = route(TOPICS.heartbeats, leave)
    assert misplaced.dead_letters == 1


def test_a_malformed_heartbeats_event_is_one_dead_letter_naming_the_field() -> None:
    good = ClusterHeartbeats(clusters=["c1"], lease_seconds=30).to_bytes()
    twice = json.dumps({"type": "ClusterHeartbeats", "clusters": ["c1", "c1"], "leaseSeconds": 30}).encode()
    none = json.dumps({"type": "ClusterHeartbeats", "clusters": [], "leaseSeconds": 30}).encode()
    out = route(TOPICS.heartbeats, twice, none, good)
    letters = [json.loads(r.value) for r in out.all() if r.topic == TOPICS.dead_letters]
    assert [letter["offset"] for letter in letters] == [0, 1]
    assert "clusters" in letters[0]["reason"] and "more than once" in letters[0]["reason"]
    assert "clusters" in letters[1]["reason"]
    assert [r.value for r in out.all() if r.topic == TOPICS.journal] == [good] * PARTITIONS


def test_a_lease_continuation_goes_to_the_journal_partition_it_names() -> None:
    """LeasesContinued (rollout/engine/leases.py): a partition's next slice of a mass lease
    expiry goes back to that partition, whatever its key hashes to; one naming a partition
    the journal does not have is a dead letter saying so."""
    values = [LeasesContinued(partition=partition, slice=1).to_bytes() for partition in (2, 0, 3)]
    out = route(TOPICS.dependencies, *values)
    journal = [(r.key, r.partition) for r in out.all() if r.topic == TOPICS.journal]
    assert journal == [(b"leases/2", 2), (b"leases/0", 0)]
    assert out.dead_letters == 1
    (dead,) = [json.loads(r.value or b"") for r in out.all() if r.topic == TOPICS.dead_letters]
    assert "LeasesContinued for journal partition 3: the journal has 3" in dead["reason"]
