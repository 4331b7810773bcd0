"""The cluster watcher: Cluster API clusters in the management cluster become fleet events.

What flows through here: Cluster API `Cluster` objects and the presence of their
kubeconfig secrets, in the namespaces given (or all), go in; `ClusterObserved` (the
cluster's name, namespace, labels, annotations and readiness) and `ClusterRemoved` events
(key: cluster name) come out on the cluster-observations topic — only when what the engine
would see changes, never once per watch event.

`observe(cluster, secret_present)` is the pure rule:

- control plane ready: v1beta1 `status.controlPlaneReady: true`; v1beta2
  `status.initialization.controlPlaneInitialized: true`; or a condition
  `ControlPlaneInitialized=True` (in `status.conditions`, or in `status.v1beta2.conditions`
  of a v1beta1 object). A Cluster being deleted (`deletionTimestamp`) is not ready.
- kubeconfig secret: `<name>-kubeconfig` exists in the Cluster's namespace. Cluster API
  writes it minutes after the Cluster appears; until then the cluster is not ready, and the
  engine skips it rather than failing it.
- labels and annotations are passed on (bindings read them); the bulky
  `kubectl.kubernetes.io/last-applied-configuration` is not. The annotation
  `rollout.dev/observed-by: watch-clusters` marks observations this watcher made.

The loop (`ClusterWatcher.run`) is two informers per namespace (`projections.kube.
list_and_watch`): Clusters (v1beta2 when the API serves it, else v1beta1) and secrets —
the latter *metadata only* (`PartialObjectMetadata`), so the watcher never receives a
kubeconfig. Nothing is published until both have been listed once, so a restart does not
flap every cluster to not-ready. A Cluster deleted while the watcher was down is noticed on
the first list if the watcher was seeded (`seed`) with what was last published — the CLI
seeds it from the cluster-observations topic, restricted to observations carrying the
marker annotation, so clusters applied by hand (`rollout apply`) are never removed by it.

Cluster names must be DNS-1123 labels (the engine's names); a Cluster whose name is not
one is logged and skipped. Names are fleet-wide keys: the same name in two namespaces is
reported as a conflict and only the first seen is observed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from projections.informer import list_and_watch
from projections.kube import RetryPolicy, call, status_code
from projections.publisher import Publish
from rollout.api.manifests import API_VERSION, ClusterManifest
from rollout.wire.events import ClusterObserved, ClusterRemoved

__all__ = [
    "CAPI_GROUP",
    "OBSERVED_BY",
    "ClusterWatcher",
    "control_plane_ready",
    "list_secret_metadata",
    "observe",
]

log = logging.getLogger("rollout.watcher")

CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSIONS = ("v1beta2", "v1beta1")  # preferred first
OBSERVED_BY = ("rollout.dev/observed-by", "watch-clusters")
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_SECRET_SUFFIX = "-kubeconfig"
# Lists come back as a PartialObjectMetadataList; each watch event carries one
# PartialObjectMetadata. A watch asking for the List form is one the server cannot encode:
# it answers 200 and closes the stream at once.
_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


# --- the rule -----------------------------------------------------------------------------


def _initialized(conditions: Any) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == "ControlPlaneInitialized" and c.get("status") == "True"
        for c in conditions or []
    )


def control_plane_ready(cluster: Mapping[str, Any]) -> bool:
    """Is the control plane up, by the v1beta1 or v1beta2 fields (whichever the object has)?"""
    status = cluster.get("status") or {}
    if (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return bool(
        status.get("controlPlaneReady") is True
        or (status.get("initialization") or {}).get("controlPlaneInitialized") is True
        or _initialized(status.get("conditions"))
        or _initialized((status.get("v1beta2") or {}).get("conditions"))
    )


def observe(cluster: Mapping[str, Any], secret_present: bool) -> ClusterManifest:
    """The engine's view of a Cluster API Cluster; ValueError when its name is not usable."""
    metadata = cluster.get("metadata") or {}
    annotations = {
        key: value for key, value in (metadata.get("annotations") or {}).items() if key not in _DROPPED_ANNOTATIONS
    }
    annotations[OBSERVED_BY[0]] = OBSERVED_BY[1]
    return ClusterManifest.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "Cluster",
            "metadata": {
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace", "default"),
                "labels": dict(metadata.get("labels") or {}),
                "annotations": annotations,
            },
            "status": {"controlPlaneReady": control_plane_ready(cluster), "kubeconfigSecret": secret_present},
        }
    )


