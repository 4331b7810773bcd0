"""`rollout apply`, everything before the one transaction: nothing is published unless all holds.

    read_manifests(files)               every problem of every file      → error, exit 2
    no documents                        "no documents in empty.yaml"     → error, exit 2
    one object twice / a shared name    both places named                → error, exit 2
    topics exist; every encoded event   under its topic's max.message.bytes, named by
                                        document and limit               → error, exit 2
    the fleet on cluster-observations   clusters: created / configured / unchanged;
                                        selectors and stages matching no known cluster →
                                        `warning:` lines (applied all the same)
    dependsOn (and module-status)       a cycle → error, exit 2 (plan refuses it too); a
                                        dependency that exists nowhere → `warning:` line
    freeze calendars                    created / configured / unchanged (from the topic);
                                        more than MAX_CALENDARS_PER_SCOPE in a namespace (or
                                        the fleet), with the topic's → error, exit 2
    ModuleRestrictions                  each module checked against its namespace's — the
                                        one in the files, else the one on the
                                        cluster-observations topic (rollout/api/restrictions.py):
                                        a broken rule, named → error, exit 2

then `publish` sends `Prepared.intents` in one transaction (intents.py) and the command
(rollout_cli/commands/apply.py) reports the engine's verdicts.
Errors are one `error:` line per problem (at most MAX_PROBLEMS, then how many more), each
`FILE: document N (Kind/name): field: why`, and a last line saying nothing was applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from infra import client, transactions
from rollout.api.loading import Loaded, ManifestError
from rollout.api.manifests import ClusterManifest, ModuleRestrictionManifest
from rollout.api.restrictions import RestrictionViolation, check_module
from rollout.planning.dependency_graph import DependencyCycle, check_acyclic, missing_dependencies
from rollout.planning.plan import plan_rollout
from rollout.planning.surprises import surprises
from rollout_cli.options import Context, fail
from rollout_cli.publishing.intents import (
    Intent,
    calendar_label,
    intent_for,
    intents_for,
    largest_encoding,
    publish_intents,
)
from rollout_cli.publishing.manifest_files import expand_paths, read_manifests
from rollout_cli.reading.freeze_calendars import calendars_from_records

if TYPE_CHECKING:
    from rollout.wire.status import ModuleStatus
    from rollout_cli.reading.known_clusters import KnownCluster

MAX_PROBLEMS = 20


@dataclass
class Prepared:
    """What apply will publish, and what it found out on the way."""

    intents: list[Intent]
    known_ends: dict[int, int]  # cluster-observations end offsets, read before publishing
    max_bytes: int
    # cluster/x, modulerestriction/namespace/x -> created|configured|unchanged
    cluster_changes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    committed: bool = False  # the transaction committed: everything is visible


def fail_with(problems: list[str], outcome: str = "nothing was applied") -> None:
    """Exit 2 with one `error:` line per problem (capped) and a last one: `outcome`."""
    for problem in problems[:MAX_PROBLEMS]:
        click.echo(f"error: {problem}", err=True)
    if len(problems) > MAX_PROBLEMS:
        click.echo(f"error: ... and {len(problems) - MAX_PROBLEMS} more problem(s)", err=True)
    fail(f"{outcome} ({len(problems)} problem(s))")


def load(files: tuple[str, ...], *, outcome: str = "nothing was applied") -> list[Loaded]:
    """The valid manifests of `files`, or exit listing every problem; never an empty list."""
    try:
        loaded = read_manifests(list(files))
    except ManifestError as error:
        fail_with([str(problem) for problem in error.problems], outcome)
    if not loaded:
        found = [str(path) for path in expand_paths(list(files))]
        if not found:
            fail(f"no .yaml or .yml files in {', '.join(files)}; {outcome}")
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        fail(f"no documents in {shown}; {outcome}")
    refuse_repeats(loaded, outcome)
    return loaded


def refuse_repeats(loaded: list[Loaded], outcome: str) -> None:
    """An object twice, or a Module and a BootstrapModule sharing a name, is a mistake."""
    problems: list[str] = []
    seen: dict[tuple[str, str], Loaded] = {}
    for item in loaded:
        name, kind = item.manifest.metadata.name, item.manifest.kind
        if kind == "ModuleRestriction":  # one per namespace
            name = item.manifest.metadata.namespace
        if kind == "FreezeCalendar":  # one name per namespace (a ClusterFreezeCalendar's: one in the fleet)
            kind, name = "ClusterFreezeCalendar", item.manifest.identity
        first = seen.setdefault((_space(kind), name), item)
        if first is item:
            continue
        if kind == "ModuleRestriction":
            problems.append(f"{item.where}: {first.where} is the restriction of namespace {name}; one per namespace")
        elif first.manifest.kind == kind:
            problems.append(f"{item.where}: {first.identity} is already in {first.where}; apply each object once")
        else:
            problems.append(f"{item.where}: {first.identity} ({first.where}) has the same name; modules share names")
    if problems:
        fail_with(problems, outcome)


def prepare(ctx: Context, loaded: list[Loaded]) -> Prepared:
    """Check sizes against the topics' limits, compare with the fleet, find surprises."""
    intents = intents_for([item.manifest for item in loaded])
    try:
        limits, known_ends, fleet, restrictions, calendars = client.run(_broker_facts(ctx))
    except client.MissingTopic as error:
        fail(f"nothing was applied: {error}")
    except Exception as error:
        fail(f"nothing was applied: cannot read the topics at {ctx.bootstrap}: {error}")
    known_statuses = client.run(_known_statuses(ctx))
    known_modules = {name: status.depends_on for name, status in known_statuses.items()}
    refuse_cycles(loaded, known_modules)
    refuse_violations(loaded, restrictions)
    refuse_calendars_beyond_limit(loaded, calendars)
    sources = {(intent.role, intent.key): item for item in loaded for intent in [intent_for(item.manifest)]}
    too_large = []
    for intent in intents:
        topic = ctx.topics.clusters if intent.role == "clusters" else ctx.topics.intents
        size = transactions.record_size(intent.key.encode(), largest_encoding(intent, known_ends))
        if size > limits[topic].max_bytes:
            where = sources[(intent.role, intent.key)].where
            too_large.append(
                f"{where}: encoded event is {transactions.megabytes(size)}, over {limits[topic].describe()}"
            )
    if too_large:
        fail_with(too_large)
    prepared = Prepared(intents, known_ends, max(limit.max_bytes for limit in limits.values()))
    prepared.cluster_changes = (
        cluster_changes(loaded, fleet) | restriction_changes(loaded, restrictions) | calendar_changes(loaded, calendars)
    )
    prepared.warnings = fleet_warnings([item.manifest for item in loaded], fleet)
    prepared.warnings += dependency_warnings(loaded, known_modules)
    prepared.warnings += release_warnings(loaded, known_statuses)
    return prepared


