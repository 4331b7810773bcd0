"""Read verbs against a real worker: `status --wait` exits 0 / 1 / 2 by the rollout's outcome,
and every read verb prints json / yaml (and `get`: wide, name, `-l` selectors)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from rollout_cli.main import cli
from tests.cli.worker import CANARY, Worker, a_cluster, podinfo, running_worker

pytestmark = pytest.mark.integration
ONLY_CANARY = (CANARY,)


@pytest.fixture(scope="module")
def worker(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(kafka_bootstrap, tmp_path_factory.mktemp("reads")) as running:
        running.send("clusters", "c1", ClusterObserved(cluster=a_cluster("c1", "canary")))
        running.send("clusters", "w1", ClusterObserved(cluster=a_cluster("w1", "wave")))
        yield running


def rollout(worker: Worker, *args: str) -> tuple[int, str]:
    command = [*args, "--bootstrap-servers", worker.bootstrap, "--topic-prefix", worker.prefix]
    result = CliRunner().invoke(cli, command)
    return result.exit_code, result.output


def applied(worker: Worker, module: str, stages: tuple[dict[str, object], ...] | None = None) -> None:
    worker.send("intents", module, ModuleApplied(module=podinfo("1.0.0", module, stages)))
    deadline = time.monotonic() + 60
    while module not in worker.latest("module_status"):
        assert time.monotonic() < deadline, f"{module} never got a status"
        time.sleep(0.2)


def report(worker: Worker, module: str, cluster: str, state: str) -> None:
    event = SyncStatusReported(cluster=cluster, module=module, revision="1.0.0", state=state)  # type: ignore[arg-type]
    worker.send("status", cluster, event)


def gate(worker: Worker, *args: str) -> subprocess.Popen[str]:
    """`rollout status ... --wait` as a process of its own (it blocks until the outcome)."""
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": worker.bootstrap, "ROLLOUT_TOPIC_PREFIX": worker.prefix}
    command = [sys.executable, "-m", "rollout_cli.main", "status", *args, "--wait"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def first_line(process: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The first line `process` prints, waiting for it up to `timeout` seconds."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), f"nothing printed within {timeout}s"
    return process.stdout.readline()


def test_status_wait_exits_0_once_the_rollout_is_complete(worker: Worker) -> None:
    applied(worker, "gate-ok", ONLY_CANARY)
    waiting = gate(worker, "gate-ok", "--timeout", "60s")
    # the report goes out only once the gate has read the rollout still in progress (a fixed
    # sleep raced the process's start-up under load)
    progressing = first_line(waiting)
    assert progressing.startswith("module/gate-ok: Progressing, stage canary, 0/1"), progressing
    assert waiting.poll() is None, waiting.communicate()[0]  # still Progressing: it waits
    report(worker, "gate-ok", "c1", "succeeded")
    output, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, progressing + output
    assert output.splitlines()[-1] == "module/gate-ok: phase=Complete"


def test_status_wait_exits_1_when_the_rollout_halts(worker: Worker) -> None:
    applied(worker, "gate-bad", ONLY_CANARY)
    waiting = gate(worker, "gate-bad", "--timeout", "60s")
    report(worker, "gate-bad", "c1", "failed")
    output, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 1, output
    assert "error: module/gate-bad: rollout Halted" in output


def test_status_wait_exits_2_when_the_condition_does_not_hold_in_time(worker: Worker) -> None:
    applied(worker, "gate-slow")  # canary, then wave-1 after an approval nobody gives
    report(worker, "gate-slow", "c1", "succeeded")
    waiting = gate(worker, "gate-slow", "--for", "phase=AwaitingApproval", "--timeout", "60s", "-o", "json")
    output, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, output
    assert json.loads(output)["phase"] == "AwaitingApproval"
    started = time.monotonic()
    code, output = rollout(worker, "status", "gate-slow", "--wait", "--timeout", "2s")
    assert code == 2 and 2 <= time.monotonic() - started < 30, output
    assert "error: module/gate-slow: still AwaitingApproval after 2s (waiting for phase=Complete)" in output


def test_status_wait_of_an_unknown_module_or_a_bad_condition_is_an_error(worker: Worker) -> None:
    assert rollout(worker, "status", "nosuchmodule", "--wait") == (1, "error: module nosuchmodule not found\n")
    code, output = rollout(worker, "status", "x", "--wait", "--for", "phase=Done")
    assert code == 2 and "unknown phase 'Done'; phases: Progressing" in output


def test_get_prints_json_yaml_name_and_wide(worker: Worker) -> None:
    applied(worker, "listed", ONLY_CANARY)
    code, output = rollout(worker, "get", "modules", "-o", "json")
    assert code == 0 and "listed" in [doc["module"] for doc in json.loads(output)]
    code, output = rollout(worker, "get", "module", "listed", "-o", "yaml")
    assert code == 0 and yaml.safe_load(output)["currentStage"] == "canary"
    code, output = rollout(worker, "get", "modules", "-o", "name")
    assert code == 0 and "module/listed" in output.splitlines()
    code, output = rollout(worker, "get", "modules", "-o", "wide")
    assert code == 0 and output.splitlines()[0].split()[-6:] == [
        "NAMESPACE",
        "GENERATION",
        "FAILED",
        "PAUSED",
        "LAST",
        "DECISION",
    ]
    code, output = rollout(worker, "get", "clusters", "-o", "wide")
    assert code == 0 and "KUBECONFIG SECRET" in output.splitlines()[0]


def test_get_selects_clusters_and_assemblages_by_cluster_labels(worker: Worker) -> None:
    assert rollout(worker, "get", "clusters", "-l", "ring=canary", "-o", "name") == (0, "cluster/c1\n")
    assert rollout(worker, "get", "clusters", "-l", "ring!=canary", "-o", "name") == (0, "cluster/w1\n")
    code, output = rollout(worker, "get", "clusters", "-l", "ring in (canary,wave)", "-o", "name")
    assert (code, output) == (0, "cluster/c1\ncluster/w1\n")
    assert rollout(worker, "get", "clusters", "-l", "!ring", "-o", "name") == (0, "")
    # a module of its own on c1, and its snapshot written (the assembler follows the decider)
    applied(worker, "selected", ONLY_CANARY)
    deadline = time.monotonic() + 60
    while "proxyassemblage/c1" not in rollout(worker, "get", "proxyassemblages", "-o", "name")[1]:
        assert time.monotonic() < deadline, "c1's ProxyAssemblage was never written"
        time.sleep(0.2)
    code, output = rollout(worker, "get", "proxyassemblages", "-l", "ring=canary", "-o", "name")
    assert code == 0 and output.splitlines() == ["proxyassemblage/c1"], output
    code, output = rollout(worker, "get", "clusters", "-l", "ring in canary")
    assert code == 2 and output.startswith("error: -l: 'ring in canary' is not a selector term")
    code, output = rollout(worker, "get", "modules", "-l", "ring=canary")
    assert code == 2 and "module statuses carry no labels" in output


def test_status_history_dead_letters_and_plan_print_yaml_and_json(worker: Worker, tmp_path: Path) -> None:
    applied(worker, "shown", ONLY_CANARY)
    code, output = rollout(worker, "status", "shown", "-o", "json")
    assert code == 0 and json.loads(output)["module"] == "shown"
    assert rollout(worker, "status", "nosuchmodule", "-o", "yaml") == (1, "error: module nosuchmodule not found\n")
    code, output = rollout(worker, "history", "shown", "-o", "yaml")
    assert code == 0 and yaml.safe_load(output)[0]["action"] == "created"
    code, output = rollout(worker, "dead-letters", "-o", "yaml")
    assert code == 0 and isinstance(yaml.safe_load(output), list)
    manifest = tmp_path / "shown.yaml"
    manifest.write_text(
        yaml.safe_dump(podinfo("2.0.0", "shown", ONLY_CANARY).model_dump(by_alias=True, exclude_none=True))
    )
    code, output = rollout(worker, "plan", "-f", str(manifest), "-o", "yaml")
    assert code == 0, output
    (plan,) = yaml.safe_load(output)
    assert plan["module"] == "shown" and plan["stages"][0]["batches"] == [["c1"]]
