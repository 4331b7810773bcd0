"""The promoter: watches auto-promoted sources for newer versions; the engine never does I/O.

    module-status topic ──► modules whose source has autoPromote (`ModuleStatus.promotion`)
                        ──► the source's versions (OCI tags, Helm index.yaml, Git tags:
                            sources.py) ──► the highest in the module's range
                        ──► newer than the target (and than what is already held available)?
                        ──► PromotionObserved(module, version, source, promoter)
                        ──► sync-status topic (key: module) ──► router ──► the engine

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
from rollout.wire.events import PromotedSource, PromotionObserved
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
        """One look at every auto-promoted module's source."""
        watched: set[str] = set()
        for module, document in sorted((await self.statuses.latest()).items()):
            try:
                status = ModuleStatus.read(document)
            except DocumentError as error:
                log.warning("module %s: %s; not watched", module, error, extra=RATE_LIMITED)
                continue
            if status.promotion is None or status.target_revision is None:
                continue
            watched.add(module)
            await self.watch(session, module, status)
        self.pending = {module: sent for module, sent in self.pending.items() if module in watched}

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