def refuse_calendars_beyond_limit(loaded: list[Loaded], known: dict[tuple[str, str], Any]) -> None:
    """A scope (a namespace, or the fleet) may hold MAX_CALENDARS_PER_SCOPE freeze calendars
    (rollout/api/freezes.py; the engine dead-letters one more): those on the topic and those
    in the files together; each calendar beyond it is named."""
    from rollout.api.freezes import MAX_CALENDARS_PER_SCOPE

    names: dict[str, set[str]] = {}
    for scope, name in known:
        names.setdefault(scope, set()).add(name)
    problems = []
    for item in loaded:
        manifest = item.manifest
        if manifest.kind not in ("FreezeCalendar", "ClusterFreezeCalendar"):
            continue
        held = names.setdefault(manifest.scope, set())
        if manifest.name in held:
            continue
        if len(held) >= MAX_CALENDARS_PER_SCOPE:
            which = "the fleet" if manifest.kind == "ClusterFreezeCalendar" else f"namespace {manifest.scope}"
            problems.append(
                f"{item.where}: {which} already has {len(held)} freeze calendars, at most "
                f"{MAX_CALENDARS_PER_SCOPE} per scope (delete one, or merge their windows into one calendar)"
            )
            continue
        held.add(manifest.name)
    if problems:
        fail_with(problems)


def release_warnings(loaded: list[Loaded], known: dict[str, ModuleStatus]) -> list[str]:
    """A module the engine knows as a Release member, applied without its Release: legal
    (it leaves the release), but likely a mistake — said, not hidden."""
    warnings = []
    for item in loaded:
        status = known.get(item.manifest.metadata.name) if _is_module(item.manifest) else None
        if status is not None and status.release is not None and item.manifest.spec.release is None:
            warnings.append(
                f"{item.where}: a member of Release {status.release.name}, applied without it: it leaves the "
                f"release and moves on its own (apply the Release with its modules to keep it)"
            )
    return warnings


def refuse_cycles(loaded: list[Loaded], known: dict[str, list[str]], outcome: str = "nothing was applied") -> None:
    """A dependsOn cycle among the given modules and the known ones is refused — by apply
    and plan alike (rollout/planning/dependency_graph.py): the engine's partitions cannot see one."""
    graph, where = _dependency_graph(loaded, known)
    try:
        check_acyclic(graph)
    except DependencyCycle as error:
        named = next((where[name] for name in error.cycle if name in where), None)
        fail_with([f"{named}: {error}" if named else str(error)], outcome)


