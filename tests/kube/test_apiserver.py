"""The fake API server behaves like kube-apiserver where the fault-injection tests depend on it.

Every request goes through kubernetes-asyncio over HTTP, as in the applier tests, so these
tests also pin down that the client is used the way a real server expects (apply-patch
content type, field manager, force).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi, V1ObjectMeta, V1Secret
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from projections.watcher import list_secret_metadata
from tests.kube.apiserver import KubeAPIServer

KS = ("kustomize.toolkit.fluxcd.io", "v1")
APPLY = "application/apply-patch+yaml"


@pytest.fixture
def management(fake_management: KubeAPIServer) -> KubeAPIServer:
    """These tests are about the fake: `management` is the fake here, not the real server."""
    return fake_management


def kustomization(name: str = "app", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": "fleet", "labels": {"team": "a"}},
        "spec": {"interval": "10m", "prune": True, "sourceRef": {"kind": "GitRepository", "name": "src"}, **spec},
    }


async def apply(custom: CustomObjectsApi, body: dict[str, Any], *, manager: str = "rollout", force: bool = True) -> Any:
    """Apply and return the object. A create-on-apply answers 201 Created, for which
    kubernetes-asyncio's generated client returns None (its response map has 200 only)."""
    name = body["metadata"]["name"]
    result = await custom.patch_namespaced_custom_object(
        *KS, "fleet", "kustomizations", name, body, field_manager=manager, force=force, _content_type=APPLY
    )
    return (
        result
        if result is not None
        else await custom.get_namespaced_custom_object(*KS, "fleet", "kustomizations", name)
    )


