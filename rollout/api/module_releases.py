"""Release documents → their member modules, as `rollout apply` publishes them.

    Release shop {selector, rollout, modules: [{name: web, oci: {tag: 2.1.0}}, {name: api, ...}]}
    Module web, Module api (in the same files, without selector or rollout)
        ──► Module web: selector and rollout of the release, source version 2.1.0,
                        spec.release = {name: shop, members: [web, api]}
        ──► Module api: likewise

A Release is a unit of promotion (kargo's Freight, what its users ask for in #7027 and
#3193): several modules' revisions that move through *one* strategy together. The
release decides the clusters (`selector`) and the stages (`rollout`); each member gives
the source, the package and the bindings. Expanding it here — before anything is
published — keeps the engine's model one thing, the module: a new Release revision is a
new target for every member it changes (the members it leaves as they were get no new
generation), published in one transaction, each member's apply stamped with its peers'
(`ModuleApplied.after`) so that none counts a peer's state from before this apply.

What makes the members move *together* is the engine's (rollout/engine/dependencies.py,
"Releases"): each member learns its peers' state per cluster, a cluster is done for a
member only once every member is on its target there and succeeded, and a failure of any
member there is a failure of each.

The rules checked here, each a `DocumentProblem` naming file, document and field: every
member is a Module or BootstrapModule of these files; no module is in two releases; a
member leaves `selector` and `rollout` to its release (two places deciding one thing is a
mistake waiting to happen) and is not auto-promoted on its own (`autoPromote`: a member
promoted alone would break the combination — a Release auto-promotes as a whole instead:
`spec.autoPromote` and a `semver` per member that follows a range, given to each member's
source and, with every followed member's source and version, to `spec.release.autoPromote`,
which the release's leader decides each new combination with); a version matches the member's source (`git` for a Git
source, `oci` for an OCI one, `chart` for a Helm chart) and `values` go to a Helm package
only; nobody writes `spec.release` by hand.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rollout.api.loading import DocumentProblem, Loaded, ManifestError
from rollout.api.manifests import FollowedMember, ReleaseManifest, ReleaseModule, ReleasePromotion

MODULE_KINDS = ("Module", "BootstrapModule")


def expand_releases(loaded: list[Loaded]) -> list[Loaded]:
    """`loaded` with each Release's members given its selector, rollout, revisions and
    membership, and the Release documents themselves left out; ManifestError with every problem."""
    problems: list[DocumentProblem] = []
    modules = {item.manifest.metadata.name: item for item in loaded if item.manifest.kind in MODULE_KINDS}
    for item in modules.values():
        if item.manifest.spec.release is not None:
            problems.append(
                _problem(
                    item,
                    "spec.release",
                    "is set by rollout apply from a Release; list the module in a Release's spec.modules",
                )
            )
    claimed: dict[str, Loaded] = {}
    names: dict[str, Loaded] = {}
    expanded: dict[int, Loaded] = {}
    for item in loaded:
        if item.manifest.kind != "Release":
            continue
        release: ReleaseManifest = item.manifest
        first = names.setdefault(release.name, item)
        if first is not item:
            problems.append(
                _problem(
                    item, "metadata.name", f"Release {release.name} is already in {first.where}; apply each object once"
                )
            )
            continue
        for index, member in enumerate(release.spec.modules):
            field = f"spec.modules[{index}]"
            module = modules.get(member.name)
            if module is None:
                reason = f"no Module or BootstrapModule {member.name} in these files; apply a release with its modules"
                problems.append(_problem(item, f"{field}.name", reason))
                continue
            owner = claimed.setdefault(member.name, item)
            if owner is not item:
                reason = f"{member.name} is already a member of {owner.where}; a module moves with one release"
                problems.append(_problem(item, f"{field}.name", reason))
                continue
            member_problems, updated = _member(release, member, field, item, module)
            problems.extend(member_problems)
            if updated is not None:
                expanded[id(module)] = updated
        problems.extend(_promotion_problems(item))
        if release.spec.auto_promote is not None:
            _give_promotion(release, modules, expanded)
    if problems:
        raise ManifestError(problems)
    return [expanded.get(id(item), item) for item in loaded if item.manifest.kind != "Release"]


def _member(
    release: ReleaseManifest, member: ReleaseModule, field: str, where: Loaded, module: Loaded
) -> tuple[list[DocumentProblem], Loaded | None]:
    """The member's module as the release gives it, or the problems with it."""
    manifest = module.manifest
    problems = [
        _problem(module, f"spec.{name}", f"is decided by {where.where} (its spec.{name}); remove it here")
        for name in ("selector", "rollout")
        if getattr(manifest.spec, name) is not None
    ]
    if manifest.spec.sync.source.auto_promote is not None:
        reason = (
            f"a member of {where.where} moves with its release, never promoted alone (that would break the "
            "combination); remove autoPromote here and give the release its new versions"
        )
        problems.append(_problem(module, "spec.sync.source.autoPromote", reason))
    document: dict[str, Any] = manifest.model_dump(by_alias=True, exclude_unset=True)
    spec = document["spec"]
    source = spec["sync"]["source"]
    for kind, given in (("git", member.git), ("oci", member.oci)):
        if given is None:
            continue
        if kind not in source:
            problems.append(
                _problem(where, f"{field}.{kind}", f"{member.name}'s source is not {kind}: {_source_kind(source)}")
            )
            continue
        source[kind]["version"] = given.model_dump(by_alias=True, exclude_none=True)
    if member.chart is not None:
        if "helm" in source:
            source["helm"]["version"] = member.chart.version
        elif "oci" in source and "helm" in spec["sync"].get("package", {}):
            source["oci"]["version"] = {"tag": member.chart.version}  # a chart in an OCI registry
        else:
            reason = f"{member.name} installs no Helm chart (its source is {_source_kind(source)})"
            problems.append(_problem(where, f"{field}.chart", reason))
    if member.semver is not None:
        if release.spec.auto_promote is None:
            reason = "follows a range only when the release auto-promotes: give the release spec.autoPromote"
            problems.append(_problem(where, f"{field}.semver", reason))
        else:  # the member's source follows the range: the promoter looks there, status shows it
            hold = {"hold": True} if release.spec.auto_promote.hold else {}
            source["autoPromote"] = {"semver": member.semver, **hold}
    if member.values is not None:
        helm = spec["sync"].get("package", {}).get("helm")
        if helm is None:
            problems.append(_problem(where, f"{field}.values", f"{member.name} has no Helm package to give values to"))
        else:
            helm["values"] = member.values
    if problems:
        return problems, None
    if release.spec.selector is not None:
        spec["selector"] = release.spec.selector.model_dump(by_alias=True, exclude_unset=True)
    if release.spec.rollout is not None:
        spec["rollout"] = release.spec.rollout.model_dump(by_alias=True, exclude_unset=True)
    spec["release"] = {"name": release.name, "members": [m.name for m in release.spec.modules]}
    try:
        updated = type(manifest).model_validate(document)
    except ValidationError as error:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors(include_url=False)
        )
        return [_problem(where, field, f"{member.name} as this release gives it is not valid: {reasons}")], None
    return [], Loaded(module.file, module.document, updated)