def dependency_warnings(loaded: list[Loaded], known: dict[str, list[str]]) -> list[str]:
    """A dependsOn naming a module neither given nor known: legal (it may be applied
    later), but the module is blocked on every cluster until then — said, not hidden."""
    graph, where = _dependency_graph(loaded, known)
    return [
        f"{where[name]}: dependsOn {dependency}: no module {dependency} exists (not in these files, not known "
        f"to the engine); {name} stays BLOCKED on every cluster until {dependency} is applied"
        for name, missing in missing_dependencies(graph, where).items()
        for dependency in missing
    ]


def _dependency_graph(loaded: list[Loaded], known: dict[str, list[str]]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """module → its dependsOn, `known` overridden by the modules of `loaded`; and where
    each module of `loaded` is."""
    graph = dict(known)
    where: dict[str, str] = {}
    for item in loaded:
        if _is_module(item.manifest):
            graph[item.manifest.metadata.name] = list(item.manifest.spec.depends_on)
            where[item.manifest.metadata.name] = item.where
    return graph, where


def dependencies_from_records(records: Sequence[client.Record]) -> dict[str, list[str]]:
    """dependsOn of every module the module-status topic's `records` hold (the latest
    document per key, read with its model; a tombstone: deleted). A pending module (its
    apply held for causal order) has none yet."""
    return {name: status.depends_on for name, status in statuses_from_records(records).items()}


def statuses_from_records(records: Sequence[client.Record]) -> dict[str, ModuleStatus]:
    """The status of every module the module-status topic's `records` hold (the latest
    document per key, read with its model; a tombstone: deleted)."""
    from rollout_cli.reading.documents import module_status

    latest: dict[str, bytes | None] = {}
    for record in records:
        if record.key is not None:
            latest[record.key] = record.value
    return {name: module_status(name, value) for name, value in sorted(latest.items()) if value is not None}


async def _known_statuses(ctx: Context) -> dict[str, ModuleStatus]:
    """Every module the module-status topic knows (none if it has no topic)."""
    try:
        return statuses_from_records(await client.read_all(ctx.bootstrap, ctx.topics.module_status))
    except LookupError:
        return {}


def refuse_violations(loaded: list[Loaded], known: dict[str, ModuleRestrictionManifest]) -> None:
    """Every module breaking its namespace's ModuleRestriction — the one applied with it,
    else the one the topic knows — is refused, naming the restriction, rule and value."""
    problems = violations(loaded, restrictions_from_loaded(loaded, known))
    if problems:
        fail_with([problem for _, problem in problems])


def restrictions_from_loaded(
    loaded: list[Loaded], known: dict[str, ModuleRestrictionManifest]
) -> dict[str, ModuleRestrictionManifest]:
    """`known` restrictions, replaced by the ones in `loaded` for their namespaces."""
    restrictions = dict(known)
    for item in loaded:
        if item.manifest.kind == "ModuleRestriction":
            restrictions[item.manifest.metadata.namespace] = item.manifest
    return restrictions


def violations(loaded: list[Loaded], restrictions: dict[str, ModuleRestrictionManifest]) -> list[tuple[Loaded, str]]:
    """Each module of `loaded` its namespace's restriction refuses, with `where: why` (rollout/api/restrictions.py)."""
    problems = []
    for item in loaded:
        if _is_module(item.manifest):
            try:
                check_module(restrictions.get(item.manifest.metadata.namespace), item.manifest)
            except RestrictionViolation as violation:
                problems.append((item, f"{item.where}: {violation}"))
    return problems


def restrictions_from_records(records: Sequence[client.Record]) -> dict[str, ModuleRestrictionManifest]:
    """The ModuleRestriction of each namespace, as the cluster-observations topic holds them
    (the latest RestrictionApplied, unless a RestrictionDeleted of it came after)."""
    restrictions: dict[str, ModuleRestrictionManifest] = {}
    for record in records:
        try:
            event = record.json()
            if not isinstance(event, dict):
                continue
            if event.get("type") == "RestrictionApplied":
                manifest = ModuleRestrictionManifest.model_validate(event["restriction"])
                restrictions[manifest.metadata.namespace] = manifest
            elif event.get("type") == "RestrictionDeleted":
                current = restrictions.get(event.get("namespace", ""))
                if current is not None and current.metadata.name == event.get("name"):
                    del restrictions[current.metadata.namespace]
        except (ValueError, KeyError, TypeError):
            continue  # malformed events are the dead-letter topic's business
    return restrictions


def restriction_changes(loaded: list[Loaded], known: dict[str, ModuleRestrictionManifest]) -> dict[str, str]:
    """modulerestriction/namespace/name → created, unchanged or configured."""
    changes = {}
    for item in loaded:
        manifest = item.manifest
        if manifest.kind == "ModuleRestriction":
            current = known.get(manifest.metadata.namespace)
            change = "created" if current is None else "unchanged" if current == manifest else "configured"
            changes[f"modulerestriction/{manifest.metadata.namespace}/{manifest.metadata.name}"] = change
    return changes


def calendar_changes(loaded: list[Loaded], known: dict[tuple[str, str], Any]) -> dict[str, str]:
    """freezecalendar/namespace/name, clusterfreezecalendar/name → created, unchanged or configured."""
    changes = {}
    for item in loaded:
        manifest = item.manifest
        if manifest.kind in ("FreezeCalendar", "ClusterFreezeCalendar"):
            current = known.get((manifest.scope, manifest.name))
            change = "created" if current is None else "unchanged" if current == manifest else "configured"
            changes[calendar_label(manifest)] = change
    return changes


def _is_module(manifest: Any) -> bool:
    return manifest.kind in ("Module", "BootstrapModule")


def _space(kind: str) -> str:
    """Names a kind shares: modules (both kinds) are fleet-wide, restrictions per namespace."""
    spaces = {"Cluster": "cluster", "ModuleRestriction": "restriction", "ClusterFreezeCalendar": "calendar"}
    return spaces.get(kind, "module")


async def _broker_facts(
    ctx: Context,
) -> tuple[
    dict[str, transactions.MessageLimit],
    dict[int, int],
    dict[str, KnownCluster],
    dict[str, ModuleRestrictionManifest],
    dict[tuple[str, str], Any],
]:
    """Topics' limits, cluster-observations end offsets, the fleet's latest documents, the
    namespaces' ModuleRestrictions and the freeze calendars (all from the cluster-observations topic)."""
    from rollout_cli.reading.known_clusters import clusters_from_records

    topics = [ctx.topics.clusters, ctx.topics.intents]
    await client.require_topics(ctx.bootstrap, topics)
    limits = await transactions.message_limits(ctx.bootstrap, topics)
    known_ends = await client.end_offsets(ctx.bootstrap, ctx.topics.clusters)
    records = await client.read_all(ctx.bootstrap, ctx.topics.clusters)
    return (
        limits,
        known_ends,
        clusters_from_records(records),
        restrictions_from_records(records),
        calendars_from_records(records),
    )


def cluster_changes(loaded: list[Loaded], fleet: dict[str, KnownCluster]) -> dict[str, str]:
    """cluster/x → created (not in the fleet), unchanged (the same facts) or configured."""
    changes = {}
    for item in loaded:
        manifest = item.manifest
        if manifest.kind != "Cluster":
            continue
        current = fleet.get(manifest.metadata.name)
        if current is None:
            changes[item.identity.lower()] = "created"
        else:
            changes[item.identity.lower()] = "unchanged" if _same_cluster(current.manifest, manifest) else "configured"
    return changes


def _same_cluster(document: Any, manifest: ClusterManifest) -> bool:
    try:
        return bool(ClusterManifest.model_validate(document) == manifest)
    except ValueError:
        return False  # written by an older version, under other rules: it changes now


def known_fleet(known: dict[str, KnownCluster], applied: Sequence[Any] = ()) -> list[ClusterManifest]:
    """The clusters the engine knows (valid documents of the topic), with `applied` ones
    replacing or joining them."""
    fleet: dict[str, ClusterManifest] = {}
    for name, cluster in known.items():
        try:
            fleet[name] = ClusterManifest.model_validate(cluster.manifest)
        except ValueError:
            continue
    for manifest in applied:
        if manifest.kind == "Cluster":
            fleet[manifest.metadata.name] = manifest
    return list(fleet.values())


def fleet_warnings(manifests: list[Any], known: dict[str, KnownCluster]) -> list[str]:
    """`surprises` of every module in `manifests`, against the fleet once they are applied."""
    fleet = known_fleet(known, manifests)
    warnings: list[str] = []
    for module in manifests:
        if _is_module(module):
            warnings.extend(surprises(module, plan_rollout(module, fleet)))
    return warnings


async def publish(ctx: Context, prepared: Prepared) -> None:
    """Every intent in one transaction (intents.py); `prepared.committed` once it is."""
    try:
        await publish_intents(
            ctx.bootstrap, ctx.topics, prepared.intents, known=prepared.known_ends, max_bytes=prepared.max_bytes
        )
    except client.MissingTopic:
        raise
    except Exception as error:
        raise RuntimeError(f"cannot publish at {ctx.bootstrap}: {error}") from error
    prepared.committed = True
