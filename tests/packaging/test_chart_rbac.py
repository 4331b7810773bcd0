"""The Helm chart's RBAC (charts/rollout): exactly the intended rules for each component,
rendered with the default values and with every charts/rollout/ci/*-values.yaml — namespaced
or cluster-wide, only the named kubeconfig secrets, no wildcards, one service account each,
no rights for the worker, and the admission policy that confines the applier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from projections.render import LABEL_MANAGED_BY, MANAGED_BY
from tests.packaging.conftest import (
    CI,
    FLUX_WRITE,
    KUBECONFIG_SECRETS,
    NAMESPACE,
    READ,
    Render,
    by_values,
)
from tests.packaging.objects import (
    component,
    containers,
    engine_processes,
    of_kind,
)

try:
    from infra.observability import HEALTH_PATHS
except ImportError:  # before streams/observability.py existed; the lead exports the same tuple
    HEALTH_PATHS = ("/healthz", "/readyz", "/metrics")


# --- RBAC -----------------------------------------------------------------------------------------

Rule = tuple[str, str, frozenset[str], tuple[str, ...]]  # (API group, resource, verbs, resourceNames)


def expand(rules: list[dict[str, Any]]) -> set[Rule]:
    return {
        (group, resource, frozenset(rule["verbs"]), tuple(sorted(rule.get("resourceNames", []))))
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def watcher_rules() -> set[Rule]:
    return {
        ("cluster.x-k8s.io", "clusters", READ, ()),
        ("", "secrets", frozenset({"list", "watch"}), ()),
    }


def module_watcher_rules() -> set[Rule]:
    objects = ("modules", "bootstrapmodules", "rolloutapprovals", "rolloutcommands", "rolloutbreakglasses")
    return (
        {("rollout.dev", plural, READ, ()) for plural in (*objects, "modulerestrictions", "freezecalendars")}
        | {("rollout.dev", f"{plural}/status", frozenset({"get", "update", "patch"}), ()) for plural in objects}
        | {("", "events", frozenset({"create", "patch"}), ())}
    )


CALENDAR_RULES = {("rollout.dev", "clusterfreezecalendars", READ, ())}
"""The fleet's ClusterFreezeCalendars: cluster-scoped, so a ClusterRole whatever the fleet namespaces."""


def lease_rules(lease: str) -> set[Rule]:
    return {
        ("coordination.k8s.io", "leases", frozenset({"create"}), ()),
        ("coordination.k8s.io", "leases", frozenset({"get", "update"}), (lease,)),
    }


def dashboard_rules() -> set[Rule]:
    """Who a token is and what a user may do: the dashboard asks, it never reads or writes objects."""
    return {
        ("authentication.k8s.io", "tokenreviews", frozenset({"create"}), ()),
        ("authorization.k8s.io", "subjectaccessreviews", frozenset({"create"}), ()),
    }


DASHBOARD_GRANTS = {("rollout-dashboard", None): dashboard_rules()}

LEASE_GRANTS = {
    ("rollout-watcher", NAMESPACE): lease_rules("rollout-watcher"),
    ("rollout-module-watcher", NAMESPACE): lease_rules("rollout-module-watcher"),
}


def applier_rules(secret_names: tuple[str, ...] = ()) -> set[Rule]:
    return {
        ("source.toolkit.fluxcd.io", "gitrepositories", FLUX_WRITE, ()),
        ("source.toolkit.fluxcd.io", "ocirepositories", FLUX_WRITE, ()),
        ("source.toolkit.fluxcd.io", "helmrepositories", FLUX_WRITE, ()),
        ("kustomize.toolkit.fluxcd.io", "kustomizations", FLUX_WRITE, ()),
        ("helm.toolkit.fluxcd.io", "helmreleases", FLUX_WRITE, ()),
        ("", "secrets", frozenset({"get"}), secret_names),
    }


def applier_read_rules() -> set[Rule]:
    return {
        ("source.toolkit.fluxcd.io", "gitrepositories", READ, ()),
        ("source.toolkit.fluxcd.io", "ocirepositories", READ, ()),
        ("source.toolkit.fluxcd.io", "helmrepositories", READ, ()),
        ("kustomize.toolkit.fluxcd.io", "kustomizations", READ, ()),
        ("helm.toolkit.fluxcd.io", "helmreleases", READ, ()),
    }


def grants(objects: list[dict[str, Any]]) -> dict[tuple[str, str | None], set[Rule]]:
    """(ServiceAccount, namespace of the grant or None for cluster-wide) -> rules it gets."""
    roles = {
        (r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]): r
        for r in objects
        if r["kind"] in ("Role", "ClusterRole")
    }
    found: dict[tuple[str, str | None], set[Rule]] = {}
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
            found.setdefault((subject["name"], namespace), set()).update(expand(role["rules"]))
    return found


