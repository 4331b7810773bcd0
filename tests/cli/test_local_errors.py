"""CLI errors that need no broker: they happen before anything talks to Kafka.

`--bootstrap-servers 127.0.0.1:1` (nothing listens there) proves it: a command that got as
far as Kafka would fail differently ("cannot publish ...").
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from infra.observability import DEFAULT_WEB_HOST, Health, Metrics, ObservabilityServer
from rollout_cli.main import cli
from rollout_cli.options import parse_duration

NOWHERE = ["--bootstrap-servers", "127.0.0.1:1", "--topic-prefix", "cli-test."]


@pytest.fixture(autouse=True)
def _no_web_host_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # `rollout worker` exports its --web-host for the web server; undone after each test.
    monkeypatch.delenv("ROLLOUT_WEB_HOST", raising=False)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("content", ["", "\n", "---\n---\n", "# only a comment\n"])
def test_apply_of_a_file_without_manifests_is_an_error(tmp_path: Path, content: str) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text(content)
    code, output = run("apply", "-f", str(empty), *NOWHERE)
    assert code != 0
    assert output == f"error: no documents in {empty}; nothing was applied\n"


def test_apply_of_a_directory_without_manifests_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("not a manifest")
    code, output = run("apply", "-f", str(tmp_path), *NOWHERE)
    assert code != 0
    assert output.startswith(f"error: no .yaml or .yml files in {tmp_path}")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind((DEFAULT_WEB_HOST, 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [["worker"], ["applier", "--sink", "dir:/nonexistent/out"], ["watch-clusters", "--kubeconfig", "/nonexistent"]],
    ids=["worker", "applier", "watch-clusters"],
)
def test_a_web_port_in_use_is_a_one_line_error_before_anything_else(command: list[str], taken_port: int) -> None:
    code, output = run(*command, "--web-port", str(taken_port), *NOWHERE)
    assert code == 2
    assert output == f"error: port {taken_port} is in use (--web-port)\n"


def test_the_port_check_uses_the_web_host(taken_port: int) -> None:
    # Something on 127.0.0.1:N does not keep the worker from 127.0.0.2:N (Linux routes 127/8).
    code, output = run("worker", "--web-host", "127.0.0.2", "--web-port", str(taken_port), *NOWHERE)
    assert "is in use" not in output
    assert code != 0  # it went on, to Kafka, which is not there


def test_up_checks_the_worker_port_and_the_next_one_before_starting_anything(taken_port: int) -> None:
    code, output = run("up", "--web-port", str(taken_port), *NOWHERE)
    assert (code, output) == (2, f"error: port {taken_port} is in use (--web-port: the worker's)\n")
    code, output = run("up", "--web-port", str(taken_port - 1), *NOWHERE)
    assert (code, output) == (2, f"error: port {taken_port} is in use (--web-port + 1: the applier's)\n")


def test_web_servers_listen_on_loopback_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLOUT_WEB_HOST", raising=False)
    server = ObservabilityServer(port=0, metrics=Metrics(), health=Health())
    assert server.host == "127.0.0.1" == DEFAULT_WEB_HOST
    monkeypatch.setenv("ROLLOUT_WEB_HOST", "0.0.0.0")
    assert ObservabilityServer(port=0, metrics=Metrics(), health=Health()).host == "0.0.0.0"
    assert ObservabilityServer(port=0, metrics=Metrics(), health=Health(), host="::1").host == "::1"


def test_the_web_host_defaults_to_loopback_on_every_process() -> None:
    for name in ("worker", "applier", "watch-clusters"):
        command = cli.get_command(click.Context(cli), name)  # loaded on demand (rollout_cli/main.py)
        assert command is not None, name
        options = {o.name: o for o in command.params}
        assert options["web_host"].default == "127.0.0.1", name
        assert options["web_host"].envvar == "ROLLOUT_WEB_HOST", name


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("15m", 900), ("1h30m", 5400), ("2d", 172800), ("500ms", 0.5), ("1.5h", 5400)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "m", "1x", "1h 30m", "-5m", "1h30"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    code, output = run("dead-letters", "--since", text, *NOWHERE)
    assert code == 2 and "is not a duration" in output
