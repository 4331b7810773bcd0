"""The chart as operators expect it: Kubernetes versions, pod labels, network policies,
disruption budgets, the Prometheus Operator objects (PodMonitor, PrometheusRule), the
Grafana dashboard and the Kubernetes sink's timings — rendered by a real `helm template`.

The version checks render for named Kubernetes versions (`--kube-version`), and once as a
live install would (`--api-versions v1/Pod`: Helm then knows kinds, as from discovery).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import invocation_problems
from tests.packaging.conftest import CHART, Helm, parse_manifests
from tests.packaging.objects import (
    component,
    containers,
    has_model,
    long_running,
    of_kind,
    pod_template,
    validation_problems,
)

SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def rendered(helm: Helm, tmp_path: Path, values: dict[str, Any], *extra: str) -> list[dict[str, Any]]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return parse_manifests(helm.template("--values", str(values_file), *extra).stdout)


def refusal(helm: Helm, tmp_path: Path, values: dict[str, Any]) -> str:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = helm.template("--values", str(values_file), check=False)
    assert result.returncode != 0, "helm template should have refused these values"
    return result.stderr


# --- Kubernetes versions -------------------------------------------------------------------


def test_chart_declares_the_kubernetes_versions_it_supports(helm: Helm) -> None:
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.22.0-0"
    result = helm.template("--kube-version", "1.21.0", check=False)
    assert result.returncode != 0 and "kubeVersion" in result.stderr


@pytest.mark.parametrize(
    ("kube_version", "api_versions", "policy"),
    [
        ("1.29.0", (), False),
        ("1.31.0", (), True),
        ("1.31.0", ("v1/Pod",), False),  # a live 1.31 cluster that does not serve the API
        ("1.31.0", ("v1/Pod", VAP), True),
    ],
    ids=["1.29", "1.31-offline", "1.31-live-without-api", "1.31-live"],
)
def test_admission_policy_is_rendered_only_where_the_api_exists(
    helm: Helm, kube_version: str, api_versions: tuple[str, ...], policy: bool
) -> None:
    args = ["--kube-version", kube_version, *(f"--api-versions={api}" for api in api_versions)]
    objects = parse_manifests(helm.template(*args).stdout)
    kinds = {obj["kind"] for obj in objects}
    assert ({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds) is policy
    assert policy or not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert component(objects, "applier").workload["kind"] == "Deployment"
    for obj in objects:
        if has_model(obj):
            assert validation_problems(obj) == [], obj["kind"]


# --- pod labels ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", SELECTOR_LABELS)
def test_a_pod_label_colliding_with_a_selector_label_is_refused(helm: Helm, tmp_path: Path, key: str) -> None:
    message = refusal(helm, tmp_path, {"podLabels": {key: "x"}})
    assert f'podLabels: "{key}" is a selector label' in message


def test_pod_labels_are_added_once_and_may_override_other_chart_labels(helm: Helm, tmp_path: Path) -> None:
    objects = rendered(helm, tmp_path, {"podLabels": {"team": "fleet", "app.kubernetes.io/version": "custom"}})
    for container in containers(objects):
        labels = pod_template(container.workload)["metadata"]["labels"]
        assert labels["team"] == "fleet" and labels["app.kubernetes.io/version"] == "custom"
        assert labels["app.kubernetes.io/component"] == container.component
    raw = helm.template("--set", "podLabels.app\\.kubernetes\\.io/version=custom").stdout
    for document in raw.split("\n---"):
        template = document.partition("  template:\n")[2]
        assert template.count("app.kubernetes.io/version:") <= 1, "a label rendered twice"


# --- network policies ----------------------------------------------------------------------


def policy_of(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (policy,) = [p for p in of_kind(objects, "NetworkPolicy") if p["metadata"]["labels"][SELECTOR_LABELS[2]] == name]
    return policy


def egress_ports(policy: dict[str, Any]) -> set[tuple[int, str]]:
    return {(port["port"], port["protocol"]) for rule in policy["spec"]["egress"] for port in rule["ports"]}


NOTIFYING = {"enabled": True, "webhooks": [{"name": "oncall", "url": "https://hooks.example.com"}]}


def test_network_policies_by_default_confine_every_process_the_chart_runs(helm: Helm, tmp_path: Path) -> None:
    values = {"kafka": {"bootstrapServers": "kafka-0:9092,kafka-1:9093"}, "notifier": NOTIFYING}
    objects = rendered(helm, tmp_path, {**values, "promoter": {"enabled": True}})
    policies = of_kind(objects, "NetworkPolicy")
    named = sorted(p["metadata"]["labels"][SELECTOR_LABELS[2]] for p in policies)
    assert named == sorted(
        [
            "applier",
            "dashboard",
            "gate-runner",
            "module-watcher",
            "notifier",
            "promoter",
            "snapshotter",
            "watcher",
            "worker",
        ]
    )
    dns_and_kafka = {(53, "UDP"), (53, "TCP"), (9092, "TCP"), (9093, "TCP")}
    api_servers = {(443, "TCP"), (6443, "TCP")}
    for name in ("worker", "snapshotter"):
        assert egress_ports(policy_of(objects, name)) == dns_and_kafka, name
    for name in ("applier", "watcher", "module-watcher"):
        assert egress_ports(policy_of(objects, name)) == dns_and_kafka | api_servers, name
    # the URLs of gates, webhooks, sources and the OpenID Provider are the user's: until
    # networkPolicy.external names them, these reach any address and port beside the rest
    for name in ("gate-runner", "notifier", "promoter", "dashboard"):
        egress = policy_of(objects, name)["spec"]["egress"]
        assert {} in egress, name
        api = api_servers if name == "dashboard" else set()
        assert egress_ports({"spec": {"egress": [r for r in egress if r]}}) == dns_and_kafka | api, name
    for policy in policies:
        assert validation_problems(policy) == []
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        component = policy["metadata"]["labels"][SELECTOR_LABELS[2]]
        selected = [
            c
            for c in containers(objects)
            if policy["spec"]["podSelector"]["matchLabels"].items()
            <= pod_template(c.workload)["metadata"]["labels"].items()
        ]
        assert {c.component for c in selected} == {component}
        if component == "snapshotter":  # its runs serve nothing
            assert policy["spec"]["ingress"] == []
            continue
        (ingress,) = policy["spec"]["ingress"]
        served = "http" if component == "dashboard" else "metrics"
        assert ingress["ports"] == [{"port": served, "protocol": "TCP"}], component
        assert any(p.get("name") == served for p in selected[0].spec["ports"]), component


def test_network_policies_leave_out_disabled_components_and_refuse_unknown_ones(helm: Helm, tmp_path: Path) -> None:
    objects = rendered(helm, tmp_path, {"dashboard": {"enabled": False}, "snapshotter": {"enabled": False}})
    named = {p["metadata"]["labels"][SELECTOR_LABELS[2]] for p in of_kind(objects, "NetworkPolicy")}
    assert named == {"worker", "applier", "watcher", "module-watcher", "gate-runner"}  # notifier, promoter: off
    refused = helm.template("--set", "networkPolicy.components={worker,grafana}", check=False)
    assert refused.returncode != 0 and "networkPolicy.components.1 must be one of" in refused.stderr


def test_network_policies_name_their_peers_and_can_be_turned_off(helm: Helm, tmp_path: Path) -> None:
    brokers = [{"ipBlock": {"cidr": "10.1.0.0/24"}}]
    values = {
        "networkPolicy": {"components": ["worker", "applier", "watcher"], "kafka": {"to": brokers}},
    }
    objects = rendered(helm, tmp_path, values)
    watcher = policy_of(objects, "watcher")
    kafka_rules = [rule for rule in watcher["spec"]["egress"] if {"port": 9092, "protocol": "TCP"} in rule["ports"]]
    assert [rule["to"] for rule in kafka_rules] == [brokers]
    endpoints = [{"ipBlock": {"cidr": "10.2.0.0/16"}}]
    ingress_controller = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    values = {
        "networkPolicy": {
            "external": {"ports": [443, 9090], "to": endpoints},
            "dashboard": {"from": ingress_controller},
        }
    }
    objects = rendered(helm, tmp_path, values)
    gates = policy_of(objects, "gate-runner")["spec"]["egress"]
    assert {} not in gates
    assert {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 9090, "protocol": "TCP"}], "to": endpoints} in gates
    dashboard = policy_of(objects, "dashboard")["spec"]
    assert dashboard["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}], "from": ingress_controller}]
    assert policy_of(objects, "worker")["spec"]["ingress"][0].get("from") is None
    assert of_kind(rendered(helm, tmp_path, {"networkPolicy": {"enabled": False}}), "NetworkPolicy") == []


# --- disruption budgets --------------------------------------------------------------------


def test_every_multi_replica_component_gets_a_disruption_budget(helm: Helm, tmp_path: Path) -> None:
    def budgets(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {pdb["metadata"]["labels"][SELECTOR_LABELS[2]]: pdb for pdb in of_kind(objects, "PodDisruptionBudget")}

    defaults = parse_manifests(helm.template().stdout)  # worker: 1 replica, applier and watchers: 2
    assert set(budgets(defaults)) == {"applier", "watcher", "module-watcher"}
    one_each = {"replicas": 1}
    objects = rendered(
        helm,
        tmp_path,
        {"worker": {"replicas": 3}, "applier": one_each, "watcher": one_each, "moduleWatcher": one_each},
    )
    assert set(budgets(objects)) == {"worker"}
    for name, budget in budgets(defaults).items():
        assert budget["spec"]["maxUnavailable"] == 1
        selector = budget["spec"]["selector"]["matchLabels"]
        selected = [
            c.component
            for c in long_running(defaults)
            if selector.items() <= pod_template(c.workload)["metadata"]["labels"].items()
        ]
        assert selected == [name]


# --- leader election ------------------------------------------------------------------------

WATCHERS = {"watcher": "watch-clusters", "module-watcher": "watch-modules"}


def test_watchers_run_two_candidates_for_their_own_lease_named_through_the_downward_api(
    helm: Helm, tmp_path: Path
) -> None:
    objects = parse_manifests(helm.template().stdout)
    roles = {r["metadata"]["name"]: r for r in of_kind(objects, "Role")}
    for name, command in WATCHERS.items():
        watcher = component(objects, name)
        assert watcher.args[0] == command
        assert watcher.workload["spec"]["replicas"] == 2
        assert watcher.workload["spec"]["strategy"] == {"type": "RollingUpdate"}
        assert "--leader-elect" in watcher.args
        lease = watcher.flag("--lease-name")
        assert lease == watcher.workload["metadata"]["name"]  # one Lease per watcher and release
        timings = [watcher.flag(f) for f in ("--lease-duration", "--renew-deadline", "--retry-period")]
        assert timings == ["15", "10", "2"]
        assert watcher.env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert watcher.env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        lease_role = roles[f"{lease}-lease"]
        assert lease_role["metadata"]["namespace"] == watcher.workload["metadata"]["namespace"]
        assert {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": [
                "get",
                "update",
            ],
        } in lease_role["rules"]


def test_without_leader_election_each_watcher_runs_alone_and_two_are_refused(helm: Helm, tmp_path: Path) -> None:
    alone = {"replicas": 1}
    objects = rendered(helm, tmp_path, {"leaderElection": {"enabled": False}, "watcher": alone, "moduleWatcher": alone})
    for name in WATCHERS:
        watcher = component(objects, name)
        assert watcher.workload["spec"]["strategy"] == {"type": "Recreate"}
        assert "--leader-elect" not in watcher.args and "POD_NAME" not in watcher.env
    assert not [r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-lease")]
    message = refusal(helm, tmp_path, {"leaderElection": {"enabled": False}, "moduleWatcher": alone})
    assert "watcher.replicas is 2" in message and "needs leaderElection.enabled" in message


@pytest.mark.parametrize(
    ("timings", "why"),
    [
        ({"leaseDuration": 10, "renewDeadline": 10}, "the leader may renew no later than another takes over"),
        ({"renewDeadline": 2, "retryPeriod": 2}, "a renewal needs more than one try"),
    ],
)
def test_lease_timings_that_cannot_work_are_refused(
    helm: Helm, tmp_path: Path, timings: dict[str, int], why: str
) -> None:
    message = refusal(helm, tmp_path, {"leaderElection": timings})
    assert "leaseDuration > renewDeadline > 1.2 x retryPeriod" in message, why


# --- Prometheus Operator and Grafana -------------------------------------------------------


def test_pod_monitor_scrapes_the_metrics_port_of_every_pod(helm: Helm, tmp_path: Path) -> None:
    objects = rendered(helm, tmp_path, {"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    (monitor,) = of_kind(objects, "PodMonitor")
    assert of_kind(objects, "ServiceMonitor") == []
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [
        c.component
        for c in long_running(objects)
        if selector.items() <= pod_template(c.workload)["metadata"]["labels"].items()
        and any(p.get("name") == "metrics" for p in c.spec["ports"])
    ]
    assert sorted(scraped) == ["applier", "gate-runner", "module-watcher", "watcher", "worker"]


def test_pod_monitor_and_service_monitor_together_are_refused(helm: Helm, tmp_path: Path) -> None:
    message = refusal(
        helm, tmp_path, {"metrics": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}}
    )
    assert "choose one" in message


def test_prometheus_rule_alerts_with_the_thresholds_of_the_values(helm: Helm, tmp_path: Path) -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True, "approvalWait": "2h", "consumerLag": 50}}}
    (rule,) = of_kind(rendered(helm, tmp_path, values), "PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {
        "RolloutHalted",
        "RolloutAwaitingApprovalTooLong",
        "RolloutConsumerLagHigh",
        "RolloutDeadLettersRising",
        "RolloutApplierErrors",
        "RolloutDecisionLatencyHigh",
        "RolloutWorkerHeapSettleForced",
    }
    assert alerts["RolloutAwaitingApprovalTooLong"]["for"] == "2h"
    assert alerts["RolloutConsumerLagHigh"]["expr"].endswith("> 50")
    assert 'phase="Halted"' in alerts["RolloutHalted"]["expr"]
    assert '{kind="forced"}[1h]' in alerts["RolloutWorkerHeapSettleForced"]["expr"]
    for alert in alerts.values():
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert "{{ $labels." in alert["annotations"]["summary"] or "{{ $value" in alert["annotations"]["summary"]
    assert of_kind(parse_manifests(helm.template().stdout), "PrometheusRule") == []


def test_grafana_dashboard_ships_as_a_configmap_the_sidecar_finds(helm: Helm, tmp_path: Path) -> None:
    objects = rendered(helm, tmp_path, {"metrics": {"grafanaDashboard": {"enabled": True}}})
    (config,) = [c for c in of_kind(objects, "ConfigMap") if "rollout.json" in c.get("data", {})]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config["data"]["rollout.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "rollout.json").read_text())
    assert dashboard["uid"] == "rollout-engine" and len(dashboard["panels"]) >= 10
    assert all(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])


# --- the Kubernetes sink's timings ---------------------------------------------------------


def test_kubernetes_sink_timings_become_applier_flags_the_cli_accepts(helm: Helm, tmp_path: Path) -> None:
    timings = {"resyncInterval": 30, "notReadyInterval": 5, "requestTimeout": 7, "writeTimeout": 3, "maxBackoff": 60}
    values = {"applier": {"kubernetesSink": {**timings, "driftWatch": False}}}
    applier = component(rendered(helm, tmp_path, values), "applier")
    flags = {
        "--resync-interval": "30",
        "--not-ready-interval": "5",
        "--request-timeout": "7",
        "--write-timeout": "3",
        "--max-backoff": "60",
    }
    assert {flag: applier.flag(flag) for flag in flags} == flags
    assert "--no-drift-watch" in applier.args
    assert invocation_problems(applier.args, applier.plain_env()) == []
    directory = component(rendered(helm, tmp_path, {"applier": {"sink": "dir:/data"}}), "applier")
    assert not {"--resync-interval", "--drift-watch", "--no-drift-watch"} & set(directory.args)
