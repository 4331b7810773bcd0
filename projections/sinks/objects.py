"""Converging one cluster's owned Flux objects: apply what is rendered, prune the rest.

What flows through here: the rendered objects of one (cluster, assemblage) and a client of
the cluster they belong in go into `sync_objects`; an `Outcome` (how many written,
unchanged, pruned) comes out. Ownership is by label (`app.kubernetes.io/managed-by`,
`rollout.dev/cluster`, `rollout.dev/assemblage`); applies are server-side with the sink's
field manager and `force`, sources before Kustomizations; prunes go Kustomizations first.
A `hold` callback may leave a rendered object as the cluster has it for now (a HelmRelease
whose values were changed out of band: `projections.sinks.live_values`).

`find_cluster_namespace` answers, for a tombstone after a restart, in which namespace a
cluster's kubeconfig secret lives (see its docstring for the lookups and RBAC fallbacks).
The per-cluster workers, gates and drift watches that call these are in
`projections.sinks.kubernetes`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from projections.kube import Resource, RetryPolicy, call, kubeconfig_secret_name, read_kubeconfig, resource
from projections.render import LABEL_ASSEMBLAGE, LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY

__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "MANAGED_RESOURCES",
    "ObjectKey",
    "Outcome",
    "find_cluster_namespace",
    "sync_objects",
]

log = logging.getLogger("rollout.sink.kubernetes")

FIELD_MANAGER = "rollout"
APPLY_PATCH = "application/apply-patch+yaml"

# Everything the renderer produces, in deletion order (Kustomizations and HelmReleases
# before their sources).
MANAGED_RESOURCES: tuple[Resource, ...] = (
    resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    resource("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
    resource("source.toolkit.fluxcd.io/v1", "GitRepository"),
    resource("source.toolkit.fluxcd.io/v1", "OCIRepository"),
    resource("source.toolkit.fluxcd.io/v1", "HelmRepository"),
)

ObjectKey = tuple[str, str, str]  # (kind, namespace, name)
Hold = Callable[[dict[str, Any], dict[str, Any] | None], Awaitable[bool]]
"""(rendered object, live object or None) -> leave the live object as it is for now?"""


@dataclass(frozen=True)
class Outcome:
    """What one converge of one cluster did."""

    state: Literal["applied", "not-ready", "failed"]
    written: int = 0
    unchanged: int = 0
    pruned: int = 0
    held: int = 0  # rendered but left as the cluster has it for now (projections.sinks.live_values)
    reason: str = ""


async def sync_objects(
    api: ApiClient,
    *,
    cluster: str,
    label: str,
    objects: list[dict[str, Any]],
    field_manager: str,
    policy: RetryPolicy,
    hold: Hold | None = None,
) -> Outcome:
    """Apply `objects` (but those `hold` says to leave as they are), delete every other
    object owned for (cluster, assemblage)."""
    custom = CustomObjectsApi(api)
    selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CLUSTER}={cluster},{LABEL_ASSEMBLAGE}={label}"
    existing = await _owned_objects(custom, selector, cluster, policy)
    written = unchanged = held = 0
    for obj in objects:
        kind = resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        key = (kind.kind, meta["namespace"], meta["name"])
        if hold is None or kind.kind not in HOLDABLE_KINDS:
            after = await _apply(custom, kind, obj, field_manager, policy)
        else:
            after = await _apply_unless_held(custom, kind, obj, existing, field_manager, policy, hold)
            if after is HELD:
                existing.pop(key, None)
                held += 1
                continue
        live = existing.pop(key, None)
        before = live["metadata"].get("resourceVersion", "") if live is not None else None
        if before is not None and before == after:
            unchanged += 1
        else:
            written += 1
    pruned = await _prune(custom, existing, policy)
    return Outcome("applied", written=written, unchanged=unchanged, pruned=pruned, held=held)


HOLDABLE_KINDS = frozenset({"HelmRelease"})
"""The kinds a `hold` judges (projections.sinks.live_values); only their applies carry a
precondition — a Kustomization's status changes all the time, and nobody edits it by hand."""
HELD = "held"
HOLD_ATTEMPTS = 5


