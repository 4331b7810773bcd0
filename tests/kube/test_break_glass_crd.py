"""The Kubernetes door to break-glass: a RolloutBreakGlass object, on the real kube-apiserver
(RBAC authorization) with the chart's ValidatingAdmissionPolicy, becomes one
CalendarBreakGlass on the intents topic with the Kubernetes user who created it.

Two users, the service accounts `alice` and `bob` (bearer tokens from the TokenRequest API:
real authenticated users to RBAC and to the policy): a Role lets alice create
RolloutBreakGlasses in `fleet`; bob may create RolloutCommands and RolloutApprovals there —
which grants no break-glass. alice's object in her own name reaches the intents topic as a
break-glass of the FreezeCalendar `fleet/quiet` (its namespace's: a namespaced object lifts
only its namespace's calendars) with `user` = her username and `via: crd`; one she signs as
someone else is refused by the policy; bob's is refused by RBAC; one whose `until` has no
offset is not published, and its status says why. The engine's side:
tests/rollout/test_freeze_calendars.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi, RbacAuthorizationV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra import client
from infra.topics import TopicNames
from rollout.wire.events import CalendarBreakGlass, parse_event
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import eventually
from tests.kube.rollout_objects import GROUP, VERSION
from tests.kube.test_approvals_rbac import install_approval_rbac, remove_policy, user_token
from tests.kube.test_module_watcher import running_watcher

pytestmark = pytest.mark.integration

UNTIL = "2199-12-24T18:00:00Z"  # far ahead: the engine's time never reaches it in this test


async def create_as(cluster: KubeCluster, token: str, body: dict[str, Any]) -> dict[str, Any]:
    config = cluster.kubeconfig()
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    api = await new_client_from_config_dict(config)
    async with api:
        return await api.call_api(  # type: ignore[no-any-return]
            f"/apis/{GROUP}/{VERSION}/namespaces/fleet/rolloutbreakglasses",
            "POST",
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            response_types_map={201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )


def break_glass(name: str, requested_by: str, until: str = UNTIL) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutBreakGlass",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "calendar": "quiet",
            "reason": "sev-1: the fix must ship",
            "until": until,
            "requestedBy": requested_by,
        },
    }


async def grant(cluster: KubeCluster, user: str, role: str, resources: list[str]) -> None:
    async with cluster.client() as api:
        rbac = RbacAuthorizationV1Api(api)
        for kind in ("role", "role_binding"):
            try:
                await getattr(rbac, f"delete_namespaced_{kind}")(role, "fleet")
            except ApiException as error:
                if error.status != 404:
                    raise
        rules = [{"apiGroups": [GROUP], "resources": resources, "verbs": ["create", "get", "list"]}]
        await rbac.create_namespaced_role("fleet", {"metadata": {"name": role}, "rules": rules})
        await rbac.create_namespaced_role_binding(
            "fleet",
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": "fleet"}],
            },
        )


@pytest.fixture
async def rbac_cluster(management: KubeCluster) -> AsyncIterator[KubeCluster]:
    """The management cluster with the chart's admission policy (as in a real install), alice
    an incident commander, bob an operator; the policy goes again afterwards."""
    installed = await install_approval_rbac(management)
    await grant(management, "alice", "incident-commander", ["rolloutbreakglasses"])
    await grant(management, "bob", "rollout-operator", ["rolloutcommands", "rolloutapprovals"])
    yield management
    await remove_policy(management, installed)


async def test_rbac_decides_who_breaks_the_glass_and_the_kubernetes_user_is_recorded(
    rbac_cluster: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    alice, bob = await user_token(rbac_cluster, "alice"), await user_token(rbac_cluster, "bob")
    alice_name = "system:serviceaccount:fleet:alice"

    async def policy_refuses_impostor() -> str | None:  # the policy takes a moment to load
        try:
            await create_as(rbac_cluster, alice, break_glass("impostor", "system:serviceaccount:fleet:bob"))
        except ApiException as error:
            message = json.loads(error.body)["message"]
            return message if "spec.requestedBy must be the user creating the break-glass" in message else None
        async with rbac_cluster.client() as api:  # admitted before the policy was loaded: try again
            await CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, "fleet", "rolloutbreakglasses", "impostor"
            )
        return None

    refused = await eventually(policy_refuses_impostor, timeout=20, interval=0.5)
    assert alice_name in refused

    with pytest.raises(ApiException) as forbidden:  # commands and approvals grant no break-glass
        await create_as(rbac_cluster, bob, break_glass("by-bob", "system:serviceaccount:fleet:bob"))
    assert forbidden.value.status == 403 and "cannot create resource" in json.loads(forbidden.value.body)["message"]

    async with running_watcher(rbac_cluster, kafka_bootstrap, topic_prefix):
        await create_as(rbac_cluster, alice, break_glass("by-alice", alice_name))
        await create_as(rbac_cluster, alice, break_glass("no-offset", alice_name, until="2199-12-24T18:00:00"))

        async def published() -> list[tuple[str | None, CalendarBreakGlass]]:
            records = await client.read_all(kafka_bootstrap, TopicNames(topic_prefix).intents)
            found = [(r.key, parse_event(r.value)) for r in records]
            return [(key, e) for key, e in found if isinstance(e, CalendarBreakGlass)]

        [(key, glass)] = await eventually(published)

        async def invalid_status() -> dict[str, Any] | None:
            async with rbac_cluster.client() as api:
                obj = await CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, "fleet", "rolloutbreakglasses", "no-offset"
                )
            status = obj.get("status") or {}
            return status if status.get("verdict") == "Invalid" else None

        status = await eventually(invalid_status, timeout=20)
        await asyncio.sleep(0.5)
        assert len(await published()) == 1  # the one without an offset is never published
    assert key == "freeze/fleet/quiet"
    assert (glass.scope, glass.name, glass.user, glass.via) == ("fleet", "quiet", alice_name, "crd")
    assert (glass.reason, glass.until) == ("sev-1: the fix must ship", 7_257_492_000.0)  # 2199-12-24T18:00:00Z
    assert "until" in status["message"] and "needs its offset" in status["message"]