async def test_apply_creates_then_updates_and_bumps_generation_only_on_spec_changes(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        created = await apply(custom, kustomization())
        assert created["metadata"]["generation"] == 1
        again = await apply(custom, kustomization())
        assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]  # a no-op
        relabelled = kustomization()
        relabelled["metadata"]["labels"]["team"] = "b"
        relabelled = await apply(custom, relabelled)
        assert relabelled["metadata"]["generation"] == 1
        assert int(relabelled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
        changed = await apply(custom, kustomization(path="./other"))
        assert changed["metadata"]["generation"] == 2
        assert changed["metadata"]["managedFields"][0]["manager"] == "rollout"
        assert changed["metadata"]["managedFields"][0]["operation"] == "Apply"


async def test_apply_removes_fields_the_manager_stopped_applying(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await apply(custom, kustomization(path="./deploy", targetNamespace="apps"))
        result = await apply(custom, kustomization(path="./deploy"))
        assert "targetNamespace" not in result["spec"]
        assert result["spec"]["path"] == "./deploy"


async def test_apply_conflicts_with_another_manager_unless_forced(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await apply(custom, kustomization(path="./a"), manager="someone-else")
        with pytest.raises(ApiException) as raised:
            await apply(custom, kustomization(path="./b"), force=False)
        assert raised.value.status == 409
        assert "someone-else" in json.loads(raised.value.body)["message"]
        forced = await apply(custom, kustomization(path="./b"), force=True)
        assert forced["spec"]["path"] == "./b"
        managers = {entry["manager"] for entry in forced["metadata"]["managedFields"]}
        assert managers == {"rollout", "someone-else"}  # someone-else still owns the fields it shares


async def test_objects_that_fail_the_crd_schema_are_rejected(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        with pytest.raises(ApiException) as raised:
            await apply(custom, kustomization(interval="ten minutes"))
        assert raised.value.status == 422
        assert "spec.interval" in json.loads(raised.value.body)["message"]
        with pytest.raises(ApiException) as raised:
            await apply(custom, kustomization(healthcheck=[]))
        assert raised.value.status == 422
    assert management.objects("kustomizations") == []


async def test_json_patch_with_an_object_body_is_refused_like_a_real_server(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await apply(custom, kustomization())
        with pytest.raises(ApiException) as raised:  # no _content_type: kubernetes-asyncio sends JSON patch
            await custom.patch_namespaced_custom_object(*KS, "fleet", "kustomizations", "app", kustomization())
        assert raised.value.status in (400, 415)


async def test_status_subresource_is_separate_from_the_spec(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        body = kustomization()
        body["status"] = {"observedGeneration": 7}
        created = await apply(custom, body)
        assert "status" not in created
        status = {"status": {"observedGeneration": 1, "lastAppliedRevision": "6.7.0@sha1:" + "a" * 40}}
        patched = await custom.patch_namespaced_custom_object_status(
            *KS, "fleet", "kustomizations", "app", status, _content_type="application/merge-patch+json"
        )
        assert patched["status"]["observedGeneration"] == 1
        assert patched["metadata"]["generation"] == 1
        with pytest.raises(ApiException) as raised:
            await custom.patch_namespaced_custom_object_status(
                *KS,
                "fleet",
                "kustomizations",
                "app",
                {"status": {"observedGeneration": "x"}},
                _content_type="application/merge-patch+json",
            )
        assert raised.value.status == 422


async def test_watch_streams_changes_from_a_resource_version(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await apply(custom, kustomization("one"))
        listing = await custom.list_namespaced_custom_object(*KS, "fleet", "kustomizations", label_selector="team=a")
        since = listing["metadata"]["resourceVersion"]

        async def changes() -> None:
            await asyncio.sleep(0.1)
            await apply(custom, kustomization("two"))
            await custom.delete_namespaced_custom_object(*KS, "fleet", "kustomizations", "one")

        seen = []
        writer = asyncio.create_task(changes())
        async with watch.Watch() as stream:
            async for event in stream.stream(
                custom.list_namespaced_custom_object,
                *KS,
                "fleet",
                "kustomizations",
                resource_version=since,
                timeout_seconds=1,
            ):
                seen.append((event["type"], event["object"]["metadata"]["name"]))
        await writer
        assert seen == [("ADDED", "two"), ("DELETED", "one")]


async def test_a_compacted_history_answers_410_gone(management: KubeAPIServer) -> None:
    async with management.client() as api:
        custom = CustomObjectsApi(api)
        await apply(custom, kustomization("one"))
        await apply(custom, kustomization("two"))
        management.compact()
        with pytest.raises(ApiException) as raised:
            async with watch.Watch() as stream:
                async for _ in stream.stream(
                    custom.list_namespaced_custom_object,
                    *KS,
                    "fleet",
                    "kustomizations",
                    resource_version="1",
                    timeout_seconds=1,
                ):
                    pass
        assert raised.value.status == 410


async def test_label_selectors_and_metadata_only_secret_lists(management: KubeAPIServer) -> None:
    async with management.client() as api:
        core = CoreV1Api(api)
        for name, labels in (("a-kubeconfig", {"x": "1"}), ("b-kubeconfig", {"x": "2"}), ("other", {})):
            await core.create_namespaced_secret(
                "fleet",
                V1Secret(
                    metadata=V1ObjectMeta(name=name, labels=labels), data={"value": base64.b64encode(b"s").decode()}
                ),
            )
        selected = await core.list_namespaced_secret("fleet", label_selector="x in (1,3),x!=2")
        assert [s.metadata.name for s in selected.items] == ["a-kubeconfig"]
        partial = await list_secret_metadata(api, "fleet")
        assert partial["kind"] == "PartialObjectMetadataList"
        assert {item["metadata"]["name"] for item in partial["items"]} == {"a-kubeconfig", "b-kubeconfig", "other"}
        assert all("data" not in item for item in partial["items"])


async def test_wrong_token_is_unauthorized_and_faults_are_injected_per_path(management: KubeAPIServer) -> None:
    other = management.kubeconfig(token="not-the-token")
    api = await new_client_from_config_dict(other)
    try:
        with pytest.raises(ApiException) as raised:
            await CoreV1Api(api).list_namespaced_secret("fleet")
        assert raised.value.status == 401
    finally:
        await api.close()
    management.inject(r"/secrets", status=503, times=1)
    async with management.client() as api:
        with pytest.raises(ApiException) as raised:
            await CoreV1Api(api).list_namespaced_secret("fleet")
        assert raised.value.status == 503
        assert (await CoreV1Api(api).list_namespaced_secret("fleet")).items == []