async def _apply_unless_held(
    custom: CustomObjectsApi,
    kind: Resource,
    obj: dict[str, Any],
    existing: dict[ObjectKey, dict[str, Any]],
    field_manager: str,
    policy: RetryPolicy,
    hold: Hold,
) -> str | None:
    """Apply `obj` unless `hold` says to leave the live object as it is (then `HELD`).

    The live object `hold` judged is the one the apply may overwrite: the apply carries its
    resourceVersion as a precondition. Otherwise an edit made on the cluster between the
    listing and the apply (seen: `kubectl edit` of a HelmRelease's values during a resync)
    was silently reverted, never reported. A conflict re-reads the object and judges again."""
    meta = obj["metadata"]
    key = (kind.kind, meta["namespace"], meta["name"])
    conditional = replace(policy, retry_conflicts=False)
    for attempt in range(1, HOLD_ATTEMPTS + 1):
        live = existing.get(key)
        if await hold(obj, live):
            return HELD
        version = live["metadata"].get("resourceVersion") if live is not None else None
        if version is None:  # nothing to overwrite (a create fails if someone created it meanwhile)
            return await _apply(custom, kind, obj, field_manager, policy)
        try:
            return await _apply(custom, kind, obj, field_manager, conditional, resource_version=version)
        except ApiException as error:
            if error.status != 409 or attempt == HOLD_ATTEMPTS:
                raise
            log.debug("%s %s/%s changed since it was read; judging it again", kind.kind, *key[1:])
            fresh = await _read(custom, kind, meta["namespace"], meta["name"], policy)
            if fresh is None:
                existing.pop(key, None)
            else:
                existing[key] = fresh
    raise AssertionError("unreachable")  # pragma: no cover


async def _read(
    custom: CustomObjectsApi, kind: Resource, namespace: str, name: str, policy: RetryPolicy
) -> dict[str, Any] | None:
    found: dict[str, Any] | None = await _unless_gone(
        custom.get_namespaced_custom_object, kind, namespace, name, policy, "read"
    )
    return found


