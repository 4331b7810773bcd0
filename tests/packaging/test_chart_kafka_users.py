"""The chart's least-privilege Kafka: with kafka.users.enabled, a Strimzi KafkaUser per
component carrying exactly the ACLs of infra/kafka_acls.py (for the chart's topic prefix),
and every container connecting as its own user with its own Secret."""

from __future__ import annotations

from typing import Any

import pytest

from infra import kafka_acls
from tests.packaging.conftest import Helm, parse_manifests
from tests.packaging.objects import containers, of_kind

PREFIX = "prod."
USERS = [
    "--set",
    f"kafka.users.enabled=true,kafka.users.strimziCluster=my-kafka,kafka.securityProtocol=SASL_SSL,"
    f"kafka.topicPrefix={PREFIX},kafka.bootstrapServers=kafka-bootstrap:9093,"
    "notifier.enabled=true,notifier.webhooks[0].name=oncall,notifier.webhooks[0].url=https://hooks.example.com,"
    "promoter.enabled=true",
]


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> list[dict[str, Any]]:
    return parse_manifests(helm.template(*USERS).stdout)


def users_by_component(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {user["metadata"]["labels"]["app.kubernetes.io/component"]: user for user in of_kind(objects, "KafkaUser")}


def test_the_charts_acls_are_generated_from_the_catalogue() -> None:
    assert kafka_acls.CHART_USERS_FILE.read_text() == kafka_acls.chart_users_yaml(), (
        "charts/rollout/files/kafka-users.yaml is out of date: run `python -m infra.kafka_acls --write`"
    )


def test_every_component_gets_a_kafka_user_with_exactly_its_acls(rendered: list[dict[str, Any]]) -> None:
    users = users_by_component(rendered)
    assert set(users) == set(kafka_acls.COMPONENTS)
    for component, user in users.items():
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == "my-kafka"
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        assert user["spec"]["authorization"]["type"] == "simple"
        expected = kafka_acls.strimzi_acls(kafka_acls.principal(component, PREFIX))
        assert user["spec"]["authorization"]["acls"] == expected, component


def test_each_container_connects_as_its_own_user(rendered: list[dict[str, Any]]) -> None:
    users = users_by_component(rendered)
    talking = [c for c in containers(rendered) if "ROLLOUT_BOOTSTRAP_SERVERS" in c.env]
    assert {c.component for c in talking} == set(kafka_acls.COMPONENTS) - {"cli-reader", "cli-operator"}
    for container in talking:
        name = users[container.component]["metadata"]["name"]
        env = container.env
        assert env["ROLLOUT_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
        assert env["ROLLOUT_KAFKA_SASL_USERNAME"]["value"] == name, container.component
        assert env["ROLLOUT_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": name, "key": "password"}


def test_the_topics_user_exists_before_the_topics_job_runs(rendered: list[dict[str, Any]]) -> None:
    user = users_by_component(rendered)["topics"]["metadata"]["annotations"]
    (job,) = of_kind(rendered, "Job")
    assert set(user["helm.sh/hook"].split(",")) == set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert int(user["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_without_users_the_chart_declares_none(helm: Helm) -> None:
    assert of_kind(parse_manifests(helm.template().stdout), "KafkaUser") == []


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ("kafka.users.enabled=true,kafka.users.strimziCluster=k", "securityProtocol"),
        ("kafka.users.enabled=true,kafka.securityProtocol=SASL_SSL", "strimziCluster"),
        (
            "kafka.users.enabled=true,kafka.users.strimziCluster=k,kafka.securityProtocol=SASL_SSL,"
            "applier.groupId=other-group",
            "applier.groupId must start with rollout.rollout-applier",
        ),
    ],
)
def test_kafka_users_refuse_values_they_cannot_honour(helm: Helm, values: str, complaint: str) -> None:
    result = helm.template("--set", values, check=False)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr
