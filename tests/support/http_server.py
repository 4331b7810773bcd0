"""A real aiohttp application served for a test: in a thread of its own, with its own event
loop, on a free port of 127.0.0.1 — so that synchronous tests, and processes the test starts,
can talk HTTP to it while the test's own code blocks.

    with serving(app) as port: ...   # stopped (and its connections closed) on the way out
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


@contextmanager
def serving(app: web.Application) -> Iterator[int]:
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    started = threading.Event()
    port: list[int] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the test's HTTP server did not start within 10 s")
    try:
        yield port[0]
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
