"""Metrics, health and log format for the long-running processes (worker, applier).

Each process serves, on its `--web-port`:

* `/metrics` — Prometheus text format from the process's own registry (`infra/metrics.py`
  lists every metric and where it comes from);
* `/healthz` — liveness: 200 while the process's event loop answers and it has not
  crashed; 503 with the reason otherwise;
* `/readyz`  — readiness: 200 only when the broker answered a metadata request recently,
  the consumer group assigned partitions (possibly none, when there are more replicas
  than partitions) and — for the worker — every owned partition's state is restored. 503 with every unmet
  condition named otherwise.

`Health` is the state those endpoints read; the process updates it. `BrokerProbe` asks the
broker for metadata every second with its own small client (public aiokafka API), each
request bounded by `PROBE_TIMEOUT` (after a broker dies aiokafka may wait out its reconnect
backoff instead of failing), so "broker reachable" means what it says: readiness turns 503
at most `BROKER_STALE_AFTER` seconds after the last answer, and 200 again with the next one.

`RateLimitFilter` (installed on the console handler by `logging_config`) keeps a broker
outage from flooding the logs: WARNING/ERROR records of the noisy Kafka/asyncio libraries,
and of our own retry loops (they log with `extra=RATE_LIMITED`), pass at most once per
(logger, message template, exception type) per interval; the next one that passes says how
many similar ones were suppressed. With `--log-format json` every line is one JSON object,
and the domain fields a log call attaches (`log_fields`: module, cluster, stage, event_id)
are fields of their own, not only words in the message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from infra.metrics import Metrics

__all__ = ["Metrics"]  # re-exported: every process builds its `Metrics` from here (infra/metrics.py)

HEALTH_PATHS = ("/healthz", "/readyz", "/metrics")
DEFAULT_WORKER_PORT = 6066
DEFAULT_APPLIER_PORT = 6067
DEFAULT_WEB_HOST = "127.0.0.1"
"""Where the web server listens unless told otherwise (`host=`, else $ROLLOUT_WEB_HOST):
loopback, so a process started on a laptop is not reachable from the network. Containers
pass 0.0.0.0 (the chart's args, docker-compose.yml's environment)."""
BROKER_STALE_AFTER = 3.0
"""Readiness needs a broker answer at most this old (seconds)."""
PROBE_INTERVAL = 1.0
PROBE_TIMEOUT = 2.0

log = logging.getLogger("rollout.observability")


@dataclass
class Health:
    requires_recovery: bool = False
    started: float = field(default_factory=time.monotonic)
    broker_seen: float | None = None
    broker_error: str = "not probed yet"
    assigned: bool = False
    recovered: bool = False
    crashed: str | None = None

    def live(self) -> tuple[bool, list[str]]:
        return (self.crashed is None, [f"crashed: {self.crashed}"] if self.crashed else [])

    def process_problems(self) -> list[str]:
        """What every process needs to be ready: not crashed, the broker answering."""
        problems = []
        if self.crashed:
            problems.append(f"crashed: {self.crashed}")
        if self.broker_seen is None:
            problems.append(f"broker not reachable: {self.broker_error}")
        elif (age := time.monotonic() - self.broker_seen) > BROKER_STALE_AFTER:
            # a failed probe says why; none failed yet means none has finished since the last
            # answer — a probe still waiting for the broker, or an event loop held by a long
            # fold or restore (the probe cannot even ask)
            problems.append(
                f"broker not reachable: {self.broker_error}"
                if self.broker_error
                else f"broker not answered for {age:.1f}s: the last probe succeeded and none has finished since "
                "(the broker slow to answer, or this process too busy to ask)"
            )
        return problems

    def ready(self) -> tuple[bool, list[str]]:
        problems = self.process_problems()
        if not self.assigned:
            problems.append("no partition assignment yet (joining the consumer group)")
        if self.requires_recovery and not self.recovered:
            problems.append("state not restored yet, or a partition is being repaired")
        return (not problems, problems)


class BrokerProbe:
    """Ask the broker for metadata every `interval` seconds, each round trip bounded by
    `timeout`; record the last answer (or the failure) in `health`. A client that failed is
    closed and a fresh one bootstraps next time, so a restarted broker is found again."""

    def __init__(
        self,
        bootstrap: str,
        health: Health,
        *,
        interval: float = PROBE_INTERVAL,
        timeout: float = PROBE_TIMEOUT,
        **client_options: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.health = health
        self.interval = interval
        self.timeout = timeout
        self.client_options = client_options
        self._task: asyncio.Task[None] | None = None

    async def _probe(self, client: AIOKafkaClient) -> None:
        """One metadata round trip that names no topic: the broker answers with itself only.
        (Asking for all topics costs the broker and this process a decode of every topic's
        metadata each second — measurable on a broker with thousands of topics.)"""
        if not client.cluster.brokers():
            await client.bootstrap()
        node = client.get_random_node()
        if node is None:
            raise ConnectionError("no broker known")
        await client.send(node, MetadataRequest(topics=[]))

    async def _run(self) -> None:
        client: AIOKafkaClient | None = None
        try:
            while True:
                if client is None:
                    client = AIOKafkaClient(
                        bootstrap_servers=self.bootstrap,
                        client_id="rollout-health",
                        request_timeout_ms=int(self.timeout * 1000),
                        **self.client_options,
                    )
                try:
                    await asyncio.wait_for(self._probe(client), self.timeout)
                    if self.health.broker_seen is not None and self.health.broker_error:
                        log.info("broker %s reachable again", self.bootstrap)
                    self.health.broker_seen = time.monotonic()
                    self.health.broker_error = ""
                except Exception as error:  # any failure is "not reachable", with its reason
                    if isinstance(error, asyncio.TimeoutError):
                        error_text = f"no metadata answer within {self.timeout:g}s"
                    else:
                        error_text = str(error) or type(error).__name__
                    if not self.health.broker_error:  # the transition only; the filter limits the rest
                        log.warning("broker %s not reachable: %s", self.bootstrap, error_text)
                    self.health.broker_error = error_text
                    await _close_quietly(client)
                    client = None
                await asyncio.sleep(self.interval)
        finally:
            if client is not None:
                await _close_quietly(client)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def _close_quietly(client: AIOKafkaClient) -> None:
    try:
        await asyncio.wait_for(client.close(), PROBE_TIMEOUT)
    except Exception as error:  # closing a broken client: nothing to do about it
        log.debug("closing the probe client: %s", error)


class ObservabilityServer:
    def __init__(self, *, port: int, metrics: Metrics, health: Health, host: str | None = None) -> None:
        self.port = port
        self.host = host if host is not None else os.environ.get("ROLLOUT_WEB_HOST") or DEFAULT_WEB_HOST
        self.metrics = metrics
        self.health = health
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        def answer(ok: bool, problems: list[str]) -> web.Response:
            body = json.dumps({"ok": ok, "problems": problems})
            return web.Response(status=200 if ok else 503, text=body, content_type="application/json")

        async def healthz(_: web.Request) -> web.Response:
            return answer(*self.health.live())

        async def readyz(_: web.Request) -> web.Response:
            return answer(*self.health.ready())

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        log.info("serving /metrics /healthz /readyz on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


LOG_FIELDS = ("module", "cluster", "stage", "event_id")
"""Domain fields a log call may attach (`extra=log_fields(module=...)`); `JsonFormatter`
writes each one that is set as a field of its own, so a log pipeline can filter on it."""


def log_fields(
    *, module: str | None = None, cluster: str | None = None, stage: str | None = None, event_id: str | None = None
) -> dict[str, dict[str, str]]:
    """`extra=` for a log call about a module, a cluster, a stage or an input event. (They
    travel as one `fields` attribute: `module` is a LogRecord attribute of its own.)"""
    given = {"module": module, "cluster": cluster, "stage": stage, "event_id": event_id}
    return {"fields": {name: value for name, value in given.items() if value is not None}}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the `LOG_FIELDS` set on the
    record, and the exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            document.update((name, str(fields[name])) for name in LOG_FIELDS if fields.get(name) is not None)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


RATE_LIMITED = {"rate_limited": True}
"""`extra=` for our own retry loops' warnings: rate-limited like the noisy libraries'."""
NOISY_LOGGERS = ("aiokafka", "kafka", "asyncio")
RATE_LIMIT_INTERVAL = 10.0


class RateLimitFilter(logging.Filter):
    """Let through at most one WARNING+ record per (logger, message template, exception type)
    per `interval` seconds from the `NOISY_LOGGERS` (and their children) and from records
    logged with `extra=RATE_LIMITED`; other records always pass. The first record of a kind
    after its interval passes with "(N similar suppressed)" appended when N > 0.

    A record it lets through is one line: a multi-line message (asyncio's "Exception in
    callback ... handle: ...") is joined, and an exception becomes "(Type: message)" at its
    end instead of a traceback — unless `tracebacks` (the worker at --loglevel debug). An
    outage must cost the log a line per failure kind per interval, not a traceback each."""

    def __init__(
        self,
        interval: float = RATE_LIMIT_INTERVAL,
        loggers: tuple[str, ...] = NOISY_LOGGERS,
        *,
        max_kinds: int = 1000,
        clock: Any = time.monotonic,
        tracebacks: bool = False,
    ) -> None:
        super().__init__()
        self.tracebacks = tracebacks
        self.interval = interval
        self.loggers = tuple(loggers)
        self.max_kinds = max_kinds
        self.clock = clock
        self._kinds: OrderedDict[tuple[str, str, str], list[float | int]] = OrderedDict()  # -> [passed at, suppressed]
        self._lock = threading.Lock()

    def _limited(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        if getattr(record, "rate_limited", False):
            return True
        name = record.name
        return any(name == prefix or name.startswith(prefix + ".") for prefix in self.loggers)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._limited(record):
            return True
        error = record.exc_info[1] if record.exc_info else None
        key = (record.name, str(record.msg), type(error).__name__ if error is not None else "")
        now = self.clock()
        with self._lock:
            seen = self._kinds.get(key)
            if seen is not None and now - seen[0] < self.interval:
                seen[1] += 1
                return False
            suppressed = int(seen[1]) if seen is not None else 0
            self._kinds[key] = [now, 0]
            self._kinds.move_to_end(key)
            while len(self._kinds) > self.max_kinds:
                self._kinds.popitem(last=False)
        text = record.getMessage()
        if record.exc_info and not self.tracebacks:
            text = f"{text} ({type(error).__name__}: {error})" if error is not None else text
            record.exc_info, record.exc_text = None, None
        if suppressed:
            text = f"{text} ({suppressed} similar suppressed)"
        if "\n" in text:
            text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
        record.msg, record.args = text, ()
        return True


def logging_config(
    log_format: str, level: str = "info", *, rate_limit_interval: float = RATE_LIMIT_INTERVAL
) -> dict[str, Any]:
    """A dictConfig for `--log-format text|json` (text: human-readable, the default), with a
    `RateLimitFilter` on the console handler."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if log_format == "json"
        else {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {
            "rate_limit": {
                "()": f"{__name__}.RateLimitFilter",
                "interval": rate_limit_interval,
                "tracebacks": level.lower() == "debug",
            }
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "default", "filters": ["rate_limit"]}},
        "root": {"handlers": ["console"], "level": level.upper()},
    }
