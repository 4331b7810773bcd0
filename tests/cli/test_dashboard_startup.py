"""`rollout dashboard` refuses to serve anyone it cannot identify: it needs a Kubernetes API
server (TokenReview, SubjectAccessReview), or an explicit --insecure-no-auth that only a
loopback address may have. These refusals come before Kafka (nothing listens on
127.0.0.1:1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rollout_cli.main import cli
from tests.integration.stack import free_port

NOWHERE = ["--bootstrap-servers", "127.0.0.1:1", "--topic-prefix", "cli-test."]


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "ROLLOUT_DASHBOARD_INSECURE_NO_AUTH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config


def dashboard(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["dashboard", "--port", str(free_port()), *args, *NOWHERE])
    return result.exit_code, result.output


def test_without_a_kubernetes_api_server_the_dashboard_does_not_start() -> None:
    code, output = dashboard()
    assert code == 2
    assert "the dashboard needs a Kubernetes API server to check logins and authorize commands" in output
    assert "--insecure-no-auth" in output


def test_no_login_is_refused_on_an_address_other_machines_reach() -> None:
    code, output = dashboard("--host", "0.0.0.0", "--insecure-no-auth")
    assert code == 2
    assert "--insecure-no-auth serves everyone as an all-powerful user: only on a loopback --host" in output


def test_oidc_needs_its_three_settings_together() -> None:
    code, output = dashboard("--oidc-issuer-url", "https://login.example.com/")
    assert code == 2 and "OIDC login needs --oidc-client-id, --oidc-redirect-url as well" in output


def test_no_login_and_oidc_contradict_each_other() -> None:
    oidc = [
        "--oidc-issuer-url",
        "https://i/",
        "--oidc-client-id",
        "c",
        "--oidc-redirect-url",
        "https://d/auth/callback",
    ]
    code, output = dashboard("--insecure-no-auth", *oidc)
    assert code == 2 and "contradict" in output
