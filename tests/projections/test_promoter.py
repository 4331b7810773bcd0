"""The promoter against real sources started by the test — the CNCF distribution registry
(OCI tags), a Helm repository's index.yaml behind basic auth, a Git server behind basic auth
— with credentials read from a Secret mounted as a directory (projections/promoter/)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from infra.localflux.sources.git import GitServer
from infra.localflux.sources.helm import HelmRepository
from infra.localflux.sources.oci import OCIRegistry
from projections.promoter.promoter import Promoter
from projections.promoter.sources import SourceError, read_credentials
from rollout.wire.events import PromotionObserved, ReleasePromotionObserved, parse_event
from rollout.wire.status import (
    FollowedRange,
    ModuleRelease,
    ModuleStatus,
    PromotionHoldStatus,
    PromotionSourceStatus,
    PromotionStatus,
    ReleasePromotionStatus,
)
from tests.support.promotion_sources import (
    CHART_USER,
    GIT_USER,
    add_charts,
    push_versions,
)

RANGE = ">=1.0.0 <2.0.0"


def status(source: PromotionSourceStatus, target: str = "1.0.0", **promotion: Any) -> ModuleStatus:
    return ModuleStatus(
        module="app",
        phase="Complete",
        generation=1,
        target_revision=target,
        promotion=PromotionStatus(semver=promotion.pop("semver", RANGE), source=source, **promotion),
    )


class Published(list[Any]):
    async def __call__(self, key: str, value: bytes) -> None:
        event = parse_event(value)
        assert isinstance(event, PromotionObserved | ReleasePromotionObserved) and key == event.module
        self.append(event)


def promoter(secrets_dir: Path | None = None) -> tuple[Promoter, Published]:
    published = Published()
    made = Promoter(
        bootstrap="unused:9092", prefix="t.", publish=published, name="promoter-test", secrets_dir=secrets_dir
    )
    return made, published


def mount_secret(root: Path, name: str, **keys: str) -> Path:
    """A Secret as a Kubernetes volume mounts it: one file per key."""
    folder = root / name
    folder.mkdir(parents=True)
    for key, value in keys.items():
        (folder / key).write_text(value)
    return root


async def watch(made: Promoter, view: ModuleStatus) -> None:
    async with aiohttp.ClientSession() as session:
        await made.watch(session, view.module, view)


async def test_the_highest_oci_tag_in_range_newer_than_the_target_is_published(registry: OCIRegistry) -> None:
    push_versions(registry, "promote/app", "1.0.0", "1.2.0", "v1.3.0", "1.4.0-rc.1", "2.0.0", "latest", "1.9")
    source = PromotionSourceStatus(kind="oci", url=f"{registry.url}/promote/app", insecure=True)
    made, published = promoter()
    await watch(made, status(source))
    [event] = published
    assert (event.version, event.promoter, event.source.kind, event.source.url) == (
        "v1.3.0",
        "promoter-test",
        "oci",
        source.url,
    )


async def test_a_range_naming_a_pre_release_takes_pre_releases(registry: OCIRegistry) -> None:
    push_versions(registry, "promote/rc", "1.0.0", "1.1.0", "1.2.0-rc.1")
    source = PromotionSourceStatus(kind="oci", url=f"{registry.url}/promote/rc", insecure=True)
    made, published = promoter()
    await watch(made, status(source, semver=">=1.0.0-0 <2.0.0"))
    assert [e.version for e in published] == ["1.2.0-rc.1"]


async def test_nothing_newer_than_the_target_publishes_nothing(registry: OCIRegistry) -> None:
    push_versions(registry, "promote/old", "0.9.0", "1.0.0")
    source = PromotionSourceStatus(kind="oci", url=f"{registry.url}/promote/old", insecure=True)
    made, published = promoter()
    await watch(made, status(source))
    assert published == []


async def test_a_version_already_held_available_is_not_published_again(registry: OCIRegistry) -> None:
    push_versions(registry, "promote/held", "1.0.0", "1.5.0")
    source = PromotionSourceStatus(kind="oci", url=f"{registry.url}/promote/held", insecure=True)
    made, published = promoter()
    await watch(made, status(source, hold=True, available="1.5.0"))
    assert published == []
    push_versions(registry, "promote/held", "1.6.0")
    await watch(made, status(source, hold=True, available="1.5.0"))
    assert [e.version for e in published] == ["1.6.0"]


async def test_a_published_version_is_not_sent_every_round_while_the_status_lags(registry: OCIRegistry) -> None:
    push_versions(registry, "promote/lag", "1.0.0", "1.1.0")
    source = PromotionSourceStatus(kind="oci", url=f"{registry.url}/promote/lag", insecure=True)
    made, published = promoter()
    made.republish_after = 2
    for _ in range(4):
        await watch(made, status(source))
    assert [e.version for e in published] == ["1.1.0", "1.1.0"]  # once, then again after 2 lagging rounds


async def test_chart_versions_are_read_from_a_private_helm_index_with_the_mounted_secret(
    chart_repository: HelmRepository, tmp_path: Path
) -> None:
    add_charts(chart_repository, "podinfo", "6.0.0", "6.1.0", "6.2.0", "7.0.0")
    secrets_dir = mount_secret(tmp_path, "charts-auth", username=CHART_USER[0], password=CHART_USER[1])
    source = PromotionSourceStatus(kind="helm", url=chart_repository.url, chart="podinfo", secret_ref="charts-auth")
    made, published = promoter(secrets_dir)
    await watch(made, status(source, target="6.0.0", semver="~6"))
    assert [e.version for e in published] == ["6.2.0"] and published[0].source.chart == "podinfo"


async def test_a_private_source_whose_secret_is_not_mounted_is_logged_and_skipped(
    chart_repository: HelmRepository, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_charts(chart_repository, "private", "1.0.0", "1.1.0")
    source = PromotionSourceStatus(kind="helm", url=chart_repository.url, chart="private", secret_ref="absent")
    made, published = promoter(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rollout.promoter"):
        await watch(made, status(source))
    assert published == []
    assert "Secret 'absent' is not mounted" in caplog.text


async def test_a_private_helm_index_without_credentials_is_refused_not_read(
    chart_repository: HelmRepository, caplog: pytest.LogCaptureFixture
) -> None:
    add_charts(chart_repository, "anon", "1.0.0", "1.1.0")
    source = PromotionSourceStatus(kind="helm", url=chart_repository.url, chart="anon")
    made, published = promoter()
    with caplog.at_level(logging.WARNING, logger="rollout.promoter"):
        await watch(made, status(source))
    assert published == [] and "HTTP 401" in caplog.text


async def test_git_tags_are_read_from_a_private_repository_with_the_mounted_secret(
    git_repositories: GitServer, tmp_path: Path
) -> None:
    sha = git_repositories.commit("app", {"deploy/configmap.yaml": "kind: ConfigMap\n"}, tag="v1.0.0")
    for tag in ("v1.1.0", "v1.2.0", "v2.0.0", "release-candidate"):
        git_repositories.tag("app", tag, sha)
    secrets_dir = mount_secret(tmp_path, "git-auth", username=GIT_USER[0], password=GIT_USER[1])
    source = PromotionSourceStatus(kind="git", url=git_repositories.url("app"), secret_ref="git-auth")
    made, published = promoter(secrets_dir)
    await watch(made, status(source, target="v1.0.0"))
    assert [e.version for e in published] == ["v1.2.0"]


def test_registry_credentials_come_from_a_dockerconfigjson_secret(tmp_path: Path) -> None:
    config = '{"auths": {"registry.example.com": {"auth": "Ym90OnMzY3JldA=="}}}'  # bot:s3cret
    mount_secret(tmp_path, "regcred", **{".dockerconfigjson": config})
    found = read_credentials(tmp_path, "regcred", "registry.example.com")
    assert found is not None and (found.username, found.password) == ("bot", "s3cret")
    with pytest.raises(SourceError, match=r"no credentials for other\.example\.com"):
        read_credentials(tmp_path, "regcred", "other.example.com")


# --- a Release auto-promoted as a unit (promoter.py `watch_release`) ---------------------


def member_status(
    name: str, source: PromotionSourceStatus | None, target: str, leader: ReleasePromotionStatus
) -> ModuleStatus:
    """A member of release shop as the engine writes its status (api leads: first by name)."""
    promotion = PromotionStatus(semver=RANGE, source=source) if source is not None else None
    return ModuleStatus(
        module=name,
        phase="Complete",
        generation=1,
        target_revision=target,
        promotion=promotion,
        release=ModuleRelease(name="shop", members=["web", "api", "db"], auto_promote=leader),
    )


async def test_a_releases_members_newer_versions_go_to_its_leader_in_one_event(registry: OCIRegistry) -> None:
    push_versions(registry, "shop/web", "1.0.0", "1.1.0", "2.0.0")
    push_versions(registry, "shop/api", "1.0.0", "1.0.1")
    push_versions(registry, "shop/db", "1.0.0")
    sources = {n: PromotionSourceStatus(kind="oci", url=f"{registry.url}/shop/{n}", insecure=True) for n in SHOP}
    auto = ReleasePromotionStatus(leader="api", follow=[FollowedRange(module=n, semver=RANGE) for n in SHOP])
    statuses = {n: member_status(n, sources[n], "1.0.0", auto) for n in SHOP}
    made, published = promoter()
    async with aiohttp.ClientSession() as session:
        await made.watch_release(session, "shop", statuses)
    # one event, to the leader, with every member newer than its target (db has nothing newer)
    [event] = published
    assert isinstance(event, ReleasePromotionObserved) and (event.module, event.release) == ("api", "shop")
    assert [(m.module, m.version, m.source.url) for m in event.members] == [
        ("api", "1.0.1", sources["api"].url),
        ("web", "1.1.0", sources["web"].url),
    ]


async def test_a_held_release_is_not_told_the_combination_available_again(registry: OCIRegistry) -> None:
    push_versions(registry, "held/web", "1.0.0", "1.1.0")
    push_versions(registry, "held/api", "1.0.0")
    push_versions(registry, "held/db", "1.0.0")
    sources = {n: PromotionSourceStatus(kind="oci", url=f"{registry.url}/held/{n}", insecure=True) for n in SHOP}
    auto = ReleasePromotionStatus(
        leader="api",
        follow=[FollowedRange(module=n, semver=RANGE) for n in SHOP],
        held_by=PromotionHoldStatus(reason="incident"),
        available={"web": "1.1.0"},
    )
    statuses = {n: member_status(n, sources[n], "1.0.0", auto) for n in SHOP}
    made, published = promoter()
    async with aiohttp.ClientSession() as session:
        await made.watch_release(session, "shop", statuses)
        assert published == []
        push_versions(registry, "held/api", "1.2.0")
        await made.watch_release(session, "shop", statuses)
    [event] = published
    assert [(m.module, m.version) for m in event.members] == [("api", "1.2.0")]


SHOP = ("web", "api", "db")
