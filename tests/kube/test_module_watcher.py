"""`rollout watch-modules` against the real kube-apiserver and the real Kafka broker:
Module objects become intents (created, changed, deleted, refused), the engine's module
status and verdicts come back as the object's status, conditions and Events, and a
restarted watcher republishes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiextensionsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.config import new_client_from_config_dict

from infra import client
from infra.topics import TopicNames
from projections.module_watcher import APPLIED_BY
from rollout.wire.events import (
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    ModuleApplied,
    ModuleDeleted,
    RestrictionApplied,
    RestrictionDeleted,
    parse_event,
)
from rollout_cli.processes.watch_modules import ModuleWatcherHealth, watch_as_leader
from tests.kube.cluster import KubeCluster
from tests.kube.conftest import eventually
from tests.kube.rollout_objects import GROUP, VERSION, create, install_rollout_crds, module_object, read

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def running_watcher(cluster: KubeCluster, bootstrap: str, prefix: str) -> AsyncIterator[ModuleWatcherHealth]:
    api = await new_client_from_config_dict(cluster.kubeconfig())
    health = ModuleWatcherHealth()
    task = asyncio.create_task(watch_as_leader(api, bootstrap=bootstrap, prefix=prefix, namespaces=[], health=health))
    try:
        await eventually(lambda: (health.watcher is not None and health.watcher.synced) or task.done(), timeout=20)
        if task.done():
            task.result()
        yield health
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


async def intents(bootstrap: str, prefix: str) -> list[Any]:
    return [parse_event(r.value) for r in await client.read_all(bootstrap, TopicNames(prefix).intents)]


def view(phase: str, stage: str, counts: dict[str, int]) -> dict[str, Any]:
    """A module-status document as the engine writes it (rollout/engine/views.py)."""
    return {
        "module": "web",
        "kind": "Module",
        "namespace": "fleet",
        "targetRevision": "6.7.0",
        "stableRevision": None,
        "phase": phase,
        "currentStage": stage,
        "stages": [
            {"name": "canary", "state": "Succeeded", "counts": {"members": 1, "succeeded": 1}},
            {
                "name": "prod",
                "state": "AwaitingApproval" if phase == "AwaitingApproval" else "Running",
                "counts": counts,
            },
        ],
        "unstaged": {"members": 0},
        "lastDecision": "canary succeeded",
    }


@pytest.fixture
async def fleet(management: KubeCluster) -> KubeCluster:
    await install_rollout_crds(management)
    return management


async def test_a_module_object_becomes_an_intent_and_its_rollout_comes_back_as_status(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = TopicNames(topic_prefix)
    stages = [{"name": "canary"}, {"name": "prod", "requireApproval": True}]
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        created = await create(fleet, "modules", module_object("web", stages=stages))
        [applied] = await eventually(lambda: intents(kafka_bootstrap, topic_prefix))
        assert isinstance(applied, ModuleApplied)
        assert applied.module.name == "web" and applied.module.spec.sync.revision == "6.7.0"
        assert applied.module.metadata.annotations[APPLIED_BY[0]] == APPLIED_BY[1]
        assert applied.id.startswith(f"k8s-{created['metadata']['uid']}-g1-")

        await client.publish(
            kafka_bootstrap,
            topics.verdicts,
            [(applied.id, json.dumps({"event": applied.id, "verdict": "accepted", "module": "web"}).encode())],
        )
        await client.publish(
            kafka_bootstrap,
            topics.module_status,
            [("web", json.dumps(view("AwaitingApproval", "prod", {"members": 2, "pending": 2})).encode())],
        )

        async def awaiting_approval() -> Any:
            status = ((await read(fleet, "modules", "web")) or {}).get("status") or {}
            return (
                status if status.get("phase") == "AwaitingApproval" and status.get("observedGeneration") == 1 else None
            )

        status = await eventually(awaiting_approval)
        conditions = {c["type"]: c for c in status["conditions"]}
        assert (
            conditions["Ready"]["status"],
            conditions["Progressing"]["status"],
            conditions["Stalled"]["status"],
        ) == ("False", "True", "False")
        assert "waits for approval" in conditions["Ready"]["message"]
        assert status["progress"] == "1/3" and status["targetRevision"] == "6.7.0"
        assert [(s["name"], s["members"]) for s in status["stages"]] == [("canary", 1), ("prod", 2)]
        assert status["currentStage"] == "prod" and status["currentStages"] == ["prod"]  # kept by the real CRD schema

        async def events() -> list[str]:
            async with fleet.client() as api:
                listing = await CoreV1Api(api).list_namespaced_event("fleet", field_selector="involvedObject.name=web")
            return [e.reason for e in listing.items]

        assert "WaitingForApproval" in await eventually(events)

        await client.publish(
            kafka_bootstrap,
            topics.module_status,
            [("web", json.dumps(view("Complete", "prod", {"members": 2, "succeeded": 2})).encode())],
        )

        async def complete() -> Any:
            status = ((await read(fleet, "modules", "web")) or {}).get("status") or {}
            return status if status.get("phase") == "Complete" else None

        conditions = {c["type"]: c["status"] for c in (await eventually(complete))["conditions"]}
        assert conditions == {"Ready": "True", "Progressing": "False", "Stalled": "False"}
        assert "Complete" in await eventually(events)

        async with fleet.client() as api:
            await CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP, VERSION, "fleet", "modules", "web",
                [{"op": "replace", "path": "/spec/sync/source/git/version/tag", "value": "6.8.0"}],
            )  # fmt: skip
        published = await eventually(lambda: _at_least(intents(kafka_bootstrap, topic_prefix), 2))
        assert published[1].module.spec.sync.revision == "6.8.0" and "-g2-" in published[1].id

        async with fleet.client() as api:
            await CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, "fleet", "modules", "web")
        published = await eventually(lambda: _at_least(intents(kafka_bootstrap, topic_prefix), 3))
        assert isinstance(published[2], ModuleDeleted) and published[2].name == "web"


async def _at_least(listing: Any, count: int) -> list[Any] | None:
    items = await listing
    return items if len(items) >= count else None


async def test_a_module_the_manifest_rules_refuse_is_stalled_and_not_published(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        await create(fleet, "modules", module_object("bad", tag="has space"))

        async def stalled() -> Any:
            status = ((await read(fleet, "modules", "bad")) or {}).get("status") or {}
            return status if status.get("phase") == "Invalid" else None

        status = await eventually(stalled)
    stalled_condition = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled_condition["status"] == "True" and stalled_condition["reason"] == "InvalidSpec"
    assert "spec.sync.source.git.version" in stalled_condition["message"]
    assert await intents(kafka_bootstrap, topic_prefix) == []


async def test_a_restarted_watcher_republishes_nothing_and_deletes_what_went_while_it_was_down(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        await create(fleet, "modules", module_object("web"))
        await create(fleet, "modules", module_object("api"))
        await eventually(lambda: _at_least(intents(kafka_bootstrap, topic_prefix), 2))
    async with fleet.client() as api:
        await CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, "fleet", "modules", "api")
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        published = await eventually(lambda: _at_least(intents(kafka_bootstrap, topic_prefix), 3))
        await asyncio.sleep(1.0)
    published = await intents(kafka_bootstrap, topic_prefix)
    assert [type(e).__name__ for e in published] == ["ModuleApplied", "ModuleApplied", "ModuleDeleted"]
    assert published[2].name == "api"


async def test_a_new_leader_starts_from_the_current_status_and_records_no_event_twice(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A takeover must not walk the object back through the module-status history."""
    topics = TopicNames(topic_prefix)
    created = await create(fleet, "modules", module_object("takeover", stages=[{"name": "canary"}, {"name": "prod"}]))
    uid = created["metadata"]["uid"]  # events of earlier tests' objects stay in the namespace
    history = [
        view("Progressing", "prod", {"members": 2, "updating": 2}),  # StageStarted prod
        view("AwaitingApproval", "prod", {"members": 2, "pending": 2}),  # WaitingForApproval
    ]
    await client.publish(kafka_bootstrap, topics.module_status, [("takeover", json.dumps(v).encode()) for v in history])

    async def events() -> list[str]:
        async with fleet.client() as api:
            listing = await CoreV1Api(api).list_namespaced_event("fleet", field_selector=f"involvedObject.uid={uid}")
        return sorted(e.reason for e in listing.items)

    async def phase() -> str | None:
        return (((await read(fleet, "modules", "takeover")) or {}).get("status") or {}).get("phase")

    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        await eventually(lambda: _is(phase(), "AwaitingApproval"), timeout=20)
        first = await eventually(events)
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):  # the next leader
        await asyncio.sleep(2.0)  # it has listed the object and followed the topic
        assert await phase() == "AwaitingApproval"
    assert first == ["WaitingForApproval"]
    assert await events() == first


