"""The dashboard's picture of the fleet: a fold of the projection topics.

`absorb(view, role, record)` folds one record of the topic with that role (infra/topics.py)
into a `FleetView` and says what it changed (`Changes`). It is the only writer of the view
and does no I/O, so a unit test is "given these records, the view is this".

* compacted topics (module-status, rollout-targets, remote/proxy assemblages): the latest
  document per key; a tombstone removes the key. Module statuses and targets are read with
  their models (rollout/wire/status.py), every shape of them — a pending module has no
  stages. Targets are indexed both ways, by module (a module page lists its clusters) and
  by cluster (a cluster page lists its modules).
* cluster observations: the latest `ClusterObserved` per cluster; `ClusterRemoved` drops it;
  `ClusterCommanded` leave/join marks the cluster as having left the fleet, or not.
* cluster heartbeats (compacted): the latest lease per cluster — holder, leaseSeconds and the
  heartbeat's time in epoch seconds — from the records naming it (one applier's beat names
  many clusters: rollout/wire/beats.py), or for a claimed cluster its holder's latest beat (a
  HolderHeartbeat names no cluster: it renews the clusters its holder's claims name); the
  page derives age and expiry from it (rollout/engine/leases.py).
* decisions (rollout/wire/decisions.py): the last `DECISIONS_KEPT` per module, a
  redelivered decision id only once.
* dead letters (rollout/wire/dead_letters.py): the last `DEAD_LETTERS_KEPT`, each with its
  record's timestamp; a dead letter whose input carries an event `id` is also a refusal of
  that event (verdicts.py).
* verdicts (rollout/wire/verdicts.py): the engine's answer to one event id, accepted with
  the decisions it caused or refused with the reason; a verdict replaces a dead letter's.

Malformed documents are skipped: judging inputs is the engine's job, not the dashboard's. A
document of a newer `schemaVersion` than this dashboard reads is skipped too, and logged:
the page keeps showing what it last could read.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rollout.wire.beats import HOLDER_CLAIMS, HOLDER_HEARTBEAT, beat_clusters, beat_time
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import DocumentError, NewerSchema, VersionedDocument
from rollout.wire.status import ModuleStatus, TargetStatus
from rollout.wire.verdicts import VerdictDocument

log = logging.getLogger(__name__)

DECISIONS_KEPT = 200
DEAD_LETTERS_KEPT = 1000
VERDICTS_KEPT = 10_000

Document = dict[str, Any]
Read = TypeVar("Read", bound=VersionedDocument)


@dataclass(frozen=True)
class ProjectionRecord:
    """One record as the reader hands it over: key, raw value (None: tombstone) and the
    record's timestamp in seconds."""

    key: str | None
    value: bytes | None
    timestamp: float | None = None


@dataclass
class Changes:
    """What a batch of records changed: the browser refetches only what it shows of these."""

    modules: set[str] = field(default_factory=set)
    clusters: set[str] = field(default_factory=set)
    dead_letters: bool = False
    verdicts: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.modules or self.clusters or self.dead_letters or self.verdicts)

    def merge(self, other: Changes) -> None:
        self.modules |= other.modules
        self.clusters |= other.clusters
        self.dead_letters = self.dead_letters or other.dead_letters
        self.verdicts |= other.verdicts

    def as_json(self, limit: int = 200) -> Document:
        """The SSE payload; past `limit` names the browser is told `all` changed."""
        return {
            "modules": sorted(self.modules)[:limit],
            "clusters": sorted(self.clusters)[:limit],
            "all": len(self.modules) > limit or len(self.clusters) > limit,
            "deadLetters": self.dead_letters,
            "verdicts": sorted(self.verdicts)[:limit],
        }


@dataclass(frozen=True)
class ReceivedDeadLetter:
    """A dead letter and its record's timestamp (seconds; None: unknown)."""

    at: float | None
    letter: DeadLetter


