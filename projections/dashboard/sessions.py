"""Browser sessions: server-side, bounded, expiring; the cookie holds only a random id.

A session is created when a login completes (OIDC callback or a pasted Kubernetes token)
and holds the verified `Identity` and the session's CSRF token. Server-side rather than a
signed cookie so that logout really ends it (a copied cookie is dead after logout) and no
signing key has to be shared between replicas or rotated; the price is that sessions do not
survive a restart of the dashboard and are per replica (the chart runs one replica, or
needs sticky sessions with more) — users log in again.

Limits: a session lives `ttl` seconds from login (default 8 h, `--session-ttl`), whatever
its use; at most `kept` sessions (default 10,000; the oldest go first). The cookie:

    __Host-rollout-session=<id>; Path=/; Secure; HttpOnly; SameSite=Lax

`__Host-` makes the browser refuse the cookie unless it is Secure, host-only and Path=/.
`Secure` cookies travel only over https — except to http://localhost and http://127.0.0.1,
which Chromium and Firefox treat as potentially trustworthy origins (the browser test runs
there); behind TLS nothing changes; a dashboard served over plain http on any other address
has no working login (by design: put TLS in front). `Lax` keeps the cookie off cross-site
subrequests and POSTs, yet lets the top-level redirect back from the OIDC provider carry the
login cookie. Same-site but cross-origin requests (another port of the same host) do carry
it: the Origin check and the CSRF token (guard.py) stop those.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from projections.dashboard.identity import Identity

SESSION_COOKIE = "__Host-rollout-session"
LOGIN_COOKIE = "__Host-rollout-login"
DEFAULT_TTL_SECONDS = 8 * 3600.0
DEFAULT_SESSIONS_KEPT = 10_000


@dataclass(frozen=True)
class Session:
    id: str
    identity: Identity
    csrf_token: str
    expires: float  # time.time()


class SessionStore:
    """Sessions by id; see the module docstring for the limits."""

    def __init__(self, ttl: float = DEFAULT_TTL_SECONDS, kept: int = DEFAULT_SESSIONS_KEPT) -> None:
        self.ttl, self._kept = ttl, kept
        self._sessions: dict[str, Session] = {}

    def create(self, identity: Identity) -> Session:
        now = time.time()
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires > now}
        while len(self._sessions) >= self._kept:
            self._sessions.pop(next(iter(self._sessions)))
        session = Session(secrets.token_urlsafe(32), identity, secrets.token_urlsafe(32), now + self.ttl)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires <= time.time():
            self._sessions.pop(session_id, None)
            return None
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)
