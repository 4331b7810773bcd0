"""The generated `rollout.dev` CRDs: committed copy equals the generator's output, and a
real kube-apiserver accepts them, stores Modules that `rollout apply` accepts, refuses
what the schema forbids, keeps approvals immutable, and prints the columns `kubectl get`
shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from projections.crd_schema import CHART_CRDS, GROUP, VERSION, crds_yaml
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout_cli.main import cli
from tests.kube.cluster import KubeCluster
from tests.kube.rollout_objects import create, install_rollout_crds, module_object

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_committed_crds_are_what_the_generator_produces() -> None:
    assert CHART_CRDS.read_text() == crds_yaml(), "run: python -m projections.crd_schema --write"


def test_rollout_crds_prints_the_generated_crds() -> None:
    result = CliRunner().invoke(cli, ["crds"])
    assert result.exit_code == 0, result.output
    kinds = [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(result.output) if d]
    assert kinds == [
        "Module",
        "BootstrapModule",
        "RolloutApproval",
        "RolloutCommand",
        "RolloutBreakGlass",
        "ModuleRestriction",
        "FreezeCalendar",
        "ClusterFreezeCalendar",
    ]
    assert result.output == crds_yaml()


@pytest.fixture
async def management_with_crds(management: KubeCluster) -> KubeCluster:
    await install_rollout_crds(management)
    return management


async def test_the_example_modules_are_stored_as_they_were_applied(management_with_crds: KubeCluster) -> None:
    """What the server stores (its schema defaults filled in) is the manifest `rollout apply` reads."""
    for document in yaml.safe_load_all((EXAMPLES / "modules.yaml").read_text()):
        stored = await create(management_with_crds, "modules", document)
        reread = MANIFEST_ADAPTER.validate_python(
            {"apiVersion": stored["apiVersion"], "kind": stored["kind"], "metadata": document["metadata"]}
            | {"spec": stored["spec"]}
        )
        assert reread == MANIFEST_ADAPTER.validate_python(document)


async def test_a_boolean_concurrency_is_refused_by_the_api_server(management_with_crds: KubeCluster) -> None:
    body = module_object("web", stages=[{"name": "canary", "maxConcurrency": True}])
    with pytest.raises(ApiException) as refused:
        await create(management_with_crds, "modules", body)
    assert refused.value.status == 422
    assert "maxConcurrency" in json.loads(refused.value.body)["message"]


async def test_an_approval_cannot_be_changed_once_created(management_with_crds: KubeCluster) -> None:
    approval = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutApproval",
        "metadata": {"name": "web-prod", "namespace": "fleet"},
        "spec": {"module": "web", "stage": "prod", "approver": "alice"},
    }
    await create(management_with_crds, "rolloutapprovals", approval)
    async with management_with_crds.client() as api:
        with pytest.raises(ApiException) as refused:
            await CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "fleet",
                "rolloutapprovals",
                "web-prod",
                [{"op": "replace", "path": "/spec/stage", "value": "other"}],
            )
    assert refused.value.status == 422, refused.value.body
    assert "spec is immutable" in json.loads(refused.value.body)["message"]


async def test_kubectl_get_modules_shows_phase_target_stable_progress_age(management_with_crds: KubeCluster) -> None:
    await create(management_with_crds, "modules", module_object("web"))
    async with management_with_crds.client() as api:
        table = await api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/fleet/modules",
            "GET",
            header_params={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Phase", "Target", "Stable", "Progress", "Age"]
    assert table["rows"][0]["cells"][0] == "web"


async def test_a_helm_module_with_nested_values_round_trips_unchanged(management_with_crds: KubeCluster) -> None:
    """Free-form values keep every key: the API server would prune them to {} without
    `x-kubernetes-preserve-unknown-fields`."""
    documents = list(yaml.safe_load_all((EXAMPLES / "helm.yaml").read_text()))
    [document] = [d for d in documents if d and d.get("kind") == "Module"]
    helm = document["spec"]["sync"]["package"]["helm"]
    helm["values"]["extra"] = {"deep": {"list": [1, {"x": None}, "s"], "flag": True, "ratio": 0.5}}
    stored = await create(management_with_crds, "modules", document)
    stored_helm = stored["spec"]["sync"]["package"]["helm"]
    for layer in ("values", "chartDefaults", "stageValues", "clusterValues", "valuesPolicy"):
        assert stored_helm[layer] == helm[layer], layer
    reread = MANIFEST_ADAPTER.validate_python({**document, "spec": stored["spec"]})
    assert reread == MANIFEST_ADAPTER.validate_python(document)
