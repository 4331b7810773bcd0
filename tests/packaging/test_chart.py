"""The Helm chart (charts/rollout): lint, render, and check what it would run.

Rendered with the default values and with every charts/rollout/ci/*-values.yaml (SASL/TLS,
several replicas, ServiceMonitor, minimal, directory sink), the chart must produce
valid Kubernetes objects whose containers run real `rollout` command lines with variables
the program reads, probe paths the program serves, and exactly the intended RBAC.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra import settings
from tests.packaging.cli_surface import (
    KAFKA_SECURITY_ENV,
    commands,
    envvars_of,
    invocation_problems,
    kafka_security_env_in_source,
    options_of,
    pending_entries_now_in_cli,
    readable_env,
    split_command,
)
from tests.packaging.conftest import (
    CHART,
    CI,
    CI_VALUES,
    NAMESPACE,
    RELEASE,
    Helm,
    Render,
    by_values,
    merged_values,
    parse_manifests,
    values_args,
)
from tests.packaging.objects import (
    component,
    containers,
    engine_processes,
    has_model,
    long_running,
    of_kind,
    pod_template,
    validation_problems,
    workloads,
)

try:
    from infra.observability import HEALTH_PATHS
except ImportError:  # before streams/observability.py existed; the lead exports the same tuple
    HEALTH_PATHS = ("/healthz", "/readyz", "/metrics")


def test_ci_values_files_cover_the_issue() -> None:
    assert {"sasl", "replicas", "servicemonitor"} <= set(CI)


# --- lint and schema ----------------------------------------------------------------------


@by_values
def test_chart_lints_strictly(helm: Helm, values_file: Path | None) -> None:
    helm.run("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_args(values_file))


def test_values_schema_is_valid_and_accepts_every_shipped_values_file() -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(defaults)


class UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
        assert not duplicates, f"duplicate keys {duplicates} at line {node.start_mark.line + 1}"
        return super().construct_mapping(node, deep=deep)


@pytest.mark.parametrize("values_file", [CHART / "values.yaml", *CI_VALUES], ids=lambda p: p.name)
def test_values_files_have_no_duplicate_keys(values_file: Path) -> None:
    # Helm silently keeps the last of duplicate keys, so a duplicated block is lost unseen.
    yaml.load(values_file.read_text(), Loader=UniqueKeyLoader)  # a SafeLoader subclass


REJECTED = {
    "negative-worker-replicas": ({"worker": {"replicas": -1}}, "worker.replicas"),
    "negative-applier-replicas": ({"applier": {"replicas": -1}}, "applier.replicas"),
    # The worker's state is in Kafka now (streams/state.py): the Faust-era values are gone.
    "removed-worker-store": ({"worker": {"store": "rocksdb://"}}, "store"),
    "removed-worker-persistence": ({"worker": {"persistence": {"enabled": True}}}, "persistence"),
    "missing-bootstrap": ({"kafka": {"bootstrapServers": None}}, "bootstrapServers is required"),
    "empty-bootstrap": ({"kafka": {"bootstrapServers": ""}}, "kafka.bootstrapServers"),
    "bootstrap-without-port": ({"kafka": {"bootstrapServers": "kafka-0,kafka-1"}}, "kafka.bootstrapServers"),
    "unknown-security-protocol": ({"kafka": {"securityProtocol": "SASL"}}, "kafka.securityProtocol"),
    "sasl-without-secret": (
        {"kafka": {"securityProtocol": "SASL_SSL", "sasl": {"mechanism": "SCRAM-SHA-512"}}},
        "kafka.sasl.existingSecret",
    ),
    "sasl-without-mechanism": (
        {"kafka": {"securityProtocol": "SASL_PLAINTEXT", "sasl": {"existingSecret": "kafka-user"}}},
        "kafka.sasl.mechanism",
    ),
    "ca-on-plaintext": ({"kafka": {"tls": {"caSecret": "kafka-ca"}}}, "kafka.securityProtocol"),
    "zero-partitions": ({"kafka": {"partitions": 0}}, "kafka.partitions"),
    "unknown-sink": ({"applier": {"sink": "s3://bucket"}}, "applier.sink"),
    "simulated-status-on-kubernetes": ({"applier": {"simulateStatus": True}}, "applier.sink"),
    "flux-interval-in-words": ({"applier": {"fluxInterval": "10 minutes"}}, "applier.fluxInterval"),
    "privileged-web-port": ({"worker": {"webPort": 80}}, "worker.webPort"),
    "unknown-log-format": ({"logFormat": "xml"}, "logFormat"),
    "unknown-log-level": ({"logLevel": "verbose"}, "logLevel"),
    "misspelled-key": ({"worker": {"replica": 3}}, "replica"),
    "servicemonitor-without-service": (
        {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
        "metrics.service.enabled",
    ),
    "malformed-digest": ({"image": {"digest": "sha256:abc"}}, "image.digest"),
    "invalid-namespace": ({"rbac": {"namespaces": ["Fleet_A"]}}, "rbac.namespaces"),
    "negative-tick": ({"worker": {"tickInterval": 0}}, "worker.tickInterval"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_schema_rejects_bad_values_at_install_time(helm: Helm, tmp_path: Path, case: str) -> None:
    values, field = REJECTED[case]
    values_file = tmp_path / f"{case}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = helm.template("--values", str(values_file), check=False)
    assert result.returncode != 0, f"{case}: the chart rendered although {values} is invalid"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert field in result.stderr, f"{case}: the error does not name {field}:\n{result.stderr}"


# --- objects --------------------------------------------------------------------------------


@by_values
def test_every_rendered_object_is_a_valid_kubernetes_object(render: Render, values_file: Path | None) -> None:
    objects = render(values_file)
    assert objects
    problems: list[str] = []
    seen: set[tuple[str, str, str | None]] = set()
    for obj in objects:
        assert obj.get("apiVersion") and obj.get("kind") and obj.get("metadata", {}).get("name"), obj
        identity = (obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        assert identity not in seen, f"{identity} rendered twice"
        seen.add(identity)
        if has_model(obj):
            problems += validation_problems(obj)
        else:
            assert obj["kind"] == "ServiceMonitor", f"no Kubernetes model to validate {obj['kind']} against"
    assert not problems, "\n".join(problems)


@by_values
def test_objects_carry_the_release_labels(render: Render, values_file: Path | None) -> None:
    for obj in render(values_file):
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE, obj["metadata"]["name"]
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", obj["metadata"]["name"]


@by_values
def test_containers_have_an_image_and_long_running_ones_have_probes(render: Render, values_file: Path | None) -> None:
    for container in containers(render(values_file)):
        assert container.spec.get("image"), container.spec["name"]
        assert container.spec.get("resources", {}).get("requests"), container.spec["name"]
    for container in long_running(render(values_file)):
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert probe in container.spec, f"{container.component} has no {probe}"


@by_values
def test_probes_point_at_paths_the_program_serves_on_its_web_port(render: Render, values_file: Path | None) -> None:
    expected = {"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"}
    assert set(expected.values()) <= set(HEALTH_PATHS)
    for container in long_running(render(values_file)):
        # the dashboard serves its UI and health paths on one port, `--port`
        port_name, flag = ("http", "--port") if container.component == "dashboard" else ("metrics", "--web-port")
        ports = {port["name"]: port["containerPort"] for port in container.spec["ports"]}
        assert str(ports[port_name]) == container.flag(flag), container.component
        for probe, path in expected.items():
            http = container.spec[probe]["httpGet"]
            assert http["path"] == path, f"{container.component} {probe}"
            assert http["port"] == port_name, f"{container.component} {probe}"


@by_values
def test_pods_run_unprivileged_and_read_only(render: Render, values_file: Path | None) -> None:
    for container in containers(render(values_file)):
        pod, security = container.pod["securityContext"], container.spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container.mount("/tmp") is not None, f"{container.component}: no writable /tmp"


# --- command lines and environment ------------------------------------------------------------


@by_values
def test_container_args_are_real_rollout_invocations(render: Render, values_file: Path | None) -> None:
    problems: list[str] = []
    for container in containers(render(values_file)):
        assert "command" not in container.spec, "the image's entrypoint is `rollout`; pass args only"
        problems += invocation_problems(container.args, container.plain_env())
    assert not problems, "\n".join(problems)


@by_values
def test_every_environment_variable_is_one_the_program_reads(render: Render, values_file: Path | None) -> None:
    for container in containers(render(values_file)):
        path, _ = split_command(container.args)
        unread = set(container.env) - readable_env(path)
        assert not unread, f"{container.component} (rollout {' '.join(path)}) sets {sorted(unread)}, never read"


def test_kafka_security_variables_are_the_programs_own_list() -> None:
    assert set(settings.SECURITY_ENV) == KAFKA_SECURITY_ENV


def test_pending_entries_still_missing() -> None:
    """PENDING (cli_surface.py) excuses what the CLI lacks; report what it no longer needs to."""
    arrived = pending_entries_now_in_cli()
    missing_kafka = sorted(KAFKA_SECURITY_ENV - kafka_security_env_in_source())
    if arrived:
        warnings.warn(f"now in the CLI, delete from PENDING: {arrived}", stacklevel=1)
    if missing_kafka:
        warnings.warn(f"the program does not read {missing_kafka} yet", stacklevel=1)


@by_values
def test_every_component_gets_the_same_kafka_connection(render: Render, values_file: Path | None) -> None:
    values = merged_values(values_file)
    for container in containers(render(values_file)):
        env = container.env
        assert env["ROLLOUT_BOOTSTRAP_SERVERS"]["value"] == values["kafka"]["bootstrapServers"]
        assert env["ROLLOUT_TOPIC_PREFIX"]["value"] == values["kafka"]["topicPrefix"]
        assert env["ROLLOUT_KAFKA_SECURITY_PROTOCOL"]["value"] == values["kafka"]["securityProtocol"]


def test_sasl_credentials_and_ca_come_from_existing_secrets(render: Render) -> None:
    for container in containers(render(CI["sasl"])):
        env = container.env
        assert env["ROLLOUT_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
        for name, key in (("ROLLOUT_KAFKA_SASL_USERNAME", "user"), ("ROLLOUT_KAFKA_SASL_PASSWORD", "password")):
            assert "value" not in env[name], f"{name} must not be a literal"
            assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "rollout-kafka-user", "key": key}
        ca_file = Path(env["ROLLOUT_KAFKA_CA_FILE"]["value"])
        mount = container.mount(str(ca_file.parent))
        assert mount is not None and mount["readOnly"] is True, f"{container.component}: CA not mounted"
        volume = container.volume(mount["name"])
        assert volume is not None
        assert volume["secret"]["secretName"] == "kafka-cluster-ca"
        assert {"key": "ca.crt", "path": ca_file.name} in volume["secret"]["items"]


def test_plaintext_sets_no_credentials(render: Render) -> None:
    for container in containers(render(None)):
        assert not {name for name in container.env if "SASL" in name or "CA_FILE" in name}


# --- components -------------------------------------------------------------------------------


def test_default_install_runs_every_component_and_the_topics_job(render: Render) -> None:
    objects = render(None)
    kinds = {c.component: c.workload["kind"] for c in containers(objects)}
    assert kinds == {
        "worker": "Deployment",
        "applier": "Deployment",
        "watcher": "Deployment",
        "module-watcher": "Deployment",
        "gate-runner": "Deployment",
        "dashboard": "Deployment",
        "snapshotter": "CronJob",
        "topics": "Job",
    }
    assert component(objects, "worker").args[0] == "worker"
    assert component(objects, "applier").args[:3] == ["applier", "--sink", "kubernetes"]
    assert component(objects, "watcher").args[0] == "watch-clusters"
    assert component(objects, "module-watcher").args[0] == "watch-modules"
    assert component(objects, "gate-runner").args[:3] == ["gate-runner", "--interval", "15s"]
    assert component(objects, "topics").args[:2] == ["topics", "create"]


def test_topics_are_created_before_install_and_upgrade_with_the_workers_partitions(render: Render) -> None:
    for values_file in (None, CI["replicas"]):
        objects = render(values_file)
        job = component(objects, "topics")
        hooks = job.workload["metadata"]["annotations"]["helm.sh/hook"].split(",")
        assert set(hooks) == {"pre-install", "pre-upgrade"}
        assert job.flag("--partitions") == component(objects, "worker").flag("--partitions")
        assert job.flag("--partitions") == str(merged_values(values_file)["kafka"]["partitions"])


WORKER_STATE_FLAGS = ("--store", "--data-dir")  # Faust's table store; the worker has neither now


def test_the_worker_cli_has_no_local_state_flags() -> None:
    worker = commands()[("worker",)]
    assert not set(WORKER_STATE_FLAGS) & set(options_of(worker)), "the worker's state lives in Kafka topics"
    assert not {"ROLLOUT_STORE", "ROLLOUT_DATA_DIR"} & envvars_of(worker)


@by_values
def test_the_worker_keeps_no_local_state(render: Render, values_file: Path | None) -> None:
    objects = render(values_file)
    worker = component(objects, "worker")
    assert worker.workload["kind"] == "Deployment"
    assert not set(WORKER_STATE_FLAGS) & set(worker.args)
    assert not {"ROLLOUT_STORE", "ROLLOUT_DATA_DIR"} & set(worker.env)
    assert not of_kind(objects, "StatefulSet")
    claims = [c["metadata"]["labels"]["app.kubernetes.io/component"] for c in of_kind(objects, "PersistentVolumeClaim")]
    assert set(claims) <= {"snapshotter"}, claims  # the snapshot files; the worker's state is in Kafka
    assert "volumeClaimTemplates" not in worker.workload["spec"]
    for volume in worker.pod.get("volumes", []):
        assert set(volume) & {"emptyDir", "secret"}, f"worker volume {volume['name']} is not scratch or a Secret"
    mounted = {m["mountPath"] for m in worker.spec.get("volumeMounts", [])}
    assert mounted <= {"/tmp", "/etc/rollout/kafka-ca"}, mounted


@by_values
def test_every_rendered_worker_flag_is_one_the_worker_accepts(render: Render, values_file: Path | None) -> None:
    worker = component(render(values_file), "worker")
    path, rest = split_command(worker.args)
    assert path == ("worker",)
    accepted = options_of(commands()[path])
    flags = [arg.split("=")[0] for arg in rest if arg.startswith("-")]
    assert flags and set(flags) <= set(accepted), sorted(set(flags) - set(accepted))
    values = merged_values(values_file)
    assert worker.flag("--partitions") == str(values["kafka"]["partitions"])
    assert worker.flag("--replication-factor") == str(values["kafka"]["replicationFactor"])
    assert float(worker.flag("--tick-interval") or "nan") == values["worker"]["tickInterval"]


def test_worker_extra_args_reach_the_command_line(helm: Helm, tmp_path: Path) -> None:
    values_file = tmp_path / "extra-args.yaml"
    values_file.write_text(yaml.safe_dump({"worker": {"extraArgs": ["--topic-prefix", "blue."]}}))
    worker = component(parse_manifests(helm.template("--values", str(values_file)).stdout), "worker")
    assert worker.args[-2:] == ["--topic-prefix", "blue."]
    assert invocation_problems(worker.args, worker.plain_env()) == []


def test_static_membership_gives_each_worker_pod_its_name_as_instance_id(
    render: Render, helm: Helm, tmp_path: Path
) -> None:
    assert "ROLLOUT_INSTANCE_ID" not in component(render(None), "worker").env
    values_file = tmp_path / "static.yaml"
    values_file.write_text(yaml.safe_dump({"worker": {"staticMembership": True}}))
    worker = component(parse_manifests(helm.template("--values", str(values_file)).stdout), "worker")
    assert worker.env["ROLLOUT_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "--instance-id" in options_of(commands()[("worker",)])


def test_worker_rolls_over_without_a_gap(render: Render) -> None:
    strategy = component(render(None), "worker").workload["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def worker_budgets(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        pdb
        for pdb in of_kind(objects, "PodDisruptionBudget")
        if pdb["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]


def test_several_workers_get_a_disruption_budget_one_does_not(render: Render, helm: Helm, tmp_path: Path) -> None:
    assert worker_budgets(render(None)) == [], "one worker alone must not block a node drain"
    for replicas in (2, 3):
        values_file = tmp_path / f"workers-{replicas}.yaml"
        values_file.write_text(yaml.safe_dump({"worker": {"replicas": replicas}}))
        objects = parse_manifests(helm.template("--values", str(values_file)).stdout)
        (budget,) = worker_budgets(objects)
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["maxUnavailable"] == 1
        selector = budget["spec"]["selector"]["matchLabels"]
        selected = [w for w in workloads(objects) if selector.items() <= pod_template(w)["metadata"]["labels"].items()]
        assert [w["metadata"]["name"] for w in selected] == [component(objects, "worker").workload["metadata"]["name"]]
    (budget,) = worker_budgets(render(CI["replicas"]))
    assert budget["metadata"]["namespace"] == NAMESPACE


def test_replicas_come_from_the_values(render: Render) -> None:
    objects = render(CI["replicas"])
    assert component(objects, "worker").workload["spec"]["replicas"] == 3
    assert component(objects, "applier").workload["spec"]["replicas"] == 4
    assert component(objects, "watcher").workload["spec"]["replicas"] == 2
    assert component(objects, "module-watcher").workload["spec"]["replicas"] == 2
    assert component(objects, "applier").flag("--group-id") == "rollout-applier-eu"


def test_applier_templates_are_mounted_and_passed_as_template_dir(render: Render) -> None:
    objects = render(CI["replicas"])
    applier = component(objects, "applier")
    template_dir = applier.flag("--template-dir")
    assert template_dir is not None
    mount = applier.mount(template_dir)
    assert mount is not None and mount["readOnly"] is True
    volume = applier.volume(mount["name"])
    assert volume is not None
    (config_map,) = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == volume["configMap"]["name"]]
    assert "kustomization.yaml.j2" in config_map["data"]
    annotations = pod_template(applier.workload)["metadata"]["annotations"]
    assert "checksum/templates" in annotations, "changed templates must roll the applier"


def test_directory_sink_writes_to_a_mounted_volume(render: Render) -> None:
    applier = component(render(CI["directory-sink"]), "applier")
    sink = applier.flag("--sink")
    assert sink is not None and sink.startswith("dir:")
    assert applier.mount(sink.removeprefix("dir:")) is not None
    assert "--simulate-status" in applier.args


def test_node_selection_reaches_every_pod_and_a_component_may_override_it(render: Render) -> None:
    objects = render(CI["replicas"])
    values = merged_values(CI["replicas"])
    for container in containers(objects):
        pod = container.pod
        assert pod["tolerations"] == values["tolerations"]
        assert pod["affinity"] == values["affinity"]
        wanted = values["worker"]["nodeSelector"] if container.component == "worker" else values["nodeSelector"]
        assert pod["nodeSelector"] == wanted, container.component


def test_image_digest_wins_over_the_tag(render: Render) -> None:
    for container in containers(render(CI["servicemonitor"])):
        assert container.spec["image"] == (
            "registry.example/platform/rollout-engine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
        assert container.pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    for container in containers(render(None)):
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        assert container.spec["image"] == f"rollout-engine:{chart['appVersion']}"


def test_minimal_install_runs_only_the_worker(render: Render) -> None:
    objects = render(CI["minimal"])
    assert [c.component for c in containers(objects)] == ["worker"]
    assert not [o for o in objects if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    assert not of_kind(objects, "ValidatingAdmissionPolicy")


# --- metrics ------------------------------------------------------------------------------------


@by_values
def test_metrics_services_reach_the_metrics_port_of_their_component(render: Render, values_file: Path | None) -> None:
    objects = render(values_file)
    services = [s for s in of_kind(objects, "Service") if s["metadata"]["labels"].get("rollout.dev/metrics") == "true"]
    if not merged_values(values_file)["metrics"]["service"]["enabled"]:
        assert not services
        return
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in services} == {
        c.component for c in engine_processes(objects)
    }
    for service in services:
        selected = [
            w
            for w in workloads(objects)
            if service["spec"]["selector"].items() <= pod_template(w)["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, service["metadata"]["name"]
        (port,) = service["spec"]["ports"]
        assert port["name"] == "metrics" and port["targetPort"] == "metrics"


def test_service_monitor_scrapes_the_metrics_path_of_every_metrics_service(render: Render) -> None:
    objects = render(CI["servicemonitor"])
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["path"] in HEALTH_PATHS
    assert endpoint["port"] == "metrics" and endpoint["interval"] == "15s"
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in of_kind(objects, "Service") if selector.items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected} == {
        "worker",
        "applier",
        "watcher",
        "module-watcher",
        "gate-runner",
    }
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_no_service_monitor_by_default(render: Render) -> None:
    assert not of_kind(render(None), "ServiceMonitor")