async def _is(value: Any, expected: str) -> bool:
    return await value == expected  # type: ignore[no-any-return]


async def clusters_topic(bootstrap: str, prefix: str) -> list[Any]:
    return [parse_event(r.value) for r in await client.read_all(bootstrap, TopicNames(prefix).clusters)]


async def test_a_module_breaking_its_namespaces_restriction_is_stalled_naming_the_rule_and_not_published(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str
) -> None:
    restriction = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModuleRestriction",
        "metadata": {"name": "lane", "namespace": "fleet"},
        "spec": {
            "allowedSourcePatterns": [r"https://example\.com/web"],
            "allowedClusters": {"matchLabels": {"env": "prod"}},
        },
    }
    await create(fleet, "modulerestrictions", restriction)
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        await create(fleet, "modules", module_object("web"))  # https://example.com/web, env=prod: in its lane
        await create(fleet, "modules", module_object("grab"))  # https://example.com/grab: not

        async def stalled() -> Any:
            status = ((await read(fleet, "modules", "grab")) or {}).get("status") or {}
            return status if status.get("phase") == "Invalid" else None

        status = await eventually(stalled)
        [published] = await eventually(lambda: intents(kafka_bootstrap, topic_prefix))
        assert isinstance(published, ModuleApplied) and published.module.name == "web"
        [applied] = await clusters_topic(kafka_bootstrap, topic_prefix)
        assert isinstance(applied, RestrictionApplied) and applied.restriction.metadata.name == "lane"
        assert applied.restriction.spec.allowed_source_patterns == [r"https://example\.com/web"]
        [record] = await client.read_all(kafka_bootstrap, TopicNames(topic_prefix).clusters)
        assert published.fleet.get(record.partition, 0) > record.offset  # stamped past it: folded after it

        async with fleet.client() as api:  # the restriction goes: the refused module is published
            await CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, "fleet", "modulerestrictions", "lane"
            )
        published_now = await eventually(lambda: _at_least(intents(kafka_bootstrap, topic_prefix), 2))
        assert published_now[1].module.name == "grab"
        deleted = (await clusters_topic(kafka_bootstrap, topic_prefix))[-1]
        assert isinstance(deleted, RestrictionDeleted) and (deleted.namespace, deleted.name) == ("fleet", "lane")
    stalled_condition = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled_condition["status"], stalled_condition["reason"]) == ("True", "Restricted")
    assert stalled_condition["message"] == (
        "refused by ModuleRestriction fleet/lane: allowedSourcePatterns: source 'https://example.com/grab' "
        r"matches none of https://example\.com/web"
    )


