"""One watcher at a time: run work only while holding a `coordination.k8s.io/v1` Lease.

    candidates ──► LeaseLock (kubernetes-asyncio's leader election) ──► the leader runs `work`
                                                                       └─ lost the Lease: `work`
                                                                          is cancelled; candidate again

kubernetes-asyncio's `LeaderElection` acquires the Lease (a follower takes it over once it
has seen the same holder record for `lease_duration` seconds), renews it every
`retry_period` and gives up when it could not renew within `renew_deadline` — shorter than
the lease, so the old leader stops before anyone else may start. `work` is a fresh
coroutine each time leadership is won: state is rebuilt from Kafka and the API, never
carried across a loss. What the Lease cannot promise (a leader paused longer than its
lease by the scheduler or a broken network) the Kafka fencing of
`projections/fenced_publisher.py` does: the new leader's producer makes the old one's
writes fail.

On a clean stop the leader releases the Lease (holder cleared), so a rolling update hands
over at once rather than after the lease duration.

`run_role` is what the watchers (`watch-clusters`, `watch-modules`) call: with a Lease,
`run_as_leader`; without one (no `--leader-elect`), `work` runs at once until `stop` — the
fenced publisher still keeps a second instance from publishing beside the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

__all__ = ["LeaseSettings", "run_as_leader", "run_role"]

log = logging.getLogger("rollout.leadership")


@dataclass(frozen=True)
class LeaseSettings:
    name: str
    namespace: str
    identity: str
    lease_duration: int = 15  # whole seconds: the Lease stores leaseDurationSeconds
    renew_deadline: int = 10
    retry_period: int = 2


async def run_as_leader(
    api: ApiClient, lease: LeaseSettings, work: Callable[[], Awaitable[None]], stop: asyncio.Event
) -> None:
    """Run `work()` whenever this instance holds `lease`, until `stop` is set or `work`
    ends by itself (its error is raised)."""
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    running: list[asyncio.Task[None]] = []

    async def lead() -> None:
        log.info("%s leads (Lease %s/%s)", lease.identity, lease.namespace, lease.name)
        task = asyncio.current_task()
        assert task is not None
        running.append(task)
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            if not finished.done():
                finished.set_exception(error)
        else:
            if not finished.done():
                finished.set_result(None)

    async def lost() -> None:
        log.warning("%s lost the Lease %s/%s; candidate again", lease.identity, lease.namespace, lease.name)

    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set() and not finished.done():
            config = electionconfig.Config(
                LeaseLock(lease.name, lease.namespace, lease.identity, api),
                lease.lease_duration,
                lease.renew_deadline,
                lease.retry_period,
                lead,
                lost,
            )
            election = asyncio.ensure_future(leaderelection.LeaderElection(config).run())
            waited: set[asyncio.Future[Any]] = {election, stopped, finished}
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            if not election.done():
                election.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await election
            elif election.exception() is not None and not finished.done():
                finished.set_exception(election.exception())  # type: ignore[arg-type]
            for task in running:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if running and (stop.is_set() or finished.done()):
                await _release(api, lease)
            running.clear()
    finally:
        stopped.cancel()
    if finished.done():
        finished.result()


async def run_role(
    api: ApiClient, lease: LeaseSettings | None, work: Callable[[], Awaitable[None]], stop: asyncio.Event
) -> None:
    """Run `work()` as the one holder of a role: under `lease` when given, else at once,
    until `stop` is set or `work` ends by itself (its error is raised)."""
    if lease is not None:
        await run_as_leader(api, lease, work, stop)
        return
    task, stopped = asyncio.ensure_future(work()), asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for pending in (task, stopped):
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def _release(api: ApiClient, lease: LeaseSettings) -> None:
    """Clear the holder if it is still us: followers take over at their next try."""
    coordination = CoordinationV1Api(api)
    try:
        current = await coordination.read_namespaced_lease(lease.name, lease.namespace)
        if current.spec is not None and current.spec.holder_identity == lease.identity:
            current.spec.holder_identity = None  # type: ignore[assignment]  # null clears it; the stub says str
            await coordination.replace_namespaced_lease(lease.name, lease.namespace, current)
            log.info("%s released the Lease %s/%s", lease.identity, lease.namespace, lease.name)
    except ApiException as error:
        log.warning("releasing the Lease %s/%s: HTTP %s", lease.namespace, lease.name, error.status)
