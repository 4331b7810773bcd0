"""Logging in and out, and who the page's user is.

    GET  /login            the login page: "Log in with <provider>" (OIDC, when configured)
                           and a form to paste a Kubernetes token (when tokens are accepted)
    GET  /auth/oidc        start the OIDC login (oidc.py): login cookie + 302 to the provider
    GET  /auth/callback    the provider's redirect: verify, open a session, 303 to /
    POST /auth/token       the pasted token (form field `token`): TokenReview, open a session
    POST /auth/logout      end the session (same origin + CSRF token, guard.py), clear the cookie
    GET  /api/me           {user, groups, source, csrfToken, insecure, fallbackNamespace,
                            can: {namespace: {commands, approvals}}} — `can` per namespace of
                            the modules in view, by SubjectAccessReview; the page hides the
                            buttons a user may not press (the server refuses them anyway)

The login page is plain HTML (no script: the CSP forbids inline script, and it needs none).
Failures are shown on it, in words, and logged; they never open a session.
"""

from __future__ import annotations

import html
import logging

from aiohttp import web

from projections.dashboard.guard import GUARD, IDENTITY, SESSION, Guard, cross_origin_refusal, json_error
from projections.dashboard.kube_access import APPROVALS, BREAK_GLASS, COMMANDS
from projections.dashboard.oidc import LoginFailed
from projections.dashboard.sessions import LOGIN_COOKIE, SESSION_COOKIE, Session

log = logging.getLogger(__name__)
MAX_TOKEN_CHARS = 16_384

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>rollout dashboard: log in</title>
  <link rel="stylesheet" href="/static/style.css">
</head>
<body>
  <header><span class="brand">rollout</span></header>
  <main class="login" data-testid="login">
    <h1>Log in</h1>
    {error}
    {oidc}
    {token}
  </main>
</body>
</html>
"""


def login_page(guard: Guard, error: str = "", status: int = 200) -> web.Response:
    oidc = ""
    if guard.oidc is not None:
        oidc = '<p><a class="button" href="/auth/oidc" data-testid="login-oidc">Log in with single sign-on</a></p>'
    token = ""
    if guard.accepts_tokens:
        token = (
            '<form method="post" action="/auth/token" data-testid="login-token-form">'
            '<label for="token">or paste a Kubernetes token (<code>kubectl create token NAME</code>)</label>'
            '<textarea id="token" name="token" rows="4" autocomplete="off" data-testid="login-token"></textarea>'
            '<button type="submit" data-testid="login-token-submit">Log in with the token</button></form>'
        )
    shown = f'<p class="warning" data-testid="login-error">{html.escape(error)}</p>' if error else ""
    body = PAGE.format(error=shown, oidc=oidc, token=token)
    return web.Response(text=body, content_type="text/html", status=status)


def _open_session(guard: Guard, response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session.id,
        path="/",
        secure=True,
        httponly=True,
        samesite="Lax",
        max_age=int(guard.sessions.ttl),
    )


async def show_login(request: web.Request) -> web.Response:
    return login_page(request.app[GUARD])


async def start_oidc(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    if guard.oidc is None:
        return login_page(guard, "single sign-on is not configured (--oidc-issuer-url)", 404)
    login = guard.oidc.logins.start()
    try:
        url = await guard.oidc.authorization_url(login)
    except (LoginFailed, OSError) as error:
        log.warning("cannot start an OIDC login: %s", error)
        return login_page(guard, f"cannot reach the identity provider: {error}", 502)
    response = web.HTTPFound(url)
    response.set_cookie(LOGIN_COOKIE, login.state, path="/", secure=True, httponly=True, samesite="Lax", max_age=600)
    return response


async def oidc_callback(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    if guard.oidc is None:
        return login_page(guard, "single sign-on is not configured", 404)
    if "error" in request.query:
        error = request.query.get("error_description") or request.query["error"]
        return login_page(guard, f"the identity provider refused the login: {error}", 401)
    state, code = request.query.get("state", ""), request.query.get("code", "")
    try:
        if not state or state != request.cookies.get(LOGIN_COOKIE):
            raise LoginFailed("this login was not started by this browser (state does not match); log in again")
        identity = await guard.oidc.finish(guard.oidc.logins.finish(state), code)
    except (LoginFailed, OSError) as error:
        log.warning("OIDC login refused: %s", error)
        return login_page(guard, f"login failed: {error}", 401)
    session = guard.sessions.create(identity)
    log.info("logged in: %s (groups %s) through OIDC", identity.user, ", ".join(identity.groups) or "none")
    response = web.HTTPSeeOther("/")
    _open_session(guard, response, session)
    response.del_cookie(LOGIN_COOKIE, path="/", secure=True, httponly=True, samesite="Lax")
    return response


async def token_login(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    if guard.kube is None:
        return login_page(guard, "this dashboard accepts no Kubernetes tokens (no --kubeconfig)", 404)
    refusal = cross_origin_refusal(request, guard)
    if refusal is not None:
        return login_page(guard, refusal, 403)
    form = await request.post()
    token = str(form.get("token") or "").strip()
    if not token or len(token) > MAX_TOKEN_CHARS:
        return login_page(guard, "paste a Kubernetes bearer token", 400)
    try:
        identity = await guard.kube.authenticate(token)
    except Exception as error:
        log.warning("TokenReview failed: %s", error)
        return login_page(guard, f"cannot ask the Kubernetes API server (TokenReview): {error}", 502)
    if identity is None:
        return login_page(guard, "the Kubernetes API server does not accept this token", 401)
    session = guard.sessions.create(identity)
    log.info("logged in: %s (groups %s) with a Kubernetes token", identity.user, ", ".join(identity.groups) or "none")
    response = web.HTTPSeeOther("/")
    _open_session(guard, response, session)
    return response


async def logout(request: web.Request) -> web.Response:
    guard = request.app[GUARD]
    session = request.get(SESSION)
    if session is not None:
        guard.sessions.end(session.id)
        log.info("logged out: %s", session.identity.user)
    response = web.json_response({"loggedOut": True})
    response.del_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True, samesite="Lax")
    return response


async def me(request: web.Request, namespaces: set[str]) -> web.Response:
    guard = request.app[GUARD]
    identity = request[IDENTITY]
    session = request.get(SESSION)
    csrf_token = session.csrf_token if session is not None else guard.insecure_csrf_token if guard.insecure else None
    can: dict[str, dict[str, bool]] = {}
    for namespace in sorted(namespaces | {guard.fallback_namespace}):
        if guard.insecure:
            can[namespace] = {"commands": True, "approvals": True, "breakGlass": True}
            continue
        if guard.kube is None:
            return json_error(500, "no Kubernetes API server to authorize with")
        try:
            commands = await guard.kube.may_create(identity, COMMANDS, namespace)
            approvals = await guard.kube.may_create(identity, APPROVALS, namespace)
            glass = await guard.kube.may_create(identity, BREAK_GLASS, namespace)
        except Exception as error:
            log.warning("SubjectAccessReview for %s failed: %s", identity.user, error)
            return json_error(503, f"cannot ask the Kubernetes API server (SubjectAccessReview): {error}")
        can[namespace] = {"commands": commands.allowed, "approvals": approvals.allowed, "breakGlass": glass.allowed}
    return web.json_response(
        {
            "user": identity.user,
            "groups": list(identity.groups),
            "source": identity.source,
            "csrfToken": csrf_token,
            "insecure": guard.insecure,
            "fallbackNamespace": guard.fallback_namespace,
            "can": can,
        },
        headers={"Cache-Control": "no-store"},
    )