@dataclass
class FleetView:
    modules: dict[str, ModuleStatus] = field(default_factory=dict)
    targets: dict[str, dict[str, TargetStatus]] = field(default_factory=dict)  # module → cluster → target
    targets_by_cluster: dict[str, dict[str, TargetStatus]] = field(default_factory=dict)  # cluster → module → target
    clusters: dict[str, Document] = field(default_factory=dict)  # the Cluster manifest as observed
    remote: dict[str, Document] = field(default_factory=dict)
    proxy: dict[str, Document] = field(default_factory=dict)
    decisions: dict[str, deque[DecisionDocument]] = field(default_factory=dict)
    dead_letters: deque[ReceivedDeadLetter] = field(default_factory=lambda: deque(maxlen=DEAD_LETTERS_KEPT))
    verdicts: dict[str, Document] = field(default_factory=dict)  # event id → {state, reason, source}
    heartbeats: dict[str, Document] = field(default_factory=dict)  # cluster → {holder, leaseSeconds, at, key}
    heartbeat_keys: dict[str, set[str]] = field(default_factory=dict)  # heartbeats key → the clusters it named
    holder_beats: dict[str, Document] = field(default_factory=dict)  # holder → {leaseSeconds, at} of its latest
    holder_keys: dict[str, set[str]] = field(default_factory=dict)  # holder → the keys of its claims
    left: set[str] = field(default_factory=set)  # clusters that left the fleet (`rollout cluster leave`)


def _document(value: bytes | None) -> Document | None:
    if value is None:
        return None
    try:
        document = json.loads(value)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _read(model: type[Read], record: ProjectionRecord) -> Read | None:
    """The record's document read with `model`; None when it cannot be (logged if newer)."""
    if record.value is None:
        return None
    try:
        return model.read(record.value)
    except NewerSchema as error:
        log.error("%s: %s", record.key, error)
    except DocumentError:
        pass  # malformed: the engine's business, not the dashboard's
    return None


def absorb(view: FleetView, role: str, record: ProjectionRecord) -> Changes:
    """Fold `record` of the topic with `role` into `view`; what it changed."""
    folder = _FOLDERS.get(role)
    if folder is None:
        raise ValueError(f"the dashboard does not read topic role {role!r}; it reads {', '.join(sorted(_FOLDERS))}")
    return folder(view, record)


def _module_status(view: FleetView, record: ProjectionRecord) -> Changes:
    if record.key is None:
        return Changes()
    if record.value is None:
        view.modules.pop(record.key, None)
        return Changes(modules={record.key})
    status = _read(ModuleStatus, record)
    if status is None:
        return Changes()
    view.modules[record.key] = status
    return Changes(modules={record.key})


def _target(view: FleetView, record: ProjectionRecord) -> Changes:
    module, slash, cluster = (record.key or "").partition("/")
    if not slash or not module or not cluster:
        return Changes()
    if record.value is None:
        view.targets.get(module, {}).pop(cluster, None)
        view.targets_by_cluster.get(cluster, {}).pop(module, None)
        return Changes(modules={module}, clusters={cluster})
    target = _read(TargetStatus, record)
    if target is None:
        return Changes()
    view.targets.setdefault(module, {})[cluster] = target
    view.targets_by_cluster.setdefault(cluster, {})[module] = target
    return Changes(modules={module}, clusters={cluster})


