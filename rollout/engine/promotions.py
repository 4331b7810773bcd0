"""Auto-promotion: what a PromotionObserved and `rollout promotion hold|resume` do.

    PromotionObserved(module, version, source, promoter)      (from `rollout promoter`)
        ──► ignored unless: the module auto-promotes this very source (and is no Release
            member: a member moves with its release, never alone), the version is in its
            range (pre-releases only when the range names one: rollout/api/promotion.py) and
            newer than the target — never a downgrade, and the same version again (a
            redelivery, a second promoter, the next poll) changes nothing
        ──► held (autoPromote.hold, or a command's hold): `available` — the newest version
            seen — and a `promotion-held` decision, once per new version
        ──► else: `promoted`, then a new target generation with the source at `version`
            (the manifest's spec is kept, its version replaced), rolled out from the first
            stage as any new revision (`new-revision`)
    RolloutCommanded hold-promotion  ──► PromotionHold (who, via, why): `promotion-hold`
    RolloutCommanded resume-promotion──► the hold lifted: `promotion-resumed`, then the
                                         available version promoted (unless the manifest holds)
    ModuleApplied (intents.py calls `floor` and `settle`):
        * while the target is the version last promoted and promotion is not held, a
          manifest whose own version is older (the same file applied again) keeps the
          promoted version — the manifest's version is a floor, as Flux's `ref.semver` is;
          a manual apply of a *newer* version (or of any version while held) is the target;
        * afterwards the available version is promoted if the new manifest no longer holds
          it, or forgotten when it is no longer newer than the target or out of the new range.

Everything is a pure function of the record and the event: the range check is the one the
promoter used (rollout/api/promotion.py), no clock is read. Cost: an observation that
changes nothing (the same version again, older, out of range) is O(1) — the module's record
only; one that promotes pays what an apply of a new revision pays (the module's members
re-sorted and recategorised), once per new version.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from rollout.api.manifests import AnyModule, ReleasePromotion, Source, Sync
from rollout.api.promotion import in_range, newer
from rollout.api.windows import iso
from rollout.engine.applied_documents import spec_refusal
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.state import PROMOTION_IDS_KEPT, ModuleRecord, PromotionHold, PromotionState, remember
from rollout.engine.strategy import bindings_digest
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import (
    MemberVersion,
    Promoted,
    PromotionHeld,
    PromotionHoldSet,
    PromotionResumed,
    ReleaseCombinationHeld,
    ReleaseCombinationPromoted,
)
from rollout.wire.events import (
    CommandDoor,
    PromotionObserved,
    ReleasePromoted,
    ReleasePromotionObserved,
    RolloutCommanded,
)

Retarget = Callable[[ModuleRecord, Sync, str, Outcome], None]
"""intents.py's: a new generation of `record` with `sync` (and bindings digest), decided `new-revision`."""
Advance = Callable[[ModuleRecord, Outcome], None]
"""What is done to a module's record next: intents.py's `restage` (members re-sorted and
recategorised, as after an apply), stages.py's `advance`."""


def source_label(source: Source) -> str:
    """How a decision names a source: "oci oci://registry/app", "helm https://charts podinfo"."""
    chart = f" {source.helm.chart}" if source.helm is not None else ""
    return f"{source.kind} {source.url}{chart}"


def same_source(source: Source, event: PromotionObserved) -> bool:
    chart = source.helm.chart if source.helm is not None else None
    return source.kind == event.source.kind and source.url == event.source.url and chart == event.source.chart


def held_by(record: ModuleRecord) -> str | None:
    """What holds the module's promotion: "manifest", "command", or None (not held)."""
    auto = record.spec.sync.source.auto_promote
    if auto is not None and auto.hold:
        return "manifest"
    if record.promotion is not None and record.promotion.held_by is not None:
        return "command"
    return None


def release_promotion(record: ModuleRecord) -> ReleasePromotion | None:
    """The auto-promotion of the release `record`'s module leads (None: it leads none)."""
    release = record.spec.release
    if release is None or release.auto_promote is None or release.leader != record.name:
        return None
    return release.auto_promote


def release_held_by(record: ModuleRecord) -> str | None:
    """What holds the promotion of the release `record` leads: "manifest", "command" or None."""
    auto = record.spec.release.auto_promote if record.spec.release is not None else None
    if auto is not None and auto.hold:
        return "manifest"
    if record.promotion is not None and record.promotion.held_by is not None:
        return "command"
    return None


