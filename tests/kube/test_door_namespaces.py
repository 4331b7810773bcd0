"""A namespace's RolloutCommands and RolloutApprovals command only its namespace's modules,
on the real kube-apiserver (RBAC authorization), with the real module watcher and a real
`rollout worker` on the session's broker.

Two users, the service accounts `alice` (namespace door-a) and `bob` (door-b), bearer tokens
from the TokenRequest API: a Role lets each create RolloutCommands and RolloutApprovals in
their own namespace only. The Module `door-web` lives in door-b and waits for an approval of
its stage `prod`. alice may not create anything in door-b (RBAC); in door-a she may — but
her RolloutCommand `pause` and RolloutApproval of `prod`, naming door-b's module, are refused
by the engine: their status says `Refused` as if door-a held no such module (nothing about
door-b), a dead letter names each
event, no decision is taken and the module stays unpaused, awaiting its approval. bob's same
two objects in door-b are accepted: paused, then approved, in his name via crd. The engine's
rule: tests/rollout/test_door_namespaces.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api, V1ObjectMeta
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra import client
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decisions import DecisionDocument
from rollout.wire.status import ModuleStatus
from tests.integration.stack import Stack
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import eventually
from tests.kube.rollout_objects import GROUP, VERSION, install_rollout_crds, module_object
from tests.kube.test_module_watcher import running_watcher

pytestmark = pytest.mark.integration

DOOR_A, DOOR_B = "door-a", "door-b"
MODULE = "door-web"
ALICE, BOB = f"system:serviceaccount:{DOOR_A}:alice", f"system:serviceaccount:{DOOR_B}:bob"
REQUESTS = ("rolloutcommands", "rolloutapprovals")


async def clear(api: Any) -> None:
    custom = CustomObjectsApi(api)
    for namespace in (DOOR_A, DOOR_B):
        for plural in ("modules", *REQUESTS):
            await custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, plural)


async def operator(api: Any, namespace: str, name: str) -> str:
    """A service account of `namespace` that may create commands and approvals there only; its token."""
    core, rbac = CoreV1Api(api), RbacAuthorizationV1Api(api)
    for create in (
        lambda: core.create_namespace({"metadata": {"name": namespace}}),
        lambda: core.create_namespaced_service_account(namespace, {"metadata": V1ObjectMeta(name=name)}),
        lambda: rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "rollout-operator"},
                "rules": [{"apiGroups": [GROUP], "resources": list(REQUESTS), "verbs": ["create", "get", "list"]}],
            },
        ),
        lambda: rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "rollout-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollout-operator"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        ),
    ):
        try:
            await create()
        except ApiException as error:
            if error.status != 409:
                raise
    issued = await core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}}
    )
    return str(issued.status.token)


@pytest.fixture
async def doors(management: KubeCluster) -> AsyncIterator[dict[str, str]]:
    """The CRDs, the two namespaces and their operators' tokens; their objects gone afterwards."""
    await install_rollout_crds(management)
    async with management.client() as api:
        tokens = {DOOR_A: await operator(api, DOOR_A, "alice"), DOOR_B: await operator(api, DOOR_B, "bob")}
        await clear(api)
    yield tokens
    async with management.client() as api:
        await clear(api)


async def create_as(cluster: KubeCluster, token: str, namespace: str, plural: str, body: dict[str, Any]) -> None:
    config = cluster.kubeconfig()
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    api = await new_client_from_config_dict(config)
    async with api:
        await api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}",
            "POST",
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            response_types_map={201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )


def pause(name: str, namespace: str, by: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutCommand",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"module": MODULE, "command": "pause", "requestedBy": by},
    }


def approve(name: str, namespace: str, by: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutApproval",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"module": MODULE, "stage": "prod", "approver": by},
    }


