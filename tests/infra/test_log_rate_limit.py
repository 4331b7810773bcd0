"""The log rate limiter that keeps a broker outage from writing megabytes of identical errors."""

from __future__ import annotations

import io
import logging
import logging.config
from collections.abc import Iterator

import pytest

from infra.observability import RATE_LIMITED, RateLimitFilter, logging_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(
    name: str = "aiokafka.conn",
    msg: str = "Unable connect to %r: %s",
    args: tuple[object, ...] = ("127.0.0.1:9092", "refused"),
    level: int = logging.ERROR,
    exc: BaseException | None = None,
    **extra: object,
) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 1, msg, args, (type(exc), exc, None) if exc else None)
    rec.__dict__.update(extra)
    return rec


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(clock: Clock) -> RateLimitFilter:
    return RateLimitFilter(interval=10.0, clock=clock)


def test_one_line_per_kind_per_interval_then_the_suppressed_count(limiter: RateLimitFilter, clock: Clock) -> None:
    first = record()
    assert limiter.filter(first)
    assert first.getMessage() == "Unable connect to '127.0.0.1:9092': refused"
    for i in range(500):
        clock.now += 0.01
        assert not limiter.filter(record(args=("127.0.0.1:9092", f"refused {i}")))  # same template
    clock.now += 10.0
    after = record()
    assert limiter.filter(after)
    assert after.getMessage() == "Unable connect to '127.0.0.1:9092': refused (500 similar suppressed)"
    clock.now += 1.0
    assert not limiter.filter(record())
    clock.now += 10.0
    quiet = record()
    assert limiter.filter(quiet)
    assert quiet.getMessage().endswith("(1 similar suppressed)")
    clock.now += 60.0
    fresh = record()
    assert limiter.filter(fresh)
    assert "suppressed" not in fresh.getMessage()


def test_kinds_are_logger_template_and_exception_type(limiter: RateLimitFilter) -> None:
    assert limiter.filter(record())
    assert limiter.filter(record(name="aiokafka.consumer.group_coordinator"))
    assert limiter.filter(record(msg="Unable to request metadata from node %s: %s"))
    assert limiter.filter(record(msg="Commit failed", args=(), exc=ConnectionError("x")))
    assert limiter.filter(record(msg="Commit failed", args=(), exc=TimeoutError("x")))
    assert not limiter.filter(record(msg="Commit failed", args=(), exc=ConnectionError("y")))
    assert not limiter.filter(record())


def test_only_noisy_libraries_and_marked_records_are_limited(limiter: RateLimitFilter) -> None:
    for _ in range(3):  # our own loggers: every line, unless marked
        assert limiter.filter(record(name="rollout.applier", msg="cannot apply %s", args=("x",)))
        assert limiter.filter(record(name="kafkaesque", msg="not kafka's"))
        assert limiter.filter(record(level=logging.INFO))  # below WARNING: never limited
    assert limiter.filter(record(name="rollout.applier", msg="retrying", args=(), **RATE_LIMITED))
    assert not limiter.filter(record(name="rollout.applier", msg="retrying", args=(), **RATE_LIMITED))
    for name in ("kafka", "kafka.conn", "asyncio", "aiokafka"):
        assert limiter.filter(record(name=name, level=logging.WARNING))
        assert not limiter.filter(record(name=name, level=logging.WARNING))


def test_the_number_of_remembered_kinds_is_bounded(clock: Clock) -> None:
    limiter = RateLimitFilter(interval=10.0, clock=clock, max_kinds=10)
    for i in range(100):
        assert limiter.filter(record(msg=f"message {i}", args=()))
    assert len(limiter._kinds) == 10
    assert not limiter.filter(record(msg="message 99", args=()))


@pytest.fixture
def configured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logging.config.dictConfig(logging_config("text", "info"))
    stream = io.StringIO()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_logging_config_installs_it_on_the_console_handler(log_format: str) -> None:
    config = logging_config(log_format)
    assert config["handlers"]["console"]["filters"] == ["rate_limit"]
    assert config["filters"]["rate_limit"]["()"].endswith("RateLimitFilter")


def test_a_flood_through_the_configured_root_logger_is_one_line(configured: io.StringIO) -> None:
    noisy = logging.getLogger("aiokafka.conn")
    for _ in range(10_000):
        noisy.error("Unable connect to node with id %s: %s", 1, "Connect call failed")
    logging.getLogger("rollout.applier").error("cannot apply %s", "a")
    logging.getLogger("rollout.applier").error("cannot apply %s", "b")
    lines = configured.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert "Unable connect to node with id 1: Connect call failed" in lines[0]


def test_a_library_traceback_during_an_outage_is_one_line(configured: io.StringIO) -> None:
    """asyncio logs a library callback's exception with a two-line message and a traceback
    (seen: aiokafka's accumulator raising KeyError while the broker was away)."""
    try:
        {}.pop("batch")
    except KeyError:
        logging.getLogger("asyncio").error("Exception in callback cb()\nhandle: <Handle cb()>", exc_info=True)
    lines = configured.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Exception in callback cb() | handle: <Handle cb()> (KeyError: 'batch')" in lines[0]


def test_at_debug_level_the_traceback_is_kept(clock: Clock) -> None:
    debugging = RateLimitFilter(clock=clock, tracebacks=True)
    rec = record(exc=KeyError("batch"))
    assert debugging.filter(rec) and rec.exc_info is not None
    assert logging_config("text", "debug")["filters"]["rate_limit"]["tracebacks"] is True
    assert logging_config("text", "info")["filters"]["rate_limit"]["tracebacks"] is False
