"""docker-compose.yml: the engine in containers, the same result as `rollout up --example`.

Parsed statically (no Docker engine here): every rollout service runs a real `rollout`
command line with variables the program reads, the start order is wired (Kafka healthy →
topics created → worker, applier, example fleet), volumes back the paths the commands use,
and the broker advertises the address the services connect to.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import REPO, commands, invocation_problems, options_of, readable_env, split_command

COMPOSE = REPO / "docker-compose.yml"
KAFKA_IMAGE = "apache/kafka:3.9.1"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def rollout_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("build")}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_services_are_the_broker_the_topic_creator_the_processes_and_the_example_loader(
    services: dict[str, dict[str, Any]],
) -> None:
    assert set(services) == {"kafka", "topics", "worker", "applier", "gate-runner", "dashboard", "examples"}
    assert services["kafka"]["image"] == KAFKA_IMAGE
    assert set(rollout_services(services)) == {"topics", "worker", "applier", "gate-runner", "dashboard", "examples"}
    images = {s["image"] for s in rollout_services(services).values()}
    assert len(images) == 1, "every rollout service runs the one image built from the Dockerfile"
    for service in rollout_services(services).values():
        assert service["build"]["context"] == "."
        assert "entrypoint" not in service, "the image's entrypoint is `rollout`"
        assert isinstance(service["command"], list), "exec form: no shell between Docker and rollout"


def test_commands_are_real_rollout_invocations(services: dict[str, dict[str, Any]]) -> None:
    problems: list[str] = []
    for name, service in rollout_services(services).items():
        problems += [f"{name}: {p}" for p in invocation_problems(service["command"], environment(service))]
    assert not problems, "\n".join(problems)


def test_commands_are_the_ones_rollout_up_runs(services: dict[str, dict[str, Any]]) -> None:
    commands = {name: tuple(split_command(s["command"])[0]) for name, s in rollout_services(services).items()}
    assert commands == {
        "topics": ("topics", "create"),
        "worker": ("worker",),
        "applier": ("applier",),
        "gate-runner": ("gate-runner",),
        "dashboard": ("dashboard",),
        "examples": ("apply",),
    }
    applier = services["applier"]["command"]
    assert "--simulate-status" in applier, "rollout up --example reports written syncs as succeeded"
    assert flag(services["examples"]["command"], "-f") == "/app/examples"


def test_settings_match_rollout_up_defaults(services: dict[str, dict[str, Any]]) -> None:
    up = {name.lstrip("-"): option.default for name, option in options_of(commands()[("up",)]).items()}
    worker = environment(services["worker"])
    assert worker["ROLLOUT_PARTITIONS"] == str(up["partitions"])
    assert environment(services["topics"])["ROLLOUT_PARTITIONS"] == str(up["partitions"])
    assert float(worker["ROLLOUT_TICK_INTERVAL"]) == up["tick-interval"]
    assert str(up["sink"]).startswith("dir:")
    assert str(flag(services["applier"]["command"], "--sink")).startswith("dir:")


def test_every_environment_variable_is_one_the_program_reads(services: dict[str, dict[str, Any]]) -> None:
    for name, service in rollout_services(services).items():
        path, _ = split_command(service["command"])
        unread = set(environment(service)) - readable_env(path)
        assert not unread, f"{name} sets {sorted(unread)}, which rollout {' '.join(path)} never reads"


def test_every_rollout_service_reaches_kafka_and_uses_one_prefix(services: dict[str, dict[str, Any]]) -> None:
    envs = [environment(s) for s in rollout_services(services).values()]
    assert len({env["ROLLOUT_BOOTSTRAP_SERVERS"] for env in envs}) == 1
    assert len({env["ROLLOUT_TOPIC_PREFIX"] for env in envs}) == 1


def depends(service: dict[str, Any]) -> dict[str, str]:
    return {name: spec["condition"] for name, spec in service.get("depends_on", {}).items()}


def test_start_order_kafka_then_topics_then_everything_else(services: dict[str, dict[str, Any]]) -> None:
    assert "healthcheck" in services["kafka"]
    assert depends(services["topics"]) == {"kafka": "service_healthy"}
    for name in ("worker", "applier", "examples"):
        assert depends(services[name]) == {"topics": "service_completed_successfully"}, name
    for name in ("topics", "examples"):
        assert services[name]["restart"] == "no", f"{name} is one-shot"


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of a service's volumes (short syntax)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        found[target] = source
    return found


def test_applier_writes_into_the_bind_mounted_flux_out_folder(services: dict[str, dict[str, Any]]) -> None:
    sink = flag(services["applier"]["command"], "--sink")
    assert sink is not None and sink.startswith("dir:")
    assert mounts(services["applier"]).get(sink.removeprefix("dir:")) == "./flux-out"


def test_the_worker_keeps_no_state_on_a_volume(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    # Its state is changelogged to the decide-state/assemble-state topics, rebuilt on assignment.
    worker = services["worker"]
    assert not worker.get("volumes"), "the worker keeps no local files"
    assert not {"ROLLOUT_STORE", "ROLLOUT_DATA_DIR"} & set(environment(worker))
    assert set(compose["volumes"]) == {mounts(services["kafka"])["/var/lib/kafka/data"]}, "only Kafka keeps data"


def test_kafka_keeps_its_log_on_a_named_volume(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    assert mounts(services["kafka"])["/var/lib/kafka/data"] in compose["volumes"]
    assert environment(services["kafka"])["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,...' -> {NAME: (host, port)}."""
    found = {}
    for item in value.split(","):
        name, address = item.split("://")
        host, _, port = address.rpartition(":")
        found[name] = (host, int(port))
    return found


