"""Tenants stay in their lane: the ModuleRestriction of a namespace, and the one rule check.

A `ModuleRestriction` (kind of `rollout.dev/v1alpha1`, namespaced — Rancher Fleet's
`GitRepoRestriction` for our modules) limits what the Modules and BootstrapModules of its
namespace may do:

    allowedClusters         which clusters they may select (a label selector)
    allowedSourcePatterns   which Git / OCI / Helm repository URLs they may sync from
    allowedServiceAccounts  which `serviceAccountName` their Kustomization/HelmRelease runs as
    defaultServiceAccount   the one filled in when a module's sync names none
    allowedTargetNamespaces which `targetNamespace` the package may write into

(the manifest types, documented field by field, are `ModuleRestrictionManifest` and
`ModuleRestrictionSpec` in rollout/api/manifests.py, beside the Module's; the engine's handling
of restrictions is rollout/engine/restriction_rules.py).

`check_module(restriction, module)` is the ONE check, used by every door a module comes in
through — `rollout apply` (rollout_cli/publishing/applying.py), the module watcher
(projections/module_watcher.py) and the engine's fold (rollout/engine/intents.py, so that a
hand-published intent cannot bypass it) — and by `rollout plan`. It is pure: it returns
the module as the engine keeps it (with `defaultServiceAccount` filled in) or raises
`RestrictionViolation` naming the restriction, the rule (the field) and the offending value.

Rules, and why they are static:

* **allowedClusters** — the module's selector must be *at least as narrow* as the
  restriction's: every requirement of the restriction must be implied by one of the
  module's (a `matchLabels` pair by the same pair or an `In` of that one value; an `In` by a
  pair or an `In` of a subset; `NotIn` by a pair or `In` outside it, a `NotIn` of a superset
  or `DoesNotExist`; `Exists` by any requirement that needs the key; `DoesNotExist` by
  `DoesNotExist`). Implication is checked requirement by requirement, so it is sound (it
  never lets a selector through that could pick a cluster outside) and can refuse a
  selector that is narrower only in combination — write the restriction's labels into the
  selector. A module without a selector selects nothing and always passes. The check does
  not depend on the fleet, so the same manifest gets the same answer at every door and at
  every time. The engine *also* never makes a cluster outside `allowedClusters` a member
  (rollout/engine/membership.py): a cluster relabelled out of the allowed set later loses the
  module's sync like a cluster that stops matching the selector.
* **allowedSourcePatterns** — Python regular expressions matched against the whole URL
  (`re.fullmatch`: `https://git.example.com/team-a/.*` does not accept
  `https://git.example.com/team-a/x.evil.com`'s prefix tricks — the whole URL must match).
  Empty: any source.
* **allowedServiceAccounts** — the sync's `serviceAccountName` (kustomize or Helm package)
  must be one of them. Missing: `defaultServiceAccount` is filled in (Fleet does the same);
  without a default, missing is refused, because running as the controller's own account
  is exactly the escape the list exists to close. Empty list: any account (the default is
  still filled in).
* **allowedTargetNamespaces** — the package's `targetNamespace` must be one of them, and is
  required when the list is not empty. Empty: any.

A namespace without a restriction is unrestricted (as in Fleet): restrictions are opt-in per
tenant namespace, and a single-team fleet needs none. One restriction per namespace counts:
the engine keeps the latest applied per namespace (docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from rollout.api.formats import shown
from rollout.api.manifests import (
    BootstrapModuleManifest,
    LabelSelector,
    LabelSelectorRequirement,
    ModuleManifest,
    ModuleRestrictionManifest,
    ModuleRestrictionSpec,
    ModuleSpec,
)
from rollout.api.selectors import selects

AnyModuleManifest = ModuleManifest | BootstrapModuleManifest
Rule = Literal["allowedClusters", "allowedSourcePatterns", "allowedServiceAccounts", "allowedTargetNamespaces"]


@dataclass(frozen=True)
class RestrictionViolation(Exception):
    """A module breaks `rule` of `restriction` (`namespace/name`) with `value`; `why` says how."""

    restriction: str
    rule: Rule
    value: str
    why: str

    def __str__(self) -> str:
        return f"refused by ModuleRestriction {self.restriction}: {self.rule}: {self.why}"


def check_module(restriction: ModuleRestrictionManifest | None, module: AnyModuleManifest) -> AnyModuleManifest:
    """`module` as the engine keeps it under `restriction` (its namespace's, or None):
    `defaultServiceAccount` filled in where the sync names none — or RestrictionViolation for
    the first rule it breaks (in the order of the docstring). The check every door runs."""
    if restriction is None:
        return module
    if restriction.metadata.namespace != module.metadata.namespace:
        raise ValueError("a restriction applies to the modules of its own namespace only")
    spec = check_spec(restriction, module.spec, fill_default=True)
    return module if spec is module.spec else module.model_copy(update={"spec": spec})


def check_spec(restriction: ModuleRestrictionManifest, spec: ModuleSpec, *, fill_default: bool) -> ModuleSpec:
    """The rules on one module spec of the restriction's namespace. `fill_default`: a
    missing serviceAccountName takes `defaultServiceAccount` (admission); without it (a
    module the engine already runs, checked against a restriction applied later) a missing
    one breaks a non-empty `allowedServiceAccounts` — the running sync has none."""
    where = f"{restriction.metadata.namespace}/{restriction.metadata.name}"
    rules = restriction.spec
    _check_clusters(where, rules.allowed_clusters, spec.selector)
    _check_sources(where, rules.allowed_source_patterns, source_urls(spec))
    spec = _with_service_account(where, rules, spec, fill_default=fill_default)
    _check_target_namespace(where, rules.allowed_target_namespaces, spec)
    return spec


def admits(restriction: ModuleRestrictionManifest | None, labels: Mapping[str, str]) -> bool:
    """Whether a cluster with `labels` is one the restriction lets its modules reach."""
    if restriction is None or restriction.spec.allowed_clusters is None:
        return True
    return selects(restriction.spec.allowed_clusters, labels)


def source_urls(spec: ModuleSpec) -> list[str]:
    source = spec.sync.source
    return [s.url for s in (source.git, source.oci, source.helm) if s is not None]


def service_account_of(spec: ModuleSpec) -> str | None:
    package = spec.sync.package
    if package.helm is not None:
        return package.helm.service_account_name
    return package.kustomize.service_account_name


def _check_clusters(where: str, allowed: LabelSelector | None, selector: LabelSelector | None) -> None:
    if allowed is None or selector is None:
        return  # no limit, or a module that selects nothing
    for requirement in requirements_of(allowed):
        if not any(_implies(mine, requirement) for mine in requirements_of(selector)):
            raise RestrictionViolation(
                where,
                "allowedClusters",
                describe_selector(selector),
                f"selector {describe_selector(selector)} may select clusters outside {describe_selector(allowed)}: "
                f"nothing in it requires {describe_requirement(requirement)}",
            )


def _check_sources(where: str, patterns: list[str], urls: Iterable[str]) -> None:
    if not patterns:
        return
    for url in urls:
        if not any(re.fullmatch(pattern, url) for pattern in patterns):
            raise RestrictionViolation(
                where,
                "allowedSourcePatterns",
                url,
                f"source {shown(url)} matches none of {', '.join(patterns)}",
            )


def _with_service_account(
    where: str, rules: ModuleRestrictionSpec, spec: ModuleSpec, *, fill_default: bool
) -> ModuleSpec:
    account = service_account_of(spec)
    if account is None and fill_default and rules.default_service_account is not None:
        account = rules.default_service_account
        spec = _set_service_account(spec, account)
    if not rules.allowed_service_accounts:
        return spec
    if account is None:
        raise RestrictionViolation(
            where,
            "allowedServiceAccounts",
            "",
            "the sync names no serviceAccountName"
            + (" (apply it again to get defaultServiceAccount)" if rules.default_service_account else "")
            + f"; set one of {', '.join(rules.allowed_service_accounts)}",
        )
    if account not in rules.allowed_service_accounts:
        raise RestrictionViolation(
            where,
            "allowedServiceAccounts",
            account,
            f"serviceAccountName {shown(account)} is not one of {', '.join(rules.allowed_service_accounts)}",
        )
    return spec


def _set_service_account(spec: ModuleSpec, account: str) -> ModuleSpec:
    sync = spec.sync
    package = sync.package
    if package.helm is not None:
        package = package.model_copy(update={"helm": package.helm.model_copy(update={"service_account_name": account})})
    else:
        package = package.model_copy(
            update={"kustomize": package.kustomize.model_copy(update={"service_account_name": account})}
        )
    return spec.model_copy(update={"sync": sync.model_copy(update={"package": package})})


def _check_target_namespace(where: str, allowed: list[str], spec: ModuleSpec) -> None:
    if not allowed:
        return
    package = spec.sync.package
    namespace = package.helm.target_namespace if package.helm is not None else package.kustomize.target_namespace
    if namespace is None or namespace not in allowed:
        given = f"targetNamespace {namespace}" if namespace is not None else "no targetNamespace"
        raise RestrictionViolation(
            where, "allowedTargetNamespaces", namespace or "", f"{given}; it must be one of {', '.join(allowed)}"
        )


# --- selector implication ---------------------------------------------------------------


def requirements_of(selector: LabelSelector) -> list[LabelSelectorRequirement]:
    """Every requirement of a selector, `matchLabels` pairs as `In` of one value."""
    pairs = [
        LabelSelectorRequirement(key=key, operator="In", values=[value])
        for key, value in sorted(selector.match_labels.items())
    ]
    return [*pairs, *selector.match_expressions]


def _implies(mine: LabelSelectorRequirement, required: LabelSelectorRequirement) -> bool:
    """Whether every label set `mine` accepts is accepted by `required` (same key only)."""
    if mine.key != required.key:
        return False
    if required.operator == "In":
        return mine.operator == "In" and set(mine.values) <= set(required.values)
    if required.operator == "NotIn":
        if mine.operator == "In":
            return not set(mine.values) & set(required.values)
        if mine.operator == "NotIn":
            return set(mine.values) >= set(required.values)
        return mine.operator == "DoesNotExist"
    if required.operator == "Exists":
        return mine.operator in ("In", "Exists")
    return mine.operator == "DoesNotExist"


def describe_requirement(requirement: LabelSelectorRequirement) -> str:
    values = ", ".join(requirement.values)
    if requirement.operator == "In":
        return f"{requirement.key}={values}" if len(requirement.values) == 1 else f"{requirement.key} in ({values})"
    if requirement.operator == "NotIn":
        return f"{requirement.key} notin ({values})"
    return requirement.key if requirement.operator == "Exists" else f"!{requirement.key}"


def describe_selector(selector: LabelSelector) -> str:
    terms = [describe_requirement(r) for r in requirements_of(selector)]
    return "{" + ",".join(terms) + "}" if terms else "{} (every cluster)"
