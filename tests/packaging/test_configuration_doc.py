"""docs/configuration.md: the one table of settings (flag, variable, chart value, compose).

Every flag that has a variable is in the table with it; every variable the chart or the
compose file sets is in it; every chart value it names exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import KAFKA_SECURITY_ENV, PENDING, REPO, commands, options_of
from tests.packaging.conftest import CHART

DOC = REPO / "docs" / "configuration.md"


@pytest.fixture(scope="module")
def rows() -> list[list[str]]:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("|")]
    header, _, *body = lines
    assert [cell.strip() for cell in header.strip("|").split("|")][:4] == [
        "setting",
        "flag",
        "environment variable",
        "chart value",
    ]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in body]


def ticked(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def test_every_flag_with_a_variable_is_documented_with_it(rows: list[list[str]]) -> None:
    pairs = {(flag, env) for row in rows for flag in ticked(row[1]) for env in ticked(row[2])}
    missing = set()
    for path, command in commands().items():
        for option in {id(o): o for o in options_of(command).values()}.values():
            if isinstance(option.envvar, str):
                long_flag = max(option.opts, key=len)
                if (long_flag, option.envvar) not in pairs:
                    missing.add(f"{' '.join(path)} {long_flag} / {option.envvar}")
    assert not missing, f"not in docs/configuration.md: {sorted(missing)}"


def test_the_kafka_security_variables_are_documented(rows: list[list[str]]) -> None:
    documented = {env for row in rows for env in ticked(row[2])}
    assert documented >= KAFKA_SECURITY_ENV


def test_pending_flags_are_documented(rows: list[list[str]]) -> None:
    documented = {flag for row in rows for flag in ticked(row[1])}
    for pending in PENDING.values():
        assert set(pending.options) <= documented


def value_exists(values: dict[str, Any], path: str) -> bool:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def test_every_chart_value_named_exists(rows: list[list[str]]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    named = {token for row in rows for token in ticked(row[3]) if not token.startswith("/")}
    assert named, "the chart column names no values"
    assert {path for path in named if not value_exists(values, path)} == set()


def test_every_variable_the_chart_or_compose_sets_is_documented(rows: list[list[str]]) -> None:
    documented = {env for row in rows for env in ticked(row[2])}
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    used = {name for service in compose["services"].values() if service.get("build") for name in service["environment"]}
    templates = "\n".join(p.read_text() for p in (CHART / "templates").iterdir() if p.is_file())
    used |= set(re.findall(r"name: (ROLLOUT_[A-Z_]+)", templates))
    assert used - documented == set()


def test_the_doc_is_linked_from_the_chart_readme() -> None:
    assert "docs/configuration.md" in (CHART / "README.md").read_text()
    assert Path(DOC).exists()
