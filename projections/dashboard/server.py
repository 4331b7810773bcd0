"""The dashboard's HTTP layer (aiohttp): static assets, a JSON API over pages.py, SSE.

Every request passes guard.py first (identity, CSRF, security headers): without a verified
identity only the login page (login.py), /healthz and /readyz answer — /api/* says 401, a
page redirects to /login. A command is then authorized by a SubjectAccessReview (may this
user create the rollout.dev object that means the same, in the module's namespace?) before
anything is published: 403 names the missing permission.

    GET  /login, /auth/oidc, /auth/callback; POST /auth/token, /auth/logout   (login.py)
    GET  /api/me                         the user, their CSRF token, what they may do where
    GET  /                               the single-page UI (static/index.html)
    GET  /static/...                     its JS and CSS, shipped in the package
    GET  /api/overview                   modules list, counts, whether the reader caught up
    GET  /api/modules/{name}             one module's page
    GET  /api/modules/{name}/clusters    its clusters: ?stage= &state= &q= &offset= &limit=
    POST /api/modules/{name}/commands    {"command": "approve", "stage": "canary"} → 202 {eventId}
                                         (403 without the RBAC permission, or cross-origin)
    GET  /api/verdicts/{event_id}        refused / accepted / pending
    GET  /api/clusters                   ?q= &state= &offset= &limit=
    GET  /api/clusters/{name}            one cluster's page
    GET  /api/dead-letters               ?q= &offset= &limit=
    GET  /api/events                     server-sent events: `change` with what changed
    GET  /healthz, /readyz               alive; caught up with the topics

Thin on purpose: every handler parses its parameters, calls one pure function of pages.py
on the reader's view, and returns JSON. Nothing here folds or filters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from infra.topics import TopicNames
from projections.dashboard import login, pages
from projections.dashboard.commands import CommandRefused, command_event, required_permission, send_command
from projections.dashboard.guard import GUARD, IDENTITY, Guard, guard_middleware, json_error, security_headers
from projections.dashboard.reader import ProjectionReader

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
READER = web.AppKey("reader", ProjectionReader)
KEEPALIVE_SECONDS = 15.0
CHANGE_COALESCE_SECONDS = 0.2


def _reader(request: web.Request) -> ProjectionReader:
    return request.app[READER]


def _query(request: web.Request) -> pages.Query:
    try:
        return pages.Query.parse(dict(request.query))
    except ValueError as error:
        raise web.HTTPBadRequest(text=json.dumps({"error": str(error)}), content_type="application/json") from None


def _not_found(what: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=json.dumps({"error": f"{what} not found"}), content_type="application/json")


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def overview(request: web.Request) -> web.Response:
    reader = _reader(request)
    view = reader.view
    return web.json_response(
        {
            "caughtUp": reader.caught_up.is_set(),
            "serverTime": time.time(),
            "modules": pages.module_list(view),
            "clusters": len(view.clusters.keys() | view.targets_by_cluster.keys()),
            "deadLetters": len(view.dead_letters),
        }
    )


async def module(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    page = pages.module_page(_reader(request).view, name)
    if page is None:
        raise _not_found(f"module {name}")
    return web.json_response({**page, "serverTime": time.time()})


async def module_clusters(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    return web.json_response(pages.stage_clusters(_reader(request).view, name, _query(request)))


def status_namespace(request: web.Request, module: str) -> str | None:
    """The module's namespace as its status names it (None: unknown, or it has none)."""
    status = _reader(request).view.modules.get(module)
    return status.namespace if status is not None else None


def module_namespace(request: web.Request, module: str) -> str:
    """Where a command on `module` is authorized: its status's namespace; the configured
    fallback when it has none."""
    return status_namespace(request, module) or request.app[GUARD].fallback_namespace


