"""Is the broker up? One aiokafka metadata round trip (:func:`probe`), from sync code.

The broker counts as ready once a metadata answer lists it; :func:`probe` works whether or
not the caller runs inside an event loop (it then probes from a helper thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from infra.localkafka.defaults import HOST

T = TypeVar("T")


async def _metadata_ok(
    bootstrap: str, request_timeout_ms: int = 3000, client_options: Mapping[str, object] | None = None
) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms, **(client_options or {})
    )
    try:
        await asyncio.wait_for(admin.start(), request_timeout_ms / 1000 + 1)
        await asyncio.wait_for(admin.list_topics(), request_timeout_ms / 1000 + 1)
        return bool(admin._client.cluster.brokers())
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def _run_coro(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run`` that also works when called from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro_fn())
        except BaseException as e:
            result["error"] = e

    t = threading.Thread(target=target, name="localkafka-probe")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def probe(bootstrap: str, request_timeout_ms: int = 3000, client_options: Mapping[str, object] | None = None) -> bool:
    """One metadata round trip with aiokafka; True when the broker answers and lists itself.
    `client_options`: aiokafka's security arguments (a secured broker's admin), else none —
    the local broker is probed as it was started, not as ROLLOUT_KAFKA_* would connect."""
    try:
        return bool(_run_coro(lambda: _metadata_ok(bootstrap, request_timeout_ms, client_options)))
    except Exception:
        return False
