"""Manifests → input events, and publishing them all or nothing, in causal order.

`rollout apply` (and `rollout up --example`) publish every event of a set of files in ONE
Kafka transaction (infra/transactions.py): a `read_committed` reader — the engine, the CLI —
sees all of them or, if anything fails on the way, none.

Clusters and modules travel on different topics, so their order alone guarantees nothing
to the engine: each `ModuleApplied` therefore carries `fleet`, the cluster-observation
positions its publisher knew — the end offsets read before the transaction, raised past
the clusters sent in it (their offsets are known once the broker acknowledged them, before
the commit) — "stage me only against a fleet view at least this recent"; the engine holds
the module until its journal partition has seen the fleet that far
(docs/rollout-semantics.md, "Causal order"). Modules applied together with a module they
depend on carry `after`, the ids of those dependencies' applies: the dependent trusts no
readiness of a dependency until that partition has folded the apply (rollout/engine/dependencies.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from infra import client, transactions
from infra.topics import TopicNames
from rollout.wire.events import (
    ClusterObserved,
    EventBase,
    FreezeCalendarApplied,
    ModuleApplied,
    RestrictionApplied,
    freeze_key,
    restriction_key,
)

MAX_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class Intent:
    role: str  # the topic role: clusters | intents
    key: str
    event: EventBase
    description: str  # kind/name, as the CLI reports it


ORDER = {
    "ModuleRestriction": 0,
    "ClusterFreezeCalendar": 0,
    "FreezeCalendar": 0,
    "Cluster": 1,
    "BootstrapModule": 2,
    "Module": 3,
}


def intent_for(manifest: Any) -> Intent:
    """The event for one manifest. A ModuleRestriction travels on the cluster-observations
    topic (keyed by its namespace: rollout/wire/events.py), so the modules of the same apply,
    stamped past it, are folded after it; so does a freeze calendar (keyed by scope and name)."""
    name = manifest.metadata.name
    if manifest.kind == "Cluster":
        return Intent("clusters", name, ClusterObserved(cluster=manifest), f"cluster/{name}")
    if manifest.kind == "ModuleRestriction":
        namespace = manifest.metadata.namespace
        event = RestrictionApplied(restriction=manifest)
        return Intent("clusters", restriction_key(namespace), event, f"modulerestriction/{namespace}/{name}")
    if manifest.kind in ("FreezeCalendar", "ClusterFreezeCalendar"):
        calendar = FreezeCalendarApplied(calendar=manifest)
        return Intent("clusters", freeze_key(manifest.scope, name), calendar, calendar_label(manifest))
    return Intent("intents", name, ModuleApplied(module=manifest), f"{manifest.kind.lower()}/{name}")


def calendar_label(manifest: Any) -> str:
    """How apply names a calendar: freezecalendar/NAMESPACE/NAME or clusterfreezecalendar/NAME."""
    return f"{manifest.kind.lower()}/{manifest.identity}"


def intents_for(manifests: list[Any]) -> list[Intent]:
    """The events for `manifests`: restrictions first, then clusters, BootstrapModules, Modules;
    each module stamped with the intents of its dependencies among them (`after`)."""
    intents = [intent_for(manifest) for manifest in sorted(manifests, key=lambda m: ORDER[m.kind])]
    return with_dependency_intents(intents)


def with_dependency_intents(intents: list[Intent]) -> list[Intent]:
    """Each ModuleApplied naming, in `after`, the id of every dependency's ModuleApplied
    published with it: its dependency's readiness counts only once that partition folded
    that apply (docs/rollout-semantics.md, "Dependencies"), whichever is routed first.
    A release member's peers count as such dependencies ("Releases")."""
    applies = {i.key: i.event for i in intents if isinstance(i.event, ModuleApplied)}
    stamped = []
    for intent in intents:
        event = intent.event
        if isinstance(event, ModuleApplied):
            spec = event.module.spec
            peers = spec.release.peers(event.module.metadata.name) if spec.release is not None else []
            after = {d: applies[d].id for d in sorted({*spec.depends_on, *peers}) if d in applies}
            if after:
                intent = replace(intent, event=event.model_copy(update={"after": after}))
        stamped.append(intent)
    return stamped


def fleet_stamp(known: dict[int, int], written: list[tuple[int, int]]) -> dict[int, int]:
    """Partition → the position a reader must have passed: `known` end offsets, raised past
    the (partition, offset) of each record `written`; empty partitions left out."""
    fleet = dict(known)
    for partition, offset in written:
        fleet[partition] = max(fleet.get(partition, 0), offset + 1)
    return {p: o for p, o in sorted(fleet.items()) if o > 0}


def encoded(intent: Intent, fleet: dict[int, int]) -> bytes:
    """The record value of `intent`; modules stamped with `fleet`."""
    event = intent.event
    if isinstance(event, ModuleApplied):
        event = event.model_copy(update={"fleet": fleet})
    return event.to_bytes()


def largest_encoding(intent: Intent, partitions: Iterable[int]) -> bytes:
    """`intent`'s record value with the largest stamp it can get (every partition, the
    largest offset): what the size checks measure before any offset is known."""
    return encoded(intent, {p: MAX_OFFSET for p in partitions})


async def publish_intents(
    bootstrap: str,
    topics: TopicNames,
    intents: list[Intent],
    *,
    known: dict[int, int] | None = None,
    max_bytes: int = transactions.BROKER_DEFAULT_MESSAGE_BYTES,
) -> None:
    """Publish clusters, then modules stamped with the fleet positions they require, in one
    transaction. Both topics must exist (`client.MissingTopic`, before anything is sent).
    `known`: the cluster-observation end offsets, if the caller has just read them."""
    await client.require_topics(bootstrap, [topics.clusters, topics.intents])
    clusters = [(i.key, encoded(i, {})) for i in intents if i.role == "clusters"]
    modules = [i for i in intents if i.role == "intents"]
    if known is None:
        known = await client.end_offsets(bootstrap, topics.clusters) if modules else {}
    async with transactions.transaction(bootstrap, max_bytes=max_bytes, id_prefix=topics.prefix) as transaction:
        written = await transaction.send_all(topics.clusters, clusters)
        if modules:
            fleet = fleet_stamp(known, written)
            await transaction.send_all(topics.intents, [(i.key, encoded(i, fleet)) for i in modules])
