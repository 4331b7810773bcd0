"""Periodic rounds over HTTP: what the gate runner and the promoter share.

Both read the latest module statuses, ask HTTP services (Prometheus, webhooks, registries,
chart indexes) and publish what they found, once every `interval` seconds until stopped.
`run_rounds` is that loop: one aiohttp session for every round (connections are reused), a
round that fails — the broker or a service away — logged rate-limited and tried again at
the next round, and a stop that ends the wait between rounds at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp

from infra.observability import RATE_LIMITED

__all__ = ["run_rounds"]

log = logging.getLogger(__name__)


async def run_rounds(
    round_: Callable[[aiohttp.ClientSession], Awaitable[None]],
    *,
    interval: float,
    stop: asyncio.Event,
    request_timeout: float,
    what: str,
) -> None:
    """Call `round_` every `interval` seconds until `stop` is set; `what` names a failed round in the log."""
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            try:
                await round_(session)
            except Exception as error:  # the broker may be away: the next round tries again
                log.warning("%s round failed: %s", what, error, extra=RATE_LIMITED)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
