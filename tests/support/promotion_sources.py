"""Real sources for auto-promotion's tests: the CNCF distribution registry, a Helm repository
(index.yaml over HTTP, with basic auth) and a Git server (smart HTTP, with basic auth) — the
loopback servers of infra/localflux/sources, started once per test session."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator

import pytest

from infra.localflux.errors import LocalFluxError
from infra.localflux.sources.git import GitServer
from infra.localflux.sources.helm import HelmRepository, build_chart
from infra.localflux.sources.oci import OCIRegistry

CHART_USER = ("charts", secrets.token_hex(8))
GIT_USER = ("rollout", secrets.token_hex(8))
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {version: '{{ .Chart.Version }}'}\n"


def _progress(message: str) -> None:
    print(f"\n[localflux] {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OCIRegistry]:
    """A real OCI registry on plain HTTP (an OCIRepository of it needs `insecure: true`)."""
    server = OCIRegistry(tmp_path_factory.mktemp("promotion-oci"))
    try:
        server.start(_progress)
    except LocalFluxError as error:
        pytest.fail(f"cannot start the OCI registry: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chart_repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HelmRepository]:
    """A Helm repository behind basic auth (CHART_USER)."""
    repository = HelmRepository(tmp_path_factory.mktemp("promotion-helm"), CHART_USER).start()
    yield repository
    repository.stop()


@pytest.fixture(scope="session")
def git_repositories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """A Git server behind basic auth (GIT_USER)."""
    server = GitServer(tmp_path_factory.mktemp("promotion-git"), GIT_USER).start()
    yield server
    server.stop()


def push_versions(registry: OCIRegistry, repository: str, *tags: str) -> None:
    for tag in tags:
        registry.push_artifact(repository, tag, {"configmap.yaml": f"# {tag}\n"})


def add_charts(repository: HelmRepository, chart: str, *versions: str) -> None:
    for version in versions:
        repository.add_chart(build_chart(chart, version, {"configmap.yaml": CONFIGMAP}))
