"""Building the Flux controllers and the OCI registry from the Go module proxy, once per version.

No release downloads and no Docker. ``go install`` refuses the controllers (their go.mod
replaces their own ``api`` module by ``./api``), so each is built from a copy of its module:

1. ``go mod download -json github.com/fluxcd/<name>@<version>`` puts the module in the Go
   module cache and prints its ``Dir``;
2. that directory is copied into a temporary directory under the cache and made writable;
3. ``go mod edit -dropreplace=github.com/fluxcd/<name>/api``: the api module then comes from
   the proxy at the version go.mod requires;
4. ``GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'``;
5. the binary is renamed into ``<cache>/flux/<name>-<version>/<name>`` (atomic), next to the
   module's ``config/crd/bases`` copied to ``crds/`` (among them source-controller's
   HelmChart, Bucket and ExternalArtifact CRDs, which the project does not ship but the
   controllers watch: without them source-controller cannot start), and then a ``stamp``
   file naming the version is written.

The registry is a plain ``go install github.com/distribution/distribution/v3/cmd/registry@v3.1.2``
with ``GOBIN`` in a temporary directory under the cache, renamed the same way; so are the
tools the SOPS tests run (:func:`ensure_sops`, :func:`ensure_age_keygen`: the sops and age
versions kustomize-controller decrypts with), cached in ``<cache>/tools/<name>-<version>/``:
sops 1 min wall, age-keygen seconds, once the kustomize-controller build has filled Go's
module and build caches (measured, two cores).

The controllers have no ``--version`` flag, so the stamp decides: a binary is reused only
when the stamp written *after* its rename names the pinned version — an interrupted build
leaves no stamp and is redone. A file lock per binary serialises concurrent builders (two
pytest sessions, or threads): the second waits, then finds the binary built. Measured on two
cores, Go 1.26: helm-controller 3.0 min wall (2.6 min user CPU) on a quiet machine; with
other builds competing (load 10) registry 6 min (3.2 min CPU), kustomize-controller ~9 min,
source-controller ~20 min. Binaries 60-100 MB; a cached :func:`ensure_flux` takes 1 ms.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.localflux.defaults import (
    AGE_KEYGEN_MODULE,
    AGE_VERSION,
    BUILD_TIMEOUT,
    HELM_CONTROLLER_VERSION,
    KUSTOMIZE_CONTROLLER_VERSION,
    REGISTRY_MODULE,
    REGISTRY_VERSION,
    SOPS_MODULE,
    SOPS_VERSION,
    SOURCE_CONTROLLER_VERSION,
    binary_dir,
)
from infra.localflux.errors import BuildError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GoProgram:
    """One cached binary: its name, pinned version and where it lives."""

    name: str
    version: str
    cache: str = "flux"
    """The directory under the cache root: ``flux`` (controllers, registry) or ``tools``."""

    @property
    def directory(self) -> Path:
        return binary_dir(self.name, self.version, self.cache)

    @property
    def target(self) -> Path:
        return self.directory / self.name

    @property
    def stamp(self) -> Path:
        return self.directory / "stamp"

    @property
    def crds(self) -> Path:
        """The module's ``config/crd/bases``, copied next to a controller's binary."""
        return self.directory / "crds"

    def is_built(self) -> bool:
        try:
            return self.target.is_file() and self.stamp.read_text().strip() == f"{self.name} {self.version}"
        except OSError:
            return False


SOURCE_CONTROLLER = GoProgram("source-controller", SOURCE_CONTROLLER_VERSION)
KUSTOMIZE_CONTROLLER = GoProgram("kustomize-controller", KUSTOMIZE_CONTROLLER_VERSION)
HELM_CONTROLLER = GoProgram("helm-controller", HELM_CONTROLLER_VERSION)
REGISTRY = GoProgram("registry", REGISTRY_VERSION)
SOPS = GoProgram("sops", SOPS_VERSION, "tools")
AGE_KEYGEN = GoProgram("age-keygen", AGE_VERSION, "tools")


@dataclass(frozen=True)
class FluxBinaries:
    """Paths of the three built controllers, and the CRD directories of their modules."""

    source_controller: Path
    kustomize_controller: Path
    helm_controller: Path
    crds: tuple[Path, ...]


def ensure_flux(progress: Progress | None = None) -> FluxBinaries:
    """The cached controllers, each built first when it is not there (see the module docstring)."""
    for program in (SOURCE_CONTROLLER, KUSTOMIZE_CONTROLLER, HELM_CONTROLLER):
        _ensure(program, _build_controller, progress)
    return FluxBinaries(
        source_controller=SOURCE_CONTROLLER.target,
        kustomize_controller=KUSTOMIZE_CONTROLLER.target,
        helm_controller=HELM_CONTROLLER.target,
        crds=(SOURCE_CONTROLLER.crds, KUSTOMIZE_CONTROLLER.crds, HELM_CONTROLLER.crds),
    )


def ensure_registry(progress: Progress | None = None) -> Path:
    """The cached CNCF distribution registry binary, built first when it is not there."""
    return _ensure(REGISTRY, _go_install(REGISTRY_MODULE), progress)


def ensure_sops(progress: Progress | None = None) -> Path:
    """The cached ``sops`` binary, built first when it is not there."""
    return _ensure(SOPS, _go_install(SOPS_MODULE), progress)


def ensure_age_keygen(progress: Progress | None = None) -> Path:
    """The cached ``age-keygen`` binary, built first when it is not there."""
    return _ensure(AGE_KEYGEN, _go_install(AGE_KEYGEN_MODULE), progress)


def ensure_program(
    program: GoProgram, build: Callable[[GoProgram, Path], None], progress: Progress | None = None
) -> Path:
    """`program`'s cached binary, made by `build(program, workdir)` first when it is not there
    (same stamp and lock as the controllers): for Go programs of other local components
    (infra/localoidc)."""
    return _ensure(program, build, progress)


def go_build(module: Path) -> Callable[[GoProgram, Path], None]:
    """A builder running ``go build`` on a copy of the Go module in `module` (its go.mod and
    go.sum pin every dependency, fetched from the Go module proxy)."""

    def build(program: GoProgram, workdir: Path) -> None:
        source = workdir / "src"
        shutil.copytree(module, source)
        output = workdir / program.name
        env = {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=readonly"}
        _run(program, [_go(program), "build", "-trimpath", "-ldflags=-s -w", "-o", str(output), "."], source, env)
        os.replace(output, program.target)

    return build


def _ensure(program: GoProgram, build: Callable[[GoProgram, Path], None], progress: Progress | None) -> Path:
    if program.is_built():
        return program.target
    program.directory.mkdir(parents=True, exist_ok=True)
    with open(program.directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first
        if program.is_built():
            return program.target
        if progress is not None:
            progress(f"building {program.name} {program.version} from the Go module proxy (minutes, once)")
        program.stamp.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(dir=program.directory, prefix=".build-") as workdir:
            build(program, Path(workdir))
        program.stamp.write_text(f"{program.name} {program.version}\n")
    return program.target


def _go(program: GoProgram) -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            f"cannot build {program.name} {program.version}: no `go` on PATH (the test suite builds it from the "
            "Go module proxy); install Go 1.25 or newer"
        )
    return go


def _run(program: GoProgram, command: list[str], cwd: Path, env: dict[str, str]) -> str:
    try:
        result = subprocess.run(
            command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=BUILD_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"building {program.name}: `{' '.join(command[:3])}` took over {BUILD_TIMEOUT:.0f}s") from None
    if result.returncode != 0:
        raise BuildError(
            f"building {program.name} {program.version}: `{' '.join(command[:4])}` failed "
            f"(exit {result.returncode}) in {cwd}:\n{result.stderr[-4000:]}"
        )
    return result.stdout


def _download_module(program: GoProgram, workdir: Path) -> Path:
    """A writable copy of github.com/fluxcd/<name>@<version> in `workdir`/src."""
    module = f"github.com/fluxcd/{program.name}"
    listing = _run(program, [_go(program), "mod", "download", "-json", f"{module}@{program.version}"], workdir, {})
    source = workdir / "src"
    shutil.copytree(json.loads(listing)["Dir"], source)
    for directory, _, files in os.walk(source):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)
    _run(program, [_go(program), "mod", "edit", f"-dropreplace={module}/api"], source, {})
    return source


def _build_controller(program: GoProgram, workdir: Path) -> None:
    source = _download_module(program, workdir)
    output = workdir / program.name
    env = {"GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0", "GO111MODULE": "on"}
    _run(program, [_go(program), "build", "-trimpath", "-ldflags=-s -w", "-o", str(output), "."], source, env)
    shutil.rmtree(program.crds, ignore_errors=True)
    shutil.copytree(source / "config" / "crd" / "bases", program.crds)
    os.replace(output, program.target)  # atomic: a reader sees no binary or a whole one


def go_install(module: str) -> Callable[[GoProgram, Path], None]:
    """A builder running ``go install <module>@<the program's version>``, for
    :func:`ensure_program` (infra/localprometheus)."""
    return _go_install(module)


def _go_install(module: str) -> Callable[[GoProgram, Path], None]:
    """A builder running ``go install <module>@<the program's version>``."""

    def install(program: GoProgram, workdir: Path) -> None:
        env = {"GOBIN": str(workdir), "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
        command = [_go(program), "install", "-trimpath", "-ldflags=-s -w", f"{module}@{program.version}"]
        _run(program, command, workdir, env)
        os.replace(workdir / program.name, program.target)

    return install
