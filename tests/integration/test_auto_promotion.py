"""Auto-promotion end to end on the real broker: a real worker, a real `rollout promoter`
process, a real OCI registry (the CNCF distribution registry) and a real Helm repository
(index.yaml over HTTP behind basic auth, its credentials a Secret mounted in the promoter's
--secrets-dir), and the `rollout promotion hold|resume` CLI. The test plays the appliers
(status reports) and pushes new versions.

A new tag in range becomes the target and rolls out; tags outside the range and
pre-releases are not promoted; held by command, a newer tag is recorded as available and
shown, not promoted, and `resume` promotes it; a chart version from a private Helm index is
promoted the same way. A Release auto-promoted as a unit (`rollout apply` of the Release):
new versions of two members become one combination its leader decides, every member
moving to it together; held and resumed on the release by `rollout promotion hold|resume
release/NAME`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.localflux.sources.helm import HelmRepository
from infra.localflux.sources.oci import OCIRegistry
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from tests.integration.stack import Stack, free_port, started, wait_for
from tests.integration.test_staged_rollout import Driver
from tests.support.promotion_sources import (  # noqa: F401 - fixtures
    CHART_USER,
    add_charts,
    chart_repository,
    push_versions,
    registry,
)

pytestmark = pytest.mark.integration
PROMOTER = "promoter-it"


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Secret the Helm source names, as a Kubernetes Secret volume mounts it."""
    root = tmp_path_factory.mktemp("source-secrets")
    (root / "charts-auth").mkdir()
    (root / "charts-auth" / "username").write_text(CHART_USER[0])
    (root / "charts-auth" / "password").write_text(CHART_USER[1])
    return root


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, secrets_dir: Path) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("promotion")) as stack:
        yield from with_promoter(stack, secrets_dir)


def with_promoter(stack: Stack, secrets_dir: Path) -> Iterator[Stack]:
    """`rollout promoter` beside the worker, every second, reading Secrets from `secrets_dir`."""
    promoter = stack._spawn(
        "promoter",
        "promoter",
        "--interval",
        "1s",
        "--name",
        PROMOTER,
        "--secrets-dir",
        str(secrets_dir),
        "--web-port",
        str(free_port()),
    )
    try:
        yield stack
    finally:
        stack._stop(promoter)


def fleet(stack: Stack, app: str) -> None:
    for name, ring in ((f"{app}-c1", "canary"), (f"{app}-w1", "wave")):
        cluster = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "fleet", "labels": {"app": app, "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
        stack.send("clusters", name, ClusterObserved(cluster=MANIFEST_ADAPTER.validate_python(cluster)))


def promoted_module(app: str, source: dict[str, Any], package: dict[str, Any] | None = None) -> ModuleApplied:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": app}},
        "sync": {"source": source, **({"package": package} if package else {})},
        "rollout": {"stages": [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}]},
    }
    document = {"apiVersion": "rollout.dev/v1alpha1", "kind": "Module", "metadata": {"name": app, "namespace": "fleet"}}
    return ModuleApplied(module=MANIFEST_ADAPTER.validate_python({**document, "spec": spec}))


def status(stack: Stack, app: str) -> dict[str, Any]:
    return stack.latest("module_status").get(app) or {}


def cli(stack: Stack, *args: str) -> str:
    code, output = stack.rollout(*args)
    assert code == 0, output
    return output


def test_oci_tags_are_promoted_in_range_held_by_command_and_resumed(stack: Stack, registry: OCIRegistry) -> None:  # noqa: F811
    push_versions(registry, "it/tram", "1.0.0")
    source = {
        "oci": {"url": f"{registry.url}/it/tram", "version": {"tag": "1.0.0"}, "insecure": True},
        "autoPromote": {"semver": ">=1.0.0 <2.0.0"},
    }
    fleet(stack, "tram")
    stack.send("intents", "tram", promoted_module("tram", source))
    driver = Driver(stack, "tram")
    driver.until("Complete", stable="1.0.0")

    push_versions(registry, "it/tram", "2.0.0", "1.2.0-rc.1", "1.1.0")  # out of range, a pre-release, in range
    driver.until("Complete", stable="1.1.0")
    assert {t["revision"] for t in driver.targets().values()} == {"1.1.0"}
    promoted = [d.json() for d in stack.records("decisions") if d.key == "tram" and d.json()["action"] == "promoted"]
    assert [(d["because"]["version"], d["because"]["promoter"]) for d in promoted] == [("1.1.0", PROMOTER)]
    assert promoted[0]["reason"] == f"promoted 1.0.0 → 1.1.0 from oci {registry.url}/it/tram, seen by {PROMOTER}"

    held = cli(stack, "promotion", "hold", "tram", "--reason", "change freeze")
    assert "accepted" in held, held
    push_versions(registry, "it/tram", "1.3.0")
    available = wait_for(
        "1.3.0 recorded as available, held",
        lambda: (status(stack, "tram").get("promotion") or {}).get("available") == "1.3.0" and status(stack, "tram"),
        timeout=60,
    )
    assert available["targetRevision"] == "1.1.0"
    assert available["promotion"]["heldBy"]["reason"] == "change freeze"
    assert available["promotion"]["heldBy"]["via"] == "cli"
    shown = cli(stack, "status", "tram")
    assert "1.3.0 available, held" in " ".join(shown.split()), shown

    cli(stack, "promotion", "resume", "tram")
    driver.until("Complete", stable="1.3.0")
    final = status(stack, "tram")["promotion"]
    assert final.get("available") is None and final["promoted"] == "1.3.0" and final.get("heldBy") is None


