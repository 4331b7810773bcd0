"""The dashboard in a real headless Chromium, over a real worker, applier and broker, with
real logins: a real OpenID Provider and a real kube-apiserver's RBAC.

A `rollout worker`, a directory-sink `rollout applier --simulate-status` (it reports every
sync it writes as succeeded, as Flux would) and `rollout dashboard` run as processes on the
session broker. The dashboard logs users in through the local OpenID Provider
(infra/localoidc: zitadel/oidc's provider, its login page filled in by the browser) and asks
the session's management kube-apiserver (`kube_pool`) a SubjectAccessReview for every
command: the group `rollout-operators` may create RolloutCommands and RolloutApprovals in
`fleet`; alice is in it, vera (a viewer) is not. The tests open the page in Debian's
Chromium (driven by Playwright), publish clusters and a staged module, and watch the page —
never reloaded — follow the rollout through its stages; they approve the gated stage with
the button and see the engine refuse a command; a stage asking for two release managers
waits for bob and carol (alice, allowed to approve but in neither group, is refused by the
engine: the groups are the ID token's), and a rejection halts a rollout with its reason;
vera sees everything and can press nothing;
a page of another loopback origin cannot abort through alice's browser. Screenshots go to
tests/artifacts/.

Playwright's sync API runs an event loop of its own, so the Kafka calls of the test run
on a helper thread (`off_loop`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api, RbacAuthorizationV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from infra.localoidc import LocalOIDC, OIDCClientConfig, OIDCUser
from rollout.api.promotion import AutoPromote
from rollout.engine.strategy import wave_rank
from rollout.wire.events import (
    GateEvaluated,
    ModuleDeleted,
    PromotedSource,
    PromotionObserved,
    RolloutCommanded,
    parse_event,
)
from tests.integration.stack import Stack, free_port, http_get, wait_for
from tests.integration.test_staged_rollout import cluster, module
from tests.kube.cluster import KubeCluster, KubePool

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CLIENT_ID, CLIENT_SECRET = "rollout-dashboard", "dashboard-client-secret"
ALICE = OIDCUser("alice", "alice", "alice-password", "alice@example.com", ["rollout-operators"])
VERA = OIDCUser("vera", "vera", "vera-password", "vera@example.com", ["rollout-viewers"])
# release managers, who may also press the buttons: the approvers a stage's approval.groups names
BOB = OIDCUser("bob", "bob", "bob-password", "bob@example.com", ["rollout-operators", "release-managers"])
CAROL = OIDCUser("carol", "carol", "carol-password", "carol@example.com", ["rollout-operators", "release-managers"])
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
T = TypeVar("T")
_kafka_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka")


def off_loop(call: Callable[..., T], *args: Any) -> T:
    return _kafka_thread.submit(call, *args).result()


async def operators_may_command_in_fleet(pool: KubePool) -> KubeCluster:
    """The management cluster, where the group rollout-operators may create RolloutCommands
    and RolloutApprovals in `fleet` (what the chart's docs tell an admin to bind)."""
    management = await pool.cluster("management")
    async with management.client() as api:
        rbac = RbacAuthorizationV1Api(api)
        name = "dashboard-browser-operators"
        for kind in ("role_binding", "role"):
            try:
                await getattr(rbac, f"delete_namespaced_{kind}")(name, "fleet")
            except ApiException as error:
                if error.status != 404:
                    raise
        rule = {"apiGroups": ["rollout.dev"], "resources": ["rolloutcommands", "rolloutapprovals"], "verbs": ["create"]}
        await rbac.create_namespaced_role("fleet", {"metadata": {"name": name}, "rules": [rule]})
        await rbac.create_namespaced_role_binding(
            "fleet",
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "Group", "name": "rollout-operators", "apiGroup": "rbac.authorization.k8s.io"}],
            },
        )
        await may_break_glass_in_winter(api)
    return management


async def may_break_glass_in_winter(api: Any) -> None:
    """alice, and only she, may break the glass of freeze calendars in `winter` — a
    permission of its own (rolloutbreakglasses), which operators in `fleet` do not have."""
    try:
        await CoreV1Api(api).create_namespace({"metadata": {"name": "winter"}})
    except ApiException as error:
        if error.status != 409:
            raise
    rbac, name = RbacAuthorizationV1Api(api), "incident-commander"
    for kind in ("role_binding", "role"):
        try:
            await getattr(rbac, f"delete_namespaced_{kind}")(name, "winter")
        except ApiException as error:
            if error.status != 404:
                raise
    rule = {"apiGroups": ["rollout.dev"], "resources": ["rolloutbreakglasses"], "verbs": ["create"]}
    await rbac.create_namespaced_role("winter", {"metadata": {"name": name}, "rules": [rule]})
    subject = {"kind": "User", "name": ALICE.email, "apiGroup": "rbac.authorization.k8s.io"}
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    await rbac.create_namespaced_role_binding(
        "winter", {"metadata": {"name": name}, "roleRef": role, "subjects": [subject]}
    )


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, kube_pool: KubePool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("dashboard")
    management = off_loop(lambda: asyncio.run(operators_may_command_in_fleet(kube_pool)))
    kubeconfig = workdir / "management.kubeconfig"
    kubeconfig.write_text(management.kubeconfig_yaml())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    client = OIDCClientConfig(CLIENT_ID, CLIENT_SECRET, [f"{url}/auth/callback"])
    provider = LocalOIDC(workdir / "oidc", [client], [ALICE, VERA, BOB, CAROL]).start()
    stack = off_loop(lambda: Stack(kafka_bootstrap, workdir, partitions=2, tick_interval=1.0))
    stack.start_worker()
    stack.start_applier("--simulate-status")
    stack.env["ROLLOUT_DASHBOARD_OIDC_CLIENT_SECRET"] = CLIENT_SECRET
    dashboard = stack._spawn(
        "dashboard", "dashboard", "--port", str(port), "--kubeconfig", str(kubeconfig), "--namespace", "fleet",
        "--oidc-issuer-url", provider.issuer, "--oidc-client-id", CLIENT_ID,
        "--oidc-redirect-url", f"{url}/auth/callback",
    )  # fmt: skip
    stack.dashboard_url = url  # type: ignore[attr-defined]
    stack.provider = provider  # type: ignore[attr-defined]

    def ready() -> bool:
        if dashboard.poll() is not None:
            raise AssertionError(f"dashboard exited with {dashboard.returncode}:\n{stack.log('dashboard')}")
        answer = http_get(port, "/readyz")
        return answer is not None and answer[0] == 200

    wait_for("the dashboard to be ready", ready, timeout=60, interval=0.2)
    yield stack
    Stack._stop(dashboard)
    stack.stop()
    provider.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (`make test` does it)", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield browser
        browser.close()