def test_rbac_rules_default_to_the_release_namespace(render: Render) -> None:
    assert (
        grants(render(None))
        == {
            ("rollout-watcher", NAMESPACE): watcher_rules() | lease_rules("rollout-watcher"),
            ("rollout-module-watcher", NAMESPACE): module_watcher_rules() | lease_rules("rollout-module-watcher"),
            ("rollout-applier", NAMESPACE): applier_rules(),
            ("rollout-applier", None): applier_read_rules(),
            ("rollout-module-watcher", None): CALENDAR_RULES,
        }
        | DASHBOARD_GRANTS
    )


def test_rbac_rules_cover_each_fleet_namespace_and_only_the_named_kubeconfig_secrets(render: Render) -> None:
    assert (
        grants(render(CI["replicas"]))
        == {
            ("rollout-watcher", "fleet-eu"): watcher_rules(),
            ("rollout-watcher", "fleet-us"): watcher_rules(),
            ("rollout-module-watcher", "fleet-eu"): module_watcher_rules(),
            ("rollout-module-watcher", "fleet-us"): module_watcher_rules(),
            ("rollout-applier", "fleet-eu"): applier_rules(KUBECONFIG_SECRETS),
            ("rollout-applier", "fleet-us"): applier_rules(KUBECONFIG_SECRETS),
            ("rollout-applier", None): applier_read_rules(),
            ("rollout-module-watcher", None): CALENDAR_RULES,
        }
        | LEASE_GRANTS
        | DASHBOARD_GRANTS
    )  # the Leases stay in the release namespace
    for name in ("watcher", "module-watcher"):
        watcher = component(render(CI["replicas"]), name)
        namespaces = [watcher.args[i + 1] for i, arg in enumerate(watcher.args) if arg == "--namespace"]
        assert namespaces == ["fleet-eu", "fleet-us"], name


def test_rbac_rules_cluster_wide(render: Render) -> None:
    objects = render(CI["servicemonitor"])
    assert {r["metadata"]["name"] for r in of_kind(objects, "Role")} == {
        "rollout-watcher-lease",
        "rollout-module-watcher-lease",
    }
    assert (
        grants(objects)
        == {
            ("rollout-watcher", None): watcher_rules(),
            ("rollout-module-watcher", None): module_watcher_rules() | CALENDAR_RULES,
            ("rollout-applier", None): applier_rules(),
        }
        | LEASE_GRANTS
        | DASHBOARD_GRANTS
    )  # the Leases stay in the release namespace: a Role, not a ClusterRole
    assert "--namespace" not in component(objects, "watcher").args
    assert "--namespace" not in component(objects, "module-watcher").args


@by_values
def test_the_worker_has_no_kubernetes_rights_and_no_token(render: Render, values_file: Path | None) -> None:
    objects = render(values_file)
    worker = component(objects, "worker")
    assert worker.pod["automountServiceAccountToken"] is False
    assert not [key for key in grants(objects) if key[0] == worker.pod["serviceAccountName"]]
    topics = [c for c in containers(objects) if c.component == "topics"]
    assert all(c.pod["automountServiceAccountToken"] is False for c in topics)


@by_values
def test_no_rule_uses_wildcards(render: Render, values_file: Path | None) -> None:
    for obj in render(values_file):
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], obj["metadata"]["name"]


@by_values
def test_each_component_runs_under_its_own_service_account(render: Render, values_file: Path | None) -> None:
    objects = render(values_file)
    accounts = {sa["metadata"]["name"] for sa in of_kind(objects, "ServiceAccount")}
    for container in engine_processes(objects):
        assert container.pod["serviceAccountName"] == f"rollout-{container.component}"
        assert container.pod["serviceAccountName"] in accounts


def test_admission_policy_confines_the_applier_to_the_engines_flux_objects(render: Render) -> None:
    objects = render(None)
    (policy,) = of_kind(objects, "ValidatingAdmissionPolicy")
    (binding,) = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    covered = {
        (group, resource, op)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for op in rule["operations"]
    }
    flux = {(g, r) for g, r, verbs, _ in applier_rules() if "create" in verbs}
    assert covered == {(g, r, op) for g, r in flux for op in ("CREATE", "UPDATE", "DELETE")}
    applier_account = component(objects, "applier").pod["serviceAccountName"]
    (condition,) = spec["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:{applier_account}" in condition["expression"]
    label_check = f"labels['{LABEL_MANAGED_BY}'] == '{MANAGED_BY}'"
    new, old = spec["validations"]
    assert f"object.metadata.{label_check}" in new["expression"]
    assert f"oldObject.metadata.{label_check}" in old["expression"]