def _promotion_problems(item: Loaded) -> list[DocumentProblem]:
    """A release that auto-promotes has at least one member following a range."""
    release: ReleaseManifest = item.manifest
    if release.spec.auto_promote is None or any(m.semver is not None for m in release.spec.modules):
        return []
    reason = "an auto-promoted release follows at least one member's range: give a member spec.modules[].semver"
    return [_problem(item, "spec.autoPromote", reason)]


def _give_promotion(release: ReleaseManifest, modules: dict[str, Loaded], expanded: dict[int, Loaded]) -> None:
    """Every member's `spec.release.autoPromote`: the hold, and each followed member's
    source, range and version as the release gives it — what the leader decides with."""
    assert release.spec.auto_promote is not None
    follow: list[FollowedMember] = []
    for member in release.spec.modules:
        module = modules.get(member.name)
        given = expanded.get(id(module)) if module is not None else None
        if member.semver is None or given is None:
            continue
        source = given.manifest.spec.sync.source
        chart = source.helm.chart if source.helm is not None else None
        follow.append(
            FollowedMember(
                module=member.name,
                semver=member.semver,
                kind=source.kind,
                url=source.url,
                chart=chart,
                version=source.revision,
            )
        )
    promotion = ReleasePromotion(hold=release.spec.auto_promote.hold, follow=follow)
    for member in release.spec.modules:
        module = modules.get(member.name)
        given = expanded.get(id(module)) if module is not None else None
        if given is None or given.manifest.spec.release is None:
            continue
        manifest = given.manifest
        membership = manifest.spec.release.model_copy(update={"auto_promote": promotion})
        spec = manifest.spec.model_copy(update={"release": membership})
        expanded[id(module)] = Loaded(given.file, given.document, manifest.model_copy(update={"spec": spec}))


def _source_kind(source: dict[str, Any]) -> str:
    return next(iter(source), "none")


def _problem(item: Loaded, field: str, reason: str) -> DocumentProblem:
    return DocumentProblem(file=item.file, document=item.document, identity=item.identity, field=field, reason=reason)