def log_in(context: BrowserContext, stack: Stack, user: OIDCUser) -> Page:
    """Through the front door: the dashboard sends the browser to its login page, on to the
    provider's, whose form is filled in; the provider redirects back to the dashboard."""
    page = context.new_page()
    page.goto(f"{stack.dashboard_url}/")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("login")).to_be_visible()
    assert page.url == f"{stack.dashboard_url}/login"  # type: ignore[attr-defined]
    issuer = stack.provider.issuer  # type: ignore[attr-defined]
    with page.expect_request(lambda r: r.url.startswith(f"{issuer}auth?")) as authorize:
        page.get_by_test_id("login-oidc").click()
    asked = {k: v[0] for k, v in parse_qs(urlsplit(authorize.value.url).query).items()}
    assert (asked["response_type"], asked["client_id"], asked["code_challenge_method"]) == ("code", CLIENT_ID, "S256")
    assert len(asked["code_challenge"]) == 43 and asked["state"] and asked["nonce"], asked  # PKCE, state, nonce
    page.wait_for_url(f"{issuer}login/**")
    page.fill("#username", user.username)
    page.fill("#password", user.password)
    page.get_by_role("button", name="Login").click()
    page.wait_for_url(f"{stack.dashboard_url}/")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("user")).to_have_text(f"{user.email} ({', '.join(user.groups)})")
    return page


def watch_page(page: Page, stack: Stack) -> Page:
    """Record requests to anywhere but the dashboard, and CSP violations."""
    page.requests_elsewhere = []  # type: ignore[attr-defined]
    page.csp_violations = []  # type: ignore[attr-defined]
    base = stack.dashboard_url  # type: ignore[attr-defined]
    page.on("request", lambda r: None if r.url.startswith(base) else page.requests_elsewhere.append(r.url))  # type: ignore[attr-defined]
    page.on(
        "console",
        lambda m: page.csp_violations.append(m.text) if "Content Security Policy" in m.text else None,  # type: ignore[attr-defined]
    )
    return page