async def test_without_the_module_restriction_crd_modules_are_still_published(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Helm installs CRDs on install only: a chart upgraded from a release without the kind
    must keep publishing modules (and say that restrictions are not enforced)."""

    async def served() -> set[str]:
        async with fleet.client() as api:
            return {r.name for r in (await CustomObjectsApi(api).get_api_resources(GROUP, VERSION)).resources}

    async with fleet.client() as api:
        await ApiextensionsV1Api(api).delete_custom_resource_definition(f"modulerestrictions.{GROUP}")
    await eventually(lambda: _not_serving(served(), "modulerestrictions"))
    try:
        async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
            await create(fleet, "modules", module_object("web"))
            [published] = await eventually(lambda: intents(kafka_bootstrap, topic_prefix))
        assert isinstance(published, ModuleApplied) and published.module.name == "web"
        assert "serves no modulerestrictions: ModuleRestriction objects are not enforced here" in caplog.text
    finally:
        await install_rollout_crds(fleet)


async def _not_serving(listing: Any, plural: str) -> bool:
    return plural not in await listing


def calendar_object(name: str, window: dict[str, Any], *, namespace: str | None) -> dict[str, Any]:
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterFreezeCalendar" if namespace is None else "FreezeCalendar",
        "metadata": metadata,
        "spec": {"windows": [window]},
    }


async def test_freeze_calendar_objects_are_published_with_the_fleets_policy_and_their_deletion_too(
    fleet: KubeCluster, kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    weekend = {"name": "weekend", "schedule": "0 16 * * 5", "duration": "64h", "timeZone": "Europe/Berlin"}
    hourly = {"name": "hourly", "rrule": "FREQ=HOURLY", "start": "2026-01-01T00:00:00", "duration": "1h"}
    await create(fleet, "freezecalendars", calendar_object("weekends", weekend, namespace="fleet"))
    await create(fleet, "freezecalendars", calendar_object("hourly", hourly, namespace="fleet"))  # refused: FREQ
    async with running_watcher(fleet, kafka_bootstrap, topic_prefix):
        year_end = {
            "name": "holidays",
            "rrule": "FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=20",
            "start": "2026-12-20T00:00:00",
            "duration": "336h",
            "timeZone": "Europe/Berlin",
        }
        async with fleet.client() as api:
            await CustomObjectsApi(api).create_cluster_custom_object(
                GROUP, VERSION, "clusterfreezecalendars", calendar_object("year-end", year_end, namespace=None)
            )
        applied = await eventually(lambda: _at_least(clusters_topic(kafka_bootstrap, topic_prefix), 2))
        assert all(isinstance(event, FreezeCalendarApplied) for event in applied)
        assert sorted((e.calendar.scope, e.calendar.name) for e in applied) == [
            ("*", "year-end"),
            ("fleet", "weekends"),
        ]
        assert all(e.calendar.metadata.annotations.get(APPLIED_BY[0]) == APPLIED_BY[1] for e in applied)
        async with fleet.client() as api:
            await CustomObjectsApi(api).delete_cluster_custom_object(
                GROUP, VERSION, "clusterfreezecalendars", "year-end"
            )
        events = await eventually(lambda: _at_least(clusters_topic(kafka_bootstrap, topic_prefix), 3))
        gone = events[-1]
        assert isinstance(gone, FreezeCalendarDeleted) and (gone.scope, gone.name) == ("*", "year-end")
    refused = [r.getMessage() for r in caplog.records if "fleet/hourly refused" in r.getMessage()]
    assert [message.split(" or coarser")[0] for message in refused] == [
        "FreezeCalendar fleet/hourly refused: spec.windows.0: rrule 'FREQ=HOURLY': FREQ must be DAILY"
    ]  # said once, naming the field
    assert not [e for e in events if isinstance(e, FreezeCalendarApplied) and e.calendar.name == "hourly"]
