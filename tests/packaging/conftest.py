"""Fixtures of the packaging tests: a pinned Helm, and the chart rendered per values file.

``helm``: Helm HELM_VERSION, built from source with ``go install`` (the Go module proxy is
the one way to get it on these machines) into
``$ROLLOUT_CACHE_DIR/helm/<version>/helm`` (default ``~/.cache/rollout``) and reused from
there. The first build takes a few minutes; a Helm that cannot be installed fails the
session — it never skips the tests.

``render(values_file)``: ``helm template`` of charts/rollout with that file (None: the
defaults), parsed into a list of objects; each values file is rendered once per session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import REPO

HELM_VERSION = "v3.16.4"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
# `go install` builds without Helm's release ldflags; this one makes `helm version` honest.
HELM_LDFLAGS = f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
HELM_BUILD_TIMEOUT = 900

CHART = REPO / "charts" / "rollout"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "rollout"
NAMESPACE = "fleet"
KUBE_VERSION = "1.31.0"
"""The Kubernetes version `helm template` and `helm lint` render for unless a test names one
(Helm's offline default, 1.20, is below the chart's kubeVersion)."""


def cache_dir() -> Path:
    return Path(os.environ.get("ROLLOUT_CACHE_DIR") or Path.home() / ".cache" / "rollout").expanduser()


def installed_version(binary: Path) -> str | None:
    try:
        result = subprocess.run(
            [str(binary), "version", "--template", "{{.Version}}"], capture_output=True, text=True, timeout=60
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def install_helm() -> Path:
    """The pinned Helm from the cache, built with `go install` when it is not there yet."""
    target = cache_dir() / "helm" / HELM_VERSION / "helm"
    if target.is_file() and installed_version(target) == HELM_VERSION:
        return target
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            f"cannot install Helm {HELM_VERSION}: no `go` on PATH (it builds Helm with "
            f"`go install {HELM_PACKAGE}@{HELM_VERSION}`); install Go, or put a Helm {HELM_VERSION} binary at {target}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as build:
        env = {**os.environ, "GOBIN": build, "GOFLAGS": "-mod=mod", "GO111MODULE": "on", "CGO_ENABLED": "0"}
        command = [go, "install", "-ldflags", HELM_LDFLAGS, f"{HELM_PACKAGE}@{HELM_VERSION}"]
        try:
            result = subprocess.run(
                command, cwd=build, env=env, capture_output=True, text=True, timeout=HELM_BUILD_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"`{' '.join(command)}` took longer than {HELM_BUILD_TIMEOUT}s") from None
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
        # Atomic: a concurrent session sees the old binary or the new one, never half of one.
        os.replace(Path(build) / "helm", target)
    version = installed_version(target)
    if version != HELM_VERSION:
        raise RuntimeError(f"built {target}, but it reports version {version!r}, not {HELM_VERSION}")
    return target


@dataclass(frozen=True)
class Helm:
    binary: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args and args[0] in ("template", "lint") and "--kube-version" not in args:
            args = (*args, "--kube-version", KUBE_VERSION)
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HELM_CACHE_HOME": str(cache_dir() / "helm" / "home")},
        )
        if check and result.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} failed (exit {result.returncode}):\n{result.stderr}", pytrace=False)
        return result

    def template(self, *values_args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values_args, check=check)


@pytest.fixture(scope="session")
def helm() -> Helm:
    try:
        return Helm(install_helm())
    except RuntimeError as error:
        pytest.fail(f"Helm {HELM_VERSION} is required for the packaging tests and could not be installed: {error}")


def values_args(values_file: Path | None) -> list[str]:
    return [] if values_file is None else ["--values", str(values_file)]


def parse_manifests(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[[Path | None], list[dict[str, Any]]]:
    rendered: dict[Path | None, list[dict[str, Any]]] = {}

    def _render(values_file: Path | None) -> list[dict[str, Any]]:
        if values_file not in rendered:
            rendered[values_file] = parse_manifests(helm.template(*values_args(values_file)).stdout)
        return rendered[values_file]

    return _render


VALUES_FILES: list[Path | None] = [None, *CI_VALUES]


def values_id(values_file: Path | None) -> str:
    return "defaults" if values_file is None else values_file.name.removesuffix("-values.yaml")


# -- shared by the chart's tests (test_chart.py, test_chart_rbac.py, test_chart_docs.py) ----------

Render = Callable[[Path | None], list[dict[str, Any]]]
by_values = pytest.mark.parametrize("values_file", VALUES_FILES, ids=values_id)
CI = {path.name.removesuffix("-values.yaml"): path for path in CI_VALUES}
FLUX_WRITE = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})
READ = frozenset({"get", "list", "watch"})
KUBECONFIG_SECRETS = ("prod-eu-1-kubeconfig", "prod-us-2-kubeconfig")  # ci/replicas-values.yaml


def merged_values(values_file: Path | None) -> dict[str, Any]:
    """The chart's values.yaml with `values_file` merged over it (as helm merges them)."""

    def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return values if values_file is None else merge(values, yaml.safe_load(values_file.read_text()))
