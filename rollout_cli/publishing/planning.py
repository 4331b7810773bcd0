"""`rollout plan`: what `apply` would start, nothing published.

    the files (applying.load) ──► dependsOn cycles refused, as apply refuses them
    the fleet: --clusters files, or the cluster-observations topic (clusters that left kept,
        as skipped) ──► each module against its namespace's ModuleRestriction
    ──► rollout.planning.plan.plan_rollout per admitted module (windows: open now? freeze
        calendars — of the files, else the topic's: frozen now?)
    ──► warnings: a module or stage moving no cluster (surprises), a dependency that exists
        nowhere (against the modules the engine knows; not with --clusters)

Failing checks end the command as in apply (`error:` lines, exit 2); a module its
restriction refuses is left out of the plans and named in `refused`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollout_cli.publishing import applying

if TYPE_CHECKING:
    from rollout.api.loading import Loaded
    from rollout.planning.plan import PlannedBreakGlass, RolloutPlan
    from rollout_cli.options import Context

OUTCOME = "nothing was planned"


@dataclass
class Planned:
    plans: list[RolloutPlan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why a module's restriction refuses it


def plan(ctx: Context, files: tuple[str, ...], cluster_files: tuple[str, ...]) -> Planned:
    """The plans of the modules in `files` against the fleet (of `cluster_files`, if given)."""
    from rollout.planning.plan import plan_rollout
    from rollout.planning.surprises import surprises
    from rollout_cli.reading.freeze_calendars import calendars_from_records, governing
    from rollout_cli.reading.known_clusters import clusters_from_records

    planned = applying.load(files, outcome=OUTCOME)
    left: set[str] = set()
    # dependsOn: a cycle refused as apply refuses it; without --clusters, against the
    # modules the engine knows too, and a dependency that exists nowhere is warned about
    known_modules = {} if cluster_files else applying.dependencies_from_records(ctx.records(ctx.topics.module_status))
    applying.refuse_cycles(planned, known_modules, outcome=OUTCOME)
    if cluster_files:
        loaded = applying.load(cluster_files, outcome=OUTCOME)
        fleet = [item.manifest for item in loaded if item.manifest.kind == "Cluster"]
        restrictions = applying.restrictions_from_loaded(loaded, {})
        calendars = calendars_from_loaded(loaded, {})
    else:
        records = ctx.records(ctx.topics.clusters)
        known = clusters_from_records(records)
        fleet = applying.known_fleet(known)
        left = {name for name, cluster in known.items() if cluster.left}
        restrictions = applying.restrictions_from_records(records)
        calendars = calendars_from_records(records)
    calendars = calendars_from_loaded(planned, calendars)  # those in the files replace the known
    refused = applying.violations(planned, applying.restrictions_from_loaded(planned, restrictions))
    refused_items = [id(item) for item, _ in refused]
    modules = [
        i.manifest for i in planned if i.manifest.kind in ("Module", "BootstrapModule") and id(i) not in refused_items
    ]
    result = Planned(refused=[problem for _, problem in refused])
    now = time.time()  # windows: open now? calendars: frozen now?
    glass = [] if cluster_files else break_glass_in_force(ctx, now)
    result.plans = [
        plan_rollout(
            m,
            fleet,
            now=now,
            left=left,
            calendars=governing(calendars, m.metadata.namespace),
            break_glass=[
                g
                for namespace, module, g in glass
                if module in (None, m.metadata.name) and namespace in ("*", m.metadata.namespace)
            ],
        )
        for m in modules
    ]
    for module, rollout_plan in zip(modules, result.plans, strict=True):
        result.warnings += surprises(module, rollout_plan)
    if not cluster_files:
        result.warnings += applying.dependency_warnings(planned, known_modules)
    return result


def break_glass_in_force(ctx: Context, now: float) -> list[tuple[str, str | None, PlannedBreakGlass]]:
    """The break-glass overrides in force at `now`, each with the scope it covers (a
    namespace, `*`: the fleet) and the module it is about (None: every module the calendar
    governs): the calendars' own from the intents topic, the modules' own from their status."""
    from rollout.api.manifests import calendar_identity
    from rollout.api.windows import iso
    from rollout.planning.plan import PlannedBreakGlass
    from rollout_cli.reading.documents import module_statuses
    from rollout_cli.reading.freeze_calendars import break_glass_from_records

    found: list[tuple[str, str | None, PlannedBreakGlass]] = []
    for (scope, name), event in sorted(break_glass_from_records(ctx.records(ctx.topics.intents)).items()):
        if now < event.until:
            planned = PlannedBreakGlass(
                calendar=calendar_identity(scope, name),
                every_module=True,
                until=event.until,
                until_at=iso(event.until) or "",
                reason=event.reason,
                user=event.user,
                via=event.via,
            )
            found.append((scope, None, planned))
    for module, status in sorted(module_statuses(ctx.latest(ctx.topics.module_status)).items()):
        own = status.break_glass
        if own is not None and now < own.until:
            planned = PlannedBreakGlass(
                calendar=own.calendar,
                until=own.until,
                until_at=own.until_at or "",
                reason=own.reason,
                user=own.user,
                via=own.via,
            )
            found.append(("*", module, planned))  # a module's own: that module, whatever its namespace
    return found


def calendars_from_loaded(loaded: list[Loaded], known: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """`known` freeze calendars, with those of `loaded` replacing or joining them."""
    calendars = dict(known)
    for item in loaded:
        if item.manifest.kind in ("FreezeCalendar", "ClusterFreezeCalendar"):
            calendars[item.manifest.scope, item.manifest.name] = item.manifest
    return calendars
