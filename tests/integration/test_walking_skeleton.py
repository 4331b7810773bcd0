"""The walking skeleton end to end on the real broker: the example fleet's manifests go
onto the input topics, a real `rollout worker` and a directory-sink `rollout applier`
turn them into assemblage snapshots and Flux YAML, and every step users rely on is
checked from the outside — topics, files, CLI.

The tests in this module share one stack and run in order, like a user's session:
apply → a cluster turns ready → a module is deleted → poison events → worker restart →
replay → the example's Release approved and complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from projections import crds
from rollout.wire.events import ClusterObserved, ModuleDeleted, Tick
from rollout_cli.main import cli
from rollout_cli.publishing.manifest_files import load_manifest_files
from tests.integration.stack import EXAMPLES, Stack, wait_for

pytestmark = pytest.mark.integration

READY = {
    "prod-eu-1", "prod-us-2", "prod-ap-3", "prod-eu-4", "prod-us-5", "prod-eu-7", "prod-us-8",
    "staging-eu-1", "staging-us-2", "staging-ap-3",
}  # fmt: skip
NOT_READY = {"prod-ap-6", "staging-eu-4"}


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("skeleton"))
    stack.start_worker()
    stack.start_applier("--simulate-status")
    stack.apply(EXAMPLES)
    yield stack
    stack.stop()


def run_cli(stack: Stack, *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env=stack.env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def cluster_event(name: str, *, ready: bool, labels: dict[str, str] | None = None) -> ClusterObserved:
    manifest = next(m for m in load_manifest_files([EXAMPLES / "clusters.yaml"]) if m.metadata.name == name)
    data = manifest.model_dump(by_alias=True)
    data["status"] = {"controlPlaneReady": ready, "kubeconfigSecret": True}
    if labels is not None:
        data["metadata"]["labels"] = labels
    return ClusterObserved.model_validate({"cluster": data})


def test_example_fleet_becomes_crd_valid_flux_yaml(stack: Stack) -> None:
    expected = (
        {f"remote/fleet/{c}/flux-install.yaml" for c in READY}
        | {f"proxy/{c}/monitoring.yaml" for c in READY}
        | {"proxy/prod-eu-1/podinfo.yaml"}  # podinfo is staged: only its canary so far
        | {"proxy/prod-eu-1/web.yaml"}  # so is web, the Helm release (a HelmRelease)
        # and the Release storefront: both members on its canary, its rest waiting for approvals
        | {"proxy/prod-eu-1/storefront-web.yaml", "proxy/prod-eu-1/storefront-api.yaml"}
    )
    files = wait_for("the example fleet's Flux files", lambda: stack.files() >= expected and stack.files())
    assert files == expected, files ^ expected
    for relative in files:
        documents = list(yaml.safe_load_all((stack.out / relative).read_text()))
        assert [d["kind"] for d in documents][1] == (
            "HelmRelease" if relative.endswith("/web.yaml") else "Kustomization"
        )
        for document in documents:
            crds.validate(document)  # raises SchemaError naming the field
    remote = yaml.safe_load_all((stack.out / "remote/fleet/prod-eu-1/flux-install.yaml").read_text())
    source, kustomization = list(remote)
    assert source["kind"] == "GitRepository" and source["spec"]["ref"] == {"tag": "v2.7.3"}
    assert kustomization["spec"]["kubeConfig"]["secretRef"]["name"] == "prod-eu-1-kubeconfig"
    assert kustomization["spec"]["prune"] is True
    assert kustomization["spec"]["postBuild"]["substitute"] == {"CLUSTER_NAME": "prod-eu-1", "TEAM": "platform"}
    proxy = list(yaml.safe_load_all((stack.out / "proxy/staging-ap-3/monitoring.yaml").read_text()))
    assert proxy[0]["kind"] == "OCIRepository"
    assert proxy[1]["spec"]["postBuild"]["substitute"] == {
        "CLUSTER": "staging-ap-3",
        "ENV": "staging",
        "LITERAL": "$(NOT_EXPANDED)",
    }
    assert "kubeConfig" not in proxy[1]["spec"]


def test_projection_topics_hold_one_snapshot_per_ready_cluster(stack: Stack) -> None:
    remote = stack.latest("remote")
    proxy = stack.latest("proxy")
    assert set(remote) == READY
    assert set(proxy) == READY
    assert [s["module"] for s in proxy["prod-eu-1"]["spec"]["syncs"]] == [
        "monitoring",
        "podinfo",
        "storefront-api",
        "storefront-web",
        "web",
    ]
    assert all(doc["kind"] == "RemoteAssemblage" for doc in remote.values())
    table = run_cli(stack, "get", "remoteassemblages")
    assert "prod-eu-1" in table and "flux-install@v2.7.3" in table
    as_json = json.loads(run_cli(stack, "get", "proxyassemblages", "prod-eu-1", "-o", "json"))
    assert as_json["metadata"]["name"] == "prod-eu-1"
    modules = json.loads(run_cli(stack, "get", "modules", "-o", "json"))
    flux = {m["module"]: m for m in modules}["flux-install"]
    # every stage passed, but prod-ap-6 and staging-eu-4 are not ready: not Complete
    assert (flux["phase"], flux["stableRevision"], flux["waiting"]) == ("Progressing", "v2.7.3", "2 clusters not ready")
    clusters = json.loads(run_cli(stack, "get", "clusters", "-o", "json"))
    assert len(clusters) == 12


def test_cluster_turning_ready_gets_its_files(stack: Stack) -> None:
    assert not any("prod-ap-6" in f for f in stack.files())
    stack.send("clusters", "prod-ap-6", cluster_event("prod-ap-6", ready=True))
    wanted = {"remote/fleet/prod-ap-6/flux-install.yaml", "proxy/prod-ap-6/monitoring.yaml"}
    wait_for("prod-ap-6's files", lambda: wanted <= stack.files())
    # prod-ap-6 is in podinfo's wave-2, which has not started: no podinfo yet
    assert "proxy/prod-ap-6/podinfo.yaml" not in stack.files()


def test_deleted_module_is_pruned_from_files_and_snapshots(stack: Stack) -> None:
    stack.send("intents", "monitoring", ModuleDeleted(kind="Module", name="monitoring"))
    wait_for("monitoring's files to be pruned", lambda: not any("monitoring" in f for f in stack.files()))
    proxy = stack.latest("proxy")
    assert set(proxy) == {"prod-eu-1"}  # the others had only monitoring: tombstoned
    assert [s["module"] for s in proxy["prod-eu-1"]["spec"]["syncs"]] == [
        "podinfo",
        "storefront-api",
        "storefront-web",
        "web",
    ]
    assert not (stack.out / "proxy/staging-ap-3").exists()
    assert "monitoring" not in stack.latest("module_status")


def test_poison_events_go_to_dead_letters_and_the_stream_keeps_going(stack: Stack) -> None:
    stack.send("intents", "garbage", b"{not json")
    stack.send("clusters", "half", b'{"type": "ClusterObserved"}')
    stack.send("intents", "misplaced", Tick(now=1.0))
    stack.send("intents", "podinfo", b'{"type": "RolloutCommanded", "module": "podinfo", "command": "explode"}')
    late = cluster_event("staging-eu-4", ready=True)
    stack.send("clusters", "staging-eu-4", late)
    wait_for("staging-eu-4's files", lambda: "remote/fleet/staging-eu-4/flux-install.yaml" in stack.files())
    letters = [r.json() for r in stack.records("dead_letters")]
    reasons = {letter["key"]: letter["reason"] for letter in letters}
    assert reasons["garbage"].startswith("not JSON")
    assert "cluster" in reasons["half"] and "Field required" in reasons["half"]
    assert reasons["misplaced"] == f"Tick events belong on {stack.topics.ticks}"
    assert "command" in reasons["podinfo"]
    assert all(letter["topic"].startswith(stack.prefix) for letter in letters)
    assert letters[0]["value"] == "{not json"


def test_worker_restart_recovers_state_without_duplicate_or_missing_snapshots(stack: Stack) -> None:
    before = stack.latest("proxy")["prod-eu-1"]
    assert stack.stop_worker() == 0
    stack.start_worker()
    labels = {"env": "prod", "region": "us", "ring": "canary", "rollout.dev/order": "1"}
    stack.send("clusters", "prod-eu-1", cluster_event("prod-eu-1", ready=True, labels=labels))

    def moved() -> dict | None:
        now = stack.latest("proxy")["prod-eu-1"]
        return now if now["version"] >= before["version"] + 2 else None

    # both modules that bind REGION are re-expanded: one new snapshot each
    after = wait_for("prod-eu-1's re-expanded snapshot", moved)
    assert after["version"] == before["version"] + 2
    syncs = {sync["module"]: sync for sync in after["spec"]["syncs"]}
    podinfo, web = syncs["podinfo"], syncs["web"]
    assert podinfo["sync"]["package"]["kustomize"]["substitute"]["REGION"] == "us"
    assert web["sync"]["package"]["helm"]["values"]["ui"]["message"] == "prod-eu-1 in us"
    for role in ("remote", "proxy"):
        versions: dict[str, list[int]] = {}
        for record in stack.records(role):
            if record.value is not None:
                versions.setdefault(record.key, []).append(record.json()["version"])
        for cluster, seen in versions.items():
            assert seen == sorted(set(seen)), f"{role} {cluster}: duplicate or out-of-order versions {seen}"
    # state survived: podinfo is still soaking on its canary, not started over
    assert stack.latest("module_status")["podinfo"]["phase"] == "Soaking"


def test_replay_of_the_log_reproduces_the_projections_exactly(stack: Stack) -> None:
    wait_for("the stream to settle", lambda: stack.latest("proxy")["prod-eu-1"]["version"] >= 1)
    result = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "identical" in result.output


def test_status_shows_stages_and_latest_decisions(stack: Stack) -> None:
    output = run_cli(stack, "status", "podinfo")
    assert "Soaking" in output and "canary" in output and "wave-2" in output
    history = json.loads(run_cli(stack, "history", "podinfo", "-o", "json"))
    actions = [d["action"] for d in history]
    assert actions.index("stage-started") < actions.index("assign") < actions.index("stage-succeeded")


RELEASE = ("storefront-web", "storefront-api")  # examples/release.yaml
PROD = {"prod-eu-1", "prod-us-2", "prod-ap-3", "prod-eu-4", "prod-us-5", "prod-ap-6", "prod-eu-7", "prod-us-8"}


def test_the_example_release_is_planned_shown_and_completes_once_approved(stack: Stack) -> None:
    plan = run_cli(stack, "plan", "-f", str(EXAMPLES), "--clusters", str(EXAMPLES / "clusters.yaml"))
    assert "release storefront, with storefront-api" in plan and "release storefront, with storefront-web" in plan

    def phases() -> list[str]:
        statuses = stack.latest("module_status")
        return [statuses[name]["phase"] if name in statuses else "-" for name in RELEASE]

    # its canary is done for both members; its rest waits for an approval of each
    wait_for("the release's canary done", lambda: phases() == ["AwaitingApproval"] * 2, timeout=120)
    shown = json.loads(run_cli(stack, "status", "storefront-web", "-o", "json"))["releaseStatus"]
    assert (shown["name"], [m["module"] for m in shown["members"]]) == ("storefront", list(RELEASE))
    assert [
        c["cluster"] for c in shown["clusters"] if all(t["state"] == "succeeded" for t in c["members"].values())
    ] == ["prod-eu-1"]
    assert "Release storefront" in run_cli(stack, "status", "storefront-api")
    stack.send("clusters", "prod-ap-6", cluster_event("prod-ap-6", ready=True))  # every prod cluster ready
    for name in RELEASE:
        run_cli(stack, "approve", name, "--stage", "rest")
    wait_for("the release complete", lambda: phases() == ["Complete"] * 2, timeout=180)
    shown = json.loads(run_cli(stack, "status", "storefront-api", "-o", "json"))["releaseStatus"]
    assert shown["phase"] == "Complete" and [m["stableRevision"] for m in shown["members"]] == ["6.7.1", "6.7.1"]
    assert {c["cluster"] for c in shown["clusters"]} == PROD
    assert all(t["state"] == "succeeded" for c in shown["clusters"] for t in c["members"].values())
    assert {f"proxy/{c}/{m}.yaml" for c in PROD for m in RELEASE} <= stack.files()


def test_files_survive_as_written_by_an_atomic_sink(stack: Stack) -> None:
    leftovers = [p for p in Path(stack.out).rglob("*") if p.name.startswith(".") and p.suffix == ".tmp"]
    assert leftovers == []


def test_a_new_applier_on_an_empty_directory_writes_the_whole_fleet_again(stack: Stack, tmp_path: Path) -> None:
    """Same consumer group, committed offsets at the end: the directory still gets filled."""
    expected = stack.files()
    assert stack.applier is not None
    stack.applier.terminate()
    assert stack.applier.wait(timeout=60) == 0
    other = tmp_path / "fresh-out"
    applier = stack._spawn("applier-2", "applier", "--sink", f"dir:{other}", "--web-port", "0")
    try:
        wait_for(
            "the fresh directory to hold the whole fleet",
            lambda: other.exists() and {str(p.relative_to(other)) for p in other.rglob("*.yaml")} == expected,
        )
    finally:
        applier.terminate()
        applier.wait(timeout=60)
