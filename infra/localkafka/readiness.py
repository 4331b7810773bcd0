"""Is the broker up? One aiokafka metadata round trip (:func:`probe`), from sync code.

The broker counts as ready once a metadata answer lists it; :func:`probe` works whether or
not the caller runs inside an event loop (it then probes from a helper thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable

from infra.localkafka.defaults import HOST


async def _metadata_ok(bootstrap: str, request_timeout_ms: int = 3000) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms)
    try:
        await asyncio.wait_for(admin.start(), request_timeout_ms / 1000 + 1)
        await asyncio.wait_for(admin.list_topics(), request_timeout_ms / 1000 + 1)
        return bool(admin._client.cluster.brokers())
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def _run_coro(coro_fn: Callable[[], object]) -> object:
    """``asyncio.run`` that also works when called from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro_fn())
        except BaseException as e:
            result["error"] = e

    t = threading.Thread(target=target, name="localkafka-probe")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def probe(bootstrap: str, request_timeout_ms: int = 3000) -> bool:
    """One metadata round trip with aiokafka; True when the broker answers and lists itself."""
    try:
        return bool(_run_coro(lambda: _metadata_ok(bootstrap, request_timeout_ms)))
    except Exception:
        return False
