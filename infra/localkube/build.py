"""Building kube-apiserver and etcd from the Go module proxy, once per version.

No release downloads and no Docker: each binary is built from a scratch Go module kept in
``infra/localkube/gomod/<name>/`` (``go.mod.tmpl`` with ``{{VERSION}}`` placeholders,
``main.go``, and for kube-apiserver two empty stub modules standing in for the staging
modules the proxy lacks and kube-apiserver never imports). :func:`ensure_binary` renders the
template into a temporary directory under the cache, runs ``go build`` there
(``GOFLAGS=-mod=mod`` so go.sum is resolved on the fly, ``CGO_ENABLED=0``, ``-trimpath
-ldflags=-s -w``) and renames the result into ``<cache>/kube/<name>-<version>/<name>``.

A file lock per binary serialises concurrent builders (two pytest sessions, say): the
second waits and then finds the binary built. A binary is reused only when it answers
``--version`` with the pinned version, so an interrupted or foreign file is rebuilt.
The first build takes 4 to 13 minutes on two cores (kube-apiserver); later ones are instant.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from infra.localkube.defaults import (
    BUILD_TIMEOUT,
    ETCD_VERSION,
    GO_MODULES,
    KUBE_VERSION,
    STAGING_VERSION,
    binary_path,
)
from infra.localkube.errors import BuildError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GoBinary:
    """One binary built from a scratch module: its name, pinned version and how to check it."""

    name: str
    version: str
    substitutions: dict[str, str]
    version_marker: str  # what `<binary> --version` prints when it is this version
    ldflags: tuple[str, ...] = field(default=())

    @property
    def module(self) -> Path:
        return GO_MODULES / self.name

    @property
    def target(self) -> Path:
        return binary_path(self.name, self.version)


KUBE_APISERVER = GoBinary(
    name="kube-apiserver",
    version=KUBE_VERSION,
    substitutions={"KUBE_VERSION": KUBE_VERSION, "STAGING_VERSION": STAGING_VERSION},
    version_marker=f"Kubernetes {KUBE_VERSION}",
    ldflags=(f"-X k8s.io/component-base/version.gitVersion={KUBE_VERSION}",),
)
ETCD = GoBinary(
    name="etcd",
    version=ETCD_VERSION,
    substitutions={"ETCD_VERSION": ETCD_VERSION},
    version_marker=f"etcd Version: {ETCD_VERSION.removeprefix('v')}",
)


def reported_version(binary: Path) -> str:
    """What `<binary> --version` prints (empty when it does not run)."""
    try:
        result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    return result.stdout if result.returncode == 0 else ""


def is_built(spec: GoBinary) -> bool:
    return spec.target.is_file() and spec.version_marker in reported_version(spec.target)


def ensure_binary(spec: GoBinary, progress: Progress | None = None) -> Path:
    """The cached binary of `spec`, built first when it is not there (see the module docstring)."""
    if is_built(spec):
        return spec.target
    spec.target.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first
        if is_built(spec):
            return spec.target
        if progress is not None:
            progress(f"building {spec.name} {spec.version} from the Go module proxy (minutes, once)")
        _build(spec)
    if not is_built(spec):
        raise BuildError(
            f"built {spec.target}, but `--version` does not report {spec.version_marker!r}: "
            f"{reported_version(spec.target).strip()!r}"
        )
    return spec.target


def _render_module(spec: GoBinary, into: Path) -> None:
    shutil.copytree(spec.module, into, dirs_exist_ok=True, ignore=shutil.ignore_patterns("go.mod.tmpl"))
    text = (spec.module / "go.mod.tmpl").read_text()
    for key, value in spec.substitutions.items():
        text = text.replace("{{" + key + "}}", value)
    if "{{" in text:
        raise BuildError(f"{spec.module / 'go.mod.tmpl'}: a placeholder is left unfilled")
    (into / "go.mod").write_text(text)


def _build(spec: GoBinary) -> None:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            f"cannot build {spec.name} {spec.version}: no `go` on PATH (the test suite builds it from the Go "
            f"module proxy); install Go 1.24 or newer, or put a {spec.name} {spec.version} binary at {spec.target}"
        )
    with tempfile.TemporaryDirectory(dir=spec.target.parent, prefix=".build-") as build:
        module = Path(build) / "module"
        _render_module(spec, module)
        output = Path(build) / spec.name
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0", "GO111MODULE": "on"}
        ldflags = " ".join(("-s", "-w", *spec.ldflags))
        command = [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(output), "."]
        try:
            result = subprocess.run(command, cwd=module, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise BuildError(f"building {spec.name}: `go build` took longer than {BUILD_TIMEOUT:.0f}s") from None
        if result.returncode != 0:
            raise BuildError(
                f"building {spec.name} {spec.version} failed (exit {result.returncode}) in {module}:\n"
                f"{result.stderr[-4000:]}"
            )
        os.replace(output, spec.target)  # atomic: a reader sees no binary or a whole one
