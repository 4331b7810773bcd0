"""The Dockerfile, read statically (no Docker engine here): multi-stage, slim, non-root,
no build tools in the final image, `rollout` as the entrypoint, and a layout that the chart
and docker-compose.yml rely on.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field

import pytest
import yaml

from tests.packaging.cli_surface import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CHART = REPO / "charts" / "rollout"
BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|clang|make|cmake|cargo|rustc|[a-z0-9.+-]+-dev)\b")


@dataclass
class Instruction:
    keyword: str
    arguments: str

    def exec_form(self) -> list[str] | None:
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def instructions(text: str) -> list[Instruction]:
    logical: list[str] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    if current:
        logical.append(current)
    found = []
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        found.append(Instruction(keyword.upper(), arguments.strip()))
    return found


def stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages)."""
    global_args: dict[str, str] = {}
    found: list[Stage] = []
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            words = instruction.arguments.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else None
            found.append(Stage(base, name))
        elif not found:
            if instruction.keyword == "ARG":
                key, _, value = instruction.arguments.partition("=")
                global_args[key] = value
        else:
            found[-1].instructions.append(instruction)
    return global_args, found


@pytest.fixture(scope="module")
def parsed() -> list[Stage]:
    return stages(DOCKERFILE.read_text())[1]


@pytest.fixture(scope="module")
def final(parsed: list[Stage]) -> Stage:
    return parsed[-1]


def test_the_build_is_multi_stage_on_slim_images(parsed: list[Stage]) -> None:
    assert len(parsed) >= 2
    for stage in parsed:
        assert "slim" in stage.base, f"{stage.name}: {stage.base} is not a slim image"
        assert ":latest" not in stage.base and ":" in stage.base, f"{stage.base}: pin the base image"
    assert parsed[0].base == parsed[-1].base, "the virtualenv is copied between stages: same Python, same paths"


def test_final_stage_runs_as_a_numeric_non_root_user(final: Stage) -> None:
    users = final.of("USER")
    assert users, "the final stage must set USER"
    user = users[-1].arguments.split(":")[0]
    assert user.isdigit() and int(user) != 0, f"USER {user}: numeric and not root (runAsNonRoot checks it)"
    chart = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(user) == chart["podSecurityContext"]["runAsUser"], "the chart must run the image's user"


def test_final_stage_has_no_build_tools(final: Stage) -> None:
    for instruction in final.of("RUN"):
        installs = re.findall(r"(?:apt-get|apt|apk)\s+(?:-\S+\s+)*(?:install|add)\s+([^&;|]*)", instruction.arguments)
        for packages in installs:
            assert not BUILD_TOOLS.search(packages), f"build tools in the final image: {packages}"
        assert "pip install" not in instruction.arguments, "install in the build stage, copy the virtualenv"


def test_final_stage_copies_only_the_virtualenv_from_the_build(parsed: list[Stage], final: Stage) -> None:
    copies = [shlex.split(i.arguments) for i in final.of("COPY")]
    from_build = [c for c in copies if any(arg.startswith("--from=") for arg in c)]
    assert from_build == [[f"--from={parsed[0].name}", "/opt/venv", "/opt/venv"]]


def test_entrypoint_is_rollout_in_exec_form(final: Stage) -> None:
    (entrypoint,) = final.of("ENTRYPOINT")
    assert entrypoint.exec_form() == ["rollout"]
    path = " ".join(i.arguments for i in final.of("ENV"))
    assert "/opt/venv/bin" in path, "rollout must be on PATH"


def test_every_source_package_reaches_the_build(parsed: list[Stage]) -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    patterns = re.search(r"include\s*=\s*\[([^\]]*)\]", pyproject)
    assert patterns is not None
    includes = re.findall(r'"([^"]+)"', patterns.group(1))
    packages = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}
    wanted = {name for name in packages if any(fnmatch.fnmatch(name, pattern) for pattern in includes)}
    copied = {shlex.split(i.arguments)[0] for i in parsed[0].of("COPY")}
    assert wanted <= copied, f"packages not copied into the build: {sorted(wanted - copied)}"
    assert "pyproject.toml" in copied


def dockerignored(path: str) -> bool:
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p.removeprefix("**/")) for p in patterns)


def test_what_the_dockerfile_copies_is_in_the_build_context(parsed: list[Stage]) -> None:
    for stage in parsed:
        for instruction in stage.of("COPY"):
            args = shlex.split(instruction.arguments)
            if any(arg.startswith("--from=") for arg in args):
                continue
            for source in [a for a in args[:-1] if not a.startswith("--")]:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
                assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    for path in (".git", ".venv", ".rollout", "flux-out", "tests", "charts"):
        assert dockerignored(path), path


def test_runtime_layout_the_chart_and_compose_rely_on(final: Stage) -> None:
    runs = " ".join(i.arguments for i in final.of("RUN"))
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid = chart_values["podSecurityContext"]["runAsUser"]
    # The directory sink's target, writable by the runtime user.
    assert "/flux-out" in runs and f"chown -R {uid}:{uid} /flux-out" in runs
    # The worker keeps no local files (its state is in Kafka): no state directory.
    assert "/var/lib/rollout" not in DOCKERFILE.read_text()
    copies = [shlex.split(i.arguments) for i in final.of("COPY")]
    assert ["examples", "/app/examples"] in copies


def test_the_build_installs_the_project_without_extras(parsed: list[Stage]) -> None:
    # The Faust/RocksDB extra is gone: the runtime dependencies are pyproject's `dependencies`.
    installs = [i.arguments for i in parsed[0].of("RUN") if "pip install ." in i.arguments]
    assert installs, "the build stage must pip-install the project"
    assert not any(re.search(r"pip install \.\S", run) for run in installs), installs
    assert not [i for i in parsed[0].of("ARG") if i.arguments.startswith("EXTRAS")]


def test_exposed_ports_are_the_processes_web_ports(final: Stage) -> None:
    exposed = {int(port) for i in final.of("EXPOSE") for port in i.arguments.split()}
    chart = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {chart[c]["webPort"] for c in ("worker", "applier", "watcher")} <= exposed
