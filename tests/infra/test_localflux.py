"""infra.localflux without controllers: the build cache's validity rule and the loopback sources.

The controllers themselves are exercised in tests/flux/test_local_flux.py.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from infra.localflux import GitServer, HelmRepository, build_chart
from infra.localflux.build import GoProgram
from infra.localflux.sources import tar_gz


def test_a_cached_binary_is_reused_only_with_a_stamp_naming_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_CACHE_DIR", str(tmp_path))
    program = GoProgram("source-controller", "v1.9.1")
    program.directory.mkdir(parents=True)
    program.target.write_bytes(b"an interrupted build")
    assert not program.is_built()
    program.stamp.write_text("source-controller v1.9.0\n")
    assert not program.is_built()
    program.stamp.write_text("source-controller v1.9.1\n")
    assert program.is_built()
    assert program.target == tmp_path / "flux" / "source-controller-v1.9.1" / "source-controller"


def test_the_git_server_serves_tags_over_smart_http_only_with_the_credentials(tmp_path: Path) -> None:
    server = GitServer(tmp_path / "repos", ("alice", "s3cret")).start()
    try:
        first = server.commit("app", {"deploy/cm.yaml": "a: 1\n"}, tag="v1")
        second = server.commit("app", {"deploy/cm.yaml": "a: 2\n"})
        server.tag("app", "v1", second)
        server.tag("app", "v0", first)
        server.delete_tag("app", "v0")
        anonymous = _ls_remote(server.url("app"))
        authorized = _ls_remote(server.url("app").replace("http://", "http://alice:s3cret@"))
    finally:
        server.stop()
    assert anonymous.returncode != 0
    assert f"{second}\trefs/tags/v1" in authorized.stdout
    assert "v0" not in authorized.stdout


def test_the_helm_repository_indexes_every_chart_it_serves(tmp_path: Path) -> None:
    repository = HelmRepository(tmp_path / "charts").start()
    try:
        url = repository.add_chart(build_chart("hello", "0.1.0", {"cm.yaml": "kind: ConfigMap\n"}, {"a": 1}))
        index = yaml.safe_load(_get(repository.url + "/index.yaml"))
        chart = _get(url)
        with pytest.raises(urllib.error.HTTPError):
            _get(repository.url + "/../secrets")
    finally:
        repository.stop()
    assert index["entries"]["hello"][0]["urls"] == [url]
    names = tarfile.open(fileobj=io.BytesIO(chart), mode="r:gz").getnames()
    assert names == ["hello/Chart.yaml", "hello/templates/cm.yaml", "hello/values.yaml"]


def test_archives_of_the_same_files_are_identical() -> None:
    assert tar_gz({"a": "1", "b/c": "2"}) == tar_gz({"b/c": "2", "a": "1"})


def _ls_remote(url: str) -> subprocess.CompletedProcess[str]:
    env = {"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, env=env, timeout=30)


def _get(url: str) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return response.read()  # type: ignore[no-any-return]