def observed_by_watcher(manifest: ClusterManifest) -> bool:
    return manifest.metadata.annotations.get(OBSERVED_BY[0]) == OBSERVED_BY[1]


# --- metadata-only secrets ------------------------------------------------------------------


async def list_secret_metadata(api: ApiClient, namespace: str | None = None, **kwargs: Any) -> Any:
    """List (or, with watch=True, watch) secrets as PartialObjectMetadata: names, no data.

    Lists ask for `as=PartialObjectMetadataList`, watches for `as=PartialObjectMetadata`
    (each event is one object). No fallback to full objects: secret data never arrives.

    Takes the keyword arguments of kubernetes-asyncio's list functions that
    `projections.kube.list_and_watch` and `Watch.stream` pass.
    """
    path = "/api/v1/namespaces/{namespace}/secrets" if namespace else "/api/v1/secrets"
    names = {
        "label_selector": "labelSelector",
        "field_selector": "fieldSelector",
        "resource_version": "resourceVersion",
        "timeout_seconds": "timeoutSeconds",
        "watch": "watch",
        "limit": "limit",
        "allow_watch_bookmarks": "allowWatchBookmarks",
    }
    query = [(names[key], kwargs[key]) for key in names if kwargs.get(key) is not None]
    return await api.call_api(
        path,
        "GET",
        {"namespace": namespace} if namespace else {},
        query,
        {"Accept": _METADATA_OBJECT if kwargs.get("watch") else _METADATA_LIST},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=kwargs.get("_preload_content", True),
        _request_timeout=kwargs.get("_request_timeout"),
    )


# --- the loop -------------------------------------------------------------------------------


