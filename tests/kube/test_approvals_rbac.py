"""Approvals decided by RBAC, on the real kube-apiserver (RBAC authorization) with the
chart's ValidatingAdmissionPolicy, and the approver recorded as the Kubernetes user.

Two users, the service accounts `alice` and `bob` (bearer tokens from the TokenRequest
API: real authenticated users to RBAC and to the policy): a Role lets alice create
RolloutApprovals; bob has no grant. alice's approval in her own name is admitted and
reaches the intents topic with `user` = her username; an approval she signs as someone
else is refused by the policy; bob's is refused by RBAC. The groups an approval claims
(`spec.approverGroups`, what a stage's `approval.groups` counts) are admitted only when
they are the creating user's own: alice's service-account group travels to the engine as
`groups`; a group she is not in is refused by the policy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import (
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
    V1ObjectMeta,
    V1ServiceAccount,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from infra import client
from infra.topics import TopicNames
from rollout.wire.events import RolloutCommanded, parse_event
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import eventually
from tests.kube.rollout_objects import GROUP, VERSION, install_rollout_crds
from tests.kube.test_module_watcher import running_watcher
from tests.packaging.conftest import CHART, Helm, install_helm

pytestmark = pytest.mark.integration


def chart_policy() -> list[dict[str, Any]]:
    """The approval policy and its binding, as the chart renders them."""
    rendered = Helm(install_helm()).run(
        "template", "rollout", str(CHART), "--namespace", "fleet", "--kube-version", "1.33.0",
        "--set", "approvals.admissionPolicy.enabled=true", "--show-only", "templates/approval-policy.yaml",
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(rendered) if d]


async def user_token(cluster: KubeCluster, name: str) -> str:
    async with cluster.client() as api:
        core = CoreV1Api(api)
        try:
            await core.create_namespaced_service_account("fleet", V1ServiceAccount(metadata=V1ObjectMeta(name=name)))
        except ApiException as error:
            if error.status != 409:
                raise
        issued = await core.create_namespaced_service_account_token(
            name, "fleet", {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}}
        )
    return str(issued.status.token)


async def create_as(
    cluster: KubeCluster, token: str, body: dict[str, Any], plural: str = "rolloutapprovals"
) -> dict[str, Any]:
    config = cluster.kubeconfig()
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    api = await new_client_from_config_dict(config)
    async with api:
        return await api.call_api(  # type: ignore[no-any-return]
            f"/apis/{GROUP}/{VERSION}/namespaces/fleet/{plural}",
            "POST",
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            response_types_map={201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )


def approval(name: str, approver: str, groups: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"module": "web", "stage": "prod", "approver": approver}
    if groups is not None:
        spec["approverGroups"] = groups
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutApproval",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": spec,
    }


@pytest.fixture
async def rbac_cluster(management: KubeCluster) -> AsyncIterator[KubeCluster]:
    """The management cluster with the chart's approval policy (cluster-wide, like in a real
    install) and alice's Role; the policy goes again afterwards — the session shares the
    API server, and other tests create approvals signed for anyone."""
    installed = await install_approval_rbac(management)
    yield management
    await remove_policy(management, installed)


async def install_approval_rbac(management: KubeCluster) -> list[str]:
    """Install the policy, its binding and alice's Role; the policy objects' API paths."""
    installed: list[str] = []
    await install_rollout_crds(management)
    async with management.client() as api:
        for document in chart_policy():
            group, version = document["apiVersion"].split("/")
            plural = (
                "validatingadmissionpolicies"
                if document["kind"] == "ValidatingAdmissionPolicy"
                else "validatingadmissionpolicybindings"
            )
            path = f"/apis/{group}/{version}/{plural}"
            installed.append(f"{path}/{document['metadata']['name']}")
            try:
                await api.call_api(
                    path,
                    "POST",
                    body=document,
                    auth_settings=["BearerToken"],
                    header_params={"Content-Type": "application/json"},
                )
            except ApiException as error:
                if error.status != 409:
                    raise
        rbac = RbacAuthorizationV1Api(api)
        for kind in ("role", "role_binding"):
            for name in ("rollout-approver",):
                try:
                    await getattr(rbac, f"delete_namespaced_{kind}")(name, "fleet")
                except ApiException as error:
                    if error.status != 404:
                        raise
        await rbac.create_namespaced_role(
            "fleet",
            {
                "metadata": {"name": "rollout-approver"},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "resources": ["rolloutapprovals", "rolloutcommands"],
                        "verbs": ["create", "get", "list"],
                    }
                ],
            },
        )
        await rbac.create_namespaced_role_binding(
            "fleet",
            {
                "metadata": {"name": "rollout-approver"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollout-approver"},
                "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "fleet"}],
            },
        )
    return installed


async def remove_policy(management: KubeCluster, installed: list[str]) -> None:
    """Delete the policy objects, then wait until admission lets an approval signed for
    someone else through again (a dry run: nothing is stored)."""
    async with management.client() as api:
        for path in installed:
            try:
                await api.call_api(path, "DELETE", auth_settings=["BearerToken"])
            except ApiException as error:
                if error.status != 404:
                    raise

        async def admitted() -> bool | None:
            try:
                await CustomObjectsApi(api).create_namespaced_custom_object(
                    GROUP, VERSION, "fleet", "rolloutapprovals", approval("policy-gone", "someone-else"), dry_run="All"
                )
            except ApiException as error:
                if error.status == 403:
                    return None
                raise
            return True

        assert await eventually(admitted, timeout=20, interval=0.5), "the approval policy is still in force"


async def test_rbac_decides_who_approves_and_the_approver_is_the_kubernetes_user(
    rbac_cluster: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    alice, bob = await user_token(rbac_cluster, "alice"), await user_token(rbac_cluster, "bob")
    alice_name = "system:serviceaccount:fleet:alice"

    async def policy_refuses_impostor() -> str | None:  # the policy takes a moment to load
        try:
            await create_as(rbac_cluster, alice, approval("impostor", "system:serviceaccount:fleet:bob"))
        except ApiException as error:
            message = json.loads(error.body)["message"]
            return message if "spec.approver must be the user creating the approval" in message else None
        async with rbac_cluster.client() as api:  # admitted before the policy was loaded: try again
            await CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, "fleet", "rolloutapprovals", "impostor"
            )
        return None

    refused = await eventually(policy_refuses_impostor, timeout=20, interval=0.5)
    assert alice_name in refused

    with pytest.raises(ApiException) as forbidden:
        await create_as(rbac_cluster, bob, approval("by-bob", "system:serviceaccount:fleet:bob"))
    assert forbidden.value.status == 403 and "cannot create resource" in json.loads(forbidden.value.body)["message"]

    with pytest.raises(ApiException) as not_her_group:
        await create_as(rbac_cluster, alice, approval("claims-a-group", alice_name, ["release-managers"]))
    assert not_her_group.value.status == 422 or not_her_group.value.status == 403
    assert (
        "spec.approverGroups must be groups of the user creating the approval"
        in json.loads(not_her_group.value.body)["message"]
    )

    async with running_watcher(rbac_cluster, kafka_bootstrap, topic_prefix):
        await create_as(rbac_cluster, alice, approval("by-alice", alice_name))
        await create_as(
            rbac_cluster, alice, approval("by-alice-in-group", alice_name, ["system:serviceaccounts:fleet"])
        )

        async def approvals() -> list[Any]:
            records = await client.read_all(kafka_bootstrap, TopicNames(topic_prefix).intents)
            found = [e for e in map(parse_event, (r.value for r in records)) if isinstance(e, RolloutCommanded)]
            return found if len(found) >= 2 else []

        approved, in_group = sorted(await eventually(approvals), key=lambda e: e.groups is not None)
        await asyncio.sleep(0.5)
    assert (approved.command, approved.module, approved.stage, approved.user) == ("approve", "web", "prod", alice_name)
    assert approved.groups is None  # claims no group: counts only where a stage names none
    assert (in_group.user, in_group.groups, in_group.via) == (alice_name, ["system:serviceaccounts:fleet"], "crd")
    assert len(await approvals()) == 2


async def test_a_release_approval_and_a_promotion_hold_come_through_the_kubernetes_doors(
    rbac_cluster: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A RolloutApproval naming a Release approves the stage for every member (the engine
    decides it once at the member named); a RolloutCommand holds (and resumes) a module's —
    or, at its leader, a Release's — auto-promotion, with the reason the object gives. Both
    signed by the Kubernetes user the admission policy checked."""
    alice = await user_token(rbac_cluster, "alice")
    alice_name = "system:serviceaccount:fleet:alice"
    for_release = approval("for-release-shop", alice_name)
    for_release["spec"]["release"] = "shop"
    hold = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutCommand",
        "metadata": {"name": "hold-shop", "namespace": "fleet"},
        "spec": {"module": "api", "command": "hold-promotion", "reason": "change freeze", "requestedBy": alice_name},
    }
    without_reason = {**hold, "metadata": {"name": "hold-without-reason", "namespace": "fleet"}}
    without_reason["spec"] = {k: v for k, v in hold["spec"].items() if k != "reason"}

    async with running_watcher(rbac_cluster, kafka_bootstrap, topic_prefix):
        await eventually(lambda: _admitted(rbac_cluster, alice, for_release), timeout=20, interval=0.5)
        await create_as(rbac_cluster, alice, hold, "rolloutcommands")
        await create_as(rbac_cluster, alice, without_reason, "rolloutcommands")

        async def published() -> list[Any]:
            records = await client.read_all(kafka_bootstrap, TopicNames(topic_prefix).intents)
            found = [e for e in map(parse_event, (r.value for r in records)) if isinstance(e, RolloutCommanded)]
            mine = [e for e in found if e.release == "shop" or e.command == "hold-promotion"]
            return mine if len(mine) >= 2 else []

        released, held = sorted(await eventually(published), key=lambda e: e.command)
        await asyncio.sleep(1.0)  # the object without a reason had its chance to be published
        assert len(await published()) == 2  # a hold without a reason is not published
    assert (released.command, released.module, released.stage, released.release) == ("approve", "web", "prod", "shop")
    assert (released.user, released.via) == (alice_name, "crd")
    assert (held.module, held.reason, held.user, held.via) == ("api", "change freeze", alice_name, "crd")


async def _admitted(cluster: KubeCluster, token: str, body: dict[str, Any]) -> bool | None:
    """Create `body` as the token's user once the admission policy is loaded (None: try again)."""
    try:
        await create_as(cluster, token, body)
    except ApiException as error:
        if error.status == 409:
            return True
        if error.status in (403, 422):
            return None
        raise
    return True