@pytest.fixture
def page(stack: Stack, browser: Browser) -> Iterator[Page]:
    """alice's browser, logged in."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield watch_page(log_in(context, stack, ALICE), stack)
    context.close()


def open_dashboard(page: Page, stack: Stack, route: str) -> None:
    page.goto(f"{stack.dashboard_url}/{route}")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("live")).to_have_text("live")
    page.evaluate("window.loadedOnce = 'still the same page'")


def same_page(page: Page) -> bool:
    return page.evaluate("window.loadedOnce") == "still the same page"


def publish_fleet(stack: Stack, name: str, app: str, count: int) -> None:
    rings = ["canary"] * 2 + ["wave-1"] * ((count - 2) // 2)
    for i in range(count):
        labels = {"app": app, "ring": rings[i] if i < len(rings) else "wave-2", "order": str(i)}
        off_loop(stack.send, "clusters", f"{name}-{i:02d}", cluster(f"{name}-{i:02d}", labels=labels))


STAGES = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 1, "minSuccessTime": "4s"},
    {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "50%"},
    {"name": "wave-2", "maxConcurrency": "50%", "requireApproval": True},
]


def test_a_staged_rollout_progresses_on_screen_and_is_approved_with_the_button(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "shop", "shop", 24)
    open_dashboard(page, stack, "#/")
    off_loop(stack.send, "intents", "shop", module("shop", app="shop", tag="2.0.0", stages=STAGES))
    page.get_by_test_id("module-row-shop").get_by_role("link", name="shop").click()
    phase = page.get_by_test_id("module-phase")
    seen: list[str] = []
    soak_clock = ""

    def awaiting_approval() -> bool:
        nonlocal soak_clock
        text = phase.inner_text().strip() if phase.count() else ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        clock = page.get_by_test_id("stage-canary").get_by_test_id("soak-clock")
        if clock.count() and not soak_clock:
            soak_clock = clock.inner_text()
        return text == "AwaitingApproval"

    wait_for("the page to show wave-2 awaiting approval", awaiting_approval, timeout=120, interval=0.1)
    assert "Soaking" in seen and seen.index("Soaking") < seen.index("AwaitingApproval"), seen
    assert soak_clock.startswith("soak ends in"), soak_clock
    wave_2 = page.get_by_test_id("stage-wave-2")
    expect(wave_2.get_by_test_id("approval-clock")).to_contain_text("awaiting approval for")
    expect(page.get_by_test_id("stage-canary").get_by_test_id("stage-state")).to_have_text("Succeeded")
    expect(page.get_by_test_id("stage-wave-1").get_by_test_id("stage-state")).to_have_text("Succeeded")
    expect(page.get_by_test_id("cell-shop-23")).to_have_attribute("data-state", "pending")
    expect(page.get_by_test_id("decisions")).to_contain_text("stage wave-1 succeeded")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-awaiting-approval.png"))

    wave_2.get_by_test_id("approve-wave-2").click()
    verdict = page.get_by_test_id("verdict")
    approved = "stage wave-2 approved by alice@example.com via dashboard"
    expect(verdict).to_contain_text(f"approve wave-2: accepted — {approved}", timeout=20_000)
    expect(verdict).to_have_attribute("data-state", "accepted")
    expect(phase).to_have_text("Complete", timeout=60_000)
    expect(page.get_by_test_id("cell-shop-23")).to_have_attribute("data-state", "succeeded")
    expect(page.get_by_test_id("decisions")).to_contain_text(approved)
    page.screenshot(path=str(ARTIFACTS / "dashboard-complete.png"), full_page=True)
    assert same_page(page), "the page was reloaded"
    assert page.requests_elsewhere == []  # type: ignore[attr-defined]
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_two_release_managers_approve_a_stage_and_a_third_user_outside_the_group_does_not_count(
    stack: Stack, browser: Browser
) -> None:
    publish_fleet(stack, "bank", "bank", 6)
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "wave-1", "approval": {"required": 2, "groups": ["release-managers"]}},
    ]
    off_loop(stack.send, "intents", "bank", module("bank", app="bank", tag="1.0.0", stages=stages))
    pages = {}
    for user in (ALICE, BOB, CAROL):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        pages[user.username] = watch_page(log_in(context, stack, user), stack)
        open_dashboard(pages[user.username], stack, "#/modules/bank")
    alice, bob, carol = pages["alice"], pages["bob"], pages["carol"]
    expect(alice.get_by_test_id("module-phase")).to_have_text("AwaitingApproval", timeout=60_000)
    line = alice.get_by_test_id("approvals-wave-1")
    expect(line).to_have_text("no approval yet; waiting for 2 more from release-managers")

    alice.get_by_test_id("approve-wave-1").click()  # RBAC lets her; the engine counts only the group
    verdict = alice.get_by_test_id("verdict")
    expect(verdict).to_have_attribute("data-state", "refused", timeout=20_000)
    expect(verdict).to_contain_text(
        "stage wave-1 counts approvals by members of release-managers; alice@example.com is in none"
    )
    bob.get_by_test_id("approve-wave-1").click()
    expect(bob.get_by_test_id("verdict")).to_contain_text(
        "stage wave-1 approved by bob@example.com via dashboard (1 of 2)", timeout=20_000
    )
    expect(carol.get_by_test_id("approvals-wave-1")).to_have_text(
        "approved by bob@example.com (dashboard); waiting for 1 more from release-managers", timeout=20_000
    )
    expect(carol.get_by_test_id("stage-wave-1")).to_contain_text("approvals 1/2")
    carol.screenshot(path=str(ARTIFACTS / "dashboard-one-of-two-approvals.png"), full_page=True)
    bob.get_by_test_id("approve-wave-1").click()  # bob again: counts once
    expect(bob.get_by_test_id("verdict")).to_have_attribute("data-state", "accepted", timeout=20_000)
    expect(carol.get_by_test_id("module-phase")).to_have_text("AwaitingApproval")
    carol.get_by_test_id("approve-wave-1").click()
    expect(carol.get_by_test_id("verdict")).to_contain_text("(2 of 2)", timeout=20_000)
    expect(carol.get_by_test_id("module-phase")).to_have_text("Complete", timeout=60_000)
    approvals = [e for e in intents(stack, "bank") if e.command == "approve"]
    assert [(e.user, e.via, e.groups) for e in approvals] == [
        ("alice@example.com", "dashboard", ["rollout-operators"]),
        ("bob@example.com", "dashboard", ["release-managers", "rollout-operators"]),
        ("bob@example.com", "dashboard", ["release-managers", "rollout-operators"]),
        ("carol@example.com", "dashboard", ["release-managers", "rollout-operators"]),
    ]
    for page in pages.values():
        assert page.csp_violations == []  # type: ignore[attr-defined]
        page.context.close()


def test_a_rejection_with_its_reason_halts_the_rollout_on_screen(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "tram", "tram", 4)
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "wave-1", "requireApproval": True},
    ]
    off_loop(stack.send, "intents", "tram", module("tram", app="tram", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/tram")
    expect(page.get_by_test_id("module-phase")).to_have_text("AwaitingApproval", timeout=60_000)
    page.get_by_test_id("reject-wave-1").click()  # without a reason: the dashboard refuses to send it
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("reject wave-1: not sent — reject needs a reason", timeout=20_000)
    page.get_by_test_id("reject-reason-wave-1").fill("canary latency p99 doubled")
    page.get_by_test_id("reject-wave-1").click()
    expect(verdict).to_contain_text(
        "halted: stage wave-1 rejected by alice@example.com via dashboard: canary latency p99 doubled", timeout=20_000
    )
    expect(page.get_by_test_id("module-phase")).to_have_text("Halted", timeout=30_000)
    expect(page.get_by_test_id("rejection")).to_have_text(
        "at stage wave-1 by alice@example.com: canary latency p99 doubled", timeout=30_000
    )
    page.screenshot(path=str(ARTIFACTS / "dashboard-rejected.png"), full_page=True)
    [rejected] = [e for e in intents(stack, "tram") if e.command == "reject"]
    assert (rejected.user, rejected.via, rejected.reason) == (
        "alice@example.com",
        "dashboard",
        "canary latency p99 doubled",
    )
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_a_command_the_engine_refuses_shows_its_reason(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "solo", "solo", 2)
    stages = [{"name": "only", "maxConcurrency": 1}]
    off_loop(stack.send, "intents", "solo", module("solo", app="solo", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/solo")
    expect(page.get_by_test_id("module-phase")).to_have_text("Complete", timeout=60_000)
    off_loop(stack.send, "intents", "solo", ModuleDeleted(kind="Module", name="solo"))
    expect(page.get_by_test_id("module-missing")).to_be_visible(timeout=30_000)

    page.get_by_test_id("command-pause").click()
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_have_attribute("data-state", "refused", timeout=20_000)
    shown = verdict.inner_text()
    assert shown.startswith("pause: refused by the engine — ") and "solo" in shown, shown
    reason = shown.removeprefix("pause: refused by the engine — ")
    page.screenshot(path=str(ARTIFACTS / "dashboard-refusal.png"), full_page=True)

    page.get_by_role("link", name="Dead letters").click()
    expect(page.get_by_test_id("dead-letters")).to_contain_text(reason)
    assert same_page(page)


def test_the_cluster_page_shows_its_modules_and_assemblages(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "edge", "edge", 2)
    stages = [{"name": "all", "maxConcurrency": 2}]
    off_loop(stack.send, "intents", "edge", module("edge", app="edge", tag="3.1.0", stages=stages))
    open_dashboard(page, stack, "#/clusters")
    page.get_by_test_id("filter-q").fill("edge-01")
    expect(page.get_by_test_id("page-range")).to_have_text("1\u20131 of 1")
    page.get_by_role("link", name="edge-01").click()
    row = page.get_by_test_id("cluster-module-edge")
    expect(row).to_contain_text("succeeded", timeout=60_000)
    expect(page.get_by_test_id("cluster")).to_contain_text("edge@3.1.0")
    assert same_page(page)


def test_a_helm_module_shows_each_clusters_values_and_what_a_read_only_path_refused(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import HelmValuesObserved, ModuleApplied

    publish_fleet(stack, "chart", "chart", 2)
    helm = {
        "values": {"ui": {"logo": "a.png"}, "replicaCount": 2},
        "valuesPolicy": [{"path": "/ui/logo", "policy": "readOnly"}],
    }
    source = {"helm": {"url": "https://stefanprodan.github.io/podinfo", "chart": "podinfo", "version": "6.7.0"}}
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "chart", "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": "chart"}},
                "sync": {"source": source, "package": {"helm": helm}},
            },
        }
    )
    off_loop(stack.send, "intents", "chart", ModuleApplied(module=manifest))
    open_dashboard(page, stack, "#/clusters/chart-00")
    values = page.get_by_test_id("helm-values-chart")
    expect(values).to_contain_text('"logo": "a.png"', timeout=60_000)
    expect(values).to_contain_text('"replicaCount": 2')

    live = HelmValuesObserved(cluster="chart-00", module="chart", values={"ui": {"logo": "b.png"}, "replicaCount": 2})
    off_loop(stack.send, "status", "chart-00", live)
    expect(values).to_contain_text('"logo": "b.png"', timeout=30_000)  # readOnly: the cluster's value stays
    page.get_by_role("link", name="chart").first.click()
    refused = page.get_by_test_id("value-refused")
    expect(refused).to_have_count(1, timeout=30_000)
    expect(refused).to_contain_text("chart-00: /ui/logo is readOnly")
    expect(refused).to_contain_text("'a.png'")
    assert same_page(page)


def test_a_closed_maintenance_window_shows_when_the_stage_may_next_move(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "night", "night", 2)
    window = {"schedule": "0 0 1 1 *", "duration": "1m", "timeZone": "UTC"}  # opens once a year
    stages = [{"name": "all", "maxConcurrency": 2, "windows": [window]}]
    off_loop(stack.send, "intents", "night", module("night", app="night", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/night")
    shown = page.get_by_test_id("window-all")
    expect(shown).to_contain_text("window closed, opens", timeout=60_000)
    expect(page.get_by_test_id("stage-all")).to_contain_text("pending 2")
    page.screenshot(path=str(ARTIFACTS / "dashboard-window.png"), full_page=True)
    assert same_page(page)


def test_a_held_promotion_shows_the_version_available_and_is_resumed_and_held_with_the_buttons(
    page: Page, stack: Stack
) -> None:
    publish_fleet(stack, "ferry", "ferry", 2)
    applied = module("ferry", app="ferry", tag="1.0.0", stages=[{"name": "all", "maxConcurrency": 2}])
    source = applied.module.spec.sync.source.model_copy(update={"auto_promote": AutoPromote(semver=">=1.0.0 <2.0.0")})
    sync = applied.module.spec.sync.model_copy(update={"source": source})
    manifest = applied.module.model_copy(update={"spec": applied.module.spec.model_copy(update={"sync": sync})})
    off_loop(stack.send, "intents", "ferry", applied.model_copy(update={"module": manifest}))
    hold = RolloutCommanded(module="ferry", command="hold-promotion", user="ops", via="cli", reason="change freeze")
    off_loop(stack.send, "intents", "ferry", hold)
    open_dashboard(page, stack, "#/modules/ferry")
    shown = page.get_by_test_id("promotion")
    expect(shown).to_contain_text("follows >=1.0.0 <2.0.0 of git https://example.com/repo", timeout=60_000)
    expect(shown).to_contain_text("held by ops via cli: change freeze", timeout=30_000)
    seen = PromotedSource(kind="git", url="https://example.com/repo")
    observed = PromotionObserved(module="ferry", version="1.4.0", source=seen, promoter="promoter-0")
    off_loop(stack.send, "status", "ferry", observed)
    expect(shown).to_contain_text("1.4.0 available, held (seen by promoter-0)", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "dashboard-promotion-held.png"), full_page=True)

    page.get_by_test_id("promotion-resume").click()  # the held version is promoted, by whoever resumed
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("promotion resumed by alice@example.com via dashboard", timeout=20_000)
    expect(verdict).to_contain_text("promoted 1.0.0 → 1.4.0 from git https://example.com/repo, seen by promoter-0")
    expect(shown).to_contain_text("last promoted 1.4.0", timeout=30_000)

    page.get_by_test_id("promotion-hold").click()  # without a reason: the dashboard refuses to send it
    expect(verdict).to_contain_text("hold-promotion: not sent — hold-promotion needs a reason", timeout=20_000)
    page.get_by_test_id("promotion-reason").fill("incident 7")
    page.get_by_test_id("promotion-hold").click()
    expect(verdict).to_contain_text("promotion held by alice@example.com via dashboard: incident 7", timeout=20_000)
    expect(shown).to_contain_text("held by alice@example.com via dashboard: incident 7", timeout=30_000)
    [held] = [e for e in intents(stack, "ferry") if e.command == "hold-promotion" and e.via == "dashboard"]
    assert (held.user, held.reason) == ("alice@example.com", "incident 7")
    assert same_page(page)
    assert page.csp_violations == []  # type: ignore[attr-defined]


TRAIN = """
apiVersion: rollout.dev/v1alpha1
kind: Release
metadata: {name: train, namespace: fleet}
spec:
  selector: {matchLabels: {app: train}}
  rollout: {stages: [{name: all, maxConcurrency: 2}]}
  autoPromote: {}
  modules:
    - {name: engine, semver: ">=1.0.0 <2.0.0"}
    - {name: wagon, semver: ">=1.0.0 <2.0.0"}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: engine, namespace: fleet}
