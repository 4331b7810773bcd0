"""Drift detection for the Kubernetes sink: owned objects are watched, changes wake the applier.

What flows through here: watch events of the Flux objects the sink owns in one cluster
(label `app.kubernetes.io/managed-by=rollout`, plus the sink's own selector: the remote
assemblage's objects in the management cluster, or one workload cluster's proxy objects)
go in; `on_drift(assemblage_label, cluster)` comes out when an object the sink wants is
gone, or differs from what the sink applies in a field the sink sets.

Why by comparison and not on every event: the objects' other writers — Flux controllers
updating `status`, other field managers adding fields the sink does not set — produce
events all the time; re-applying on each would be a no-op request per status update.
`drifted(desired, live)` asks only whether every field the sink renders (everything but
`status`) still has the sink's value in the live object: maps are compared key by key
(extra keys, e.g. defaults or other managers' fields, are not drift), lists item by item.
Deletes are drift when the object is still desired.

Each `DriftWatch` is one informer per managed kind (`projections.informer.list_and_watch`)
over one client. A listing is compared in full, so a delete that happened while the watch
was down is caught on the relist. After a few failed watches in a row the client is made
anew (`connect`, e.g. a workload client read again from its kubeconfig secret), with
capped backoff — per cluster: one unreachable cluster's watch waits on its own and never
delays another's.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from projections.informer import list_and_watch
from projections.kube import Resource, RetryPolicy, describe
from projections.render import LABEL_ASSEMBLAGE, LABEL_CLUSTER

__all__ = ["DriftWatch", "drifted"]

log = logging.getLogger("rollout.sink.drift")

ObjectKey = tuple[str, str, str]  # (kind, namespace, name)
Connect = Callable[[], Awaitable[ApiClient | None]]
Owner = tuple[str, str]  # (assemblage label, cluster)
DesiredObjects = Callable[[], Mapping[Owner, Mapping[ObjectKey, dict[str, Any]]]]
OnDrift = Callable[[str, str], None]


def drifted(desired: Any, live: Any) -> bool:
    """Does `live` lack any value `desired` sets? (Status ignored; extra keys are not drift.)"""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return True
        return any(key != "status" and drifted(value, live.get(key)) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return True
        return any(drifted(d, v) for d, v in zip(desired, live, strict=True))
    return bool(desired != live)


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


class DriftWatch:
    """Watches the owned objects of one cluster; see the module docstring."""

    def __init__(
        self,
        connect: Connect,
        *,
        kinds: tuple[Resource, ...],
        selector: str,
        desired: DesiredObjects,
        on_drift: OnDrift,
        what: str,
        policy: RetryPolicy,
        retry_interval: float,
        watch_timeout: int = 300,
    ) -> None:
        self.connect = connect
        self.kinds = kinds
        self.selector = selector
        self.desired = desired
        self.on_drift = on_drift
        self.what = what
        self.policy = policy
        self.retry_interval = retry_interval
        self.watch_timeout = watch_timeout

    async def run(self) -> None:
        """Watch until cancelled, reconnecting with backoff."""
        failures = 0
        while True:
            try:
                api = await self.connect()
                if api is not None:
                    async with api:
                        await asyncio.gather(*(self._informer(api, kind) for kind in self.kinds))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failures += 1
                delay = min(self.retry_interval, self.policy.initial * 2 ** min(failures, 20))
                delay *= random.uniform(0.5, 1.0)
                log.info("%s: drift watch failed (%s); reconnecting in %.1fs", self.what, describe(error), delay)
                await asyncio.sleep(delay)
                continue
            await asyncio.sleep(self.retry_interval)  # not connectable yet (no kubeconfig secret)

    async def _informer(self, api: ApiClient, kind: Resource) -> None:
        custom = CustomObjectsApi(api)

        async def on_list(items: list[dict[str, Any]]) -> None:
            seen = {object_key(item) for item in items}
            for item in items:
                owner = _owner(item)
                if owner is not None:
                    self._check(owner, item)
            for owner, wanted in self.desired().items():  # wanted objects absent from the listing
                missing = [k for k in wanted if k[0] == kind.kind and k not in seen]
                if missing:
                    self._drift(owner, f"{missing[0][0]} {missing[0][1]}/{missing[0][2]} is missing")

        async def on_event(event: str, obj: dict[str, Any]) -> None:
            owner = _owner(obj)
            if owner is None:
                return
            if event == "DELETED":
                if object_key(obj) in self.desired().get(owner, {}):
                    self._drift(owner, f"{_describe(obj)} was deleted")
            else:
                self._check(owner, obj)

        await list_and_watch(
            partial(custom.list_cluster_custom_object, kind.group, kind.version, kind.plural),
            on_list=on_list,
            on_event=on_event,
            what=f"{self.what}: {kind.plural}",
            label_selector=self.selector,
            policy=self.policy,
            watch_timeout=self.watch_timeout,
            relist_backoff=self.retry_interval,
            max_failures=3,
        )

    def _check(self, owner: Owner, live: dict[str, Any]) -> None:
        want = self.desired().get(owner, {}).get(object_key(live))
        if want is not None and drifted(want, live):
            self._drift(owner, f"{_describe(live)} was changed")

    def _drift(self, owner: Owner, why: str) -> None:
        log.info("%s: drift (%s); re-applying", self.what, why)
        self.on_drift(*owner)


def _owner(obj: Mapping[str, Any]) -> Owner | None:
    """(assemblage label, cluster) from the object's labels; None when not the sink's."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    assemblage, cluster = labels.get(LABEL_ASSEMBLAGE), labels.get(LABEL_CLUSTER)
    return (assemblage, cluster) if assemblage and cluster else None


def _describe(obj: Mapping[str, Any]) -> str:
    kind, namespace, name = object_key(obj)
    return f"{kind} {namespace}/{name}"
