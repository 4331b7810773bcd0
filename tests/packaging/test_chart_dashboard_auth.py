"""The chart's dashboard logins: OIDC values become `rollout dashboard --oidc-*` flags and the
client secret comes from a Secret (never a value in the manifest); the default install logs
users in with Kubernetes tokens and never runs the dashboard --insecure-no-auth."""

from __future__ import annotations

from tests.packaging.conftest import CI, NAMESPACE, Render
from tests.packaging.objects import component


def test_oidc_values_become_the_dashboards_flags_and_the_secret_a_secret_reference(render: Render) -> None:
    dashboard = component(render(CI["dashboard-oidc"]), "dashboard")
    assert {flag: dashboard.flag(flag) for flag in (
        "--oidc-issuer-url", "--oidc-client-id", "--oidc-redirect-url", "--oidc-username-claim",
        "--oidc-groups-claim", "--oidc-username-prefix", "--oidc-groups-prefix", "--oidc-extra-scope",
        "--public-url", "--namespace", "--session-ttl",
    )} == {
        "--oidc-issuer-url": "https://login.example.com/",
        "--oidc-client-id": "rollout-dashboard",
        "--oidc-redirect-url": "https://rollout.example.com/auth/callback",
        "--oidc-username-claim": "email",
        "--oidc-groups-claim": "groups",
        "--oidc-username-prefix": "oidc:",
        "--oidc-groups-prefix": "oidc:",
        "--oidc-extra-scope": "groups",
        "--public-url": "https://rollout.example.com",
        "--namespace": "fleet",
        "--session-ttl": "3600",
    }  # fmt: skip
    secret = dashboard.env["ROLLOUT_DASHBOARD_OIDC_CLIENT_SECRET"]
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "rollout-dashboard-oidc", "key": "client-secret"}
    assert "--oidc-client-secret" not in dashboard.args


def test_the_default_dashboard_takes_kubernetes_tokens_and_authorizes_in_the_release_namespace(
    render: Render,
) -> None:
    dashboard = component(render(None), "dashboard")
    assert dashboard.flag("--namespace") == NAMESPACE
    assert not [a for a in dashboard.args if a.startswith("--oidc-") or a == "--insecure-no-auth"]
