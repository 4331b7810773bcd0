"""Stopping a long-running process: SIGINT (Ctrl-C) and SIGTERM (Kubernetes, `rollout up`)
set one `asyncio.Event` that every part of the process waits on, so it closes its clients,
servers and Lease in order instead of dying mid-transaction."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set `stop` on SIGINT or SIGTERM (inside the running event loop)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def run_until_signalled(work: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """`asyncio.run(work(stop))`, with `stop` set by the first SIGINT or SIGTERM."""

    async def main() -> T:
        stop = asyncio.Event()
        stop_on_signals(stop)
        return await work(stop)

    return asyncio.run(main())
