"""The broker probe fails fast — a refused connection and a broker that never answers alike —
so readiness turns 503 within seconds of losing the broker."""

from __future__ import annotations

import asyncio
import socket
import time

from infra import observability
from infra.observability import BrokerProbe, Health


async def _until(condition, timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_silent_broker_is_not_ready_after_the_probe_timeout() -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept, read, never reply
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    health = Health(assigned=True)
    health.broker_seen = time.monotonic()  # it answered a moment ago
    health.broker_error = ""
    probe = BrokerProbe(f"127.0.0.1:{port}", health, interval=0.2, timeout=0.5)
    probe.start()
    try:
        took = await _until(lambda: not health.ready()[0], timeout=observability.BROKER_STALE_AFTER + 2)
        assert took <= observability.BROKER_STALE_AFTER + 0.5
        await _until(lambda: health.broker_error.startswith("no metadata answer within"), timeout=3)
        assert any("broker not reachable" in problem for problem in health.ready()[1])
    finally:
        await probe.stop()
        server.close()
        await server.wait_closed()


async def test_a_refused_connection_is_reported_with_its_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    health = Health(assigned=True)
    probe = BrokerProbe(f"127.0.0.1:{port}", health, interval=0.2, timeout=0.5)
    probe.start()
    try:
        await _until(lambda: health.broker_error != "not probed yet", timeout=3)
        assert health.broker_seen is None
        assert not health.ready()[0]
    finally:
        await probe.stop()


def test_a_stale_answer_with_no_failed_probe_says_so_instead_of_an_empty_reason() -> None:
    health = Health(assigned=True)
    health.broker_seen = time.monotonic() - observability.BROKER_STALE_AFTER - 5  # a probe succeeded, long ago
    health.broker_error = ""
    ready, problems = health.ready()
    assert not ready
    (problem,) = problems
    assert problem.startswith("broker not answered for ") and "the last probe succeeded" in problem
    assert "not reachable: " not in problem


def test_a_failed_probe_is_named_in_the_readiness_problem() -> None:
    health = Health(assigned=True)
    health.broker_seen = time.monotonic() - observability.BROKER_STALE_AFTER - 5
    health.broker_error = "no metadata answer within 2s"
    assert health.ready()[1] == ["broker not reachable: no metadata answer within 2s"]
