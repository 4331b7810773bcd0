"""Live Helm values: a HelmRelease whose values someone else changed is reported, not reverted.

What flows through here: before the Kubernetes sink applies a rendered `HelmRelease`, its
desired object and the live one (from the converge's listing) go into `LiveValues.hold`;
out comes whether to leave the live object alone for now, and — once per change — a
`HelmValuesObserved {cluster, module, values: <the live spec.values>}` on the sync-status
topic (key: the cluster, like status reports). No kubeconfig or other secret is ever in it.

Why hold. The sink's server-side apply (`force`) would put back the values it rendered,
undoing the edit before the engine has seen it — and an applier reporting the reverted
values would then make `keepCurrent` keep the *old* value. So when the live `spec.values`
differ from what the sink would apply, and those live values were not reported yet, the sink
reports them and does not apply that HelmRelease for `grace` seconds (default 30). The engine
decides (rollout/engine/live_values.py): a path with `keepCurrent` or `readOnly` keeps the live value
and a new snapshot carrying it arrives within a second or two — applied as usual; a path
without a policy is not the cluster's to decide, so no snapshot comes, the grace runs out and
the next converge (scheduled for then: `recheck_in`) applies the declared values.

What is read: the HelmRelease's `spec.values` — what a cluster's UI, `kubectl edit` or a
platform operator change; Helm's own computed values stay inside helm-controller. The object a
values path may point at (a Secret generated on the cluster, a ConfigMap) is not read: nothing
in the module says which object that would be. Chart defaults are not reported (the sink does
not fetch charts); modules may declare `chartDefaults`, or `rollout report-values
--chart-defaults` reports them.

Memory is per process: after a restart, live values that differ from the rendered ones are
reported once more, which the engine takes as the no-op it is when nothing changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.publisher import Publish
from projections.render import LABEL_CLUSTER, LABEL_MODULE
from rollout.wire.events import HelmValuesObserved

__all__ = ["DEFAULT_GRACE", "LiveValues"]

log = logging.getLogger("rollout.sink.values")

DEFAULT_GRACE = 30.0
"""Seconds a reported HelmRelease is left as the cluster has it, waiting for the engine."""

ReleaseKey = tuple[str, str, str]  # (cluster, namespace, name) of a HelmRelease


@dataclass(frozen=True)
class _Reported:
    values: Any
    at: float


class LiveValues:
    """Reports HelmReleases whose live values differ from the rendered ones; see the module docstring."""

    def __init__(
        self, publish: Publish, *, grace: float = DEFAULT_GRACE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.publish = publish
        self.grace = grace
        self.clock = clock
        self._reported: dict[ReleaseKey, _Reported] = {}

    async def hold(self, desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
        """Should the sink leave `live` as it is for now instead of applying `desired`?

        Raises if the report cannot be published: the converge fails and is retried, and the
        cluster's values stay meanwhile."""
        if desired.get("kind") != "HelmRelease" or live is None:
            return False
        labels = (desired.get("metadata") or {}).get("labels") or {}
        cluster, module = labels.get(LABEL_CLUSTER, ""), labels.get(LABEL_MODULE, "")
        key = _key(cluster, desired)
        current = (live.get("spec") or {}).get("values") or {}
        if current == ((desired.get("spec") or {}).get("values") or {}):
            self._reported.pop(key, None)
            return False
        reported = self._reported.get(key)
        now = self.clock()
        if reported is not None and reported.values == current:
            if now - reported.at < self.grace:
                return True
            del self._reported[key]  # the engine had its chance and kept nothing: apply
            return False
        event = HelmValuesObserved(cluster=cluster, module=module, values=dict(current))
        await self.publish(cluster, event.to_bytes())
        self._reported[key] = _Reported(current, now)
        log.info("%s %s: values changed on the cluster; reported, not reverted for %.0fs", cluster, module, self.grace)
        return True

    def recheck_in(self, cluster: str) -> float | None:
        """Seconds until the earliest grace of `cluster`'s held releases runs out (None: none held)."""
        now = self.clock()
        left = [r.at + self.grace - now for (c, _, _), r in self._reported.items() if c == cluster]
        return max(min(left), 0.0) if left else None

    def forget(self, cluster: str) -> None:
        for key in [k for k in self._reported if k[0] == cluster]:
            del self._reported[key]


def _key(cluster: str, obj: Mapping[str, Any]) -> ReleaseKey:
    meta = obj.get("metadata") or {}
    return cluster, meta.get("namespace", ""), meta.get("name", "")