class ClusterWatcher:
    """Publishes ClusterObserved/ClusterRemoved on change; see the module docstring."""

    def __init__(
        self,
        api: ApiClient,
        publish: Publish,
        *,
        namespaces: Sequence[str] = (),
        seed: Iterable[ClusterManifest] = (),
        policy: RetryPolicy | None = None,
        watch_timeout: int = 300,
        api_version: str | None = None,
    ) -> None:
        self.api = api
        self.publish = publish
        self.namespaces: list[str | None] = list(dict.fromkeys(namespaces)) or [None]
        self.policy = policy or RetryPolicy()
        self.watch_timeout = watch_timeout
        self.api_version = api_version
        self.clusters: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: set[tuple[str, str]] = set()
        self.published: dict[str, ClusterManifest] = {
            m.name: m for m in seed if observed_by_watcher(m) and self._in_scope(m.metadata.namespace)
        }
        self._listed: set[tuple[str | None, str]] = set()
        self._skipped: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()

    def _in_scope(self, namespace: str) -> bool:
        return None in self.namespaces or namespace in self.namespaces

    @property
    def synced(self) -> bool:
        """Have Clusters and secrets of every namespace been listed at least once?"""
        return all((scope, what) in self._listed for scope in self.namespaces for what in ("clusters", "secrets"))

    async def run(self) -> None:
        """Watch until cancelled."""
        version = self.api_version or await self._served_version()
        log.info(
            "watching %s/%s Clusters in %s",
            CAPI_GROUP,
            version,
            ", ".join(n or "all namespaces" for n in self.namespaces),
        )
        custom = CustomObjectsApi(self.api)
        tasks = []
        for scope in self.namespaces:
            if scope is None:
                clusters = partial(custom.list_cluster_custom_object, CAPI_GROUP, version, "clusters")
            else:
                clusters = partial(custom.list_namespaced_custom_object, CAPI_GROUP, version, scope, "clusters")
            secrets = partial(list_secret_metadata, self.api, scope)
            tasks.append(self._informer(scope, "clusters", clusters))
            tasks.append(self._informer(scope, "secrets", secrets))
        await asyncio.gather(*tasks)

    async def _served_version(self) -> str:
        """The preferred Cluster API version the API serves, by discovery (allowed to everyone)."""
        custom = CustomObjectsApi(self.api)
        for version in CAPI_VERSIONS:
            try:
                await call(
                    custom.get_api_resources,
                    CAPI_GROUP,
                    version,
                    policy=self.policy,
                    what=f"discover {CAPI_GROUP}/{version}",
                )
                return version
            except ApiException as error:
                if status_code(error) != 404:
                    raise
        raise LookupError(
            f"the management cluster serves no {CAPI_GROUP} version this watcher reads "
            f"({', '.join(CAPI_VERSIONS)}): is Cluster API installed?"
        )

    def _informer(self, scope: str | None, what: str, list_fn: Callable[..., Awaitable[Any]]) -> Awaitable[None]:
        async def on_list(items: list[dict[str, Any]]) -> None:
            async with self._lock:
                first = not self.synced
                self._listed.add((scope, what))
                in_scope = {_key(item) for item in items}
                if what == "clusters":
                    for key in [k for k in self.clusters if scope is None or k[0] == scope]:
                        if key not in in_scope:
                            del self.clusters[key]
                    for item in items:
                        self.clusters[_key(item)] = item
                else:
                    stale = {k for k in self.secrets if scope is None or k[0] == scope}
                    self.secrets = (self.secrets - stale) | {k for k in in_scope if k[1].endswith(_SECRET_SUFFIX)}
                if self.synced:
                    await self._reconcile_all(None if first else scope)

        async def on_event(kind: str, obj: dict[str, Any]) -> None:
            key = _key(obj)
            async with self._lock:
                if what == "clusters":
                    if kind == "DELETED":
                        self.clusters.pop(key, None)
                    else:
                        self.clusters[key] = obj
                    affected = key
                else:
                    if not key[1].endswith(_SECRET_SUFFIX):
                        return
                    if kind == "DELETED":
                        self.secrets.discard(key)
                    else:
                        self.secrets.add(key)
                    affected = _cluster_key(key)
                if self.synced:
                    await self._reconcile(*affected)

        return list_and_watch(
            list_fn,
            on_list=on_list,
            on_event=on_event,
            what=f"{what} in {scope or 'all namespaces'}",
            policy=self.policy,
            watch_timeout=self.watch_timeout,
        )

    async def _reconcile_all(self, scope: str | None) -> None:
        """After a list: every cluster known or published in `scope` (None: everywhere)."""
        keys = set(self.clusters) | {(m.metadata.namespace, name) for name, m in self.published.items()}
        for namespace, name in sorted(keys):
            if scope is None or namespace == scope:
                await self._reconcile(namespace, name)

    async def _reconcile(self, namespace: str, name: str) -> None:
        """Publish what changed for the cluster `namespace/name`."""
        obj = self.clusters.get((namespace, name))
        previous = self.published.get(name)
        if obj is None:
            if previous is not None and previous.metadata.namespace == namespace:
                await self.publish(name, ClusterRemoved(name=name).to_bytes())
                del self.published[name]
                log.info("cluster %s/%s removed", namespace, name)
            return
        if previous is not None and previous.metadata.namespace != namespace and self._exists(previous):
            if (namespace, name) not in self._skipped:
                self._skipped.add((namespace, name))
                log.error(
                    "cluster %s/%s: the name is taken by %s/%s; cluster names must be unique across namespaces",
                    namespace,
                    name,
                    previous.metadata.namespace,
                    name,
                )
            return
        try:
            manifest = observe(obj, (namespace, f"{name}{_SECRET_SUFFIX}") in self.secrets)
        except (ValidationError, ValueError) as error:
            if (namespace, name) not in self._skipped:
                self._skipped.add((namespace, name))
                log.error("cluster %s/%s skipped: %s", namespace, name, str(error).splitlines()[-1].strip())
            return
        if manifest != previous:
            await self.publish(name, ClusterObserved(cluster=manifest).to_bytes())
            self.published[name] = manifest
            log.info(
                "cluster %s/%s: ready=%s (control plane %s, kubeconfig secret %s)",
                namespace,
                name,
                manifest.status.ready,
                manifest.status.control_plane_ready,
                manifest.status.kubeconfig_secret,
            )

    def _exists(self, manifest: ClusterManifest) -> bool:
        return (manifest.metadata.namespace, manifest.name) in self.clusters


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")


def _cluster_key(secret: tuple[str, str]) -> tuple[str, str]:
    return secret[0], secret[1].removesuffix(_SECRET_SUFFIX)
