"""`--leader-elect` and the Lease flags of the watchers (`watch-clusters`, `watch-modules`).

Light at import (`rollout watch-clusters --help`); `projections.leadership` does the work. In a pod the
chart passes `--leader-elect` and POD_NAMESPACE / POD_NAME (downward API), which become
the Lease's namespace and this instance's identity.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from projections.leadership import LeaseSettings


@dataclass(frozen=True)
class Leadership:
    enabled: bool
    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration: int
    renew_deadline: int
    retry_period: int

    def lease(self) -> LeaseSettings | None:
        """The Lease to hold with --leader-elect; None without it."""
        if not self.enabled:
            return None
        from projections.leadership import LeaseSettings

        return LeaseSettings(
            name=self.lease_name,
            namespace=self.lease_namespace,
            identity=self.identity,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


def leadership_options(default_lease: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @click.option(
            "--leader-elect/--no-leader-elect",
            envvar="ROLLOUT_LEADER_ELECT",
            default=False,
            show_default=True,
            help="Act only while holding a coordination.k8s.io Lease (run several replicas, one acts).",
        )
        @click.option("--lease-name", default=default_lease, show_default=True, help="Name of the Lease.")
        @click.option(
            "--lease-namespace",
            envvar="POD_NAMESPACE",
            default="default",
            show_default=True,
            help="Namespace of the Lease (env POD_NAMESPACE).",
        )
        @click.option(
            "--identity",
            envvar="POD_NAME",
            default=None,
            help="This instance's name in the Lease (env POD_NAME; default: host-pid-random).",
        )
        @click.option("--lease-duration", type=int, default=15, show_default=True, help="Seconds a Lease holds.")
        @click.option(
            "--renew-deadline",
            type=int,
            default=10,
            show_default=True,
            help="Seconds the leader may fail to renew before it stops acting (< --lease-duration).",
        )
        @click.option("--retry-period", type=int, default=2, show_default=True, help="Seconds between tries.")
        @functools.wraps(command)
        def wrapper(
            *args: Any,
            leader_elect: bool,
            lease_name: str,
            lease_namespace: str,
            identity: str | None,
            lease_duration: int,
            renew_deadline: int,
            retry_period: int,
            **kwargs: Any,
        ) -> Any:
            if leader_elect and not lease_duration > renew_deadline > 1.2 * retry_period >= 1.2:
                raise click.BadParameter(
                    "need --lease-duration > --renew-deadline > 1.2 * --retry-period, and --retry-period >= 1",
                    param_hint="--lease-duration/--renew-deadline/--retry-period",
                )
            leadership = Leadership(
                enabled=leader_elect,
                lease_name=lease_name,
                lease_namespace=lease_namespace,
                identity=identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
                lease_duration=lease_duration,
                renew_deadline=renew_deadline,
                retry_period=retry_period,
            )
            return command(*args, leadership=leadership, **kwargs)

        return wrapper

    return decorate
