"""The engine's side of ModuleRestrictions: admission of module applies, and restrictions
applied, tightened or deleted while modules run.

    RestrictionApplied  -> restrictions[namespace] replaced; each module of the namespace on
                           this partition checked again (`check_spec`, no default filled):
                           breaking a rule -> `restricted`, phase Halted, decision `halted`
                           naming the rule; complying again -> decision `restriction-met`;
                           membership refreshed (clusters outside `allowedClusters` leave)
    RestrictionDeleted  -> the namespace is unrestricted: restricted modules go on
    ModuleApplied       -> `admitted` (intents.py): refused with the rule, or the manifest
                           with `defaultServiceAccount` filled in

Why the engine checks at all, when `rollout apply` and the module watcher already refuse:
an intent published by hand (or by any other producer allowed to write the intents topic)
must not bypass the policy. Restrictions come on the cluster-observations topic, broadcast
to every journal partition like ClusterObserved (streams/router.py), so every partition
knows every namespace's restriction, and a ModuleApplied stamped with `fleet` (causal.py)
is folded after every restriction its publisher had seen.

A restriction tightened under a running module halts it rather than rolling it back: what
clusters run stays (the engine cannot know a safe revision; a rollback may break the rule
too), nothing more moves, and `rollout resume` does not lift it — re-applying a complying
module, or loosening the restriction, does. Clusters outside `allowedClusters` are not
members (membership.py), so they lose the module's sync either way. Redelivery: the ids of
the restriction events are kept per namespace (RESTRICTION_IDS_KEPT), so an older event
delivered again does not bring back a looser or deleted restriction.
"""

from __future__ import annotations

from rollout.api.manifests import AnyModule, ModuleRestrictionManifest
from rollout.api.restrictions import RestrictionViolation, check_module, check_spec
from rollout.engine.membership import Membership
from rollout.engine.outcome import DecisionAction, Outcome
from rollout.engine.stages import StageMachine
from rollout.engine.state import RESTRICTION_IDS_KEPT, ModuleRecord, RestrictionRecord, remember
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.wire.decision_reasons import Halted, RestrictionBroken, RestrictionMet
from rollout.wire.events import RestrictionApplied, RestrictionDeleted


class RestrictionRules:
    """Keeps each namespace's restriction; checks modules against it."""

    def __init__(self, tables: StateTables, book: TargetBook, stages: StageMachine, membership: Membership) -> None:
        self.tables = tables
        self.book = book
        self.stages = stages
        self.membership = membership

    def _restriction_of(self, namespace: str) -> ModuleRestrictionManifest | None:
        record = self.tables.restrictions.get(namespace)
        return record.restriction if record is not None else None

    def admitted(self, module: AnyModule) -> AnyModule:
        """The module as kept under its namespace's restriction; RestrictionViolation if refused."""
        return check_module(self._restriction_of(module.metadata.namespace), module)

    def on_restriction_applied(self, event: RestrictionApplied, out: Outcome) -> None:
        restriction = event.restriction
        self._replace_restriction(restriction.metadata.namespace, restriction, event.id, out)

    def on_restriction_deleted(self, event: RestrictionDeleted, out: Outcome) -> None:
        current = self._restriction_of(event.namespace)
        if current is not None and current.metadata.name != event.name:
            self._replace_restriction(event.namespace, current, event.id, out)  # another one's: kept
            return
        self._replace_restriction(event.namespace, None, event.id, out)

    def _replace_restriction(
        self, namespace: str, restriction: ModuleRestrictionManifest | None, event_id: str, out: Outcome
    ) -> None:
        tables = self.tables
        known = tables.restrictions.get(namespace)
        if known is not None and event_id in known.event_ids:
            return  # redelivered
        ids = remember(known.event_ids if known is not None else [], event_id, RESTRICTION_IDS_KEPT)
        tables.restrictions[namespace] = RestrictionRecord(namespace=namespace, restriction=restriction, event_ids=ids)
        if known is not None and known.restriction == restriction:
            return
        for name in sorted(tables.modules.keys()):
            stored = tables.modules[name]
            if stored.partition == tables.partition and stored.namespace == namespace:
                self._recheck(stored, restriction, out)

    def _recheck(self, stored: ModuleRecord, restriction: ModuleRestrictionManifest | None, out: Outcome) -> None:
        """A running module under a new restriction: halted while it breaks a rule."""
        book = self.book
        record = stored.working_copy()
        broken: RestrictionViolation | None = None
        if restriction is not None:
            try:
                check_spec(restriction, record.spec, fill_default=False)
            except RestrictionViolation as error:
                broken = error
        violation = str(broken) if broken is not None else None
        if violation != record.restricted:
            record.restricted = violation
            if broken is not None:
                cause = RestrictionBroken(
                    restriction=broken.restriction, rule=broken.rule, value=broken.value, why=broken.why
                )
                book.decide(record, DecisionAction.HALTED, Halted(cause=cause), out)
            else:
                book.decide(record, DecisionAction.RESTRICTION_MET, RestrictionMet(), out)
        book.resort(record)  # allowedClusters may admit or drop members: in slices (membership.py)
        self.stages.advance(record, out)
        if record != stored:
            book.save_module(record, out)
