"""The chart's journal retention (`snapshotter.enabled`, on by default): a CronJob whose
init container takes a snapshot and whose container then retains, one run at a time, the
snapshot files on a PersistentVolumeClaim both mount, as the snapshotter's own Kafka user,
with command lines the real CLI parses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.cli_surface import invocation_problems
from tests.packaging.conftest import Helm, parse_manifests
from tests.packaging.objects import Container, containers, of_kind, pod_spec, validation_problems

SNAPSHOTS = "/var/lib/rollout/snapshots"


def snapshotter(objects: list[dict[str, Any]]) -> tuple[Container, Container]:
    """The CronJob's two containers: `take` (init) and `retain`."""
    found = [c for c in containers(objects) if c.component == "snapshotter"]
    assert [c.spec["name"] for c in found] == ["take", "retain"], [c.spec["name"] for c in found]
    return found[0], found[1]


def rendered_with(helm: Helm, tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return parse_manifests(helm.template("--values", str(path)).stdout)


@pytest.fixture(scope="module")
def defaults(helm: Helm) -> list[dict[str, Any]]:
    return parse_manifests(helm.template().stdout)


def test_a_default_install_takes_a_snapshot_then_retains_seven_days_daily(defaults: list[dict[str, Any]]) -> None:
    take, retain = snapshotter(defaults)
    (cronjob,) = of_kind(defaults, "CronJob")
    assert take.workload is cronjob
    assert cronjob["spec"]["schedule"] == "17 3 * * *"
    assert take.args == ["snapshot", "take", "--dir", SNAPSHOTS]
    assert retain.args == ["snapshot", "retain", "--dir", SNAPSHOTS, "--keep", "7d"]
    assert invocation_problems(take.args, take.plain_env()) == []
    assert invocation_problems(retain.args, retain.plain_env()) == []


def test_one_run_at_a_time_and_a_failed_snapshot_deletes_nothing(defaults: list[dict[str, Any]]) -> None:
    (cronjob,) = of_kind(defaults, "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_spec(cronjob)
    # the init container must succeed before `retain` starts; a pod is never restarted in
    # place (the Job retries with a new one, which takes a snapshot again)
    assert [c["name"] for c in pod["initContainers"]] == ["take"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False  # it never calls the Kubernetes API
    assert pod["serviceAccountName"] == "rollout-snapshotter"


def test_both_containers_keep_the_snapshots_on_one_claim_kept_on_uninstall(defaults: list[dict[str, Any]]) -> None:
    take, retain = snapshotter(defaults)
    (claim,) = of_kind(defaults, "PersistentVolumeClaim")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    for container in (take, retain):
        mount = container.mount(SNAPSHOTS)
        assert mount is not None, container.spec["name"]
        volume = container.volume(mount["name"])
        assert volume == {"name": mount["name"], "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}


def test_the_cronjob_and_its_claim_are_valid_kubernetes_objects(defaults: list[dict[str, Any]]) -> None:
    for obj in (*of_kind(defaults, "CronJob"), *of_kind(defaults, "PersistentVolumeClaim")):
        assert validation_problems(obj) == [], obj["metadata"]["name"]


def test_schedule_keep_and_storage_come_from_the_values(helm: Helm, tmp_path: Path) -> None:
    objects = rendered_with(
        helm,
        tmp_path,
        {
            "snapshotter": {
                "schedule": "0 */6 * * *",
                "timeZone": "Europe/Berlin",
                "keep": "36h",
                "storage": {"size": "10Gi", "storageClassName": "fast-ssd", "accessModes": ["ReadWriteOncePod"]},
            }
        },
    )
    (cronjob,) = of_kind(objects, "CronJob")
    assert cronjob["spec"]["schedule"] == "0 */6 * * *" and cronjob["spec"]["timeZone"] == "Europe/Berlin"
    _, retain = snapshotter(objects)
    assert retain.flag("--keep") == "36h"
    assert invocation_problems(retain.args, retain.plain_env()) == []
    (claim,) = of_kind(objects, "PersistentVolumeClaim")
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOncePod"],
        "storageClassName": "fast-ssd",
        "resources": {"requests": {"storage": "10Gi"}},
    }
    assert validation_problems(cronjob) == [] and validation_problems(claim) == []


def test_an_existing_claim_is_mounted_and_none_is_created(helm: Helm, tmp_path: Path) -> None:
    objects = rendered_with(helm, tmp_path, {"snapshotter": {"storage": {"existingClaim": "rollout-snapshots-nfs"}}})
    assert of_kind(objects, "PersistentVolumeClaim") == []
    take, retain = snapshotter(objects)
    for container in (take, retain):
        mount = container.mount(SNAPSHOTS)
        assert mount is not None
        volume = container.volume(mount["name"])
        assert volume is not None and volume["persistentVolumeClaim"] == {"claimName": "rollout-snapshots-nfs"}


def test_disabled_renders_no_cronjob_claim_account_or_kafka_user(helm: Helm, tmp_path: Path) -> None:
    values = {
        "snapshotter": {"enabled": False},
        "kafka": {"securityProtocol": "SASL_SSL", "users": {"enabled": True, "strimziCluster": "k"}},
    }
    objects = rendered_with(helm, tmp_path, values)
    assert not [o for o in objects if o["metadata"]["name"].endswith("-snapshotter")]
    assert "snapshotter" not in {c.component for c in containers(objects)}


def test_with_kafka_users_both_containers_connect_as_the_snapshotter(helm: Helm, tmp_path: Path) -> None:
    values = {"kafka": {"securityProtocol": "SASL_SSL", "users": {"enabled": True, "strimziCluster": "k"}}}
    objects = rendered_with(helm, tmp_path, values)
    users = {u["metadata"]["name"] for u in of_kind(objects, "KafkaUser")}
    for container in snapshotter(objects):
        env = container.env
        assert env["ROLLOUT_KAFKA_SASL_USERNAME"]["value"] == "rollout-snapshotter" in users
        assert env["ROLLOUT_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "rollout-snapshotter",
            "key": "password",
        }


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"keep": "a week"}, "snapshotter.keep"),
        ({"schedule": "daily"}, "snapshotter.schedule"),
        ({"storage": {"size": "lots", "accessModes": ["ReadWriteOnce"]}}, "snapshotter.storage.size"),
        ({"storage": {"size": "1Gi", "accessModes": []}}, "snapshotter.storage.accessModes"),
        ({"concurrencyPolicy": "Allow"}, "concurrencyPolicy"),  # not a value: runs never overlap
    ],
    ids=["keep-in-words", "schedule-not-cron", "size-not-a-quantity", "no-access-mode", "concurrency-not-settable"],
)
def test_the_schema_rejects_bad_snapshotter_values(
    helm: Helm, tmp_path: Path, values: dict[str, Any], field: str
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"snapshotter": values}))
    result = helm.template("--values", str(path), check=False)
    assert result.returncode != 0, f"rendered although {values} is invalid"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert field.rpartition(".")[2] in result.stderr, result.stderr
