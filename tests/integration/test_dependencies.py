"""Dependencies end to end on the real broker: a real worker with three journal
partitions; the test plays the appliers (status reports). The dependency's per-cluster
readiness reaches the dependent's partition through the dependencies topic and the router:
the dependent is blocked on a cluster until its dependency succeeded there; deleting the
dependency waits for the dependent; `rollout apply` refuses a dependency cycle.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied, SyncStatusReported
from rollout_cli.main import cli
from tests.integration.stack import Stack, started, wait_for

pytestmark = pytest.mark.integration


def manifest(name: str, tag: str, depends_on: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": "deps"}},
            "sync": {"source": {"git": {"url": f"https://example.com/{name}", "version": {"tag": tag}}}},
            "dependsOn": depends_on or [],
        },
    }


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("deps"), partitions=3) as stack:
        yield stack


def targets(stack: Stack, module: str) -> dict[str, dict[str, Any]]:
    prefix = f"{module}/"
    return {k[len(prefix) :]: v for k, v in stack.latest("targets").items() if k.startswith(prefix) and v}


def test_dependent_waits_for_its_dependency_per_cluster_and_is_deleted_first(stack: Stack) -> None:
    for name in ("d1", "d2"):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "deps"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    stack.send(
        "intents", "shop", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(manifest("shop", "s1", ["platform"])))
    )
    stack.send(
        "intents", "platform", ModuleApplied(module=MANIFEST_ADAPTER.validate_python(manifest("platform", "p1")))
    )
    wait_for("platform on both", lambda: {t["revision"] for t in targets(stack, "platform").values()} == {"p1"})
    wait_for("shop blocked on both", lambda: [t["state"] for t in targets(stack, "shop").values()] == ["blocked"] * 2)
    status = stack.latest("module_status")["shop"]
    assert status["dependsOn"] == ["platform"] and status["stages"][0]["counts"]["blocked"] == 2

    report = SyncStatusReported(cluster="d1", module="platform", revision="p1", state="succeeded", generation=1)
    stack.send("status", "d1", report)
    wait_for("shop on d1", lambda: targets(stack, "shop")["d1"]["revision"] == "s1")
    assert targets(stack, "shop")["d2"]["state"] == "blocked"

    code, output = stack.rollout("delete", "module", "platform")
    assert code == 0 and "deleted once the modules depending on it are: shop" in output, output
    assert stack.latest("module_status")["platform"]["deleting"] is True
    code, output = stack.rollout("delete", "module", "shop")
    assert code == 0, output
    wait_for("platform deleted after shop", lambda: "platform" not in stack.latest("module_status"))
    assert targets(stack, "platform") == {} and targets(stack, "shop") == {}


def test_apply_refuses_a_dependency_cycle(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(manifest("cycle-a", "1", ["cycle-b"])))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(manifest("cycle-b", "1", ["cycle-a"])))
    result = CliRunner().invoke(
        cli, ["apply", "-f", str(tmp_path), "--bootstrap-servers", stack.bootstrap, "--topic-prefix", stack.prefix]
    )
    assert result.exit_code != 0
    assert "dependency cycle: cycle-a → cycle-b → cycle-a" in result.output
    assert "nothing was applied" in result.output
    assert "cycle-a" not in stack.latest("module_status")


def test_dependent_applied_with_its_dependency_in_one_apply_waits_for_its_new_revision(
    stack: Stack, tmp_path: Path
) -> None:
    names = ("t1", "t2", "t3")
    for name in names:
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "together"}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))

    def apply_both(base_tag: str, app_tag: str) -> None:
        documents = [manifest("tbase", base_tag), manifest("tapp", app_tag, ["tbase"])]
        for document in documents:
            document["spec"]["selector"] = {"matchLabels": {"app": "together"}}
        (tmp_path / "both.yaml").write_text(yaml.safe_dump_all(documents))
        code, output = stack.rollout("apply", "-f", str(tmp_path / "both.yaml"))
        assert code == 0, output

    def succeed(module: str, revision: str, generation: int) -> None:
        for name in names:
            report = SyncStatusReported(
                cluster=name, module=module, revision=revision, state="succeeded", generation=generation
            )
            stack.send("status", name, report)

    apply_both("1.6.0", "2.6.0")
    wait_for("tbase 1.6.0 on all", lambda: {t["revision"] for t in targets(stack, "tbase").values()} == {"1.6.0"})
    succeed("tbase", "1.6.0", 1)
    wait_for("tapp 2.6.0 on all", lambda: [t["revision"] for t in targets(stack, "tapp").values()] == ["2.6.0"] * 3)
    succeed("tapp", "2.6.0", 1)
    wait_for("tapp complete", lambda: stack.latest("module_status")["tapp"]["phase"] == "Complete")

    apply_both("1.7.0", "2.7.0")  # one apply: tapp must wait for tbase 1.7.0, not count 1.6.0
    wait_for("tbase 1.7.0 on all", lambda: {t["revision"] for t in targets(stack, "tbase").values()} == {"1.7.0"})
    wait_for("tapp blocked on all", lambda: [t["state"] for t in targets(stack, "tapp").values()] == ["blocked"] * 3)
    assert [t["revision"] for t in targets(stack, "tapp").values()] == ["2.6.0"] * 3
    # tbase's partition answers the apply (DependencyCurrent) in its own time: wait for it
    wait_for("tapp no longer awaiting tbase", lambda: "awaiting" not in stack.latest("module_status")["tapp"])

    report = SyncStatusReported(cluster="t1", module="tbase", revision="1.7.0", state="succeeded", generation=2)
    stack.send("status", "t1", report)
    wait_for("tapp 2.7.0 on t1", lambda: targets(stack, "tapp")["t1"]["revision"] == "2.7.0")
    assert [targets(stack, "tapp")[c]["revision"] for c in ("t2", "t3")] == ["2.6.0", "2.6.0"]
    assert [targets(stack, "tapp")[c]["state"] for c in ("t2", "t3")] == ["blocked", "blocked"]
