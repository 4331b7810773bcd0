"""Releases end to end on the real broker: `rollout apply -f` of a Release and its two
member modules (the real CLI: expansion, one transaction, `after` stamps), a real worker
with three journal partitions, the test playing the appliers (status reports for every
cluster the engine moved). The members' per-cluster state travels between their
partitions through the dependencies topic and the router. The release moves through its
two stages as one unit, and a failure of one member on the canary rolls both back to the
previous release's revisions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decisions import DecisionDocument
from rollout.wire.events import ClusterObserved, SyncStatusReported
from rollout_cli.main import cli
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration

MEMBERS = ("rweb", "rapi")


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("releases"), partitions=3, tick_interval=1.0)
    stack.start_worker()
    yield stack
    stack.stop()


def documents(web: str, api: str) -> list[dict[str, Any]]:
    """Release shop (canary, then wave; onFailure Rollback) giving rweb and rapi their tags."""
    modules = [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {"sync": {"source": {"git": {"url": f"https://example.com/{name}", "version": {"tag": "0.0.1"}}}}},
        }
        for name in MEMBERS
    ]
    release = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Release",
        "metadata": {"name": "shop", "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": "shop"}},
            "rollout": {
                "stages": [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}],
                "onFailure": "Rollback",
            },
            "modules": [{"name": "rweb", "git": {"tag": web}}, {"name": "rapi", "git": {"tag": api}}],
        },
    }
    return [*modules, release]


def rollout(stack: Stack, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--bootstrap-servers", stack.bootstrap, "--topic-prefix", stack.prefix])
    assert result.exit_code == 0, result.output
    return result.output


def apply(stack: Stack, path: Path, web: str, api: str) -> None:
    path.write_text(yaml.safe_dump_all(documents(web, api)))
    rollout(stack, "apply", "-f", str(path))


def targets(stack: Stack, module: str) -> dict[str, dict[str, Any]]:
    prefix = f"{module}/"
    return {k[len(prefix) :]: v for k, v in stack.latest("targets").items() if k.startswith(prefix) and v}


def report_updating(stack: Stack, module: str, verdict: Callable[[str], str] = lambda revision: "succeeded") -> None:
    """What an applier would report for every cluster of `module` updating now (again at
    each poll, as an applier's status reporter does: a repeated report changes nothing)."""
    for cluster, target in sorted(targets(stack, module).items()):
        if target["status"] == "updating" and target["revision"]:
            report = SyncStatusReported(
                cluster=cluster,
                module=module,
                revision=target["revision"],
                state=verdict(target["revision"]),
                generation=target["generation"],
            )
            stack.send("status", cluster, report)


def test_a_two_module_release_moves_through_two_stages_together_and_rolls_back_as_a_unit(
    stack: Stack, tmp_path: Path
) -> None:
    for name, ring in (("s-canary", "canary"), ("s-wave-1", "wave"), ("s-wave-2", "wave")):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "shop", "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    path = tmp_path / "shop.yaml"
    apply(stack, path, "web-1", "api-1")
    wait_for("both members on the canary", lambda: all(targets(stack, m).get("s-canary") for m in MEMBERS))
    status = stack.latest("module_status")["rweb"]
    assert status["release"] == {"name": "shop", "members": ["rweb", "rapi"]}

    # rweb succeeds on the canary; rapi has not reported: the canary is not done for either
    report_updating(stack, "rweb")
    waiting = "awaiting_release"  # on its target, not done: rapi is not there yet
    wait_for("rweb waits for rapi on the canary", lambda: targets(stack, "rweb")["s-canary"]["state"] == waiting)
    assert "waiting for release shop: rapi" in targets(stack, "rweb")["s-canary"]["message"]
    assert "s-wave-1" not in {c for c, t in targets(stack, "rweb").items() if t.get("revision")}

    def fails(revision: str) -> str:
        return "failed" if revision == "api-2" else "succeeded"

    def settle_all() -> bool:
        for member in MEMBERS:
            report_updating(stack, member, fails)
        statuses = stack.latest("module_status")
        return all(statuses[m]["phase"] == "Complete" for m in MEMBERS)

    wait_for("release 1 complete", settle_all, timeout=240.0, interval=0.5)
    assert {t["revision"] for t in targets(stack, "rweb").values()} == {"web-1"}
    assert {t["revision"] for t in targets(stack, "rapi").values()} == {"api-1"}
    shown = json.loads(rollout(stack, "status", "rapi", "-o", "json"))["releaseStatus"]
    assert shown["phase"] == "Complete" and [m["targetRevision"] for m in shown["members"]] == ["web-1", "api-1"]
    assert {c["cluster"]: sorted(c["members"]) for c in shown["clusters"]} == {
        name: ["rapi", "rweb"] for name in ("s-canary", "s-wave-1", "s-wave-2")
    }

    # release 2: rapi fails on the canary where rweb succeeded — both roll back together
    apply(stack, path, "web-2", "api-2")
    wait_for("release 2 on the canary", lambda: targets(stack, "rweb")["s-canary"]["revision"] == "web-2")
    report_updating(stack, "rweb")
    wait_for("rapi on the canary", lambda: targets(stack, "rapi")["s-canary"]["revision"] == "api-2")

    def rolled_back() -> bool:
        for member in MEMBERS:
            report_updating(stack, member, fails)
        statuses = stack.latest("module_status")
        return all(statuses[m]["phase"] == "RolledBack" for m in MEMBERS)

    wait_for("both members rolled back", rolled_back, timeout=240.0, interval=0.5)
    assert {t["revision"] for t in targets(stack, "rweb").values()} == {"web-1"}
    assert {t["revision"] for t in targets(stack, "rapi").values()} == {"api-1"}
    decisions = [DecisionDocument.model_validate_json(r.value) for r in stack.records("decisions") if r.value]
    rolled = {d.module for d in decisions if d.action == DecisionAction.ROLLBACK and d.module in MEMBERS}
    assert rolled == set(MEMBERS)

    # what users see: status (release phase, members, per cluster), get -o wide, history --release, plan
    screen = rollout(stack, "status", "rweb")
    assert "Release shop: RolledBack" in screen and "shop, with rapi" in screen
    assert "s-canary" in screen and "web-1 succeeded" in screen and "api-1 succeeded" in screen
    assert "shop" in rollout(stack, "get", "modules", "-o", "wide")
    history = rollout(stack, "history", "rweb", "--release", "-o", "json")
    assert {d["module"] for d in json.loads(history)} == set(MEMBERS)
    table = rollout(stack, "history", "rweb", "--release")
    assert "MODULE" in table.splitlines()[0] and "rapi" in table and "rweb" in table
    plan = rollout(stack, "plan", "-f", str(path))
    assert "release shop, with rapi: a cluster is done once every member succeeded there" in plan

    alone = tmp_path / "rweb.yaml"  # a member applied without its Release leaves it: said
    alone.write_text(yaml.safe_dump(documents("web-1", "api-1")[0]))
    assert "a member of Release shop, applied without it" in rollout(stack, "apply", "-f", str(alone))


def test_a_releases_stage_is_approved_for_every_member_with_one_cli_command(stack: Stack, tmp_path: Path) -> None:
    members = ("deli-web", "deli-api")  # deli-api leads: the first member by name
    for name, ring in (("d-canary", "canary"), ("d-wave", "wave")):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": "deli", "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))
    modules = [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {"sync": {"source": {"git": {"url": f"https://example.com/{name}", "version": {"tag": "1.0.0"}}}}},
        }
        for name in members
    ]
    release = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Release",
        "metadata": {"name": "deli", "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"app": "deli"}},
            "rollout": {
                "stages": [
                    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
                    {"name": "wave", "requireApproval": True},
                ]
            },
            "modules": [{"name": name} for name in members],
        },
    }
    path = tmp_path / "deli.yaml"
    path.write_text(yaml.safe_dump_all([*modules, release]))
    rollout(stack, "apply", "-f", str(path))

    def waiting_for_approval() -> bool:
        for member in members:
            report_updating(stack, member)
        statuses = stack.latest("module_status")
        return all((statuses.get(m) or {}).get("phase") == "AwaitingApproval" for m in members)

    wait_for("both members waiting for the wave's approval", waiting_for_approval, timeout=240.0, interval=0.5)
    said = rollout(stack, "approve", "release/deli", "--stage", "wave", "--timeout", "90s")
    assert "release/deli (its leader deli-api): approve stage wave" in said and "accepted" in said, said

    def complete() -> bool:
        for member in members:
            report_updating(stack, member)
        statuses = stack.latest("module_status")
        return all((statuses.get(m) or {}).get("phase") == "Complete" for m in members)

    wait_for("both members complete", complete, timeout=240.0, interval=0.5)
    decisions = [DecisionDocument.read(r.json()) for r in stack.records("decisions")]
    [decided] = [d for d in decisions if d.action == DecisionAction.RELEASE_APPROVED]
    assert decided.module == "deli-api" and decided.via == "cli"
    assert decided.reason.startswith("stage wave of release deli approved by ") and "for deli-api, deli-web" in (
        decided.reason
    )
    approved = sorted(d.module for d in decisions if d.action == DecisionAction.APPROVED and d.module in members)
    assert approved == ["deli-api", "deli-web"]
