"""pyproject.toml's runtime dependencies against what the program imports.

The worker runs on aiokafka transactions (streams/delivery.py) since Faust was dropped; a
package that used to arrive only as one of Faust's dependencies would now be missing from
the image. So: every third-party module the program imports belongs to a declared
dependency, and Faust (with its RocksDB extra) is declared nowhere.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata

from tests.packaging.cli_surface import PROGRAM_PACKAGES, REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return normalized(match.group(1))


def imported_top_level_modules() -> dict[str, set[str]]:
    """Top-level module -> the program files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for package in PROGRAM_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def test_faust_is_not_a_dependency() -> None:
    project = PYPROJECT["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project.get("optional-dependencies", {}).values() for r in extra),
    ]
    assert not [r for r in requirements if requirement_name(r).startswith("faust")]
    assert "rocksdb" not in project.get("optional-dependencies", {})


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    own = set(PROGRAM_PACKAGES)
    distributions = metadata.packages_distributions()
    undeclared: dict[str, set[str]] = {}
    for module, files in imported_top_level_modules().items():
        if module in own or module in sys.stdlib_module_names or module == "__future__":
            continue
        providers = {normalized(d) for d in distributions.get(module, [])}
        assert providers, f"{module} (imported by {sorted(files)}) is not installed at all"
        if not providers & declared:
            undeclared[module] = files
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"
