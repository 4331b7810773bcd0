"""The promoter: watches auto-promoted sources for newer versions; the engine never does I/O.

    module-status topic ──► modules whose source has autoPromote (`ModuleStatus.promotion`)
                        ──► the source's versions (OCI tags, Helm index.yaml, Git tags:
                            sources.py) ──► the highest in the module's range
                        ──► newer than the target (and than what is already held available)?
                        ──► PromotionObserved(module, version, source, promoter)
                        ──► sync-status topic (key: module) ──► router ──► the engine
    a Release auto-promoted as a unit (`ModuleStatus.release.autoPromote`): its followed
    members' newest versions in one ReleasePromotionObserved ──► the release's leader

Every `interval` seconds the promoter reads the latest module statuses (a compacted topic,
each document read with its model, rollout/wire/status.py; one consumer kept for the
process's life, `client.LatestReader`, so a round reads only what changed) and, for each
module whose status has a `promotion` block, lists the source's versions and picks the
highest in range with the very function the engine checks it with
(rollout/api/promotion.py: `newest_in_range`; pre-releases only when the range names one).
It publishes when that version is newer than the module's target revision — and, while
promotion is held, newer than the version already recorded as available: a held module is
not told the same version every round. It never writes a manifest: the engine decides
(rollout/engine/promotions.py) — a new target, or "available, held".

A Release auto-promoted as a unit is watched as one: every followed member's versions are
listed in the same round, and those newer than their member's target go to the release's
leader in one event, so versions seen together become one combination
(rollout/engine/promotions.py, "Releases"); a member that cannot be listed this round
leaves the whole release for the next.

Several promoters may run; each event carries its own id and the promoter's `name` (its
identity, the provenance the promotion decision records), and the engine counts a version
once whoever saw it. What it published is remembered per module until the status shows the
engine caught up, so a version is published again only when the status still lags after
`republish_after` rounds (a lost event is simply sent again). A source that cannot be read
is logged (rate-limited) and tried again next round; nothing the promoter reads from a
Secret is logged or published.

Cost: one listing per auto-promoted module per round — the registry's tag list (paged by
1000), the Helm index, or `git ls-remote`; none of it reaches the engine unless a newer
version appeared.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp

from infra import client
from infra.observability import RATE_LIMITED
from infra.topics import TopicNames
from projections.promoter.sources import REQUEST_TIMEOUT, SourceError, list_versions
from projections.publisher import Publish
from projections.rounds import run_rounds
from rollout.api.promotion import newer, newest_in_range
from rollout.wire.documents import DocumentError
from rollout.wire.events import ObservedMember, PromotedSource, PromotionObserved, ReleasePromotionObserved
from rollout.wire.status import ModuleStatus

log = logging.getLogger("rollout.promoter")


class Promoter:
    """Publishes the newer versions of auto-promoted sources; see the module docstring."""

    def __init__(
        self,
        *,
        bootstrap: str,
        prefix: str,
        publish: Publish,
        name: str,
        interval: float = 60.0,
        secrets_dir: Path | None = None,
        republish_after: int = 5,
    ) -> None:
        self.topics = TopicNames(prefix)
        self.publish = publish
        self.name = name
        self.interval = interval
        self.secrets_dir = secrets_dir
        self.republish_after = republish_after
        self.published = 0
        self.pending: dict[str, tuple[str, int]] = {}  # module → (version published, rounds since)
        self.statuses = client.LatestReader(bootstrap, self.topics.module_status)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_rounds(
                self.round, interval=self.interval, stop=stop, request_timeout=REQUEST_TIMEOUT, what="promotion"
            )
        finally:
            await self.statuses.close()

    async def round(self, session: aiohttp.ClientSession) -> None:
        """One look at every auto-promoted module's source, and every auto-promoted release's."""
        watched: set[str] = set()
        releases: dict[str, dict[str, ModuleStatus]] = {}
        for module, document in sorted((await self.statuses.latest()).items()):
            try:
                status = ModuleStatus.read(document)
            except DocumentError as error:
                log.warning("module %s: %s; not watched", module, error, extra=RATE_LIMITED)
                continue
            if status.release is not None and status.release.auto_promote is not None:
                releases.setdefault(status.release.name, {})[module] = status  # promoted as a unit
                continue
            if status.promotion is None or status.target_revision is None or status.release is not None:
                continue
            watched.add(module)
            await self.watch(session, module, status)
        for name, members in sorted(releases.items()):
            watched.add(f"release/{name}")
            await self.watch_release(session, name, members)
        self.pending = {module: sent for module, sent in self.pending.items() if module in watched}

    async def watch_release(self, session: aiohttp.ClientSession, name: str, members: dict[str, ModuleStatus]) -> None:
        """A release auto-promoted as a unit: the newest version in range of each member it
        follows, one ReleasePromotionObserved to its leader when any is newer than that
        member's target (and, while the release is held, than what is available)."""
        leader_name = next(iter(members.values())).release.auto_promote.leader  # type: ignore[union-attr]
        leader = members.get(leader_name)
        if leader is None or leader.release is None or leader.release.auto_promote is None:
            return  # the leader's status is not there yet: it decides, and says what is held
        release = leader.release.auto_promote
        seen: list[ObservedMember] = []
        for module, status in sorted(members.items()):
            promotion = status.promotion
            if promotion is None or status.target_revision is None:
                continue  # a member that follows no range
            try:
                versions = await list_versions(session, promotion.source, self.secrets_dir)
            except (SourceError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
                log.warning("release %s: cannot list the versions of %s (%s): %s", name, module,
                            promotion.source.url, error, extra=RATE_LIMITED)  # fmt: skip
                return  # a combination is seen whole, or not at all this round
            best = newest_in_range(versions, promotion.semver)
            floor = release.available.get(module) if release.held else None
            if best is not None and newer(best, floor or status.target_revision):
                source = PromotedSource(
                    kind=promotion.source.kind, url=promotion.source.url, chart=promotion.source.chart
                )
                seen.append(ObservedMember(module=module, version=best, source=source))
        key = f"release/{name}"
        combination = ",".join(f"{member.module}={member.version}" for member in seen)
        if not seen:
            self.pending.pop(key, None)
            return
        sent = self.pending.get(key)
        if sent is not None and sent[0] == combination and sent[1] < self.republish_after:
            self.pending[key] = (combination, sent[1] + 1)
            return
        event = ReleasePromotionObserved(module=leader_name, release=name, members=seen, promoter=self.name)
        await self.publish(leader_name, event.to_bytes())
        self.pending[key] = (combination, 0)
        self.published += 1
        log.info("release %s: %s offered to its leader %s%s", name, combination, leader_name,
                 ", held" if release.held else "")  # fmt: skip

    async def watch(self, session: aiohttp.ClientSession, module: str, status: ModuleStatus) -> None:
        promotion = status.promotion
        assert promotion is not None and status.target_revision is not None
        try:
            versions = await list_versions(session, promotion.source, self.secrets_dir)
        except (SourceError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
            log.warning("module %s: cannot list the versions of %s: %s", module, promotion.source.url, error,
                        extra=RATE_LIMITED)  # fmt: skip
            return
        best = newest_in_range(versions, promotion.semver)
        floor = promotion.available if promotion.held and promotion.available else status.target_revision
        if best is None or not newer(best, floor):
            self.pending.pop(module, None)  # the engine caught up (or nothing newer is there)
            return
        sent = self.pending.get(module)
        if sent is not None and sent[0] == best and sent[1] < self.republish_after:
            self.pending[module] = (best, sent[1] + 1)  # published; the status has not shown it yet
            return
        event = PromotionObserved(
            module=module,
            version=best,
            source=PromotedSource(kind=promotion.source.kind, url=promotion.source.url, chart=promotion.source.chart),
            promoter=self.name,
        )
        await self.publish(module, event.to_bytes())
        self.pending[module] = (best, 0)
        self.published += 1
        log.info(
            "module %s: %s %s offers %s (target %s, range %s)%s",
            module,
            promotion.source.kind,
            promotion.source.url,
            best,
            status.target_revision,
            promotion.semver,
            ", held" if promotion.held else "",
        )