spec: {sync: {source: {git: {url: "https://example.com/engine", version: {tag: 1.0.0}}}}}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: wagon, namespace: fleet}
spec: {sync: {source: {git: {url: "https://example.com/wagon", version: {tag: 1.0.0}}}}}
"""


def test_a_release_promoted_as_a_unit_is_held_and_resumed_with_the_release_buttons(page: Page, stack: Stack) -> None:
    from rollout.api.loading import load_manifests
    from rollout.api.module_releases import expand_releases
    from rollout.wire.events import ModuleApplied, ObservedMember, ReleasePromotionObserved

    publish_fleet(stack, "train", "train", 2)
    for item in expand_releases(load_manifests(TRAIN.encode(), file="train.yaml")):  # as `rollout apply` gives them
        off_loop(stack.send, "intents", item.manifest.metadata.name, ModuleApplied(module=item.manifest))
    hold = RolloutCommanded(module="engine", command="hold-promotion", user="ops", via="cli", reason="change freeze")
    off_loop(stack.send, "intents", "engine", hold)  # engine leads train: first by name
    open_dashboard(page, stack, "#/modules/wagon")  # a member that does not lead: its buttons go to the leader
    shown = page.get_by_test_id("release-promotion")
    expect(shown).to_contain_text("as a unit: engine >=1.0.0 <2.0.0, wagon >=1.0.0 <2.0.0 — decided by engine",
                                  timeout=60_000)  # fmt: skip
    expect(shown).to_contain_text("held by ops via cli: change freeze", timeout=30_000)
    seen = [
        ObservedMember(
            module=name, version=version, source=PromotedSource(kind="git", url=f"https://example.com/{name}")
        )
        for name, version in (("engine", "1.2.0"), ("wagon", "1.3.0"))
    ]
    observed = ReleasePromotionObserved(module="engine", release="train", members=seen, promoter="promoter-0")
    off_loop(stack.send, "status", "engine", observed)
    expect(shown).to_contain_text("available engine 1.2.0, wagon 1.3.0, held (seen by promoter-0)", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "dashboard-release-promotion-held.png"), full_page=True)

    page.get_by_test_id("release-promotion-resume").click()  # the combination promoted as one
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("promotion resumed by alice@example.com via dashboard", timeout=20_000)
    expect(verdict).to_contain_text("release train promoted as one: engine 1.0.0 → 1.2.0, wagon 1.0.0 → 1.3.0")
    expect(shown).to_contain_text("last promoted engine 1.2.0, wagon 1.3.0", timeout=30_000)
    expect(page.get_by_test_id("release-member-wagon")).to_contain_text("1.3.0", timeout=30_000)

    page.get_by_test_id("release-promotion-hold").click()  # without a reason: the dashboard refuses to send it
    expect(verdict).to_contain_text("hold-promotion: not sent — hold-promotion needs a reason", timeout=20_000)
    page.get_by_test_id("release-promotion-reason").fill("incident 9")
    page.get_by_test_id("release-promotion-hold").click()
    expect(verdict).to_contain_text("promotion held by alice@example.com via dashboard: incident 9", timeout=20_000)
    [held] = [e for e in intents(stack, "engine") if e.command == "hold-promotion" and e.via == "dashboard"]
    assert (held.user, held.reason) == ("alice@example.com", "incident 9")
    assert same_page(page)
    assert page.csp_violations == []  # type: ignore[attr-defined]


DECK = """
apiVersion: rollout.dev/v1alpha1
kind: Release
metadata: {name: deck, namespace: fleet}
spec:
  selector: {matchLabels: {app: deck}}
  rollout: {stages: [{name: all, maxConcurrency: 2, requireApproval: true}]}
  modules: [{name: deck-sail}, {name: deck-mast}]
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: deck-sail, namespace: fleet}
spec: {sync: {source: {git: {url: "https://example.com/sail", version: {tag: 1.0.0}}}}}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: deck-mast, namespace: fleet}
spec: {sync: {source: {git: {url: "https://example.com/mast", version: {tag: 1.0.0}}}}}
"""


def test_a_releases_stage_is_approved_for_every_member_with_one_button(page: Page, stack: Stack) -> None:
    from rollout.api.loading import load_manifests
    from rollout.api.module_releases import expand_releases
    from rollout.wire.events import ModuleApplied

    publish_fleet(stack, "deck", "deck", 2)
    for item in expand_releases(load_manifests(DECK.encode(), file="deck.yaml")):  # as `rollout apply` gives them
        off_loop(stack.send, "intents", item.manifest.metadata.name, ModuleApplied(module=item.manifest))
    open_dashboard(page, stack, "#/modules/deck-sail")  # a member that does not lead: deck-mast does
    button = page.get_by_test_id("approve-release-all")
    expect(button).to_have_text("approve all for release deck", timeout=60_000)
    button.click()
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text(
        "stage all of release deck approved by alice@example.com via dashboard for deck-mast, deck-sail",
        timeout=20_000,
    )
    for member in ("deck-mast", "deck-sail"):
        expect(page.get_by_test_id(f"release-member-{member}")).to_contain_text("Complete", timeout=60_000)
    [approval] = [e for e in intents(stack, "deck-mast") if e.command == "approve"]
    assert (approval.release, approval.user, approval.via) == ("deck", "alice@example.com", "dashboard")
    assert same_page(page)


def test_an_analysis_shows_its_measurements_and_why_it_paused_the_rollout(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "deli", "deli", 4)  # deli-00, deli-01 in canary; deli-02, -03 in wave-1
    errors = {"name": "errors", "prometheus": {"url": "http://127.0.0.1:9", "query": "up", "min": 1}, "count": 3}
    shadow = {"name": "shadow", "webhook": {"url": "http://127.0.0.1:9/hook"}, "count": 2, "dryRun": True}
    stages = [{**STAGES[0], "gates": [errors, shadow]}, {"name": "wave-1"}]
    off_loop(stack.send, "intents", "deli", module("deli", app="deli", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/deli")
    expect(page.get_by_test_id("gate-canary-errors")).to_contain_text("pending", timeout=90_000)
    measured = [("errors", True, 1, ""), ("shadow", False, 1, "hook answered 500")]
    measured += [("errors", None, 2, "no samples")]  # over inconclusiveLimit 0: paused
    for gate, passed, number, message in measured:
        result = GateEvaluated(
            module="deli", stage="canary", gate=gate, generation=1, passed=passed, message=message, run=1,
            measurement=number,
        )  # fmt: skip
        off_loop(stack.send, "status", "deli", result)  # as `rollout gate-runner` publishes it
    analysis = page.get_by_test_id("analysis-canary-errors")
    expect(analysis).to_contain_text("analysis run 1: 2/3 measured, 1 passed, 0 failed (limit 0), 1 inconclusive")
    expect(analysis).to_contain_text("paused until resume")
    expect(page.get_by_test_id("gate-canary-errors")).to_contain_text("inconclusive")
    expect(page.get_by_test_id("module-phase")).to_contain_text("Paused")
    expect(page.get_by_text("gate errors of stage canary inconclusive").first).to_be_visible()
    expect(page.get_by_test_id("dry-run-canary-shadow")).to_contain_text("dry run: holds nothing")
    expect(page.get_by_test_id("analysis-canary-shadow")).to_contain_text("1/2 measured, 0 passed, 1 failed")
    page.screenshot(path=str(ARTIFACTS / "dashboard-analysis.png"), full_page=True)
    assert same_page(page)


def test_the_run_lists_who_it_went_on_without_and_why(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import ClusterObserved, ClusterRemoved

    publish_fleet(stack, "churn", "churn", 2)
    hold = {"rollout.dev/hold": "true", "rollout.dev/hold-reason": "retail peak"}
    held = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "churn-held", "namespace": "fleet", "labels": {"app": "churn"}, "annotations": hold},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    off_loop(stack.send, "clusters", "churn-held", ClusterObserved(cluster=held))
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "rest"}]
    off_loop(stack.send, "intents", "churn", module("churn", app="churn", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/churn")
    member = page.get_by_test_id("run-member-churn-held")
    expect(member).to_have_attribute("data-state", "Held", timeout=60_000)
    expect(member).to_contain_text("held by its owner: retail peak")
    expect(page.get_by_test_id("held-rest")).to_contain_text("1 held by their owners")
    expect(page.get_by_test_id("run-facts")).to_contain_text("run #1, rollout of generation")
    expect(page.get_by_test_id("run-facts")).to_contain_text("3 member(s) fixed at its start")
    expect(page.get_by_test_id("run-facts")).not_to_contain_text("[object")  # its start time is an element
    expect(page.get_by_test_id("run")).not_to_contain_text("null")
    off_loop(stack.send, "clusters", "churn-01", ClusterRemoved(name="churn-01"))
    left = page.get_by_test_id("run-member-churn-01")
    expect(left).to_have_attribute("data-state", "Left", timeout=60_000)
    expect(left).to_contain_text("removed from the fleet")
    expect(page.get_by_test_id("run-facts")).to_contain_text("1 left since")
    expect(page.get_by_test_id("module-phase")).to_have_text("Progressing")  # the held member runs nothing yet
    page.screenshot(path=str(ARTIFACTS / "dashboard-run.png"), full_page=True)
    assert same_page(page)


def test_a_late_joiner_deferred_to_the_next_run_is_shown_with_why(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import ModuleApplied

    publish_fleet(stack, "tardy", "tardy", 2)  # two canaries
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "rest", "requireApproval": True},
    ]
    applied = module("tardy", app="tardy", tag="1.0.0", stages=stages)
    document = applied.module.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    document["spec"]["rollout"]["lateJoiners"] = "NextRun"
    late = ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document))
    off_loop(stack.send, "intents", "tardy", late)
    open_dashboard(page, stack, "#/modules/tardy")
    expect(page.get_by_test_id("module-phase")).to_have_text("AwaitingApproval", timeout=60_000)
    joiner = cluster("tardy-09", labels={"app": "tardy", "ring": "wave", "order": "9"})
    off_loop(stack.send, "clusters", "tardy-09", joiner)  # joins run 1 mid-way, in stage rest
    member = page.get_by_test_id("run-member-tardy-09")
    expect(member).to_have_attribute("data-state", "DeferredToNextRun", timeout=60_000)
    expect(member).to_contain_text("joined mid-run (lateJoiners: NextRun): the next run moves it")
    expect(page.get_by_test_id("late-rest")).to_contain_text("late joiners: 1 deferred to the next run")
    expect(page.get_by_test_id("run-facts")).to_contain_text("2 member(s) fixed at its start")
    page.screenshot(path=str(ARTIFACTS / "dashboard-late-joiner.png"), full_page=True)
    assert same_page(page)


def test_a_stage_waiting_for_an_offline_member_says_which_and_until_when(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import ModuleApplied

    publish_fleet(stack, "patient", "patient", 2)  # two canaries
    off = cluster("patient-09", labels={"app": "patient", "ring": "rest", "order": "9"}, ready=False)
    off_loop(stack.send, "clusters", "patient-09", off)
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "rest"}]
    document = module("patient", app="patient", tag="1.0.0", stages=stages).module.model_dump(
        mode="json", by_alias=True, exclude_defaults=True
    )
    document["spec"]["rollout"]["offline"] = {"wait": "1h", "then": "Skip"}
    off_loop(stack.send, "intents", "patient", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document)))
    open_dashboard(page, stack, "#/modules/patient")
    member = page.get_by_test_id("run-member-patient-09")
    expect(member).to_have_attribute("data-state", "AwaitingReturn", timeout=60_000)
    expect(member).to_contain_text(
        "it is not ready (control plane or kubeconfig secret); stage rest waits for it until"
    )
    expect(page.get_by_test_id("awaited-rest")).to_contain_text("waits for 1 offline member(s) to come back")
    expect(page.get_by_test_id("module-phase")).to_have_text("Progressing")
    page.screenshot(path=str(ARTIFACTS / "dashboard-offline-wait.png"), full_page=True)
    assert same_page(page)


def test_a_module_whose_stages_passed_says_what_it_still_waits_for(page: Page, stack: Stack) -> None:
    """Its stages passed with a member not ready (skipped): not Complete, and the page says
    why — the status's `waiting`, as `rollout status` prints it."""
    publish_fleet(stack, "tardy", "tardy", 2)  # two canaries
    off = cluster("tardy-09", labels={"app": "tardy", "ring": "rest", "order": "9"}, ready=False)
    off_loop(stack.send, "clusters", "tardy-09", off)
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "rest"}]
    off_loop(stack.send, "intents", "tardy", module("tardy", app="tardy", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/tardy")
    expect(page.get_by_test_id("waiting")).to_contain_text("not ready", timeout=60_000)
    expect(page.get_by_test_id("module-phase")).to_have_text("Progressing")
    assert same_page(page)


def test_a_member_failed_by_its_offline_wait_is_listed_in_the_run_with_why(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import ModuleApplied

    publish_fleet(stack, "strict", "strict", 2)  # two canaries
    off = cluster("strict-09", labels={"app": "strict", "ring": "rest", "order": "9"}, ready=False)
    off_loop(stack.send, "clusters", "strict-09", off)
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "rest", "maxFailures": 1}]
    document = module("strict", app="strict", tag="1.0.0", stages=stages).module.model_dump(
        mode="json", by_alias=True, exclude_defaults=True
    )
    document["spec"]["rollout"]["offline"] = {"wait": "0s", "then": "Fail"}  # failed as soon as its stage starts
    off_loop(stack.send, "intents", "strict", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(document)))
    open_dashboard(page, stack, "#/modules/strict")
    member = page.get_by_test_id("run-member-strict-09")
    expect(member).to_have_attribute("data-state", "Failed", timeout=60_000)
    why = "it is not ready (control plane or kubeconfig secret), past its stage's offline.wait"
    expect(member).to_contain_text(why)
    expect(page.get_by_test_id("cell-strict-09")).to_have_attribute("data-state", "failed")
    assert same_page(page)