def test_a_chart_version_from_a_private_helm_index_is_promoted(stack: Stack, chart_repository: HelmRepository) -> None:  # noqa: F811
    add_charts(chart_repository, "ferry", "1.0.0")
    source = {
        "helm": {
            "url": chart_repository.url,
            "chart": "ferry",
            "version": "1.0.0",
            "secretRef": {"name": "charts-auth"},
        },
        "autoPromote": {"semver": "~1.0"},
    }
    fleet(stack, "ferry")
    stack.send("intents", "ferry", promoted_module("ferry", source, {"helm": {}}))
    driver = Driver(stack, "ferry")
    driver.until("Complete", stable="1.0.0")
    add_charts(chart_repository, "ferry", "1.0.3", "1.1.0")  # ~1.0: patch releases only
    driver.until("Complete", stable="1.0.3")
    assert status(stack, "ferry")["promotion"]["source"]["secretRef"] == "charts-auth"


def oci_source(url: str, tag: str) -> dict[str, Any]:
    return {"url": url, "version": {"tag": tag}, "insecure": True}


def settle_members(stack: Stack, members: tuple[str, ...]) -> None:
    """Play the appliers for every member: each cluster updating reports success."""
    for member in members:
        Driver(stack, member).step()


def test_a_release_is_promoted_as_one_combination_held_and_resumed_on_the_release(
    stack: Stack,
    registry: OCIRegistry,  # noqa: F811
    tmp_path: Path,
) -> None:
    members = ("bus", "depot")  # depot's version is fixed; bus and stop follow ranges
    push_versions(registry, "it/bus", "1.0.0")
    push_versions(registry, "it/stop", "3.0.0")
    fleet(stack, "line")
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {"sync": {"source": {"oci": oci_source(f"{registry.url}/it/{repo}", tag)}}},
        }
        for name, repo, tag in (("bus", "bus", "1.0.0"), ("stop", "stop", "3.0.0"), ("depot", "stop", "3.0.0"))
    ]
    documents.append(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Release",
            "metadata": {"name": "line", "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": "line"}},
                "rollout": {
                    "stages": [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}]
                },
                "autoPromote": {},
                "modules": [
                    {"name": "bus", "semver": ">=1.0.0 <2.0.0"},
                    {"name": "stop", "semver": "^3.0.0"},
                    {"name": "depot"},
                ],
            },
        }
    )
    path = tmp_path / "line.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    cli(stack, "apply", "-f", str(path))
    names = (*members, "stop")

    def complete(bus: str, stop: str) -> bool:
        settle_members(stack, names)
        statuses = stack.latest("module_status")
        revisions = {n: (statuses.get(n) or {}).get("stableRevision") for n in names}
        phases = {(statuses.get(n) or {}).get("phase") for n in names}
        return phases == {"Complete"} and revisions == {"bus": bus, "stop": stop, "depot": "3.0.0"}

    wait_for("release line complete at its first combination", lambda: complete("1.0.0", "3.0.0"), timeout=240)

    # new versions of both followed members: one combination, decided by the leader (bus)
    push_versions(registry, "it/bus", "1.1.0", "2.0.0")
    push_versions(registry, "it/stop", "3.1.0")
    wait_for("the new combination complete", lambda: complete("1.1.0", "3.1.0"), timeout=240)
    decided = [d.json() for d in stack.records("decisions") if d.json()["action"] == "release-promoted"]
    # the promoter may read bus's new tag before stop's is pushed: then (1.1.0, 3.0.0) is a
    # combination of its own first — every one is the leader's decision, the last the pair
    assert decided and {d["module"] for d in decided} == {"bus"}
    assert {(m["module"], m["version"]) for m in decided[-1]["because"]["members"]} == {
        ("bus", "1.1.0"),
        ("stop", "3.1.0"),
    }

    # held on the release (the CLI finds its leader), newer versions are recorded, not promoted
    held = cli(stack, "promotion", "hold", "release/line", "--reason", "change freeze")
    assert "release/line (its leader bus)" in held and "accepted" in held, held
    push_versions(registry, "it/stop", "3.2.0")
    available = wait_for(
        "3.2.0 recorded as available on the release",
        lambda: (
            ((status(stack, "bus").get("release") or {}).get("autoPromote") or {}).get("available") == {"stop": "3.2.0"}
        ),
        timeout=60,
    )
    assert available and status(stack, "stop")["targetRevision"] == "3.1.0"
    shown = " ".join(cli(stack, "status", "bus").split())
    assert "available stop 3.2.0, held" in shown and "held by" in shown, shown

    cli(stack, "promotion", "resume", "release/line")
    wait_for("the combination available promoted on resume", lambda: complete("1.1.0", "3.2.0"), timeout=240)
