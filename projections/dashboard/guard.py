"""Every request passes here first: who it is, whether a state change is really the user's,
and the headers that keep the page out of other pages' reach.

    request ─► security headers on the response (whatever it is: page, JSON, error, file)
            ─► public? (/login, /auth/*, /healthz, /readyz, /static/style.css) ─► handler
            ─► identity: session cookie (sessions.py) | Authorization: Bearer (TokenReview)
               | --insecure-no-auth (loopback only)             none ─► 401 JSON (/api/*)
                                                                       or 303 → /login
            ─► POST/PUT/PATCH/DELETE from a browser session: same origin AND the
               session's CSRF token in X-CSRF-Token                  else ─► 403 JSON
            ─► handler (commands are then authorized by SubjectAccessReview, server.py)

CSRF, two checks, both required: (1) the request's `Origin` (or, where a browser sends no
Origin, `Sec-Fetch-Site: same-origin`) must be the dashboard's own origin — `--public-url`
when set (behind a TLS-terminating proxy the dashboard cannot see its public scheme and
host), else the scheme and Host of the request; (2) `X-CSRF-Token` must equal the token
of the session (app.js reads it from GET /api/me; a cross-origin page cannot read it). A
`<form enctype="text/plain">` from another origin fails both: its Origin is foreign and it
cannot set headers. SameSite=Lax alone would not do: another port of the same host is the
same site, and its POSTs carry the cookie.

A request with `Authorization: Bearer` carries no ambient credential (a browser never adds
that header by itself, and a cross-origin page cannot without a CORS preflight the
dashboard never answers), so it needs no CSRF token: CLI and API clients just send it.

Headers on every response: `Content-Security-Policy: default-src 'self'; ...;
frame-ancestors 'none'` (no inline script or style, no framing, forms post only here),
`X-Frame-Options: DENY` for old browsers, `X-Content-Type-Options: nosniff`,
`Referrer-Policy: no-referrer`, and `Cache-Control: no-store` on the API.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

from projections.dashboard.identity import Identity
from projections.dashboard.kube_access import KubeAccess
from projections.dashboard.oidc import OIDCClient
from projections.dashboard.sessions import SESSION_COOKIE, Session, SessionStore

log = logging.getLogger(__name__)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
PUBLIC_PATHS = frozenset({"/login", "/auth/oidc", "/auth/callback", "/auth/token", "/healthz", "/readyz"})
PUBLIC_FILES = frozenset({"/static/style.css"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "X-CSRF-Token"
INSECURE_USER = "insecure-no-auth"

IDENTITY = web.RequestKey("identity", Identity)
SESSION = web.RequestKey("session", Session)


@dataclass
class Guard:
    """How this dashboard knows its users (`rollout dashboard` options)."""

    sessions: SessionStore
    oidc: OIDCClient | None = None
    kube: KubeAccess | None = None
    """TokenReview (pasted and Bearer tokens) and SubjectAccessReview (every command)."""
    insecure: bool = False
    """--insecure-no-auth: everyone is INSECURE_USER and may do everything (loopback only)."""
    public_url: str | None = None
    fallback_namespace: str = "default"
    """The namespace commands are authorized in when the module's status names none."""
    insecure_csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def accepts_tokens(self) -> bool:
        return self.kube is not None

    def expected_origin(self, request: web.Request) -> str:
        if self.public_url:
            parts = urlsplit(self.public_url)
            return f"{parts.scheme}://{parts.netloc}"
        return f"{request.scheme}://{request.host}"


GUARD = web.AppKey("guard", Guard)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def json_error(status: int, message: str, **more: object) -> web.Response:
    return web.json_response({"error": message, **more}, status=status, headers={"Cache-Control": "no-store"})


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the same headers on every response, errors and files included."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith(("/api/", "/auth/", "/login")):
        response.headers.setdefault("Cache-Control", "no-store")


async def identify(request: web.Request, guard: Guard) -> tuple[Identity | None, Session | None]:
    """The request's identity: Bearer token, else session cookie, else (insecure) everyone."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        if guard.kube is None:
            return None, None
        return await guard.kube.authenticate(header[7:].strip()), None
    session = guard.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is not None:
        return session.identity, session
    if guard.insecure:
        return Identity(user=INSECURE_USER, source="insecure"), None
    return None, None


def cross_origin_refusal(request: web.Request, guard: Guard) -> str | None:
    """Why a state-changing browser request is not the dashboard's own, or None."""
    expected = guard.expected_origin(request)
    origin = request.headers.get("Origin")
    if origin is not None:
        return None if origin == expected else f"cross-origin request refused: Origin {origin} is not {expected}"
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return None if fetch_site == "same-origin" else f"cross-origin request refused: Sec-Fetch-Site {fetch_site}"
    return "request refused: neither Origin nor Sec-Fetch-Site says it comes from the dashboard's own page"


def csrf_refusal(request: web.Request, guard: Guard, session: Session | None) -> str | None:
    """Why a browser request's CSRF token is wrong, or None."""
    expected = session.csrf_token if session is not None else guard.insecure_csrf_token
    given = request.headers.get(CSRF_HEADER, "")
    if given and secrets.compare_digest(given, expected):
        return None
    return f"request refused: missing or wrong {CSRF_HEADER} (the page reads it from /api/me)"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard = request.app[GUARD]
    if request.path in PUBLIC_PATHS or request.path in PUBLIC_FILES:
        return await handler(request)
    try:
        identity, session = await identify(request, guard)
    except Exception as error:  # the API server is down or refuses the dashboard's TokenReview
        log.warning("TokenReview failed: %s", error)
        return json_error(503, f"cannot ask the Kubernetes API server who this token is (TokenReview): {error}")
    if identity is None:
        if request.path.startswith("/api/"):
            return json_error(401, "not logged in: log in at /login, or send Authorization: Bearer <kubernetes token>")
        raise web.HTTPSeeOther("/login")
    bearer = request.headers.get("Authorization", "")[:7].lower() == "bearer "
    if request.method in UNSAFE_METHODS and not bearer:
        refusal = cross_origin_refusal(request, guard) or csrf_refusal(request, guard, session)
        if refusal is not None:
            log.warning("%s %s by %s: %s", request.method, request.path, identity.user, refusal)
            return json_error(403, refusal)
    request[IDENTITY] = identity
    if session is not None:
        request[SESSION] = session
    return await handler(request)
