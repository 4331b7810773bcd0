"""Values observed on a cluster: HelmValuesObserved → the chart and live layers → a re-send.

    HelmValuesObserved -> observed_values[module/cluster] -> the cluster's sync re-merged
                       -> an Assignment (same generation) if its values changed

The engine never reads a cluster: an applier reports a release's live values (and, when it
knows them, the chart's defaults for the chart version it installed) as an event. They are
folded into `observed_values` and, if the cluster is assigned a generation of the module,
its sync is merged again (rollout/values/releases.py, rollout/values/layers.py). Only if that changes the
values sent to the cluster is an Assignment emitted — so an applier reporting back what it
applied moves nothing (the merge is a fixed point). A readOnly path that refuses a change is
recorded as a `values-refused` decision naming the path and why.

Observations are remembered by id in the cluster's report window, like status reports: a
redelivered one changes nothing. An observation about a module or cluster the engine does
not know is dropped (an applier may report a release the engine has since removed). One
with `reply` (`rollout report-values`) gets a verdict: refused naming why it does not
count, accepted otherwise with the decision it caused (or "stay as they are").
"""

from __future__ import annotations

from rollout.engine.outcome import Assignment, DecisionAction, Outcome, verdict
from rollout.engine.state import REPORT_IDS_KEPT, remember, target_key
from rollout.engine.tables import StateTables
from rollout.engine.targets import TargetBook
from rollout.values.releases import ObservedValues
from rollout.wire.assemblages import ASSEMBLAGE_FOR
from rollout.wire.decision_reasons import LiveValuesChanged
from rollout.wire.events import HelmValuesObserved


class LiveValues:
    """Folds HelmValuesObserved."""

    def __init__(self, tables: StateTables, book: TargetBook) -> None:
        self.tables = tables
        self.book = book

    def on_helm_values(self, event: HelmValuesObserved, out: Outcome) -> None:
        rejections, decisions = len(out.rejections), len(out.decisions)
        refusal = self._fold_helm_values(event, out)
        if not event.reply or refusal == _REDELIVERED:
            return
        if refusal is not None:
            out.rejections.append(refusal)
        quiet = "values observed: the values sent to the cluster stay as they are"
        out.verdicts.append(
            verdict(event.id, event.module, out, rejections=rejections, decisions=decisions, quiet=quiet)
        )

    def _fold_helm_values(self, event: HelmValuesObserved, out: Outcome) -> str | None:
        """Fold one observation; why it does not count (or `_REDELIVERED`), None if it does."""
        tables, book = self.tables, self.book
        facts = tables.clusters.get(event.cluster)
        if facts is None:
            return f"cluster {event.cluster!r} not found"
        if event.id in facts.report_ids:
            return _REDELIVERED
        tables.clusters[event.cluster] = facts.model_copy(
            update={"report_ids": remember(facts.report_ids, event.id, REPORT_IDS_KEPT)}
        )
        stored = tables.modules.get(event.module)
        if stored is None:
            return f"module {event.module!r} not found"
        if stored.spec.sync.package.helm is None:
            return f"module {event.module} does not sync a Helm chart: it has no values to observe"
        key = target_key(event.module, event.cluster)
        before = tables.observed_values.get(key)
        observed = _folded(before, event)
        if observed == before:
            return None
        tables.observed_values[key] = observed
        target = tables.targets.get(key)
        if target is None or target.assigned is None or target.assigned not in stored.revisions:
            return None
        old, _ = book.release_for(stored, target.assigned, facts, before)
        new, merged = book.release_for(stored, target.assigned, facts, observed)
        if new == old:
            return None
        record = stored.working_copy()
        out.assignments.append(
            Assignment(
                cluster=event.cluster,
                cluster_namespace=facts.namespace,
                module=record.name,
                assemblage=ASSEMBLAGE_FOR[record.kind],
                sync=book.resent_sync(record, target, facts, out),
                reason="values observed on the cluster: values merged again",
            )
        )
        book.decide(
            record,
            DecisionAction.VALUES,
            LiveValuesChanged(cluster=event.cluster),
            out,
            cluster=event.cluster,
            generation=target.assigned,
            revision=record.revisions[target.assigned].revision,
        )
        book.note_refusals(record, event.cluster, merged, out)
        book.save_module(record, out)
        return None


_REDELIVERED = "redelivered"


def _folded(before: ObservedValues | None, event: HelmValuesObserved) -> ObservedValues:
    """The observation after `event`: what it does not say stays as it was."""
    values = event.values if event.values is not None else (before.values if before else None)
    if event.chart_defaults is not None:
        return ObservedValues(values=values, chart_defaults=event.chart_defaults, chart_version=event.chart_version)
    if before is None:
        return ObservedValues(values=values)
    return before.model_copy(update={"values": values})
