"""The Helm chart's documentation: its README lists every value and no other, and the
install notes tell what to do next with real commands (and warn about the placeholder
broker); the long-running containers listen on every interface, the dashboard can be
turned off."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import (
    invocation_problems,
)
from tests.packaging.conftest import (
    CHART,
    CI,
    NAMESPACE,
    RELEASE,
    Helm,
    Render,
    by_values,
    parse_manifests,
    values_args,
)
from tests.packaging.objects import (
    component,
    containers,
    engine_processes,
    of_kind,
    pod_template,
)

try:
    from infra.observability import HEALTH_PATHS
except ImportError:  # before streams/observability.py existed; the lead exports the same tuple
    HEALTH_PATHS = ("/healthz", "/readyz", "/metrics")


def test_ci_values_files_cover_the_issue() -> None:
    assert {"sasl", "replicas", "servicemonitor"} <= set(CI)


# --- documentation ----------------------------------------------------------------------------------

PASSTHROUGH = {"resources", "podSecurityContext", "securityContext"}  # Kubernetes objects, one value


def value_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in PASSTHROUGH:
            paths += value_paths(value, f"{path}.")
        else:
            paths.append(path)
    return paths


def test_readme_documents_every_value_and_no_other() -> None:
    readme = (CHART / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `")]
    documented = {line.split("`")[1] for line in table}
    values = set(value_paths(yaml.safe_load((CHART / "values.yaml").read_text())))
    assert values - documented == set(), "values missing from the README's table"
    assert documented - values == set(), "README documents values that do not exist"


@pytest.fixture(scope="module")
def notes(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path | None], str]:
    """NOTES.txt as `helm install` would print it (rendered through a copy of the chart)."""
    chart = tmp_path_factory.mktemp("notes") / "rollout"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes-under-test.txt")
    (chart / "templates" / "zz-notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-under-test\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | toJson }}\n'
    )

    def _notes(values_file: Path | None) -> str:
        result = helm.run(
            "template",
            RELEASE,
            str(chart),
            "--namespace",
            NAMESPACE,
            *values_args(values_file),
            "--show-only",
            "templates/zz-notes-under-test.yaml",
        )
        return parse_manifests(result.stdout)[0]["data"]["notes"]

    return _notes


@by_values
def test_notes_tell_what_to_do_next_with_real_commands(
    notes: Callable[[Path | None], str], values_file: Path | None
) -> None:
    text = notes(values_file)
    assert f"-n {NAMESPACE}" in text
    commands = [line.split(" -- ", 1)[1] for line in text.splitlines() if " -- rollout " in line]
    assert any(c.startswith("rollout apply") for c in commands), "NOTES must say how to publish the fleet"
    assert any(c.startswith("rollout status") for c in commands), "NOTES must say how to follow a rollout"
    problems: list[str] = []
    for command in commands:
        args = shlex.split(command.split("<")[0])[1:]
        problems += invocation_problems(args)
    assert not problems, "\n".join(problems)


def test_notes_warn_about_the_placeholder_broker(notes: Callable[[Path | None], str]) -> None:
    assert "placeholder" in notes(None)
    assert "placeholder" not in notes(CI["sasl"])


def test_notes_say_whether_the_journal_is_retained(notes: Callable[[Path | None], str]) -> None:
    assert 'Retention: CronJob rollout-snapshotter ("17 3 * * *")' in notes(None)
    assert "retain --keep 7d; snapshots on the claim rollout-snapshotter" in notes(None)
    assert "Retention: off (snapshotter.enabled=false)" in notes(CI["minimal"])


@by_values
def test_long_running_containers_listen_on_every_interface(render: Render, values_file: Path | None) -> None:
    """The program binds 127.0.0.1 by default; probes and Prometheus reach the pod IP."""
    for container in engine_processes(render(values_file)):
        assert container.flag("--web-host") == "0.0.0.0", container.component


def test_the_dashboard_is_a_deployment_and_a_cluster_internal_service(render: Render) -> None:
    objects = render(None)
    dashboard = component(objects, "dashboard")
    assert dashboard.args[0] == "dashboard" and dashboard.flag("--host") == "0.0.0.0"
    assert dashboard.pod["automountServiceAccountToken"] is True, "TokenReview and SubjectAccessReview"
    assert dashboard.pod["serviceAccountName"] == "rollout-dashboard"
    assert "--insecure-no-auth" not in dashboard.args
    service = next(s for s in of_kind(objects, "Service") if s["metadata"]["name"].endswith("-dashboard"))
    assert service["spec"]["type"] == "ClusterIP", "reached through port-forward or an Ingress the operator adds"
    assert service["spec"]["selector"].items() <= pod_template(dashboard.workload)["metadata"]["labels"].items()
    assert [p["port"] for p in service["spec"]["ports"]] == [int(str(dashboard.flag("--port")))]


def test_the_dashboard_can_be_turned_off(helm: Helm, tmp_path: Path) -> None:
    values_file = tmp_path / "no-dashboard-values.yaml"
    values_file.write_text("dashboard:\n  enabled: false\n  port: 6070\n  service:\n    type: ClusterIP\n")
    objects = parse_manifests(helm.template("--values", str(values_file)).stdout)
    assert not [c for c in containers(objects) if c.component == "dashboard"]
    assert not [s for s in of_kind(objects, "Service") if s["metadata"]["name"].endswith("-dashboard")]
