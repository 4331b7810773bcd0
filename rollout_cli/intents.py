"""Manifests → input events, and publishing them in causal order.

`rollout apply` (and `rollout up --example`) publish clusters before modules. Clusters
and modules travel on different topics, so that order alone guarantees nothing to the
engine: each `ModuleApplied` therefore carries `fleet`, the end offsets of the
cluster-observations topic read *after* the clusters were acknowledged — "stage me only
against a fleet view at least this recent" — and the engine holds the module until its
journal partition has seen the fleet that far (docs/rollout-semantics.md, "Causal order").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra import client
from infra.topics import TopicNames
from rollout.events import ClusterObserved, EventBase, ModuleApplied


@dataclass(frozen=True)
class Intent:
    role: str  # the topic role: clusters | intents
    key: str
    event: EventBase
    description: str  # kind/name, as the CLI reports it


def intents_for(manifests: list[Any]) -> list[Intent]:
    """The events for `manifests`: clusters first, then BootstrapModules, then Modules."""
    ordered = sorted(manifests, key=lambda m: {"Cluster": 0, "BootstrapModule": 1, "Module": 2}[m.kind])
    out = []
    for manifest in ordered:
        name = manifest.metadata.name
        if manifest.kind == "Cluster":
            out.append(Intent("clusters", name, ClusterObserved(cluster=manifest), f"cluster/{name}"))
        else:
            out.append(Intent("intents", name, ModuleApplied(module=manifest), f"{manifest.kind.lower()}/{name}"))
    return out


async def publish_intents(bootstrap: str, topics: TopicNames, intents: list[Intent]) -> None:
    """Publish clusters, then modules stamped with the fleet positions they require.
    Both topics must exist before anything is published (`client.MissingTopic`)."""
    await client.require_topics(bootstrap, [topics.clusters, topics.intents])
    clusters = [(i.key, i.event.to_bytes()) for i in intents if i.role == "clusters"]
    if clusters:
        await client.publish(bootstrap, topics.clusters, clusters)
    modules = [i for i in intents if i.role == "intents"]
    if not modules:
        return
    fleet = await client.end_offsets(bootstrap, topics.clusters)
    stamped = []
    for intent in modules:
        event = intent.event
        if isinstance(event, ModuleApplied):
            event = event.model_copy(update={"fleet": {p: o for p, o in fleet.items() if o > 0}})
        stamped.append((intent.key, event.to_bytes()))
    await client.publish(bootstrap, topics.intents, stamped)