async def command(request: web.Request) -> web.Response:
    reader = _reader(request)
    guard = request.app[GUARD]
    identity = request[IDENTITY]
    try:
        body = await request.json()
    except ValueError:
        body = None
    try:
        event = command_event(request.match_info["name"], body, user=identity.user, groups=identity.groups)
    except CommandRefused as error:
        return web.json_response({"error": str(error)}, status=400)
    if not guard.insecure:
        if guard.kube is None:
            return json_error(500, "no Kubernetes API server to authorize the command with")
        namespace = module_namespace(request, event.module)
        if status_namespace(request, event.module) is not None:
            # the engine refuses it if, by the time it applies, the module is in another
            # namespace (deleted and applied again there): the grant was for this one only
            event = event.model_copy(update={"namespace": namespace})
        try:
            permission = await guard.kube.may_create(identity, required_permission(event), namespace)
        except Exception as error:
            log.warning("SubjectAccessReview for %s failed: %s", identity.user, error)
            return json_error(502, f"cannot ask the Kubernetes API server (SubjectAccessReview): {error}")
        if not permission.allowed:
            log.warning("%s refused to %s: may not %s", event.command, identity.user, permission.describe())
            return json_error(
                403,
                f"{identity.user} may not {permission.describe()}, which {event.command} requires",
                missing={"verb": permission.verb, "group": "rollout.dev", "resource": permission.resource,
                         "namespace": permission.namespace},
            )  # fmt: skip
    try:
        event_id = await send_command(reader.bootstrap, reader.topics, event)
    except Exception as error:
        log.warning("cannot publish %s %s: %s", event.command, event.module, error)
        return web.json_response({"error": f"cannot publish to {reader.topics.intents}: {error}"}, status=502)
    log.info("%s %s by %s via dashboard: event %s", event.command, event.module, identity.user, event_id)
    return web.json_response({"eventId": event_id, "command": event.command, "stage": event.stage}, status=202)


async def me(request: web.Request) -> web.Response:
    namespaces = {m.namespace for m in _reader(request).view.modules.values() if m.namespace is not None}
    return await login.me(request, namespaces)


async def verdict(request: web.Request) -> web.Response:
    return web.json_response(pages.verdict(_reader(request).view, request.match_info["event_id"]))


async def clusters(request: web.Request) -> web.Response:
    return web.json_response(pages.cluster_list(_reader(request).view, _query(request)))


async def cluster(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    page = pages.cluster_page(_reader(request).view, name)
    if page is None:
        raise _not_found(f"cluster {name}")
    return web.json_response(page)


async def dead_letters(request: web.Request) -> web.Response:
    return web.json_response(pages.dead_letter_page(_reader(request).view, _query(request)))


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: `hello` once, then `change` (coalesced) while connected."""
    reader = _reader(request)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    subscription = reader.subscribe()
    try:
        await response.write(_sse("hello", {"caughtUp": reader.caught_up.is_set(), "serverTime": time.time()}))
        while True:
            try:
                changes = await asyncio.wait_for(subscription.take(), KEEPALIVE_SECONDS)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            await asyncio.sleep(CHANGE_COALESCE_SECONDS)  # let a burst of batches become one event
            if subscription.ready.is_set():
                changes.merge(await subscription.take())
            payload = {**changes.as_json(), "caughtUp": reader.caught_up.is_set(), "serverTime": time.time()}
            await response.write(_sse("change", payload))
    except ConnectionResetError:
        pass  # the browser went away
    finally:
        reader.unsubscribe(subscription)
    return response


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    if _reader(request).caught_up.is_set():
        return web.Response(text="ok\n")
    return web.Response(text="reading the projection topics\n", status=503)


def create_app(reader: ProjectionReader, guard: Guard) -> web.Application:
    app = web.Application(middlewares=[guard_middleware])
    app[READER] = reader
    app[GUARD] = guard
    app.on_response_prepare.append(security_headers)
    app.router.add_get("/login", login.show_login)
    app.router.add_get("/auth/oidc", login.start_oidc)
    app.router.add_get("/auth/callback", login.oidc_callback)
    app.router.add_post("/auth/token", login.token_login)
    app.router.add_post("/auth/logout", login.logout)
    app.router.add_get("/api/me", me)
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/modules/{name}", module)
    app.router.add_get("/api/modules/{name}/clusters", module_clusters)
    app.router.add_post("/api/modules/{name}/commands", command)
    app.router.add_get("/api/verdicts/{event_id}", verdict)
    app.router.add_get("/api/clusters", clusters)
    app.router.add_get("/api/clusters/{name}", cluster)
    app.router.add_get("/api/dead-letters", dead_letters)
    app.router.add_get("/api/events", events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(*, bootstrap: str, topics: TopicNames, host: str, port: int, guard: Guard, stop: asyncio.Event) -> None:
    """Read the topics and serve the dashboard until `stop` is set.

    Raises `client.MissingTopic` before listening when a topic is missing."""
    reader = ProjectionReader(bootstrap, topics)
    await reader.start()
    folding = asyncio.create_task(reader.run(stop), name="dashboard-reader")
    runner = web.AppRunner(create_app(reader, guard), shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("dashboard ready: http://%s:%d/", host, port)
        if guard.insecure:
            log.warning("INSECURE (--insecure-no-auth): no login; anyone on %s:%d may abort and roll back", host, port)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({folding, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if folding.done():
            folding.result()  # the reader failed: say why
    finally:
        stop.set()
        await runner.cleanup()
        if guard.kube is not None:
            await guard.kube.close()
        with contextlib.suppress(asyncio.CancelledError):
            await folding