def release_current(record: ModuleRecord, auto: ReleasePromotion) -> dict[str, str]:
    """The leader's view of its release's combination (followed member → version): the
    version it last promoted, while that is above the one the release was applied with, in
    range and not held by the manifest — what each member's `floor` keeps — else the
    version the release was applied with."""
    promoted = record.promotion.release_promoted if record.promotion is not None else {}
    current: dict[str, str] = {}
    for member in auto.follow:
        kept = promoted.get(member.module)
        keep = kept is not None and not auto.hold and newer(kept, member.version) and in_range(kept, member.semver)
        current[member.module] = kept if keep and kept is not None else member.version
    return current


class Promotions:
    """Folds promotion observations and hold/resume commands into the module's record."""

    def __init__(
        self, tables: StateTables, book: TargetBook, retarget: Retarget, restage: Advance, advance: Advance
    ) -> None:
        self.tables = tables
        self.book = book
        self.retarget = retarget
        self.restage = restage
        self.advance = advance

    def on_promotion_observed(self, event: PromotionObserved, out: Outcome) -> None:
        tables = self.tables
        stored = tables.modules.get(event.module)
        if stored is None or stored.partition != tables.partition or stored.deleting is not None:
            return  # unknown (deleted) module, or one going away: nothing to promote
        state = stored.promotion or PromotionState()
        if event.id in state.ids or spec_refusal(stored.spec) is not None:
            return  # redelivered; or a spec this release refuses (the module is halted)
        source = stored.spec.sync.source
        auto = source.auto_promote
        if auto is None or not same_source(source, event) or not auto.admits(event.version):
            return  # not auto-promoted (any more), another source, or out of range
        if stored.spec.release is not None:
            return  # a Release member moves with its release, never promoted alone (module_releases.py)
        current = stored.revisions[stored.target].revision
        if not newer(event.version, current):
            return  # never a downgrade; the target itself again changes nothing
        hold = held_by(stored)
        if hold is not None and state.available is not None and not newer(event.version, state.available):
            return  # held, and this version (or a newer one) is already recorded as available
        try:
            sync = stored.spec.sync.model_copy(update={"source": source.at_version(event.version)})
        except (ValidationError, ValueError):
            return  # a version this source cannot take as a tag (an OCI tag has no '+')
        record = stored.working_copy()
        state = record.promotion = record.promotion or PromotionState()
        state.ids = remember(state.ids, event.id, PROMOTION_IDS_KEPT)
        if hold is not None:
            state.available, state.available_from = event.version, event.promoter
            held = PromotionHeld(version=event.version, current=current, by=hold, promoter=event.promoter)  # type: ignore[arg-type]
            self.book.decide(record, DecisionAction.PROMOTION_HELD, held, out)
        else:
            self._promote(record, sync, event.promoter, None, out)
        self.advance(record, out)
        self.book.save_module(record, out)

    def _promote(
        self,
        record: ModuleRecord,
        sync: Sync,
        promoter: str | None,
        by: RolloutCommanded | ReleasePromoted | None,
        out: Outcome,
        release: str | None = None,
    ) -> None:
        """`sync` (the source at a newer version) becomes the target of `record`."""
        state = record.promotion = record.promotion or PromotionState()
        previous = record.revisions[record.target].revision
        state.promoted, state.available, state.available_from = sync.revision, None, None
        promoted = Promoted(
            version=sync.revision,
            previous=previous,
            source=source_label(sync.source),
            promoter=promoter,
            user=by.user if by is not None else None,
            via=by.via if by is not None else None,
            release=release,
        )
        self.book.decide(record, DecisionAction.PROMOTED, promoted, out)
        record.spec = record.spec.model_copy(update={"sync": sync})
        self.retarget(record, sync, bindings_digest(record.spec.bindings), out)
        self.restage(record, out)  # every member pending again, its place in the moving order anew

    # -- commands ------------------------------------------------------------------------

    def on_command(self, record: ModuleRecord, event: RolloutCommanded, out: Outcome) -> str | None:
        """hold-promotion / resume-promotion on `record` (a working copy); a refusal's text, or None.
        A Release member's promotion is its release's: only the release's leader keeps it."""
        release = record.spec.release
        if release is not None and release.auto_promote is None:
            return f"{record.name} moves with release {release.name}, which does not auto-promote (no spec.autoPromote)"
        if release is not None and release.leader != record.name:
            return (
                f"{record.name} moves with release {release.name}: hold or resume the release "
                f"(rollout promotion hold release/{release.name}), whose promotion {release.leader} keeps"
            )
        if release is None and record.spec.sync.source.auto_promote is None:
            return f"module {record.name} does not auto-promote: its source has no autoPromote"
        state = record.promotion = record.promotion or PromotionState()
        if event.command == "hold-promotion":
            if state.held_by is None:
                state.held_by = PromotionHold(reason=event.reason or "", user=event.user, via=event.via)
                hold = PromotionHoldSet(reason=event.reason or "", user=event.user, via=event.via)
                self.book.decide(record, DecisionAction.PROMOTION_HOLD, hold, out)
            return None
        if state.held_by is not None:
            state.held_by = None
            self.book.decide(
                record, DecisionAction.PROMOTION_RESUMED, PromotionResumed(user=event.user, via=event.via), out
            )
            self.settle(record, out, by=event)
        return None

    # -- applies -------------------------------------------------------------------------

    def floor(self, record: ModuleRecord | None, manifest: AnyModule) -> AnyModule:
        """`manifest`, or — applied again with an older version while the target is the one
        promoted and promotion is not held — the manifest at the promoted version."""
        source = manifest.spec.sync.source
        auto = source.auto_promote
        if record is None or record.promotion is None or auto is None or auto.hold:
            return manifest
        promoted = record.promotion.promoted
        if record.promotion.held_by is not None or promoted is None:
            return manifest
        old = record.spec.sync.source
        current = record.revisions[record.target].revision
        if (source.kind, source.url, source.helm and source.helm.chart) != (
            old.kind,
            old.url,
            old.helm and old.helm.chart,
        ):
            return manifest  # another source: its own version counts
        if current != promoted or not newer(promoted, source.revision) or not in_range(promoted, auto.semver):
            return manifest
        try:
            sync = manifest.spec.sync.model_copy(update={"source": source.at_version(promoted)})
        except (ValidationError, ValueError):
            return manifest
        return manifest.model_copy(update={"spec": manifest.spec.model_copy(update={"sync": sync})})

    def settle(self, record: ModuleRecord, out: Outcome, by: RolloutCommanded | None = None) -> None:
        """After an apply or a resume: promote the available version when nothing holds it
        any more; forget it when it is no longer newer than the target, or out of range."""
        if record.spec.release is not None:
            self._settle_release(record, out, by)
            return
        state = record.promotion
        if state is None or state.available is None:
            return
        source = record.spec.sync.source
        auto = source.auto_promote
        current = record.revisions[record.target].revision
        if auto is None or not auto.admits(state.available) or not newer(state.available, current):
            state.available = state.available_from = None
            return
        if held_by(record) is not None:
            return
        try:
            sync = record.spec.sync.model_copy(update={"source": source.at_version(state.available)})
        except (ValidationError, ValueError):
            state.available = state.available_from = None
            return
        self._promote(record, sync, state.available_from, by, out)

    # -- releases: promoted as a unit by their leader ------------------------------------

    def on_release_observed(self, event: ReleasePromotionObserved, out: Outcome) -> None:
        """The promoter's newer versions of a release's followed members, at the release's
        leader: the combination they make with the others' current versions is promoted as
        one (every member told its version), or recorded as available while held."""
        tables = self.tables
        stored = tables.modules.get(event.module)
        if stored is None or stored.partition != tables.partition or stored.deleting is not None:
            return
        auto = release_promotion(stored)
        release = stored.spec.release
        if auto is None or release is None or release.name != event.release:
            return  # not (any more) the leader of this auto-promoted release
        state = stored.promotion or PromotionState()
        if event.id in state.ids or spec_refusal(stored.spec) is not None:
            return  # redelivered; or a spec this release refuses
        current = release_current(stored, auto)
        seen: dict[str, str] = {}
        for observed in event.members:
            member = auto.followed(observed.module)
            origin = (observed.source.kind, observed.source.url, observed.source.chart)
            if member is None or origin != (member.kind, member.url, member.chart):
                continue  # not followed (any more), or another source
            if in_range(observed.version, member.semver) and newer(observed.version, current[member.module]):
                seen[member.module] = observed.version
        hold = release_held_by(stored)
        available = state.release_available
        if not seen or (hold is not None and not any(newer(v, available.get(m, current[m])) for m, v in seen.items())):
            return  # nothing newer; or, held, nothing newer than what is available already
        record = stored.working_copy()
        state = record.promotion = record.promotion or PromotionState()
        state.ids = remember(state.ids, event.id, PROMOTION_IDS_KEPT)
        if hold is not None:
            merged = dict(state.release_available)
            for module, version in seen.items():
                if newer(version, merged.get(module, current[module])):
                    merged[module] = version
            state.release_available, state.available_from = merged, event.promoter
            moves = [MemberVersion(module=m, version=v, previous=current[m]) for m, v in sorted(merged.items())]
            held = ReleaseCombinationHeld(release=release.name, members=moves, by=hold, promoter=event.promoter)  # type: ignore[arg-type]
            self.book.decide(record, DecisionAction.RELEASE_PROMOTION_HELD, held, out)
        else:
            self._promote_release(record, current | seen, current, event.promoter, None, None, out)
        self.book.save_module(record, out)

    def _settle_release(self, record: ModuleRecord, out: Outcome, by: RolloutCommanded | None) -> None:
        """After an apply or a resume, at the release's leader: the combination available is
        promoted when nothing holds it any more; a version no longer newer than the current
        one (or out of its range) is forgotten."""
        state = record.promotion
        if state is None or not state.release_available:
            return
        auto = release_promotion(record)
        if auto is None:
            state.release_available, state.available_from = {}, None
            return
        current = release_current(record, auto)
        kept: dict[str, str] = {}
        for module, version in sorted(state.release_available.items()):
            member = auto.followed(module)
            if member is not None and in_range(version, member.semver) and newer(version, current[module]):
                kept[module] = version
        state.release_available = kept
        if not kept:
            state.available_from = None
            return
        if release_held_by(record) is not None:
            return
        user, via = (by.user, by.via) if by is not None else (None, None)
        self._promote_release(record, current | kept, current, state.available_from, user, via, out)

    def _promote_release(
        self,
        record: ModuleRecord,
        combination: dict[str, str],
        current: dict[str, str],
        promoter: str | None,
        user: str | None,
        via: CommandDoor | None,
        out: Outcome,
    ) -> None:
        """The release `record` leads moves to `combination` as one: decided here, and one
        ReleasePromoted to every member (this one too, through its own partition's input), each
        naming the others' — none counts a peer's state from before the promotion."""
        release = record.spec.release
        assert release is not None
        state = record.promotion = record.promotion or PromotionState()
        state.release_promoted, state.release_available, state.available_from = dict(combination), {}, None
        moves = [MemberVersion(module=m, version=v, previous=current[m]) for m, v in sorted(combination.items())]
        promoted = ReleaseCombinationPromoted(
            release=release.name, members=moves, promoter=promoter, user=user, via=via
        )
        self.book.decide(record, DecisionAction.RELEASE_PROMOTED, promoted, out)
        members = sorted(release.members)
        ids = dict(zip(members, self.book.links.reserve(len(members)), strict=True))
        at = iso(self.tables.now) or ""
        for member in members:
            after = {peer: ids[peer] for peer in members if peer != member}
            out.dependency_events.append(
                ReleasePromoted(
                    id=ids[member],
                    at=at,
                    module=member,
                    release=release.name,
                    version=combination.get(member),
                    after=after,
                    promoter=promoter,
                    user=user,
                    via=via,
                )
            )

    def promote_member(self, record: ModuleRecord, event: ReleasePromoted, out: Outcome) -> bool:
        """A member (`record`, a working copy) told its version of its release's new
        combination: a new target when it is newer than the target and in the range the
        member follows. Whether it was."""
        source = record.spec.sync.source
        auto = source.auto_promote
        current = record.revisions[record.target].revision
        version = event.version
        if version is None or auto is None or not auto.admits(version) or not newer(version, current):
            return False
        try:
            sync = record.spec.sync.model_copy(update={"source": source.at_version(version)})
        except (ValidationError, ValueError):
            return False
        self._promote(record, sync, event.promoter, event if event.user or event.via else None, out, event.release)
        return True
