"""Several applier replicas share the clusters through the Kafka consumer group: each
cluster — both its RemoteAssemblage and its ProxyAssemblage — is handled by exactly one
replica, and together they cover the fleet. When one replica stops, the other takes its
clusters over."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stack import EXAMPLES, Stack, free_port, wait_for

pytestmark = pytest.mark.integration


def clusters_in(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.yaml"):
        parts = path.relative_to(root).parts
        found.add(parts[2] if parts[0] == "remote" else parts[1])
    return found


def files_in(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.yaml")} if root.exists() else set()


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path, partitions=4)
    yield stack
    stack.stop()


def test_replicas_split_the_fleet_by_cluster_and_take_over(stack: Stack, tmp_path: Path) -> None:
    stack.start_worker()
    replicas: list[subprocess.Popen[bytes]] = []
    outs = [tmp_path / "replica-a", tmp_path / "replica-b"]
    try:
        for index, out in enumerate(outs):
            replicas.append(
                stack._spawn(f"applier-{index}", "applier", "--sink", f"dir:{out}", "--web-port", str(free_port()))
            )
        wait_for(
            "both replicas to join",
            lambda: all("Successfully synced group" in stack.log(f"applier-{i}") for i in range(2)),
        )
        stack.apply(EXAMPLES)
        # 23: no status is reported here, so web (dependsOn: flux-install) never moves, and
        # the Release storefront stays on its canary (2 files)
        wait_for("the example's files", lambda: len(files_in(outs[0]) | files_in(outs[1])) == 23)
        a, b = clusters_in(outs[0]), clusters_in(outs[1])
        assert a and b, "one replica did all the work"
        assert not a & b, f"clusters handled by both replicas: {a & b}"
        assert len(a | b) == 10

        replicas[0].terminate()
        assert replicas[0].wait(timeout=60) == 0
        # a new BootstrapModule reaches every cluster, replica A's too: B must apply all of it
        extra = tmp_path / "extra.yaml"
        extra.write_text((EXAMPLES / "bootstrap.yaml").read_text().replace("name: flux-install", "name: extra"))
        stack.apply(extra)
        wanted = {f"remote/fleet/{cluster}/extra.yaml" for cluster in a | b}
        wait_for("replica B to apply the new sync on A's clusters too", lambda: wanted <= files_in(outs[1]), timeout=90)
        assert not any("extra" in f for f in files_in(outs[0])), "the stopped replica still wrote"
    finally:
        for replica in replicas:
            replica.terminate()
            replica.wait(timeout=60)
