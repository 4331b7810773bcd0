"""Manifest files and directories → loaded manifests (the I/O around rollout/api/loading.py).

`-f` takes files and directories (their *.yaml/*.yml, recursively, sorted). A file is read
only up to the size limit (a larger one is refused without reading it all); every file is
loaded, and every problem of every file is collected before `ManifestError` is raised, so
one run shows the user everything to fix. A Release becomes its member modules here, so
that apply, plan and `up` publish and show what the engine will see.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollout.api.loading import DocumentProblem, Loaded, ManifestError, load_manifests
from rollout.api.module_releases import expand_releases
from rollout.api.yaml_documents import DEFAULT_LIMITS, Limits


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    expanded: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            expanded.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()))
        else:
            expanded.append(path)
    return expanded


def read_manifests(paths: Sequence[str | Path], *, limits: Limits = DEFAULT_LIMITS) -> list[Loaded]:
    """Every manifest of `paths`, with where it came from — a Release as its member modules
    (rollout/api/module_releases.py); ManifestError with every problem."""
    problems: list[DocumentProblem] = []
    loaded: list[Loaded] = []
    for path in expand_paths(paths):
        try:
            with path.open("rb") as stream:
                data = stream.read(limits.file_bytes + 1)  # one byte more tells "too large"
        except OSError as error:
            problems.append(DocumentProblem(file=str(path), reason=f"cannot read: {error.strerror or error}"))
            continue
        try:
            loaded.extend(load_manifests(data, file=str(path), limits=limits))
        except ManifestError as error:
            problems.extend(error.problems)
    if problems:
        raise ManifestError(problems)
    return expand_releases(loaded)


def load_manifest_files(paths: Sequence[str | Path]) -> list[Any]:
    """The manifests of `paths` (without where they came from)."""
    return [item.manifest for item in read_manifests(paths)]