async def _unless_gone(
    method: Callable[..., Awaitable[Any]], kind: Resource, namespace: str, name: str, policy: RetryPolicy, verb: str
) -> Any:
    """`method` (a CustomObjectsApi call on one namespaced object) with retries; None if the
    object does not exist (404)."""
    try:
        return await call(
            method,
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            policy=policy,
            what=f"{verb} {kind.kind} {namespace}/{name}",
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


async def _owned_objects(
    custom: CustomObjectsApi, selector: str, cluster: str, policy: RetryPolicy
) -> dict[ObjectKey, dict[str, Any]]:
    """The objects of every managed kind that `selector` picks, by (kind, namespace, name).
    The kinds are listed concurrently: one after the other, a converge waited five round trips."""

    async def listed(kind: Resource) -> list[dict[str, Any]]:
        try:
            listing = await call(
                custom.list_cluster_custom_object,
                kind.group,
                kind.version,
                kind.plural,
                label_selector=selector,
                policy=policy,
                what=f"list {kind.plural} of {cluster}",
            )
        except ApiException as error:
            if error.status == 404:
                return []  # the CRD is not installed: nothing of that kind to prune
            raise
        items: list[dict[str, Any]] = listing.get("items") or []
        return items

    listings = await asyncio.gather(*(listed(kind) for kind in MANAGED_RESOURCES), return_exceptions=True)
    existing: dict[ObjectKey, dict[str, Any]] = {}
    for kind, items in zip(MANAGED_RESOURCES, listings, strict=True):
        if isinstance(items, BaseException):
            raise items
        for item in items:
            meta = item["metadata"]
            existing[(kind.kind, meta["namespace"], meta["name"])] = item
    return existing


async def _apply(
    custom: CustomObjectsApi,
    kind: Resource,
    obj: dict[str, Any],
    field_manager: str,
    policy: RetryPolicy,
    *,
    resource_version: str | None = None,
) -> str | None:
    """Server-side apply `obj`; the resourceVersion it has after (None: just created).
    With `resource_version`, only onto that version of the object (else 409 Conflict)."""
    meta = obj["metadata"]
    body = obj if resource_version is None else {**obj, "metadata": {**meta, "resourceVersion": resource_version}}
    result = await call(
        custom.patch_namespaced_custom_object,
        kind.group,
        kind.version,
        meta["namespace"],
        kind.plural,
        meta["name"],
        body,
        field_manager=field_manager,
        force=True,
        _content_type=APPLY_PATCH,
        policy=policy,
        what=f"apply {kind.kind} {meta['namespace']}/{meta['name']}",
    )
    # kubernetes-asyncio returns None for 201 Created (create-on-apply): written.
    return ((result or {}).get("metadata") or {}).get("resourceVersion")


async def _prune(custom: CustomObjectsApi, leftovers: dict[ObjectKey, dict[str, Any]], policy: RetryPolicy) -> int:
    """Delete what is owned but no longer wanted, sources after the objects using them."""
    order = {kind.kind: index for index, kind in enumerate(MANAGED_RESOURCES)}
    for kind_name, namespace, name in sorted(leftovers, key=lambda k: (order[k[0]], k[1], k[2])):
        kind = next(k for k in MANAGED_RESOURCES if k.kind == kind_name)
        await _unless_gone(custom.delete_namespaced_custom_object, kind, namespace, name, policy, "delete")
    return len(leftovers)


async def find_cluster_namespace(
    management: ApiClient, *, cluster: str, fleet_namespaces: Sequence[str], policy: RetryPolicy
) -> str | None:
    """The namespace of a cluster's kubeconfig secret, for a tombstone after a restart.

    Tried in order, each skipped when RBAC forbids it (403): the secret by name in each
    of `fleet_namespaces` (get); the Cluster API Cluster of that name, cluster-wide
    (list clusters); the secret by name, cluster-wide (list secrets).
    """
    name = kubeconfig_secret_name(cluster)
    for namespace in fleet_namespaces:
        if await read_kubeconfig(management, namespace=namespace, cluster=cluster, policy=policy):
            return namespace
    if fleet_namespaces:
        return None
    lookups = _namespace_lookups(management, cluster=cluster, secret=name, policy=policy)
    forbidden = []
    for what, lookup in lookups:
        try:
            namespaces = await lookup()
        except ApiException as error:
            if error.status not in (403, 404):
                raise
            if error.status == 403:
                forbidden.append(what)
            continue
        for namespace in sorted(namespaces):
            if await read_kubeconfig(management, namespace=namespace, cluster=cluster, policy=policy):
                return namespace
    if forbidden:
        log.warning(
            "ProxyAssemblage %s: removed, but the namespace of %s is unknown since the applier started "
            "and listing %s is forbidden; its objects in the workload cluster stay. Give the applier the "
            "fleet namespaces to find the secret by name.",
            cluster,
            name,
            " and ".join(forbidden),
        )
    return None


def _namespace_lookups(
    management: ApiClient, *, cluster: str, secret: str, policy: RetryPolicy
) -> list[tuple[str, Callable[[], Awaitable[list[str]]]]]:
    """Cluster-wide listings that name the namespaces where `cluster`'s secret may be, in
    the order `find_cluster_namespace` tries them (what each lists, the listing)."""
    custom, core = CustomObjectsApi(management), CoreV1Api(management)
    lookups: list[tuple[str, Callable[[], Awaitable[list[str]]]]] = []
    for version in ("v1beta2", "v1beta1"):

        async def clusters(version: str = version) -> list[str]:
            listing = await call(
                custom.list_cluster_custom_object,
                "cluster.x-k8s.io",
                version,
                "clusters",
                field_selector=f"metadata.name={cluster}",
                policy=policy,
                what=f"find the Cluster {cluster}",
            )
            return [item["metadata"]["namespace"] for item in listing.get("items") or []]

        lookups.append((f"cluster.x-k8s.io/{version} Clusters", clusters))

    async def secrets() -> list[str]:
        listing = await call(
            core.list_secret_for_all_namespaces,
            field_selector=f"metadata.name={secret}",
            policy=policy,
            what=f"find the kubeconfig secret of {cluster}",
        )
        return [item.metadata.namespace for item in listing.items]

    lookups.append(("secrets", secrets))
    return lookups
