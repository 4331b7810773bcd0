"""The dashboard's doors against a real kube-apiserver: TokenReview says who, SubjectAccessReview
says what, and nothing reaches the intents topic otherwise.

The dashboard runs in-process (`projections.dashboard.server.serve`) on the session broker,
with the management cluster's admin kubeconfig for its reviews — as the chart's service
account would, with `create` on tokenreviews and subjectaccessreviews. Three users: alice
(a service account whose Role lets her create RolloutCommands and RolloutApprovals in
`fleet`), bob (a service account with no grant) and nobody (no credentials). Modules `web`
(status in `fleet`) and `shop` (status in `elsewhere`, where alice has no grant) exist only
as module-status documents: the engine is not needed to see what the dashboard publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from kubernetes_asyncio.client import RbacAuthorizationV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra import client
from infra.topics import TopicNames
from projections.dashboard.guard import Guard
from projections.dashboard.kube_access import KubeAccess
from projections.dashboard.server import serve
from projections.dashboard.sessions import SESSION_COOKIE, SessionStore
from rollout.wire.events import RolloutCommanded, parse_event
from rollout.wire.status import ModuleStatus
from tests.integration.stack import free_port
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import eventually
from tests.kube.test_approvals_rbac import user_token

pytestmark = pytest.mark.integration

ALICE = "system:serviceaccount:fleet:alice"


@dataclass
class Dashboard:
    url: str
    topics: TopicNames
    bootstrap: str

    async def commands(self) -> list[RolloutCommanded]:
        records = await client.read_all(self.bootstrap, self.topics.intents)
        return [e for e in map(parse_event, (r.value for r in records)) if isinstance(e, RolloutCommanded)]


async def grant_alice(cluster: KubeCluster) -> None:
    async with cluster.client() as api:
        rbac = RbacAuthorizationV1Api(api)
        for kind in ("role_binding", "role"):
            with contextlib.suppress(ApiException):
                await getattr(rbac, f"delete_namespaced_{kind}")("rollout-operator", "fleet")
        await rbac.create_namespaced_role(
            "fleet",
            {
                "metadata": {"name": "rollout-operator"},
                "rules": [
                    {
                        "apiGroups": ["rollout.dev"],
                        "resources": ["rolloutcommands", "rolloutapprovals"],
                        "verbs": ["create"],
                    }
                ],
            },
        )
        await rbac.create_namespaced_role_binding(
            "fleet",
            {
                "metadata": {"name": "rollout-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollout-operator"},
                "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "fleet"}],
            },
        )


@pytest.fixture
async def dashboard(management: KubeCluster, kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Dashboard]:
    await grant_alice(management)
    topics = TopicNames(topic_prefix)
    statuses = [("web", "fleet"), ("shop", "elsewhere")]
    await client.publish(
        kafka_bootstrap,
        topics.module_status,
        [
            (name, json.dumps(ModuleStatus(module=name, namespace=ns, phase="Progressing").as_json()).encode())
            for name, ns in statuses
        ],
    )
    guard = Guard(
        sessions=SessionStore(),
        kube=KubeAccess(lambda: new_client_from_config_dict(management.kubeconfig())),
        fallback_namespace="fleet",
    )
    port, stop = free_port(), asyncio.Event()
    serving = asyncio.create_task(
        serve(bootstrap=kafka_bootstrap, topics=topics, host="127.0.0.1", port=port, guard=guard, stop=stop)
    )
    dashboard = Dashboard(f"http://127.0.0.1:{port}", topics, kafka_bootstrap)

    async def caught_up() -> bool:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{dashboard.url}/readyz") as answer:
                return answer.status == 200
        except aiohttp.ClientError:
            return False

    await eventually(caught_up, timeout=30, interval=0.1)
    yield dashboard
    stop.set()
    await serving


async def post_command(
    dashboard: Dashboard, module: str, body: object, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{dashboard.url}/api/modules/{module}/commands", json=body, headers=headers or {}) as answer,
    ):
        return answer.status, await answer.json()


async def test_anonymous_requests_get_401_or_the_login_page_and_publish_nothing(dashboard: Dashboard) -> None:
    status, body = await post_command(dashboard, "web", {"command": "abort"})
    assert status == 401 and "not logged in" in str(body["error"])
    forged = {"Authorization": "Bearer not-a-kubernetes-token"}
    status, body = await post_command(dashboard, "web", {"command": "abort"}, forged)
    assert status == 401
    async with aiohttp.ClientSession() as http:
        for path in ("/api/overview", "/api/modules/web", "/api/me", "/api/events", "/api/dead-letters"):
            async with http.get(f"{dashboard.url}{path}") as answer:
                assert answer.status == 401, path
        async with http.get(f"{dashboard.url}/", allow_redirects=True) as answer:
            page = await answer.text()
            assert str(answer.url).endswith("/login") and 'data-testid="login-token-form"' in page
            assert "app.js" not in page
        for path in ("/static/app.js", "/static/index.html"):
            async with http.get(f"{dashboard.url}{path}", allow_redirects=False) as answer:
                assert answer.status == 303 and answer.headers["Location"] == "/login", path
    await asyncio.sleep(0.3)
    assert await dashboard.commands() == []


async def test_a_user_rbac_allows_commands_in_their_own_name_via_the_dashboard(
    dashboard: Dashboard, management: KubeCluster
) -> None:
    bearer = {"Authorization": f"Bearer {await user_token(management, 'alice')}"}
    async with aiohttp.ClientSession() as http, http.get(f"{dashboard.url}/api/me", headers=bearer) as answer:
        me = await answer.json()
    assert (me["user"], me["source"]) == (ALICE, "token")
    assert "system:serviceaccounts:fleet" in me["groups"]
    assert me["can"] == {
        "elsewhere": {"commands": False, "approvals": False, "breakGlass": False},
        "fleet": {"commands": True, "approvals": True, "breakGlass": False},  # break-glass: granted apart
    }
    status, body = await post_command(dashboard, "web", {"command": "pause"}, bearer)
    assert status == 202, body
    status, body = await post_command(dashboard, "web", {"command": "approve", "stage": "prod"}, bearer)
    assert status == 202, body
    commands = await eventually(lambda: _at_least(dashboard, 2))
    # stamped with the namespace the grant was for: the engine refuses them if, by the time
    # they apply, web lives in another namespace
    assert [(c.module, c.command, c.stage, c.user, c.via, c.namespace) for c in commands] == [
        ("web", "pause", None, ALICE, "dashboard", "fleet"),
        ("web", "approve", "prod", ALICE, "dashboard", "fleet"),
    ]


async def _at_least(dashboard: Dashboard, count: int) -> list[RolloutCommanded] | None:
    commands = await dashboard.commands()
    return commands if len(commands) >= count else None


async def test_a_user_without_the_rbac_grant_is_refused_403_naming_it_and_nothing_is_published(
    dashboard: Dashboard, management: KubeCluster
) -> None:
    bob = {"Authorization": f"Bearer {await user_token(management, 'bob')}"}
    status, body = await post_command(dashboard, "web", {"command": "abort"}, bob)
    assert status == 403
    assert body["error"] == (
        "system:serviceaccount:fleet:bob may not create rolloutcommands.rollout.dev in namespace fleet, "
        "which abort requires"
    )
    assert body["missing"] == {
        "verb": "create",
        "group": "rollout.dev",
        "resource": "rolloutcommands",
        "namespace": "fleet",
    }
    status, body = await post_command(dashboard, "web", {"command": "approve", "stage": "prod"}, bob)
    assert status == 403 and "rolloutapprovals.rollout.dev" in str(body["error"])

    alice = {"Authorization": f"Bearer {await user_token(management, 'alice')}"}
    status, body = await post_command(dashboard, "shop", {"command": "rollback"}, alice)  # shop lives in elsewhere
    assert status == 403 and "in namespace elsewhere" in str(body["error"])
    await asyncio.sleep(0.3)
    assert await dashboard.commands() == []


async def test_a_pasted_token_opens_a_session_whose_posts_need_the_same_origin_and_the_csrf_token(
    dashboard: Dashboard, management: KubeCluster
) -> None:
    token = await user_token(management, "alice")
    origin = {"Origin": dashboard.url}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(f"{dashboard.url}/auth/token", data={"token": "wrong"}, headers=origin) as answer:
            assert answer.status == 401 and "does not accept this token" in await answer.text()
        cross = {"Origin": "http://127.0.0.1:1"}
        async with http.post(f"{dashboard.url}/auth/token", data={"token": token}, headers=cross) as answer:
            assert answer.status == 403  # login CSRF: another origin cannot log the browser in
        login = http.post(f"{dashboard.url}/auth/token", data={"token": token}, headers=origin, allow_redirects=False)
        async with login as answer:
            assert answer.status == 303 and answer.headers["Location"] == "/"
            cookie = answer.cookies[SESSION_COOKIE]
            assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
        http.cookie_jar.update_cookies({SESSION_COOKIE: cookie.value})
        async with http.get(f"{dashboard.url}/api/me") as answer:
            me = await answer.json()
        assert me["user"] == ALICE and me["csrfToken"]
        url = f"{dashboard.url}/api/modules/web/commands"
        attempts = {
            "no CSRF token": origin,
            "a wrong CSRF token": {**origin, "X-CSRF-Token": "guessed"},
            "another origin": {"Origin": "http://127.0.0.1:1", "X-CSRF-Token": me["csrfToken"]},
            "a cross-site fetch": {"Sec-Fetch-Site": "same-site", "X-CSRF-Token": me["csrfToken"]},
            "neither Origin nor Sec-Fetch-Site": {"X-CSRF-Token": me["csrfToken"]},
        }
        for what, headers in attempts.items():
            async with http.post(url, json={"command": "abort"}, headers=headers) as answer:
                assert answer.status == 403, what
        async with http.post(url, json={"command": "abort"}, headers={**origin, "X-CSRF-Token": me["csrfToken"]}) as ok:
            assert ok.status == 202
        [aborted] = await eventually(lambda: _at_least(dashboard, 1))
        assert (aborted.command, aborted.user, aborted.via) == ("abort", ALICE, "dashboard")

        logout = {**origin, "X-CSRF-Token": me["csrfToken"]}
        async with http.post(f"{dashboard.url}/auth/logout", headers=logout) as answer:
            assert answer.status == 200
        http.cookie_jar.update_cookies({SESSION_COOKIE: cookie.value})  # the old cookie, replayed
        async with http.get(f"{dashboard.url}/api/me") as answer:
            assert answer.status == 401


async def test_every_response_carries_the_browser_hardening_headers(dashboard: Dashboard) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/login", "/healthz", "/api/overview", "/", "/static/style.css", "/no-such-page"):
            async with http.get(f"{dashboard.url}{path}", allow_redirects=False) as answer:
                headers = answer.headers
                csp = headers["Content-Security-Policy"]
                assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
                assert "'unsafe-inline'" not in csp
                assert headers["X-Content-Type-Options"] == "nosniff", path
                assert headers["Referrer-Policy"] == "no-referrer", path
                assert headers["X-Frame-Options"] == "DENY", path