async def verdict_of(cluster: KubeCluster, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
    """The object's status once the engine's verdict is on it."""
    async with cluster.client() as api:
        found = await CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    status = found.get("status") or {}
    return status if status.get("verdict") in ("Accepted", "Refused") else None


async def test_a_namespaces_doors_command_only_its_namespaces_modules(
    management: KubeCluster, doors: dict[str, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    stack = await asyncio.to_thread(Stack, kafka_bootstrap, tmp_path)
    topics = stack.topics

    async def status() -> ModuleStatus | None:
        latest = await client.read_latest(kafka_bootstrap, topics.module_status)
        return ModuleStatus.read(latest[MODULE]) if MODULE in latest else None

    async def decisions() -> list[DecisionDocument]:
        records = await client.read_all(kafka_bootstrap, topics.decisions)
        found = [DecisionDocument.read(r.value) for r in records]
        return [d for d in found if d.module == MODULE]

    try:
        await asyncio.to_thread(stack.start_worker)
        async with running_watcher(management, kafka_bootstrap, stack.prefix):
            module = module_object(MODULE, stages=[{"name": "canary"}, {"name": "prod", "requireApproval": True}])
            module["metadata"]["namespace"] = DOOR_B
            async with management.client() as api:
                await CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, DOOR_B, "modules", module)

            async def awaiting_approval() -> ModuleStatus | None:
                found = await status()
                return found if found is not None and found.phase == "AwaitingApproval" else None

            assert (await eventually(awaiting_approval, timeout=90, interval=0.5)).namespace == DOOR_B

            # RBAC: alice may create nothing in door-b
            with pytest.raises(ApiException) as forbidden:
                await create_as(management, doors[DOOR_A], DOOR_B, "rolloutcommands", pause("by-alice", DOOR_B, ALICE))
            assert forbidden.value.status == 403

            # in door-a she may — naming door-b's module, the engine refuses both
            await create_as(management, doors[DOOR_A], DOOR_A, "rolloutcommands", pause("by-alice", DOOR_A, ALICE))
            await create_as(management, doors[DOOR_A], DOOR_A, "rolloutapprovals", approve("by-alice", DOOR_A, ALICE))
            doors_used = [
                ("rolloutcommands", "pause", "RolloutCommand"),
                ("rolloutapprovals", "approve", "RolloutApproval"),
            ]
            for plural, command, kind in doors_used:
                refused = await eventually(lambda p=plural: verdict_of(management, DOOR_A, p, "by-alice"), timeout=60)
                assert refused["verdict"] == "Refused", refused
                assert refused["message"] == (
                    f"{command} {MODULE}: no module {MODULE} in namespace {DOOR_A}; "
                    f"a {kind} commands only the modules of its own namespace"
                )
            letters = [DeadLetter.read(r.value) for r in await client.read_all(kafka_bootstrap, topics.dead_letters)]
            assert sorted(letter.reason.split(":")[0] for letter in letters if DOOR_A in letter.reason) == [
                f"approve {MODULE}",
                f"pause {MODULE}",
            ]
            unchanged = await status()
            assert unchanged is not None and (unchanged.phase, unchanged.paused) == ("AwaitingApproval", False)
            assert [d for d in await decisions() if d.via == "crd"] == []

            # bob, in the module's own namespace: accepted, in his name
            await create_as(management, doors[DOOR_B], DOOR_B, "rolloutcommands", pause("by-bob", DOOR_B, BOB))
            accepted = await eventually(lambda: verdict_of(management, DOOR_B, "rolloutcommands", "by-bob"), timeout=60)
            assert accepted["verdict"] == "Accepted", accepted
            await create_as(management, doors[DOOR_B], DOOR_B, "rolloutapprovals", approve("by-bob", DOOR_B, BOB))
            accepted = await eventually(
                lambda: verdict_of(management, DOOR_B, "rolloutapprovals", "by-bob"), timeout=60
            )
            assert accepted["verdict"] == "Accepted", accepted

            async def by_bob() -> list[tuple[str, str | None, str | None]] | None:
                found = [(d.action, d.user, d.via) for d in await decisions() if d.via == "crd"]
                return found if len(found) >= 2 else None

            assert await eventually(by_bob, timeout=60) == [("paused", BOB, "crd"), ("approved", BOB, "crd")]
            paused = await status()
            assert paused is not None and paused.paused
    finally:
        await asyncio.to_thread(stack.stop)
        assert json.dumps(stack.log("worker")).count("Traceback") == 0, stack.log("worker")[-3000:]