def _cluster_observation(view: FleetView, record: ProjectionRecord) -> Changes:
    event = _document(record.value)
    if event is None:
        return Changes()
    if event.get("type") == "ClusterObserved" and isinstance(event.get("cluster"), dict):
        manifest = event["cluster"]
        name = (manifest.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return Changes()
        view.clusters[name] = manifest
        return Changes(clusters={name})
    if event.get("type") == "ClusterRemoved" and isinstance(event.get("name"), str):
        view.clusters.pop(event["name"], None)
        return Changes(clusters={event["name"]})
    if event.get("type") == "ClusterCommanded" and isinstance(event.get("cluster"), str):
        if event.get("command") == "leave":
            view.left.add(event["cluster"])
        elif event.get("command") == "join":
            view.left.discard(event["cluster"])
        else:
            return Changes()
        return Changes(clusters={event["cluster"]})
    return Changes()


def _heartbeat(view: FleetView, record: ProjectionRecord) -> Changes:
    """A record of the compacted cluster-heartbeats topic: the clusters it names get its
    lease (a claim's: its holder's latest) unless they have a later one; a key rewritten or
    deleted gives up the clusters its previous record named; a holder's beat renews the
    clusters its claims name (rollout/wire/beats.py)."""
    if record.key is None:
        return Changes()
    beat = _document(record.value)
    if beat is not None and beat.get("type") == HOLDER_HEARTBEAT:
        return _holder_beat(view, beat)
    before = view.heartbeat_keys.pop(record.key, set())
    named: set[str] = set()
    if beat is not None:
        seconds, at = beat.get("leaseSeconds", 60.0), beat_time(beat)
        if isinstance(seconds, int | float) and at is not None:
            holder = beat.get("holder")
            if beat.get("type") == HOLDER_CLAIMS and isinstance(holder, str):
                view.holder_keys.setdefault(holder, set()).add(record.key)
                at = max(at, view.holder_beats.get(holder, {}).get("at", at))
            named = set(beat_clusters(beat, record.key))
            lease = {"holder": holder, "leaseSeconds": float(seconds), "at": at, "key": record.key}
            for name in named:
                current = view.heartbeats.get(name)
                if current is None or current["key"] == record.key or current["at"] <= at:
                    view.heartbeats[name] = lease
            view.heartbeat_keys[record.key] = named
    for name in before - named:
        if view.heartbeats.get(name, {}).get("key") == record.key:
            del view.heartbeats[name]
    return Changes(clusters=before | named)


def _holder_beat(view: FleetView, beat: Document) -> Changes:
    """A holder's beat: the clusters its claims name (and still hold from them) renewed."""
    holder, seconds, at = beat.get("holder"), beat.get("leaseSeconds", 60.0), beat_time(beat)
    if not isinstance(holder, str) or not isinstance(seconds, int | float) or at is None:
        return Changes()
    if view.holder_beats.get(holder, {}).get("at", at) > at:
        return Changes()  # an older beat
    view.holder_beats[holder] = {"leaseSeconds": float(seconds), "at": at}
    renewed: set[str] = set()
    for key in view.holder_keys.get(holder, set()):
        for name in view.heartbeat_keys.get(key, set()):
            current = view.heartbeats.get(name)
            if current is not None and current["key"] == key:
                view.heartbeats[name] = {**current, "leaseSeconds": float(seconds), "at": at}
                renewed.add(name)
    return Changes(clusters=renewed)


def _assemblage(into: str) -> Any:
    def fold(view: FleetView, record: ProjectionRecord) -> Changes:
        if record.key is None:
            return Changes()
        snapshots: dict[str, Document] = getattr(view, into)
        document = _document(record.value)
        if document is None:
            snapshots.pop(record.key, None)
        else:
            snapshots[record.key] = document
        return Changes(clusters={record.key})

    return fold


def _decision(view: FleetView, record: ProjectionRecord) -> Changes:
    decision = _read(DecisionDocument, record)
    if decision is None:
        return Changes()
    kept = view.decisions.setdefault(decision.module, deque(maxlen=DECISIONS_KEPT))
    if any(d.id == decision.id for d in kept):
        return Changes()  # at-least-once: a redelivered journal event re-emits the same decision ids
    kept.append(decision)
    return Changes(modules={decision.module})


def _dead_letter(view: FleetView, record: ProjectionRecord) -> Changes:
    size = len(record.value) if record.value is not None else 0
    letter = _read(DeadLetter, record) or DeadLetter(reason="unreadable dead letter", size=size)
    view.dead_letters.append(ReceivedDeadLetter(record.timestamp, letter))
    changes = Changes(dead_letters=True)
    event_id = _input_event_id(letter)
    if event_id is not None and event_id not in view.verdicts:
        _remember_verdict(view, event_id, {"state": "refused", "reason": letter.reason, "source": "dead-letters"})
        changes.verdicts.add(event_id)
    return changes


def _input_event_id(letter: DeadLetter) -> str | None:
    """The id of the event a dead letter refuses: its `event`, else the `id` of the input
    it carries when that payload is readable JSON."""
    if letter.event is not None:
        return letter.event
    if letter.value is None:
        return None
    try:
        event = json.loads(letter.value)
    except ValueError:
        return None
    event_id = event.get("id") if isinstance(event, dict) else None
    return event_id if isinstance(event_id, str) else None


def _verdict(view: FleetView, record: ProjectionRecord) -> Changes:
    verdict = _read(VerdictDocument, record)
    if verdict is None:
        return Changes()
    event_id = record.key or verdict.event
    shown: Document = {"state": verdict.verdict, "reason": verdict.reason, "source": "verdicts"}
    if verdict.decisions:
        shown["decisions"] = [decision.reason for decision in verdict.decisions]
    _remember_verdict(view, event_id, shown)
    return Changes(verdicts={event_id})


def _remember_verdict(view: FleetView, event_id: str, verdict: Document) -> None:
    view.verdicts[event_id] = verdict
    if len(view.verdicts) > VERDICTS_KEPT:
        del view.verdicts[next(iter(view.verdicts))]


_FOLDERS = {
    "module_status": _module_status,
    "targets": _target,
    "clusters": _cluster_observation,
    "remote": _assemblage("remote"),
    "proxy": _assemblage("proxy"),
    "decisions": _decision,
    "dead_letters": _dead_letter,
    "verdicts": _verdict,
    "heartbeats": _heartbeat,
}
ROLES = tuple(_FOLDERS)
