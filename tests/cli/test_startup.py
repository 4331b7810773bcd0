"""`rollout --help` starts fast because `import rollout_cli.main` imports nothing heavy, and
the group loads a command's module only when that command is used (rollout_cli/main.py).

Start-up time itself is not asserted (it depends on the machine: 0.06 s for `--help`, of
which 0.02 s is the interpreter and 0.02 s click, was 0.14 s when main.py imported every command); what makes
it slow is: parsing the CRD schemas (projections.crds, jsonschema), the Kubernetes client,
the Kafka client, the pydantic domain models — and the command modules, which import the
light helpers at once and the rest inside their command. The import checks run in a fresh
interpreter, or in this one with the command modules removed from `sys.modules` first.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from importlib.metadata import version

import click
import pytest
from click.testing import CliRunner

import rollout_cli.commands
from rollout_cli.main import COMMANDS, cli

HEAVY = ("projections", "jsonschema", "kubernetes_asyncio", "aiokafka", "aiohttp", "pydantic", "rollout", "streams")

PROBE = """
import json, sys
from rollout_cli.main import cli
args = json.loads(sys.argv[1])
try:
    cli.main(args, prog_name="rollout")
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(json.dumps({"code": code, "loaded": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded_after(*args: str) -> tuple[int, set[str], str]:
    """Exit code, the top-level packages imported, and stdout of `rollout ARGS` in a fresh interpreter."""
    code, modules, out = modules_after(*args)
    return code, {name.split(".")[0] for name in modules}, out


def modules_after(*args: str) -> tuple[int, set[str], str]:
    """Exit code, every module imported, and stdout of `rollout ARGS` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True, timeout=60
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return report["code"], set(report["loaded"]), result.stdout


def test_importing_the_cli_imports_no_heavy_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys, rollout_cli.main; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(result.stdout.split())
    for name in ("projections.crds", "jsonschema", "kubernetes_asyncio", "aiokafka"):
        assert name not in modules, f"`import rollout_cli.main` imports {name}"
    assert not {m.split(".")[0] for m in modules} & set(HEAVY)
    assert not {m for m in modules if m.startswith("rollout_cli.") and m != "rollout_cli.main"}


def test_help_of_the_group_and_of_every_command_imports_no_heavy_module() -> None:
    for args in (["--help"], ["worker", "--help"], ["apply", "-h"], ["watch-clusters", "--help"], ["--version"]):
        code, loaded, out = loaded_after(*args)
        assert code == 0, (args, out)
        assert out.strip(), args
        assert not loaded & set(HEAVY), f"rollout {' '.join(args)} imported {sorted(loaded & set(HEAVY))}"


EVERY_HELP = """
import json, sys
import click
from click.testing import CliRunner
from rollout_cli.main import cli
heavy = set(json.loads(sys.argv[1]))
context = click.Context(cli)
found = {}
for name in cli.list_commands(context):
    command = cli.get_command(context, name)
    subcommands = command.list_commands(context) if isinstance(command, click.Group) else []
    for path in [[name], *([name, sub] for sub in subcommands)]:
        result = CliRunner().invoke(cli, [*path, "--help"])
        loaded = {module.split(".")[0] for module in sys.modules} & heavy
        found[" ".join(path)] = [result.exit_code, sorted(loaded)]
print(json.dumps(found))
"""


def test_the_help_of_every_command_and_subcommand_imports_no_heavy_module() -> None:
    """All in one fresh interpreter, one after the other: what one help imported, all see."""
    result = subprocess.run(
        [sys.executable, "-c", EVERY_HELP, json.dumps(HEAVY)], capture_output=True, text=True, timeout=120
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(found) >= set(COMMANDS) and "kafka start" in found and "topics create" in found
    assert {path: shown for path, shown in found.items() if shown != [0, []]} == {}


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"rollout {version('rollout-engine')}\n"


def test_completion_prints_clicks_source_for_each_shell() -> None:
    for shell, marker in (("bash", "complete -o"), ("zsh", "#compdef rollout"), ("fish", "complete --no-files")):
        result = CliRunner().invoke(cli, ["completion", shell])
        assert result.exit_code == 0, result.output
        assert "_ROLLOUT_COMPLETE" in result.output and marker in result.output, shell
    assert CliRunner().invoke(cli, ["completion", "powershell"]).exit_code == 2


def test_completion_script_completes_subcommands() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from rollout_cli.main import cli; cli(prog_name='rollout')"],
        env={"_ROLLOUT_COMPLETE": "bash_complete", "COMP_WORDS": "rollout dead", "COMP_CWORD": "1", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "dead-letters" in result.stdout


# --- the group loads a command's module only when it is used (rollout_cli/main.py) ----------------


def command_modules() -> set[str]:
    return {name for name in sys.modules if name == "rollout_cli.commands" or name.startswith("rollout_cli.commands.")}


def test_rollout_help_imports_no_command_module_and_nothing_heavy_in_a_fresh_interpreter() -> None:
    code, modules, out = modules_after("--help")
    assert code == 0 and all(name in out for name in COMMANDS)
    assert not {m for m in modules if m.startswith("rollout_cli.")} - {"rollout_cli.main"}
    assert not {m.split(".")[0] for m in modules} & {*HEAVY, "rich", "yaml", "infra"}


def test_rollout_help_in_process_loads_no_command_module(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in command_modules():  # imported by earlier tests: forgotten for this one, restored after
        monkeypatch.delitem(sys.modules, name)
    before = set(sys.modules)
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0, result.output
    assert command_modules() == set(), "`rollout --help` imported a command's module"
    new = {name.split(".")[0] for name in set(sys.modules) - before}
    assert not new & {*HEAVY, "aiokafka", "kubernetes_asyncio", "rich"}, new


def test_the_help_lists_every_command_with_its_own_short_help_at_any_width() -> None:
    """The table's short help is each command's own: the lazy group's help reads exactly as
    click's eager group would print it with every command imported."""
    context = click.Context(cli)
    eager = click.Group(
        name=cli.name,
        help=cli.help,
        params=cli.params,
        context_settings=cli.context_settings,
        commands={name: cli.get_command(context, name) for name in cli.list_commands(context)},
    )
    for width in (50, 80, 200):
        settings = {"terminal_width": width, "max_content_width": width}
        lazy_help = CliRunner().invoke(cli, ["--help"], **settings)
        eager_help = CliRunner().invoke(eager, ["--help"], **settings)
        assert lazy_help.exit_code == 0 and lazy_help.output == eager_help.output, width
    for name, entry in COMMANDS.items():
        assert entry.short_help == entry.load().get_short_help_str(limit=10_000), name


def test_every_listed_command_resolves_and_answers_help() -> None:
    context = click.Context(cli)
    assert cli.list_commands(context) == sorted(COMMANDS)
    for name in cli.list_commands(context):
        command = cli.get_command(context, name)
        assert command is not None and command.name == name, name
        paths = [[name]]
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.list_commands(context)]
        for path in paths:
            result = CliRunner().invoke(cli, [*path, "--help"])
            assert result.exit_code == 0, (path, result.output)
            assert result.output.startswith(f"Usage: cli {' '.join(path)} "), path
    assert cli.get_command(context, "no-such-command") is None
    assert "No such command 'no-such-command'" in CliRunner().invoke(cli, ["no-such-command"]).output


def test_every_command_module_is_in_the_table_and_every_command_it_defines_is_reachable() -> None:
    """No command module the table forgot (its commands would silently vanish from `rollout`)."""
    modules = {info.name for info in pkgutil.iter_modules(rollout_cli.commands.__path__)}
    assert modules == {entry.where.partition(":")[0] for entry in COMMANDS.values()}
    reachable: set[int] = set()
    pending = [entry.load() for entry in COMMANDS.values()]
    while pending:
        command = pending.pop()
        reachable.add(id(command))
        if isinstance(command, click.Group):
            pending += command.commands.values()
    for module in modules:
        defined = vars(importlib.import_module(f"rollout_cli.commands.{module}")).items()
        for attribute, value in defined:
            if isinstance(value, click.Command):
                assert id(value) in reachable, f"rollout_cli.commands.{module}:{attribute} is in no command"


def test_completion_of_command_names_reads_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in command_modules():
        monkeypatch.delitem(sys.modules, name)
    context = click.Context(cli)
    completed = {item.value: item.help for item in cli.shell_complete(context, "re")}
    assert completed == {name: COMMANDS[name].short_help_str() for name in COMMANDS if name.startswith("re")}
    assert [item.value for item in cli.shell_complete(context, "--ver")] == ["--version"]
    assert command_modules() == set()
