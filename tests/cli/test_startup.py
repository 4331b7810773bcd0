"""`rollout --help` starts fast because `import rollout_cli.main` imports nothing heavy.

Start-up time itself is not asserted (it depends on the machine); what makes it slow is:
parsing the CRD schemas (projections.crds, jsonschema), the Kubernetes client, the Kafka
client and the pydantic domain models. Each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

from click.testing import CliRunner

from rollout_cli.main import cli

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
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def loaded_after(*args: str) -> tuple[int, set[str], str]:
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


def test_help_of_the_group_and_of_every_command_imports_no_heavy_module() -> None:
    for args in (["--help"], ["worker", "--help"], ["apply", "-h"], ["watch-clusters", "--help"], ["--version"]):
        code, loaded, out = loaded_after(*args)
        assert code == 0, (args, out)
        assert out.strip(), args
        assert not loaded & set(HEAVY), f"rollout {' '.join(args)} imported {sorted(loaded & set(HEAVY))}"


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
