"""A threaded HTTP server on a free 127.0.0.1 port, in a background thread of this process.

Shared by the loopback Git server and the Helm repository: each is a
``BaseHTTPRequestHandler`` subclass served by :class:`LoopbackHTTPServer` (one thread per
request, daemon threads, so a hanging client never blocks a test's exit). Optional HTTP
basic auth: a request without the right ``Authorization`` gets 401 with
``WWW-Authenticate: Basic``, the challenge Flux's Git and Helm clients answer.
"""

from __future__ import annotations

import base64
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from infra.localflux.defaults import HOST


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its basic-auth credentials (if any) and its URL."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], credentials: tuple[str, str] | None = None) -> None:
        super().__init__((HOST, 0), handler)
        self.credentials = credentials
        self._thread = threading.Thread(target=self.serve_forever, name=f"loopback-http-{self.port}", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> LoopbackHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and checks basic auth when its server asks for it."""

    server: LoopbackHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def authorized(self) -> bool:
        """True if no credentials are required or the request carries them; else answers 401."""
        if self.server.credentials is None:
            return True
        user, password = self.server.credentials
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if hmac.compare_digest(self.headers.get("Authorization", ""), expected):
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="rollout-loopback"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
