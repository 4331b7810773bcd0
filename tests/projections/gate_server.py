"""A tiny real HTTP server for gate tests: a Prometheus-compatible instant-query endpoint
and webhooks, in a thread of its own (aiohttp), on a free port of 127.0.0.1.

    GET  /api/v1/query?query=Q   → (or POST, form-encoded) {"status": "success", "data": {"resultType": "vector",
                                    "result": [{"metric": {}, "value": [t, "<v>"]}, ...]}}
                                    for the values `metrics[Q]` (unknown Q: no samples;
                                    Q == "broken": an error answer)
    POST /hooks/NAME             → status `hooks[NAME]` (default 200); bodies kept in `calls`
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.http_server import serving


@dataclass
class GateServer:
    port: int = 0
    metrics: dict[str, list[float]] = field(default_factory=dict)
    hooks: dict[str, int] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # every query asked, as sent

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def query(self, request: web.Request) -> web.Response:
        query = request.query.get("query") or str((await request.post()).get("query", ""))  # GET or POST form
        self.queries.append(query)
        if query == "broken":
            return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400)
        samples = [{"metric": {"q": query}, "value": [time.time(), str(v)]} for v in self.metrics.get(query, [])]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": samples}})

    async def hook(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls.append({"hook": name, **json.loads(await request.text())})
        return web.Response(status=self.hooks.get(name, 200), text=f"hook {name}")


@contextmanager
def running_gate_server() -> Iterator[GateServer]:
    server = GateServer()
    app = web.Application()
    app.router.add_get("/api/v1/query", server.query)
    app.router.add_post("/api/v1/query", server.query)
    app.router.add_post("/hooks/{name}", server.hook)
    with serving(app) as port:
        server.port = port
        yield server
