"""The Kubernetes sink: assemblage snapshots become Flux objects in clusters.

What flows through here: a RemoteAssemblage or ProxyAssemblage snapshot (or a tombstone)
for one cluster goes in (`await write(kind, cluster, snapshot)`); Flux sources and
Kustomizations rendered by `projections.render.FluxRenderer` come out, server-side applied:

- RemoteAssemblage → the management cluster, in the cluster's namespace; the
  Kustomization's `spec.kubeConfig.secretRef` names `<cluster>-kubeconfig`, so the
  management cluster's Flux applies into the workload cluster.
- ProxyAssemblage → inside the workload cluster (namespace `flux-system` by default),
  reached through the kubeconfig in the secret `<cluster>-kubeconfig` (key `value`) in the
  cluster's namespace of the management cluster. The secret is read at every apply (and
  at every reconnect of a watch), its content kept in memory only for as long as a client
  is built; it is never logged or published. One client per workload cluster serves its
  converges, drift watch and status watch (`projections.kube.WorkloadClients`): made
  anew only when the secret's content changed, dropped when the cluster is.

Level-triggered, per cluster. `write` renders and validates every object first (an invalid
snapshot raises and changes nothing, as in the directory sink), records the snapshot as
the cluster's desired state and wakes that cluster's worker task. Each worker converges
its cluster to the desired state, then waits to be woken again — by the next snapshot, or
by drift: the sink watches the objects it owns (`projections.sinks.drift`), in the
management cluster (remote syncs) and in every workload cluster it applied to (proxy
syncs), and wakes a cluster's worker as soon as one of its objects is deleted or a field
the sink sets is edited, so drift is undone within a second or two. A re-converge every
`resync_interval` (default 300 s; `rollout applier --resync-interval`) stays as a
backstop for anything a watch missed. Converging is:

1. readiness gate: the kubeconfig secret must exist (for remote syncs too: without it
   Flux would only fail and back off). A cluster that is not ready is skipped, not failed,
   and retried every `not_ready_interval` until it is;
2. list the objects the sink owns for that cluster and assemblage (labels
   `app.kubernetes.io/managed-by=rollout`, `rollout.dev/cluster`, `rollout.dev/assemblage`);
3. server-side apply every rendered object (field manager `rollout`, `force=true`,
   sources before Kustomizations). Fields the sink no longer sets are removed by the API
   server; fields other managers set on other paths are left alone;
4. delete owned objects that are no longer rendered (Kustomizations first). A tombstone
   deletes them all. Note that deleting a Kustomization with `prune: true` makes Flux
   remove what it had applied — that is what removing a sync means.

Failures. Each request retries transient errors (5xx, 429, 409, timeouts) with backoff
(`projections.kube.call`); a converge that still fails is retried by the worker with
capped exponential backoff. Workers run concurrently (at most `max_parallel` converging at
once), so one failing or slow cluster never stalls the others, and `write` waits for its
cluster's converge at most `write_timeout` seconds before returning (the worker keeps
going). Stale snapshots (a version below the one already held) are ignored; a tombstone
always applies and forgets the version.

Ownership across replicas: the applier's consumer group gives each replica a disjoint set
of clusters. `forget(kind, cluster)` drops a cluster without touching its objects (for a
replica that lost the cluster's partition); `close()` stops every worker.

Sync status: with a `StatusReporter`, the sink tells it which clusters it manages, and
the reporter watches their Kustomizations and HelmReleases (see `projections.status`).
Live Helm values: with `LiveValues`, a HelmRelease whose `spec.values` were changed out of
band is reported (`HelmValuesObserved`) and left alone for a grace period instead of being
reverted, so the engine's values policy decides (`projections.sinks.live_values`).

Modules: this one holds the per-cluster workers and gates; `projections.sinks.objects`
the list/apply/prune of one cluster's objects (steps 2 to 4) and the namespace lookup of a
tombstone; `projections.sinks.drift` the watches that wake a worker on drift.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

from kubernetes_asyncio.client import ApiClient

from projections.kube import (
    RetryPolicy,
    WorkloadClients,
    describe,
    kubeconfig_secret_name,
    read_kubeconfig,
)
from projections.render import LABEL_ASSEMBLAGE, LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY, FluxRenderer
from projections.sinks import SinkResult
from projections.sinks.drift import DriftWatch
from projections.sinks.live_values import LiveValues
from projections.sinks.objects import (
    FIELD_MANAGER,
    MANAGED_RESOURCES,
    ObjectKey,
    Outcome,
    find_cluster_namespace,
    sync_objects,
)
from projections.status import StatusReporter
from rollout.api.manifests import check_dns1123_label
from rollout.wire.assemblages import Assemblage, AssemblageKind

__all__ = ["FIELD_MANAGER", "MANAGED_RESOURCES", "KubernetesSink"]

log = logging.getLogger("rollout.sink.kubernetes")

_ASSEMBLAGE_LABEL = {"RemoteAssemblage": "remote", "ProxyAssemblage": "proxy"}

ManagementClient = Callable[[], Awaitable[ApiClient]]


@dataclass
class _Target:
    kind: AssemblageKind
    cluster: str
    desired: Assemblage | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)
    namespace: str | None = None  # the cluster's namespace, known from a snapshot
    seq: int = 0  # bumped by every write
    done_seq: int = 0  # the write the last converge started from
    outcome: Outcome | None = None
    failures: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def indexed(self) -> dict[ObjectKey, dict[str, Any]]:
        """The rendered objects by (kind, namespace, name); nothing for a tombstone."""
        if self.desired is None:
            return {}
        return {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self.objects}

    @property
    def version(self) -> int | None:
        return self.desired.version if self.desired is not None else None


class KubernetesSink:
    """Server-side applies assemblage snapshots; see the module docstring."""

    #: Level-triggered: the applier may (and, to survive rebalances and crashes between a
    #: commit and a converge, should) replay the compacted topics from the beginning on
    #: every partition assignment. Older versions are ignored; re-applying is a no-op.
    replay_on_assignment: ClassVar[bool] = True

    def __init__(
        self,
        renderer: FluxRenderer,
        *,
        management: ManagementClient,
        reporter: StatusReporter | None = None,
        field_manager: str = FIELD_MANAGER,
        policy: RetryPolicy | None = None,
        resync_interval: float = 300.0,
        not_ready_interval: float = 15.0,
        max_backoff: float = 300.0,
        write_timeout: float = 5.0,
        max_parallel: int = 16,
        fleet_namespaces: Sequence[str] = (),
        watch_drift: bool = True,
        drift_watch_timeout: int = 300,
        live_values: LiveValues | None = None,
        clients: WorkloadClients | None = None,
    ) -> None:
        self.renderer = renderer
        self.clients = clients or WorkloadClients()
        self.live_values = live_values
        self.fleet_namespaces = list(fleet_namespaces)
        self.reporter = reporter
        self.field_manager = field_manager
        self.policy = policy or RetryPolicy()
        self.resync_interval = resync_interval
        self.not_ready_interval = not_ready_interval
        self.max_backoff = max_backoff
        self.write_timeout = write_timeout
        self._connect_management = management
        self._management: ApiClient | None = None
        self._management_lock = asyncio.Lock()
        self._parallel = asyncio.Semaphore(max_parallel)
        self._targets: dict[tuple[AssemblageKind, str], _Target] = {}
        self.watch_drift = watch_drift
        self.drift_watch_timeout = drift_watch_timeout
        self._drift_tasks: dict[str, asyncio.Task[None]] = {}  # "" (management) or a proxy cluster

    # -- the Sink protocol ---------------------------------------------------------------------

    async def write(self, kind: AssemblageKind, cluster: str, assemblage: Assemblage | None) -> SinkResult:
        """Make (kind, cluster) converge to this snapshot; wait for it up to `write_timeout`."""
        if kind not in get_args(AssemblageKind):
            raise ValueError(f"kind {kind!r} is not one of {', '.join(get_args(AssemblageKind))}")
        check_dns1123_label(cluster)
        target = self._targets.get((kind, cluster))
        objects: list[dict[str, Any]] = []
        if assemblage is not None:
            if assemblage.kind != kind or assemblage.metadata.name != cluster:
                raise ValueError(
                    f"snapshot {assemblage.kind} {assemblage.metadata.name!r} was delivered as "
                    f"{kind} {cluster!r}: key and value disagree"
                )
            if target is not None and target.version is not None and assemblage.version < target.version:
                log.info(
                    "ignoring %s %s version %d: version %d is newer", kind, cluster, assemblage.version, target.version
                )
                return SinkResult(kind=kind, cluster=cluster, version=assemblage.version, stale=True)
            objects = self._render(assemblage)  # raises before anything changes
        if target is None:  # new, or a tombstone for a cluster not seen since the start: prune
            target = self._targets[(kind, cluster)] = _Target(kind, cluster)
        target.desired = assemblage
        target.objects = objects
        if assemblage is not None:
            target.namespace = assemblage.metadata.namespace
        target.seq += 1
        seq = target.seq
        target.wake.set()
        if target.task is None or target.task.done():
            target.task = asyncio.create_task(self._run(target), name=f"sink: {kind} {cluster}")
        outcome = await self._wait(target, seq)
        version = assemblage.version if assemblage is not None else None
        if outcome is None or outcome.state != "applied":
            return SinkResult(kind=kind, cluster=cluster, version=version)
        return SinkResult(
            kind=kind,
            cluster=cluster,
            version=version,
            written=outcome.written,
            unchanged=outcome.unchanged,
            pruned=outcome.pruned,
        )

    def owns(self, kind: AssemblageKind, cluster: str) -> bool:
        target = self._targets.get((kind, cluster))
        return target is not None and target.desired is not None

    def outcome(self, kind: AssemblageKind, cluster: str) -> Outcome | None:
        """The last converge's outcome for (kind, cluster), None before the first."""
        target = self._targets.get((kind, cluster))
        return target.outcome if target is not None else None

    def forget(self, kind: AssemblageKind, cluster: str) -> None:
        """Stop managing (kind, cluster) without touching its objects (another replica owns it now)."""
        target = self._targets.pop((kind, cluster), None)
        if target is not None and target.task is not None:
            target.task.cancel()
        if kind == "ProxyAssemblage":
            self._stop_drift_watch(cluster)
            if target is not None and target.namespace is not None:
                self.clients.forget(target.namespace, cluster)
        if self.reporter is not None:
            self.reporter.release(_ASSEMBLAGE_LABEL[kind], cluster)  # type: ignore[arg-type]
        if self.live_values is not None:
            self.live_values.forget(cluster)

    async def close(self) -> None:
        tasks = [t.task for t in self._targets.values() if t.task is not None]
        tasks += self._drift_tasks.values()
        self._drift_tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._targets.clear()
        if self.reporter is not None:
            await self.reporter.close()
        await self.clients.close()
        if self._management is not None:
            await self._management.close()
            self._management = None

    # -- rendering -----------------------------------------------------------------------------

    def _render(self, assemblage: Assemblage) -> list[dict[str, Any]]:
        sources: list[dict[str, Any]] = []
        kustomizations: list[dict[str, Any]] = []
        modules: set[str] = set()
        for sync in assemblage.spec.syncs:
            if sync.module in modules:
                raise ValueError(
                    f"{assemblage.kind} {assemblage.metadata.name!r} version {assemblage.version} "
                    f"has two syncs for module {sync.module!r}"
                )
            modules.add(sync.module)
            source, kustomization = self.renderer.render(assemblage, sync)
            sources.append(source)
            kustomizations.append(kustomization)
        return sources + kustomizations

    # -- the per-cluster worker ----------------------------------------------------------------

    async def _wait(self, target: _Target, seq: int) -> Outcome | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.write_timeout
        while target.done_seq < seq:
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.info(
                    "%s %s: still converging after %.1fs; continuing in the background",
                    target.kind,
                    target.cluster,
                    self.write_timeout,
                )
                return None
            progress = target.progress
            try:
                await asyncio.wait_for(progress.wait(), remaining)
            except TimeoutError:
                continue
        return target.outcome

    async def _run(self, target: _Target) -> None:
        while True:
            target.wake.clear()
            seq, desired, objects = target.seq, target.desired, target.objects
            try:
                async with self._parallel:
                    outcome = await self._converge(target, desired, objects)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                outcome = Outcome("failed", reason=describe(error))
            self._log(target, outcome)
            target.outcome = outcome
            target.done_seq = seq
            target.progress.set()
            target.progress = asyncio.Event()
            if outcome.state == "applied":
                target.failures = 0
                if desired is None and target.seq == seq:  # a tombstone, done: forget the cluster
                    if self._targets.get((target.kind, target.cluster)) is target:
                        del self._targets[(target.kind, target.cluster)]
                        if target.kind == "ProxyAssemblage":
                            self._stop_drift_watch(target.cluster)
                            if target.namespace is not None:
                                self.clients.forget(target.namespace, target.cluster)
                    return
                delay = self.resync_interval
                recheck = self.live_values.recheck_in(target.cluster) if self.live_values is not None else None
                if recheck is not None:  # a held HelmRelease: look again when its grace runs out
                    delay = min(delay, recheck + 0.05)
            elif outcome.state == "not-ready":
                delay = self.not_ready_interval
            else:
                target.failures += 1
                delay = min(self.max_backoff, self.policy.initial * 2 ** min(target.failures, 20))
                delay *= random.uniform(0.5, 1.0)
            try:
                await asyncio.wait_for(target.wake.wait(), delay)
            except TimeoutError:
                pass

    def _log(self, target: _Target, outcome: Outcome) -> None:
        previous = target.outcome
        what = f"{target.kind} {target.cluster}"
        if outcome.state == "failed":
            log.warning("%s: converge failed (attempt %d): %s", what, target.failures + 1, outcome.reason)
        elif outcome.state == "not-ready":
            if previous is None or previous.state != "not-ready":
                log.info("%s: skipped, not ready: %s", what, outcome.reason)
        elif outcome.written or outcome.pruned or (previous is not None and previous.state != "applied"):
            log.info(
                "%s v%s: %d written, %d unchanged, %d pruned",
                what,
                target.version,
                outcome.written,
                outcome.unchanged,
                outcome.pruned,
            )

    async def _management_api(self) -> ApiClient:
        async with self._management_lock:
            if self._management is None:
                self._management = await self._connect_management()
                if self.reporter is not None:
                    self.reporter.watch_management(self._management)
                self._start_drift_watch("", self._connect_management)
            return self._management

    async def _converge(self, target: _Target, desired: Assemblage | None, objects: list[dict[str, Any]]) -> Outcome:
        management = await self._management_api()
        label = _ASSEMBLAGE_LABEL[target.kind]
        if target.kind == "RemoteAssemblage":
            return await self._apply_remote(management, target, desired, objects, label)
        return await self._apply_proxy(management, target, desired, objects, label)

    async def _apply_remote(
        self,
        management: ApiClient,
        target: _Target,
        desired: Assemblage | None,
        objects: list[dict[str, Any]],
        label: str,
    ) -> Outcome:
        if desired is not None:
            present = await read_kubeconfig(
                management, namespace=desired.metadata.namespace, cluster=target.cluster, policy=self.policy
            )
            if present is None:
                return Outcome(
                    "not-ready",
                    reason=f"secret {desired.metadata.namespace}/{kubeconfig_secret_name(target.cluster)} is absent",
                )
        outcome = await sync_objects(
            management,
            cluster=target.cluster,
            label=label,
            objects=objects,
            field_manager=self.field_manager,
            policy=self.policy,
            hold=self.live_values.hold if self.live_values is not None else None,
        )
        if self.reporter is not None and desired is not None:
            await self.reporter.claim_remote(target.cluster)
        elif self.reporter is not None:
            self.reporter.release("remote", target.cluster)
        return outcome

    async def _apply_proxy(
        self,
        management: ApiClient,
        target: _Target,
        desired: Assemblage | None,
        objects: list[dict[str, Any]],
        label: str,
    ) -> Outcome:
        namespace = target.namespace or await find_cluster_namespace(
            management, cluster=target.cluster, fleet_namespaces=self.fleet_namespaces, policy=self.policy
        )
        secret = f"{namespace}/{kubeconfig_secret_name(target.cluster)}"
        if namespace is None:
            return Outcome("applied", reason="no kubeconfig secret: the cluster is gone, nothing to prune")
        target.namespace = namespace
        workload = await self.clients.acquire(
            management, namespace=namespace, cluster=target.cluster, policy=self.policy
        )
        if workload is None:
            if desired is None:
                return Outcome("applied", reason=f"secret {secret} is absent: the cluster is gone, nothing to prune")
            return Outcome("not-ready", reason=f"secret {secret} is absent")
        async with workload:
            outcome = await sync_objects(
                workload,
                cluster=target.cluster,
                label=label,
                objects=objects,
                field_manager=self.field_manager,
                policy=self.policy,
                hold=self.live_values.hold if self.live_values is not None else None,
            )
        if desired is not None:
            cluster_name = target.cluster

            async def connect_workload() -> ApiClient | None:
                api = await self._management_api()
                return await self.clients.acquire(api, namespace=namespace, cluster=cluster_name, policy=self.policy)

            self._start_drift_watch(target.cluster, connect_workload)
        if self.reporter is not None:
            if desired is not None:
                cluster = target.cluster

                async def connect() -> ApiClient | None:
                    api = await self._management_api()
                    return await self.clients.acquire(api, namespace=namespace, cluster=cluster, policy=self.policy)

                self.reporter.claim_proxy(target.cluster, connect)
            else:
                self.reporter.release("proxy", target.cluster)
        return outcome

    # -- drift ---------------------------------------------------------------------------------

    def _start_drift_watch(self, cluster: str, connect: Callable[[], Awaitable[ApiClient | None]]) -> None:
        """Watch the owned objects of the management cluster (`cluster` "") or of a workload cluster."""
        running = self._drift_tasks.get(cluster)
        if not self.watch_drift or (running is not None and not running.done()):
            return
        kind: AssemblageKind = "ProxyAssemblage" if cluster else "RemoteAssemblage"
        label = _ASSEMBLAGE_LABEL[kind]
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_ASSEMBLAGE}={label}"
        if cluster:
            selector += f",{LABEL_CLUSTER}={cluster}"

        def desired() -> dict[tuple[str, str], dict[ObjectKey, dict[str, Any]]]:
            return {
                (label, t.cluster): t.indexed()
                for (k, c), t in self._targets.items()
                if k == kind and (not cluster or c == cluster) and t.desired is not None
            }

        watch = DriftWatch(
            connect,
            kinds=MANAGED_RESOURCES,
            selector=selector,
            desired=desired,
            on_drift=self._on_drift,
            what=f"{kind} {cluster}" if cluster else "management cluster",
            policy=self.policy,
            retry_interval=self.max_backoff,
            watch_timeout=self.drift_watch_timeout,
        )
        self._drift_tasks[cluster] = asyncio.create_task(watch.run(), name=f"sink: drift {cluster or 'management'}")

    def _stop_drift_watch(self, cluster: str) -> None:
        task = self._drift_tasks.pop(cluster, None)
        if task is not None:
            task.cancel()

    def _on_drift(self, label: str, cluster: str) -> None:
        kind: AssemblageKind = "ProxyAssemblage" if label == "proxy" else "RemoteAssemblage"
        target = self._targets.get((kind, cluster))
        if target is not None and target.desired is not None:
            target.wake.set()
