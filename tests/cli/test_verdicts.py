"""Commands wait for the engine's verdict on their event and exit by it (a real worker).

Each refused command of issue 9's "Seen" list exits 1 with the engine's reason; an accepted
one exits 0 saying what the engine did; `--no-wait` only publishes; no worker means exit 2.
One worker serves the module (its own topic prefix), with a fleet of two clusters and the
module podinfo staged canary → wave-1 (wave-1 waits for an approval).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from infra import client
from infra.topics import TopicNames, ensure_topics
from rollout.wire.events import ClusterObserved, ModuleApplied
from rollout_cli.main import cli
from tests.cli.worker import Worker, a_cluster, podinfo, running_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(kafka_bootstrap, tmp_path_factory.mktemp("verdicts")) as running:
        running.send("clusters", "c1", ClusterObserved(cluster=a_cluster("c1", "canary")))
        running.send("clusters", "w1", ClusterObserved(cluster=a_cluster("w1", "wave")))
        running.send("intents", "podinfo", ModuleApplied(module=podinfo()))
        deadline = time.monotonic() + 60
        while "podinfo" not in running.latest("module_status"):
            assert time.monotonic() < deadline, "podinfo never got a status"
            time.sleep(0.3)
        yield running


def rollout(worker: Worker, *args: str) -> tuple[int, str]:
    command = [*args, "--bootstrap-servers", worker.bootstrap, "--topic-prefix", worker.prefix]
    result = CliRunner().invoke(cli, command)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (
            ["approve", "podinfo", "--stage", "no-such-stage"],
            "module/podinfo: approve stage no-such-stage refused: "
            "module podinfo has no stage 'no-such-stage' (stages: canary, wave-1)",
        ),
        (
            ["approve", "nosuchmodule", "--stage", "canary"],
            "module/nosuchmodule: approve stage canary refused: module 'nosuchmodule' not found",
        ),
        (["pause", "nosuchmodule"], "module/nosuchmodule: pause refused: module 'nosuchmodule' not found"),
        (["rollback", "nosuchmodule"], "module/nosuchmodule: rollback refused: module 'nosuchmodule' not found"),
        (
            ["pin", "podinfo", "--cluster", "nosuchcluster"],
            "module/podinfo: pin nosuchcluster refused: cluster 'nosuchcluster' not found",
        ),
        (
            "report-status --cluster nosuchcluster --module podinfo --revision 6.7.0 --state succeeded".split(),
            "nosuchcluster/podinfo: succeeded at 6.7.0 refused: cluster 'nosuchcluster' not found",
        ),
        (
            ["report-status", "--cluster", "c1", "--module", "podinfo", "--revision", "0.0.1", "--state", "failed"],
            "c1/podinfo: failed at 0.0.1 refused: "
            "cluster c1 is assigned generation 1 (6.7.0) of module podinfo, not revision 0.0.1",
        ),
        (
            ["delete", "module", "nosuchmodule"],
            "module/nosuchmodule: delete refused: module 'nosuchmodule' not found",
        ),
        (
            ["delete", "cluster", "nosuchcluster"],
            "cluster/nosuchcluster: delete refused: cluster 'nosuchcluster' not found",
        ),
    ],
)
def test_refused_command_exits_1_with_the_engines_reason(worker: Worker, command: list[str], reason: str) -> None:
    code, output = rollout(worker, *command)
    assert (code, output) == (1, f"error: {reason}\n")


def test_refusal_is_also_a_dead_letter_naming_the_refused_event(worker: Worker) -> None:
    code, _ = rollout(worker, "abort", "ghostmodule")
    assert code == 1
    code, output = rollout(worker, "dead-letters", "-o", "json")
    letters = [letter for letter in json.loads(output) if letter["reason"] == "module 'ghostmodule' not found"]
    assert len(letters) == 1 and letters[0]["stage"] == "decide" and len(letters[0]["event"]) == 32


def test_accepted_commands_exit_0_saying_what_the_engine_did(worker: Worker) -> None:
    code, output = rollout(worker, "pause", "podinfo")
    assert code == 0, output
    assert output.startswith("module/podinfo: pause accepted: paused") and "no new moves until resume" in output
    code, output = rollout(worker, "pause", "podinfo")
    assert (code, output) == (0, "module/podinfo: pause accepted: nothing to change\n")
    code, output = rollout(worker, "resume", "podinfo")
    assert code == 0 and output.startswith("module/podinfo: resume accepted: resumed"), output
    code, output = rollout(worker, "approve", "podinfo", "--stage", "wave-1")
    assert code == 0 and output.startswith("module/podinfo: approve stage wave-1 accepted: stage wave-1 approved")
    code, output = rollout(
        worker, "report-status", "--cluster", "c1", "--module", "podinfo", "--revision", "6.7.0", "--state", "succeeded"
    )
    assert code == 0 and output.startswith("c1/podinfo: succeeded at 6.7.0 accepted: c1 runs 6.7.0"), output


def test_no_wait_publishes_without_a_verdict(worker: Worker) -> None:
    code, output = rollout(worker, "pause", "nosuchmodule", "--no-wait")
    assert (code, output) == (0, "module/nosuchmodule: pause: published (not waiting for the engine's verdict)\n")


def test_without_a_worker_the_command_exits_2_after_its_timeout(kafka_bootstrap: str) -> None:
    prefix = f"cli-{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, prefix, 1))
    started = time.monotonic()
    result = CliRunner().invoke(
        cli, ["pause", "podinfo", "--timeout", "1s", "--bootstrap-servers", kafka_bootstrap, "--topic-prefix", prefix]
    )
    assert result.exit_code == 2 and time.monotonic() - started < 30, result.output
    assert result.output.startswith("error: module/podinfo: pause: no verdict from the engine within 1s")
    published = asyncio.run(client.read_all(kafka_bootstrap, TopicNames(prefix).intents))
    assert [record.json()["command"] for record in published] == ["pause"]


MODULE_YAML = """\
apiVersion: rollout.dev/v1alpha1
kind: {kind}
metadata: {{name: {name}, namespace: fleet}}
spec:
  selector: {{matchLabels: {{ring: canary}}}}
  sync:
    source: {{git: {{url: https://github.com/example/app, version: {{tag: {tag}}}}}}}
    package: {{kustomize: {{path: ./deploy}}}}
"""


def test_apply_says_created_unchanged_configured_and_exits_1_when_the_engine_refuses(
    worker: Worker, tmp_path: Path
) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(MODULE_YAML.format(kind="Module", name="app", tag="v1"))
    assert rollout(worker, "apply", "-f", str(manifest)) == (0, "module/app created\n")
    assert rollout(worker, "apply", "-f", str(manifest)) == (0, "module/app unchanged\n")
    manifest.write_text(MODULE_YAML.format(kind="Module", name="app", tag="v2"))
    code, output = rollout(worker, "apply", "-f", str(manifest))
    assert code == 0 and output.startswith("module/app configured: target v2 (generation 2)"), output
    manifest.write_text(MODULE_YAML.format(kind="BootstrapModule", name="app", tag="v1"))
    code, output = rollout(worker, "apply", "-f", str(manifest))
    assert code == 1 and output.startswith("error: bootstrapmodule/app refused: BootstrapModule app: the name is")
    code, output = rollout(worker, "apply", "-f", str(manifest), "--no-wait")
    assert (code, output) == (0, "bootstrapmodule/app published (not waiting for the engine's verdict)\n")
