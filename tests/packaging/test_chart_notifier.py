"""The chart's notifier (`notifier.enabled`, off by default): a Deployment beside the
appliers whose ConfigMap the notifier's own loader accepts, auth headers from Secrets
mounted where the configuration names them, and nothing rendered until it is enabled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from projections.notifier.config import load_config
from tests.packaging.conftest import Helm, parse_manifests
from tests.packaging.objects import component, containers, of_kind, pod_template

VALUES = {
    "notifier": {
        "enabled": True,
        "startFrom": "earliest",
        "retry": {"attempts": 3, "initialDelay": "2s", "maxDelay": "30s"},
        "webhooks": [
            {
                "name": "oncall",
                "url": "https://hooks.example.com/rollout",
                "types": ["dev.rollout.module.halted"],
                "authHeader": {"secretName": "oncall-webhook", "secretKey": "bearer"},
            },
            {"name": "chat", "url": "http://relay.chat.svc/rollout", "modules": ["shop-*"], "timeout": "3s"},
        ],
    }
}


@pytest.fixture(scope="module")
def rendered(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    values = tmp_path_factory.mktemp("notifier") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    return parse_manifests(helm.template("--values", str(values)).stdout)


def test_no_notifier_unless_enabled(helm: Helm) -> None:
    objects = parse_manifests(helm.template().stdout)
    assert "notifier" not in {c.component for c in containers(objects)}
    assert not [o for o in objects if o["metadata"]["name"].endswith("-notifier")]


def test_the_notifier_runs_with_its_configmap_and_no_api_token(rendered: list[dict[str, Any]]) -> None:
    notifier = component(rendered, "notifier")
    assert notifier.workload["kind"] == "Deployment"
    assert notifier.args[:5] == [
        "notifier",
        "--config",
        "/etc/rollout/notifier/notifier.yaml",
        "--start-from",
        "earliest",
    ]
    assert notifier.pod["automountServiceAccountToken"] is False
    assert "rollout.dev/config-checksum" in pod_template(notifier.workload)["metadata"]["annotations"]
    mounts = {m["name"]: m["mountPath"] for m in notifier.spec["volumeMounts"]}
    assert mounts["config"] == "/etc/rollout/notifier"


def test_the_configmap_is_a_configuration_the_notifier_accepts(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    [configmap] = [c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"].endswith("-notifier")]
    path = tmp_path / "notifier.yaml"
    path.write_text(configmap["data"]["notifier.yaml"])
    config = load_config(path)
    assert config.retry.attempts == 3 and config.retry.initial_delay == 2.0 and config.retry.max_delay == 30.0
    oncall, chat = config.webhooks
    assert oncall.types == ["dev.rollout.module.halted"] and chat.modules == ["shop-*"] and chat.timeout == 3.0
    assert oncall.auth_header is not None and chat.auth_header is None
    assert "oncall-webhook" not in configmap["data"]["notifier.yaml"]  # a Secret's name, not its value, and not here


def test_an_auth_header_is_read_from_its_secret_mounted_where_the_configuration_says(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    [configmap] = [c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"].endswith("-notifier")]
    path = tmp_path / "notifier.yaml"
    path.write_text(configmap["data"]["notifier.yaml"])
    header = load_config(path).webhooks[0].auth_header
    assert header is not None and header.name == "Authorization" and header.value_file is not None
    notifier = component(rendered, "notifier")
    volumes = {v["name"]: v for v in notifier.pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in notifier.spec["volumeMounts"]}
    secret = volumes["auth-oncall"]["secret"]
    assert secret["secretName"] == "oncall-webhook"
    assert Path(mounts["auth-oncall"]) / secret["items"][0]["path"] == header.value_file
    assert "auth-chat" not in volumes


def test_enabling_the_notifier_without_a_webhook_fails_with_what_to_add(helm: Helm) -> None:
    result = helm.template("--set", "notifier.enabled=true", check=False)
    assert result.returncode != 0
    assert "name at least one webhook in notifier.webhooks" in result.stderr