def test_kafka_advertises_the_address_the_services_connect_to(services: dict[str, dict[str, Any]]) -> None:
    kafka = environment(services["kafka"])
    bound = listeners(kafka["KAFKA_LISTENERS"])
    advertised = listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = kafka["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(bound) == set(protocols), "every listener needs a security protocol"
    assert set(advertised) <= set(bound) - {controller}, "advertised listeners must be bound, never the controller"
    assert kafka["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    voter_id, voter = kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    assert voter_id == kafka["KAFKA_NODE_ID"] and voter.rpartition(":")[2] == str(bound[controller][1])
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller", "a single KRaft node"
    hostname = services["kafka"].get("hostname", "kafka")
    for name, service in rollout_services(services).items():
        for server in environment(service)["ROLLOUT_BOOTSTRAP_SERVERS"].split(","):
            host, _, port = server.rpartition(":")
            matches = [ln for ln, (h, p) in advertised.items() if (h, p) == (host, int(port))]
            assert matches, f"{name} connects to {server}, which the broker does not advertise"
            assert host == hostname, f"{name}: {host} is not the broker's name on the compose network"
            assert protocols[matches[0]] == "PLAINTEXT"
            assert bound[matches[0]][1] == int(port)


def test_host_listener_is_published_on_localhost_only(services: dict[str, dict[str, Any]]) -> None:
    kafka = environment(services["kafka"])
    advertised = listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    host_ports = {p for h, p in advertised.values() if h == "localhost"}
    assert host_ports, "no listener for the CLI on the host"
    published = {tuple(p.rsplit(":", 2)) for p in services["kafka"]["ports"]}
    for port in host_ports:
        assert ("127.0.0.1", str(port), str(port)) in published


def test_the_single_node_broker_keeps_internal_topics_on_one_replica(services: dict[str, dict[str, Any]]) -> None:
    kafka = environment(services["kafka"])
    for setting in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert kafka[setting] == "1", setting
    assert len(kafka["CLUSTER_ID"]) == 22, "a KRaft cluster id is a base64 UUID (22 characters)"


def test_healthchecks_probe_the_health_path_on_each_process_web_port(services: dict[str, dict[str, Any]]) -> None:
    for name in ("worker", "applier"):
        command = commands()[(name,)]
        port_option = options_of(command).get("--web-port")
        port = port_option.default if port_option is not None else {"worker": 6066, "applier": 6067}[name]
        test = " ".join(services[name]["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/healthz" in test, name


def test_example_fleet_is_copied_into_the_image_where_the_loader_reads_it() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY examples /app/examples" in dockerfile
    assert list((REPO / "examples").glob("*.yaml"))


def test_processes_listen_on_every_interface_of_their_container(services: dict[str, dict[str, Any]]) -> None:
    """The program binds 127.0.0.1 by default; a container passes 0.0.0.0 explicitly."""
    for name in ("worker", "applier"):
        assert options_of(commands()[(name,)])["--web-host"].envvar == "ROLLOUT_WEB_HOST"
        assert environment(services[name]).get("ROLLOUT_WEB_HOST") == "0.0.0.0", name


def test_the_dashboard_listens_in_its_container_and_is_published_on_localhost_only(
    services: dict[str, dict[str, Any]],
) -> None:
    dashboard = services["dashboard"]
    command = dashboard["command"]
    assert flag(command, "--host") == "0.0.0.0"
    port = flag(command, "--port")
    assert dashboard["ports"] == [f"127.0.0.1:{port}:{port}"], "its buttons act on rollouts and it has no login"
    assert f"127.0.0.1:{port}/readyz" in " ".join(dashboard["healthcheck"]["test"])
