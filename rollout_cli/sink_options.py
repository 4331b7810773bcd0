"""The Kubernetes sink's timings as `rollout applier` flags (and chart values through env vars).

`SinkTimings` carries them from the command line to `make_kubernetes_sink`
(rollout_cli/processes/kubernetes_sink.py); `sink_timing_options` adds one click option per
field. Kept apart from it so that `rollout applier --help` does not import the Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SinkTimings:
    """How often and how patiently the Kubernetes sink converges clusters (seconds)."""

    resync_interval: float = 300.0
    not_ready_interval: float = 15.0
    request_timeout: float = 10.0
    write_timeout: float = 5.0
    max_backoff: float = 300.0
    values_grace: float = 30.0
    watch_drift: bool = True


_SECONDS = click.FloatRange(min=0.1)
_OPTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "--resync-interval",
        "ROLLOUT_RESYNC_INTERVAL",
        "Re-apply every cluster this often (drift backstop).",
    ),
    ("--not-ready-interval", "ROLLOUT_NOT_READY_INTERVAL", "Retry a cluster whose kubeconfig secret is absent."),
    ("--request-timeout", "ROLLOUT_REQUEST_TIMEOUT", "Timeout of one Kubernetes API request."),
    ("--write-timeout", "ROLLOUT_WRITE_TIMEOUT", "Wait this long for a cluster's converge before moving on."),
    ("--max-backoff", "ROLLOUT_MAX_BACKOFF", "Longest wait between retries of a failing cluster."),
    (
        "--values-grace",
        "ROLLOUT_VALUES_GRACE",
        "Leave a HelmRelease whose values were changed on the cluster as it is this long (reported, "
        "for the engine's values policy to decide) before applying the declared values.",
    ),
)


def sink_timing_options(command: F) -> F:
    """Add the SinkTimings flags; the command receives them as keyword arguments."""
    defaults = SinkTimings()
    command = click.option(
        "--drift-watch/--no-drift-watch",
        "watch_drift",
        envvar="ROLLOUT_DRIFT_WATCH",
        default=True,
        show_default=True,
        help="Watch owned objects and re-apply within seconds of an out-of-band edit or delete (--sink kubernetes).",
    )(command)
    for flag, env, text in reversed(_OPTIONS):
        name = flag.removeprefix("--").replace("-", "_")
        command = click.option(
            flag,
            name,
            envvar=env,
            type=_SECONDS,
            default=getattr(defaults, name),
            show_default=True,
            help=f"{text} Seconds; --sink kubernetes (env {env}).",
        )(command)
    return command


def timings_from(options: dict[str, Any]) -> SinkTimings:
    """Pop the SinkTimings flags out of a command's keyword arguments."""
    names = [flag.removeprefix("--").replace("-", "_") for flag, _, _ in _OPTIONS] + ["watch_drift"]
    return SinkTimings(**{name: options.pop(name) for name in names})
