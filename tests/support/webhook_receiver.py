"""A real CloudEvents webhook receiver for notifier tests: an aiohttp server in a thread of
its own on a free port of 127.0.0.1, answering each POST as the test scripts it.

    POST /hooks/NAME  → `answer(NAME, n, event)` (n: the how-many-th request of that hook,
                        from 1) — default 200; every request kept in `received`

Each request body is read with the notifier's own model (`DecisionCloudEvent`), so a body
that is not a CloudEvent of that shape fails the test; the structured mode's content type
and the headers are kept for the test to check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web

from rollout.wire.notifications import DecisionCloudEvent
from tests.support.http_server import serving


@dataclass(frozen=True)
class Received:
    hook: str
    number: int
    status: int  # what the receiver answered
    content_type: str
    headers: dict[str, str]
    event: DecisionCloudEvent


Answer = Callable[[str, int, DecisionCloudEvent], int]


@dataclass
class Receiver:
    answer: Answer = lambda hook, n, event: 200
    port: int = 0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, hook: str) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{hook}"

    async def hook(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        event = DecisionCloudEvent.model_validate_json(await request.read())
        with self.lock:
            number = sum(1 for r in self.received if r.hook == name) + 1
            status = self.answer(name, number, event)
            self.received.append(
                Received(name, number, status, request.headers.get("Content-Type", ""), dict(request.headers), event)
            )
        return web.Response(status=status, text="ok" if status < 300 else "try later")

    def accepted(self, hook: str) -> list[DecisionCloudEvent]:
        """The events `hook` answered 2xx, in the order they arrived."""
        with self.lock:
            return [r.event for r in self.received if r.hook == hook and 200 <= r.status < 300]

    def requests(self, hook: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.hook == hook]


@contextmanager
def running_receiver(answer: Answer | None = None) -> Iterator[Receiver]:
    receiver = Receiver() if answer is None else Receiver(answer=answer)
    app = web.Application()
    app.router.add_post("/hooks/{name}", receiver.hook)
    with serving(app) as port:
        receiver.port = port
        yield receiver
