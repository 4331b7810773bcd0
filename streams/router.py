"""The router stage: inputs → the journal, the engine's one ordered log per partition.

    intents, cluster-observations, sync-status, ticks, cluster-heartbeats,
    dependencies (written by the decider)                                  ──► route ──► journal (+ dead letters)

Every input is parsed and validated once, here (`rollout.wire.events.parse_event`); what fails —
or is valid but on the wrong topic — becomes a dead letter with the reason, and the stream
goes on. Module-scoped events are keyed by module, so a module's whole rollout is in one
journal partition. Cluster observations (and leave/join, and the namespaces'
ModuleRestrictions and freeze calendars, and a calendar's break-glass from the intents),
heartbeats and claims and ticks are broadcast to every journal partition, because every
partition's modules need the fleet, its policy, its leases and the time (a holder's beat
is one record per partition whatever it claims: rollout/engine/leases.py).

After each batch of a cluster-observations partition, the router also writes a
`FleetSeen(partition, position)` into every journal partition: "everything of that input
partition below `position` is in the journal before this". A `ModuleApplied` carries the
cluster-observation positions its publisher had published up to, and the engine stages it
only once its journal partition has seen the fleet that far — so a module can never be
staged against a fleet view older than its publisher's (no canary bypass by arrival
order). The router is stateless: its position is the group offset committed in each
transaction (`streams/delivery.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from infra.topics import TopicNames
from rollout.wire.events import (
    CalendarBreakGlass,
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    ClusterObserved,
    ClusterRemoved,
    DependencyCurrent,
    DependencyReported,
    DependentLinked,
    EventRejected,
    FleetSeen,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    GateEvaluated,
    HelmValuesObserved,
    HolderClaims,
    HolderHeartbeat,
    LeasesContinued,
    ModuleApplied,
    ModuleDeleted,
    PromotionObserved,
    ReleasePromoted,
    ReleasePromotionObserved,
    ReleaseStageApproved,
    RestrictionApplied,
    RestrictionDeleted,
    RolloutCommanded,
    RolloutContinued,
    SyncStatusReported,
    Tick,
    freeze_key,
    parse_event,
    restriction_key,
)
from streams.outputs import Outputs

STAGE = "route"
# Which input topic each event type belongs on; anything else is a dead letter.
TOPIC_ROLE: dict[type, str] = {
    ModuleApplied: "intents",
    ModuleDeleted: "intents",
    RolloutCommanded: "intents",
    CalendarBreakGlass: "intents",
    ClusterObserved: "clusters",
    ClusterRemoved: "clusters",
    RestrictionApplied: "clusters",
    RestrictionDeleted: "clusters",
    FreezeCalendarApplied: "clusters",
    FreezeCalendarDeleted: "clusters",
    SyncStatusReported: "status",
    HelmValuesObserved: "status",
    Tick: "ticks",
    ClusterCommanded: "clusters",
    ClusterHeartbeat: "heartbeats",
    ClusterHeartbeats: "heartbeats",
    HolderHeartbeat: "heartbeats",
    HolderClaims: "heartbeats",
    DependentLinked: "dependencies",
    DependencyReported: "dependencies",
    DependencyCurrent: "dependencies",
    RolloutContinued: "dependencies",
    LeasesContinued: "dependencies",
    GateEvaluated: "status",
    PromotionObserved: "status",
    ReleasePromotionObserved: "status",
    ReleasePromoted: "dependencies",
    ReleaseStageApproved: "dependencies",
}
INPUT_ROLES = ("intents", "clusters", "status", "ticks", "heartbeats", "dependencies")
BROADCAST = (
    ClusterObserved,
    ClusterRemoved,
    Tick,
    ClusterCommanded,
    ClusterHeartbeat,
    ClusterHeartbeats,
    HolderHeartbeat,
    HolderClaims,
    RestrictionApplied,
    RestrictionDeleted,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    CalendarBreakGlass,
)


def journal_key(event: Any) -> str:
    if isinstance(event, ModuleApplied):
        return str(event.module.metadata.name)
    if isinstance(event, ModuleDeleted):
        return event.name
    if isinstance(
        event,
        (
            RolloutCommanded,
            SyncStatusReported,
            HelmValuesObserved,
            GateEvaluated,
            PromotionObserved,
            ReleasePromotionObserved,
        ),
    ):
        return event.module
    if isinstance(event, ClusterObserved):
        return str(event.cluster.metadata.name)
    if isinstance(event, ClusterRemoved):
        return event.name
    if isinstance(event, RestrictionApplied):
        return restriction_key(event.restriction.metadata.namespace)
    if isinstance(event, RestrictionDeleted):
        return restriction_key(event.namespace)
    if isinstance(event, FreezeCalendarApplied):
        return freeze_key(event.calendar.scope, event.calendar.name)
    if isinstance(event, FreezeCalendarDeleted | CalendarBreakGlass):
        return freeze_key(event.scope, event.name)
    if isinstance(event, ClusterCommanded | ClusterHeartbeat):
        return event.cluster
    if isinstance(event, ClusterHeartbeats):
        return event.holder or event.clusters[0]
    if isinstance(event, HolderHeartbeat):
        return event.holder
    if isinstance(event, HolderClaims):
        return f"{event.holder}/{event.chunk}"
    if isinstance(event, DependentLinked | RolloutContinued | ReleasePromoted | ReleaseStageApproved):
        return event.module  # the dependency's partition; a continuation's own; a release member's
    if isinstance(event, DependencyReported | DependencyCurrent):
        return event.dependent  # the dependent's partition
    if isinstance(event, LeasesContinued):
        return leases_key(event.partition)  # routed to the partition it names, not by key
    return "tick"


def leases_key(partition: int) -> str:
    """The key of a LeasesContinued for journal `partition` (on the dependencies topic and the journal)."""
    return f"leases/{partition}"


class RoutePartition:
    """Routes one input partition."""

    state = None

    def __init__(self, tp: TopicPartition, topics: TopicNames, partitions: int) -> None:
        self.tp = tp
        self.topics = topics
        self.partitions = partitions
        self.role = {topics.name(r): r for r in INPUT_ROLES}[tp.topic]
        self.fleet_seen = -1  # the last FleetSeen position written (re-written after a restart)

    def reset(self) -> None:
        self.fleet_seen = -1

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        journal = self.topics.journal
        for record in records:
            try:
                event = parse_event(record.value)
                expected = TOPIC_ROLE.get(type(event))
                if expected is None:
                    raise EventRejected(f"{event.type} events are written by the engine, not accepted as input")
                if expected != self.role:
                    raise EventRejected(f"{event.type} events belong on {self.topics.name(expected)}")
                key = journal_key(event).encode()
                if isinstance(event, LeasesContinued) and event.partition >= self.partitions:
                    raise EventRejected(
                        f"LeasesContinued for journal partition {event.partition}: the journal has {self.partitions}"
                    )
            except EventRejected as rejected:
                out.reject(rejected.reason, record, STAGE)
                continue
            if isinstance(event, BROADCAST):
                for partition in range(self.partitions):
                    out.send(journal, key, record.value, partition=partition)
            elif isinstance(event, LeasesContinued):  # the partition whose leases it continues
                out.send(journal, key, record.value, partition=event.partition)
            else:
                out.send(journal, key, record.value)
        if self.role == "clusters" and position > self.fleet_seen:
            mark = FleetSeen(id=f"fleet-{self.tp.partition}-{position}", partition=self.tp.partition, position=position)
            value = mark.to_bytes()
            for partition in range(self.partitions):
                out.send(journal, b"fleet", value, partition=partition)
            self.fleet_seen = position
