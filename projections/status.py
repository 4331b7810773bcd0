"""Sync status: what Flux says about the Kustomizations and HelmReleases the appliers manage.

What flows through here: Kustomization and HelmRelease objects (watched in the management
cluster for RemoteAssemblage syncs, and inside each workload cluster for ProxyAssemblage
syncs) go in;
`SyncStatusReported` events (key: cluster) come out on the sync-status topic — one per
change of (revision, state) of a (cluster, module), never one per watch event.

The rules for a Kustomization (`sync_state`), from what Flux's kustomize-controller writes
(a HelmRelease's, from helm-controller, are `projections.helm_status.release_state`):

- `succeeded`: `metadata.generation == status.observedGeneration`, condition
  `Ready=True` with reason `ReconciliationSucceeded`, `status.lastAppliedRevision` is the
  assigned revision, `lastAttemptedRevision` (when set) equals `lastAppliedRevision`, and
  neither `Reconciling` nor `Stalled` is True.
- `failed`: the spec was observed (`generation == observedGeneration`) and either
  `Stalled=True`, or `Ready=False` with a failure reason (anything but `Progressing` and
  `DependencyNotReady`, e.g. `ReconciliationFailed`, `BuildFailed`, `HealthCheckFailed`,
  `ArtifactFailed`) *for the assigned revision* (`lastAttemptedRevision` matches it).
  A failure on another revision — typically the previous one, while the source has not
  fetched the new one yet — is not this revision's failure: `updating`. A source that
  never delivers the assigned revision therefore stays `updating`, and the rollout's
  `progressDeadline` turns that into a failure.
- `updating`: anything else — including `Ready=Unknown`/`Progressing`, which every
  reconcile passes through.

Generations. The renderer also annotates `rollout.dev/generation` (the module generation
assigned); the report carries it so that the engine counts it only for that assignment —
not for a later generation with the same tag but another path or substitute.

Publishing. An event goes out when (revision, generation, state) of a (cluster, module) changes —
except `updating` after `succeeded` or `failed` at the same revision: Flux passes through
`Progressing` on every reconcile interval, and what is known about the revision does not
change until it succeeds or fails again (the engine reads it the same way). Without this,
every sync of the fleet would report twice per interval.

Revisions. The assigned revision is the `rollout.dev/revision` annotation the renderer puts
on the Kustomization (`6.7.0`, `sha1:<hash>`, an OCI `<tag>` or `sha256:<digest>`). Flux
reports `6.7.0@sha1:<hash>`, `sha1:<hash>` (a bare commit), `<tag>@sha256:<digest>` or
`sha256:<digest>`. `revision_matches` compares a tag with the part before the last `@`,
and a commit or digest (`sha1:`/`sha256:` labels) with the part after it; a short commit
matches the full hash it starts.

Which objects. Kustomizations and HelmReleases labelled `app.kubernetes.io/managed-by=rollout` and
`rollout.dev/assemblage=remote|proxy`; cluster and module come from their
`rollout.dev/cluster` and `rollout.dev/module` labels; a workload cluster's watch asks the
API server for its own cluster's objects only (`rollout.dev/cluster=<cluster>`): several
clusters behind one API server — LocalKube's in `benchmarks/appliers.py`, 100 per server —
otherwise each received every other's objects and events, to drop them. The reporter runs inside the
applier and reports only for the clusters its sink currently manages (`claim`/`release`),
so applier replicas that share the clusters through the consumer group do not report the
same change twice. Deduplication is in memory: after a restart the current state of every
sync is reported once more, which the engine treats as the no-op it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from projections.helm_status import release_state
from projections.informer import list_and_watch
from projections.kube import Resource, RetryPolicy, call, describe, resource
from projections.publisher import Publish
from projections.render import (
    ANNOTATION_GENERATION,
    ANNOTATION_REVISION,
    LABEL_ASSEMBLAGE,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_MODULE,
)
from projections.render import MANAGED_BY as MANAGED_BY_VALUE
from rollout.wire.events import SyncState, SyncStatusReported

__all__ = [
    "FAILURE_REASONS",
    "WAITING_REASONS",
    "StatusReporter",
    "report_for",
    "revision_matches",
    "sync_state",
]

log = logging.getLogger("rollout.status")

KUSTOMIZATION = resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
HELM_RELEASE = resource("helm.toolkit.fluxcd.io/v2", "HelmRelease")
WATCHED: tuple[Resource, ...] = (KUSTOMIZATION, HELM_RELEASE)
NOT_SERVED_INTERVAL = 60.0
"""Seconds between looks for a kind a cluster does not serve (HelmReleases without helm-controller)."""
ObjectKey = tuple[str, str, str]  # (kind, namespace, name)

# Ready=False reasons that mean "not there yet" rather than "broken".
WAITING_REASONS = frozenset({"Progressing", "DependencyNotReady"})
# The failure reasons kustomize-controller uses (documentation; any other Ready=False
# reason that is not waiting counts as a failure too).
FAILURE_REASONS = frozenset(
    {"ReconciliationFailed", "ArtifactFailed", "BuildFailed", "HealthCheckFailed", "PruneFailed"}
)
_DIGEST_PREFIXES = ("sha1:", "sha256:", "sha384:", "sha512:", "blake3:")
_MESSAGE_LIMIT = 1000

AssemblageLabel = Literal["remote", "proxy"]


# --- the rules ------------------------------------------------------------------------------


def revision_matches(reported: str | None, assigned: str) -> bool:
    """Does a revision Flux reports (`6.7.0@sha1:<hash>`) stand for the assigned label?"""
    if not reported or not assigned:
        return False
    ref, at, digest = reported.rpartition("@")
    if not at:
        ref, digest = "", reported
    if assigned.startswith(_DIGEST_PREFIXES):
        algorithm, _, wanted = assigned.partition(":")
        got_algorithm, _, got = digest.partition(":")
        return got_algorithm == algorithm and len(wanted) >= 7 and got.startswith(wanted)
    return ref == assigned


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def sync_state(kustomization: Mapping[str, Any], assigned_revision: str) -> SyncState:
    """`succeeded`, `failed` or `updating` for one Kustomization; see the module docstring."""
    metadata = kustomization.get("metadata") or {}
    status = kustomization.get("status") or {}
    generation = metadata.get("generation")
    if generation is None or status.get("observedGeneration") != generation:
        return "updating"
    ready = _condition(status, "Ready")
    stalled = _condition(status, "Stalled")
    reconciling = _condition(status, "Reconciling")
    applied = status.get("lastAppliedRevision")
    attempted = status.get("lastAttemptedRevision")
    if stalled is not None and stalled.get("status") == "True":
        return "failed"
    if ready is None:
        return "updating"
    if ready.get("status") == "True":
        if (
            ready.get("reason") == "ReconciliationSucceeded"
            and revision_matches(applied, assigned_revision)
            and (not attempted or attempted == applied)
            and not (reconciling is not None and reconciling.get("status") == "True")
        ):
            return "succeeded"
        return "updating"
    if ready.get("status") == "False" and ready.get("reason") not in WAITING_REASONS:
        if revision_matches(attempted, assigned_revision):
            return "failed"
    return "updating"


def report_for(kustomization: Mapping[str, Any], kind: str = "Kustomization") -> SyncStatusReported | None:
    """The event for a managed Kustomization (or HelmRelease), or None when it is not one of ours."""
    metadata = kustomization.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    revision = annotations.get(ANNOTATION_REVISION)
    generation_text = str(annotations.get(ANNOTATION_GENERATION, ""))
    # the generation of the assignment this object renders: the engine matches the report with it
    generation = int(generation_text) if generation_text.isdigit() and len(generation_text) < 19 else None
    cluster, module = labels.get(LABEL_CLUSTER), labels.get(LABEL_MODULE)
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_VALUE or not (revision and cluster and module):
        return None
    state = release_state(kustomization, revision) if kind == "HelmRelease" else sync_state(kustomization, revision)
    ready = _condition(kustomization.get("status") or {}, "Ready")
    message = None
    if ready is not None and (ready.get("reason") or ready.get("message")):
        message = f"{ready.get('reason', '')}: {ready.get('message', '')}".strip(": ")[:_MESSAGE_LIMIT]
    try:
        return SyncStatusReported(
            cluster=cluster, module=module, revision=revision, state=state, message=message, generation=generation
        )
    except ValueError:
        return None  # labels that are not names the engine knows


# --- the reporter ---------------------------------------------------------------------------

Connect = Callable[[], Awaitable[ApiClient | None]]


class StatusReporter:
    """Watches managed Kustomizations and HelmReleases and publishes their state on change."""

    def __init__(
        self,
        publish: Publish,
        *,
        policy: RetryPolicy | None = None,
        watch_timeout: int = 300,
        retry_interval: float = 15.0,
    ) -> None:
        self.publish = publish
        self.policy = policy or RetryPolicy()
        self.watch_timeout = watch_timeout
        self.retry_interval = retry_interval
        self._published: dict[tuple[AssemblageLabel, str, str], tuple[tuple[str, int | None], SyncState]] = {}
        self._remote_claims: set[str] = set()
        self._remote_objects: dict[ObjectKey, dict[str, Any]] = {}
        self._proxy_watches: dict[str, asyncio.Task[None]] = {}
        self._management_watch: asyncio.Task[None] | None = None
        self._locks: dict[tuple[AssemblageLabel, str, str], asyncio.Lock] = {}

    # -- what the sink tells the reporter ----------------------------------------------------

    def watch_management(self, api: ApiClient) -> None:
        """Start watching remote-sync objects in the management cluster (once)."""
        if self._management_watch is None or self._management_watch.done():
            self._management_watch = asyncio.create_task(self._watch_remote(api), name="status: management")

    async def claim_remote(self, cluster: str) -> None:
        """The sink manages this cluster's RemoteAssemblage: report its Kustomizations and HelmReleases."""
        if cluster in self._remote_claims:
            return
        self._remote_claims.add(cluster)
        for key, obj in [(k, o) for k, o in self._remote_objects.items() if _cluster_of(o) == cluster]:
            await self._consider("remote", obj, key[0])

    def claim_proxy(self, cluster: str, connect: Connect) -> None:
        """The sink manages this cluster's ProxyAssemblage: watch inside the workload cluster."""
        task = self._proxy_watches.get(cluster)
        if task is None or task.done():
            self._proxy_watches[cluster] = asyncio.create_task(
                self._watch_proxy(cluster, connect), name=f"status: {cluster}"
            )

    def release(self, assemblage: AssemblageLabel, cluster: str) -> None:
        if assemblage == "remote":
            self._remote_claims.discard(cluster)
        else:
            task = self._proxy_watches.pop(cluster, None)
            if task is not None:
                task.cancel()
        for key in [k for k in self._published if k[0] == assemblage and k[1] == cluster]:
            del self._published[key]

    async def close(self) -> None:
        tasks = [t for t in (self._management_watch, *self._proxy_watches.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._proxy_watches.clear()
        self._management_watch = None
        close = getattr(self.publish, "close", None)
        if close is not None:
            await close()

    # -- deciding and publishing ---------------------------------------------------------------

    async def _consider(self, assemblage: AssemblageLabel, obj: Mapping[str, Any], kind: str) -> None:
        event = report_for(obj, kind)
        if event is None:
            return
        key = (assemblage, event.cluster, event.module)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one decision per key at a time: exactly one event per change
            last = self._published.get(key)
            assigned = (event.revision, event.generation)  # a new generation is news even at the same tag
            if last == (assigned, event.state):
                return
            if last is not None and last[0] == assigned and last[1] != "updating" and event.state == "updating":
                return  # a periodic reconcile of a revision already known to succeed or fail
            try:
                await self.publish(event.cluster, event.to_bytes())
            except Exception as error:
                log.error("cannot publish sync status of %s/%s: %s", event.cluster, event.module, error)
                return
            self._published[key] = (assigned, event.state)
        log.info("%s %s: %s %s", event.cluster, event.module, event.revision, event.state)

    def _forget(self, assemblage: AssemblageLabel, obj: Mapping[str, Any]) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        self._published.pop((assemblage, labels.get(LABEL_CLUSTER, ""), labels.get(LABEL_MODULE, "")), None)

    # -- watches ---------------------------------------------------------------------------

    def _list_fn(self, api: ApiClient, kind: Resource) -> Callable[..., Awaitable[Any]]:
        custom = CustomObjectsApi(api)
        return partial(custom.list_cluster_custom_object, kind.group, kind.version, kind.plural)

    async def _watch_remote(self, api: ApiClient) -> None:
        async with asyncio.TaskGroup() as watches:
            for kind in WATCHED:
                watches.create_task(self._watch_remote_kind(api, kind))

    async def _served(self, api: ApiClient, kind: Resource, where: str) -> None:
        """Wait until `kind` is served: a cluster without helm-controller has no HelmRelease CRD,
        and its Kustomizations must still be reported."""
        if kind == KUSTOMIZATION:
            return
        custom, said = CustomObjectsApi(api), False
        while True:
            try:
                found = await call(
                    custom.get_api_resources,
                    kind.group,
                    kind.version,
                    policy=self.policy,
                    what=f"discover {kind.plural}",
                )
                if any(r.name == kind.plural for r in found.resources or []):
                    return
            except ApiException as error:
                if error.status != 404:
                    raise
            if not said:
                log.info(
                    "%s does not serve %s %s: looking again every %.0fs",
                    where,
                    kind.api_version,
                    kind.plural,
                    NOT_SERVED_INTERVAL,
                )
                said = True
            await asyncio.sleep(NOT_SERVED_INTERVAL)

    async def _watch_remote_kind(self, api: ApiClient, kind: Resource) -> None:
        async def on_list(items: list[dict[str, Any]]) -> None:
            current = {_key(kind, obj): obj for obj in items}
            for key in [k for k in self._remote_objects if k[0] == kind.kind and k not in current]:
                self._forget("remote", self._remote_objects.pop(key))
            self._remote_objects.update(current)
            for obj in items:
                if _cluster_of(obj) in self._remote_claims:
                    await self._consider("remote", obj, kind.kind)

        async def on_event(event: str, obj: dict[str, Any]) -> None:
            if event == "DELETED":
                self._remote_objects.pop(_key(kind, obj), None)
                self._forget("remote", obj)
                return
            self._remote_objects[_key(kind, obj)] = obj
            if _cluster_of(obj) in self._remote_claims:
                await self._consider("remote", obj, kind.kind)

        await self._served(api, kind, "the management cluster")
        await list_and_watch(
            self._list_fn(api, kind),
            on_list=on_list,
            on_event=on_event,
            what=f"remote {kind.plural} (management cluster)",
            label_selector=_selector("remote"),
            policy=self.policy,
            watch_timeout=self.watch_timeout,
        )

    async def _watch_proxy(self, cluster: str, connect: Connect) -> None:
        """Watch one workload cluster; reconnect (re-reading its kubeconfig) when that fails."""
        while True:
            try:
                api = await connect()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("status of %s: cannot connect: %s", cluster, describe(error))
                api = None
            if api is None:
                await asyncio.sleep(self.retry_interval)
                continue
            try:
                async with api, asyncio.TaskGroup() as watches:  # one failing watch ends both
                    for kind in WATCHED:
                        watches.create_task(self._watch_proxy_kind(cluster, api, kind))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # reconnect: the kubeconfig may have been rotated
                reason = describe(error.exceptions[0] if isinstance(error, ExceptionGroup) else error)
                log.warning("status of %s: %s; reconnecting in %.1fs", cluster, reason, self.retry_interval)
                await asyncio.sleep(self.retry_interval)

    async def _watch_proxy_kind(self, cluster: str, api: ApiClient, kind: Resource) -> None:
        known: dict[ObjectKey, dict[str, Any]] = {}

        async def on_list(items: list[dict[str, Any]]) -> None:
            nonlocal known
            current = {_key(kind, obj): obj for obj in items if _cluster_of(obj) == cluster}
            for key in set(known) - set(current):
                self._forget("proxy", known[key])
            known = current
            for obj in current.values():
                await self._consider("proxy", obj, kind.kind)

        async def on_event(event: str, obj: dict[str, Any]) -> None:
            if _cluster_of(obj) != cluster:
                return
            if event == "DELETED":
                known.pop(_key(kind, obj), None)
                self._forget("proxy", obj)
            else:
                known[_key(kind, obj)] = obj
                await self._consider("proxy", obj, kind.kind)

        await self._served(api, kind, cluster)
        await list_and_watch(
            self._list_fn(api, kind),
            on_list=on_list,
            on_event=on_event,
            what=f"proxy {kind.plural} in {cluster}",
            label_selector=f"{_selector('proxy')},{LABEL_CLUSTER}={cluster}",
            policy=self.policy,
            watch_timeout=self.watch_timeout,
            relist_backoff=self.retry_interval,
            max_failures=3,
        )


def _selector(assemblage: AssemblageLabel) -> str:
    return f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_ASSEMBLAGE}={assemblage}"


def _key(kind: Resource, obj: Mapping[str, Any]) -> ObjectKey:
    metadata = obj.get("metadata") or {}
    return kind.kind, metadata.get("namespace", ""), metadata.get("name", "")


def _cluster_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CLUSTER)