def test_a_stage_with_waves_shows_the_open_wave_its_members_and_when_the_next_starts(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "tide", "tide", 6)
    stages = [{"name": "all", "waves": {"size": 2, "seed": 3, "delay": "1h"}}]
    off_loop(stack.send, "intents", "tide", module("tide", app="tide", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/tide")
    card = page.get_by_test_id("stage-all")
    expect(card.get_by_test_id("waves-all")).to_contain_text("waves of 2 in random order, seed 3, 1h apart")
    expect(card.get_by_test_id("wave-all")).to_have_text(" · wave 1/3")
    expect(card.get_by_test_id("next-wave-all")).to_contain_text("next wave in 59m", timeout=60_000)
    names = [f"tide-{i:02d}" for i in range(6)]
    members = card.get_by_test_id("wave-members-all").inner_text().removeprefix("wave 1: ").split(", ")
    assert members == sorted(names, key=lambda name: wave_rank(3, name))[:2], members  # the seeded order
    for name in names:
        state = "succeeded" if name in members else "pending"  # the second wave waits an hour
        expect(page.get_by_test_id(f"cell-{name}")).to_have_attribute("data-state", state)
    expect(page.get_by_test_id("decisions")).to_contain_text(
        f"stage all wave 1/3 started (seed 3, size 2): {', '.join(members)}"
    )
    page.screenshot(path=str(ARTIFACTS / "dashboard-waves.png"), full_page=True)
    assert same_page(page)


def test_a_stage_graph_shows_which_upstreams_each_stage_waits_for_and_the_edge_soak(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "delta", "delta", 6)  # delta-00, -01 canary; -02, -03 wave-1; -04, -05 the rest
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "after": [{"stage": "canary"}]},
        {"name": "wave-2", "after": [{"stage": "canary"}]},
        {"name": "final", "after": [{"stage": "wave-1", "soak": "1h"}, {"stage": "wave-2"}], "quorum": "All"},
    ]
    off_loop(stack.send, "intents", "delta", module("delta", app="delta", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/delta")
    final = page.get_by_test_id("upstream-final")
    expect(final).to_contain_text("wave-1 passed, soaking until", timeout=90_000)
    expect(final).to_contain_text("wave-2 passed — 1 of 2 needed (quorum All)")
    expect(page.get_by_test_id("edge-final-wave-1")).to_have_attribute("data-counts", "false")
    expect(page.get_by_test_id("edge-final-wave-2")).to_have_attribute("data-counts", "true")
    expect(page.get_by_test_id("upstream-canary")).to_have_text("a root: starts with the rollout")
    expect(page.get_by_test_id("upstream-wave-2")).to_contain_text("after canary passed — 1 of 1 needed (quorum All)")
    expect(page.get_by_test_id("stage-final").get_by_test_id("stage-state")).to_contain_text("Pending")
    expect(page.get_by_test_id("module-phase")).to_have_text("Soaking")
    decisions = page.get_by_test_id("decisions")
    expect(decisions).to_contain_text("stage wave-1 started")
    expect(decisions).to_contain_text("stage wave-2 started")
    expect(decisions).to_contain_text("stage final waits for its upstream stages (All: 1 of 2 needed)")
    page.screenshot(path=str(ARTIFACTS / "dashboard-stage-graph.png"), full_page=True)
    assert same_page(page)


def intents(stack: Stack, module_name: str) -> list[RolloutCommanded]:
    events = (parse_event(r.value) for r in off_loop(stack.records, "intents") if r.key == module_name)
    return [e for e in events if isinstance(e, RolloutCommanded)]


def test_the_session_cookie_is_secure_httponly_samesite_on_loopback_http_and_logout_ends_it(
    page: Page, stack: Stack
) -> None:
    # Chromium keeps and sends a Secure cookie over plain http to 127.0.0.1 (a potentially
    # trustworthy origin): the login above worked, and this is the cookie it stored.
    [session] = [c for c in page.context.cookies() if c["name"] == "__Host-rollout-session"]
    assert (session["secure"], session["httpOnly"], session["sameSite"], session["path"]) == (True, True, "Lax", "/")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    page.get_by_test_id("logout").click()
    page.wait_for_url(f"{stack.dashboard_url}/login")  # type: ignore[attr-defined]
    assert [c for c in page.context.cookies() if c["name"] == "__Host-rollout-session"] == []
    replayed = page.request.get(
        f"{stack.dashboard_url}/api/overview",  # type: ignore[attr-defined]
        headers={"Cookie": f"__Host-rollout-session={session['value']}"},
    )
    assert replayed.status == 401  # the session ended on the server, not just in the browser


def test_a_read_only_user_sees_the_rollout_but_no_buttons_and_the_server_refuses_them(
    stack: Stack, browser: Browser
) -> None:
    publish_fleet(stack, "view", "view", 2)
    stages = [{"name": "only", "maxConcurrency": 1}, {"name": "gated", "requireApproval": True}]
    off_loop(stack.send, "intents", "view", module("view", app="view", tag="1.0.0", stages=stages))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = watch_page(log_in(context, stack, VERA), stack)
    open_dashboard(page, stack, "#/modules/view")
    expect(page.get_by_test_id("module-phase")).to_have_text("AwaitingApproval", timeout=60_000)
    expect(page.get_by_test_id("stage-gated")).to_be_visible()
    expect(page.get_by_test_id("commands")).to_be_hidden()
    expect(page.get_by_test_id("command-abort")).to_be_hidden()
    expect(page.get_by_test_id("approve-gated")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "dashboard-read-only.png"), full_page=True)

    me = page.request.get(f"{stack.dashboard_url}/api/me").json()  # type: ignore[attr-defined]
    assert me["user"] == "vera@example.com" and me["can"]["fleet"] == {
        "commands": False,
        "approvals": False,
        "breakGlass": False,
    }
    origin = {"Origin": stack.dashboard_url, "X-CSRF-Token": me["csrfToken"]}  # type: ignore[attr-defined]
    url = f"{stack.dashboard_url}/api/modules/view/commands"  # type: ignore[attr-defined]
    refused = page.request.post(url, data={"command": "abort"}, headers=origin)
    assert refused.status == 403
    assert refused.json()["error"] == (
        "vera@example.com may not create rolloutcommands.rollout.dev in namespace fleet, which abort requires"
    )
    refused = page.request.post(url, data={"command": "approve", "stage": "gated"}, headers=origin)
    assert refused.status == 403 and "rolloutapprovals.rollout.dev" in refused.json()["error"]
    assert intents(stack, "view") == []
    assert page.csp_violations == []  # type: ignore[attr-defined]
    context.close()


class _Attacker(BaseHTTPRequestHandler):
    """A page of another origin (another loopback port) that POSTs an abort to the dashboard."""

    target = ""

    def do_GET(self) -> None:
        body = (
            "<!doctype html><html><body>"
            f'<form id="f" method="POST" enctype="text/plain" action="{self.target}">'
            '<input name=\'{"command":"abort","x":"\' value=\'"}\'></form>'
            "<script>document.getElementById('f').submit()</script></body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_cross_origin_form_cannot_abort_through_a_logged_in_browser(page: Page, stack: Stack) -> None:
    publish_fleet(stack, "victim", "victim", 2)
    stages = [{"name": "all", "maxConcurrency": 2}]
    off_loop(stack.send, "intents", "victim", module("victim", app="victim", tag="1.0.0", stages=stages))
    open_dashboard(page, stack, "#/modules/victim")
    expect(page.get_by_test_id("module-phase")).to_have_text("Complete", timeout=60_000)
    expect(page.get_by_test_id("command-abort")).to_be_visible()  # alice may abort: the session is real

    _Attacker.target = f"{stack.dashboard_url}/api/modules/victim/commands"  # type: ignore[attr-defined]
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        evil = page.context.new_page()
        with evil.expect_response(_Attacker.target) as posted:
            evil.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
        response = posted.value
        assert response.request.method == "POST"
        cookie = response.request.all_headers().get("cookie", "")
        assert cookie.startswith("__Host-rollout-session="), cookie  # the browser sent alice's session along
        assert response.status == 403
        assert response.json()["error"].startswith(
            f"cross-origin request refused: Origin http://127.0.0.1:{attacker.server_address[1]} is not"
        )
    finally:
        attacker.shutdown()
    page.wait_for_timeout(1000)
    assert intents(stack, "victim") == []  # nothing reached the engine
    expect(page.get_by_test_id("module-phase")).to_have_text("Complete")


def test_without_login_the_page_says_so_and_other_origins_still_cannot_command(stack: Stack, browser: Browser) -> None:
    port = free_port()
    insecure = stack._spawn("dashboard-insecure", "dashboard", "--port", str(port), "--insecure-no-auth")
    try:
        wait_for("the insecure dashboard", lambda: (http_get(port, "/readyz") or (0,))[0] == 200, timeout=60)
        assert "INSECURE" in stack.log("dashboard-insecure")
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.get_by_test_id("insecure-banner")).to_be_visible()
        expect(page.get_by_test_id("insecure-banner")).to_contain_text("--insecure-no-auth")
        expect(page.get_by_test_id("user")).to_have_text("insecure-no-auth")
        _Attacker.target = f"http://127.0.0.1:{port}/api/modules/victim/commands"
        attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        try:
            with page.expect_response(_Attacker.target) as posted:
                page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
            assert posted.value.status == 403
        finally:
            attacker.shutdown()
        context.close()
    finally:
        Stack._stop(insecure)


def test_a_frozen_module_says_by_which_calendar_and_breaking_the_glass_needs_its_own_permission(
    page: Page, stack: Stack
) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import FreezeCalendarApplied, ModuleApplied, freeze_key

    publish_fleet(stack, "frost", "frost", 2)
    calendar = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "FreezeCalendar",
            "metadata": {"name": "always", "namespace": "winter"},  # its own namespace: no other test's module
            "spec": {"windows": [{"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}]},
        }
    )
    off_loop(stack.send, "clusters", freeze_key("winter", "always"), FreezeCalendarApplied(calendar=calendar))
    applied = module("frost", app="frost", tag="1.0.0", stages=[{"name": "all"}])
    manifest = applied.module.model_copy(
        update={"metadata": applied.module.metadata.model_copy(update={"namespace": "winter"})}
    )
    off_loop(stack.send, "intents", "frost", ModuleApplied(module=manifest))
    open_dashboard(page, stack, "#/modules/frost")
    expect(page.get_by_test_id("frozen")).to_contain_text("by calendar winter/always until ", timeout=60_000)
    expect(page.get_by_test_id("module-phase")).to_have_text("Progressing")
    page.screenshot(path=str(ARTIFACTS / "dashboard-frozen.png"), full_page=True)
    can = page.request.get(f"{stack.dashboard_url}/api/me").json()["can"]  # type: ignore[attr-defined]
    assert (can["fleet"]["approvals"], can["fleet"]["breakGlass"], can["winter"]["breakGlass"]) == (True, False, True)
    page.get_by_test_id("break-glass-button").click()  # without a reason: the dashboard refuses to send it
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("break-glass: not sent — break-glass needs a reason", timeout=20_000)
    page.get_by_test_id("break-glass-reason").fill("sev-1: the fix must ship")
    page.get_by_test_id("break-glass-for").fill("2h")
    page.get_by_test_id("break-glass-button").click()
    expect(verdict).to_contain_text(
        "break-glass by alice@example.com via dashboard: every freeze calendar overridden until ", timeout=20_000
    )
    expect(page.get_by_test_id("break-glass")).to_contain_text(
        "by alice@example.com via dashboard: sev-1: the fix must ship", timeout=30_000
    )
    expect(page.get_by_test_id("module-phase")).to_have_text("Complete", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "dashboard-break-glass.png"), full_page=True)
    [sent] = [e for e in intents(stack, "frost") if e.command == "break-glass"]
    assert (sent.user, sent.via, sent.reason) == ("alice@example.com", "dashboard", "sev-1: the fix must ship")
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_a_calendars_break_glass_is_shown_on_every_module_it_governs(page: Page, stack: Stack) -> None:
    from rollout.api.manifests import MANIFEST_ADAPTER
    from rollout.wire.events import CalendarBreakGlass, FreezeCalendarApplied, ModuleApplied, freeze_key

    publish_fleet(stack, "thaw", "thaw", 1)
    calendar = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "FreezeCalendar",
            "metadata": {"name": "always", "namespace": "spring"},  # its own namespace: no other test's module
            "spec": {"windows": [{"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}]},
        }
    )
    off_loop(stack.send, "clusters", freeze_key("spring", "always"), FreezeCalendarApplied(calendar=calendar))
    applied = module("thaw", app="thaw", tag="1.0.0", stages=[{"name": "all"}])
    manifest = applied.module.model_copy(
        update={"metadata": applied.module.metadata.model_copy(update={"namespace": "spring"})}
    )
    off_loop(stack.send, "intents", "thaw", ModuleApplied(module=manifest))
    open_dashboard(page, stack, "#/modules/thaw")
    expect(page.get_by_test_id("frozen")).to_contain_text("by calendar spring/always until ", timeout=60_000)
    glass = CalendarBreakGlass(
        scope="spring", name="always", reason="sev-2: thaw", until=time.time() + 3600, user="carol", via="cli"
    )
    off_loop(stack.send, "intents", freeze_key("spring", "always"), glass)
    expect(page.get_by_test_id("calendar-break-glass")).to_contain_text(
        "freeze calendar spring/always overridden for every module it governs until ", timeout=60_000
    )
    expect(page.get_by_test_id("calendar-break-glass")).to_contain_text("by carol via cli: sev-2: thaw")
    expect(page.get_by_test_id("module-phase")).to_have_text("Complete", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "dashboard-calendar-break-glass.png"), full_page=True)
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_a_release_member_shows_its_release_phase_members_and_clusters_done(page: Page, stack: Stack) -> None:
    from rollout.api.loading import load_manifests
    from rollout.api.module_releases import expand_releases
    from rollout_cli.publishing.intents import intents_for

    publish_fleet(stack, "duo", "duo", 2)
    members = [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {"sync": {"source": {"git": {"url": f"https://example.com/{name}", "version": {"tag": "0.1.0"}}}}},
        }
        for name in ("duo-web", "duo-api")
    ]
    release = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Release",
        "metadata": {"name": "duo", "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": "duo"}},
            "rollout": {"stages": [{"name": "all", "maxConcurrency": 2}]},
            "modules": [{"name": "duo-web", "git": {"tag": "1.0.0"}}, {"name": "duo-api", "git": {"tag": "2.0.0"}}],
        },
    }
    text = yaml.safe_dump_all([*members, release]).encode()
    for intent in intents_for([item.manifest for item in expand_releases(load_manifests(text, file="duo.yaml"))]):
        off_loop(stack.send, "intents", intent.key, intent.event)
    open_dashboard(page, stack, "#/modules/duo-web")
    shown = page.get_by_test_id("release")
    expect(shown.get_by_test_id("release-name")).to_have_text("duo", timeout=60_000)
    expect(shown.get_by_test_id("release-phase")).to_have_text("Complete", timeout=60_000)
    expect(shown.get_by_test_id("release-done")).to_contain_text("2 of 2 cluster(s) done")
    expect(shown.get_by_test_id("release-member-duo-api")).to_contain_text("2.0.0")
    expect(shown.get_by_test_id("release-member-duo-web")).to_contain_text("1.0.0")
    expect(shown).not_to_contain_text("null")
    page.screenshot(path=str(ARTIFACTS / "dashboard-release.png"), full_page=True)
    shown.get_by_role("link", name="duo-api").click()
    expect(page.get_by_test_id("release").get_by_test_id("release-member-duo-web")).to_contain_text("Complete")
    assert same_page(page)
