"""The `rollout.dev` CRDs, generated from the pydantic models — one source for both.

    rollout/api/manifests.py  ModuleSpec          ─┐
    rollout/api/resources.py  ApprovalSpec,        ├─► structural OpenAPI v3 ─► CustomResourceDefinitions
                          CommandSpec,
                          BreakGlassSpec, status ─┘

Kinds: `Module` and `BootstrapModule` (spec: `ModuleSpec`, the very model `rollout apply`
validates), `RolloutApproval`, `RolloutCommand` and `RolloutBreakGlass` (spec:
`BreakGlassSpec`), with a status subresource and printer
columns, so that `kubectl get modules` shows Phase, Target, Stable, Progress and Age; and
`ModuleRestriction` (spec: `ModuleRestrictionSpec`, rollout/api/restrictions.py; no status — a
policy, not a process), and the freeze calendars, `FreezeCalendar` and the cluster-scoped
`ClusterFreezeCalendar` (spec: `FreezeCalendarSpec`, rollout/api/freezes.py; no status).
All `rollout.dev/v1alpha1`, namespaced but the ClusterFreezeCalendar.

A pydantic JSON schema is not a *structural* schema as the API server requires, so it is
rewritten (`structural`): `$ref`s are inlined; `X | None` becomes X (optional = not
required); `int | str` becomes `x-kubernetes-int-or-string`; `additionalProperties: false`
(pydantic's `extra="forbid"`) is dropped — the API server forbids it beside `properties`
and prunes unknown fields instead; `kubectl apply` (field validation `Strict`, its default)
rejects them — titles and null defaults go. A free-form mapping (`dict[str, Any]`, pydantic's
`additionalProperties: true`: Helm values and their layers) becomes
`x-kubernetes-preserve-unknown-fields: true`, else the API server would prune it to `{}`.
The rules the schema cannot express (DNS names, Git tags, durations, "exactly one of") are
checked by `rollout watch-modules` with the same pydantic models; an object that fails
them gets `Stalled` with reason `InvalidSpec`.

The committed copy is `charts/rollout/crds/rollout.dev.yaml` (Helm installs `crds/` before
the release); `rollout crds` prints the same text; `python -m projections.crd_schema
--write` regenerates the committed file, and a test checks the two are equal.
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from rollout.api.freezes import FreezeCalendarSpec
from rollout.api.manifests import ModuleRestrictionSpec, ModuleSpec
from rollout.api.resources import (
    ApprovalSpec,
    BreakGlassSpec,
    CommandResourceStatus,
    CommandSpec,
    ModuleResourceStatus,
)

__all__ = ["CHART_CRDS", "GROUP", "VERSION", "crd_documents", "crds_yaml", "structural"]

GROUP = "rollout.dev"
VERSION = "v1alpha1"
CHART_CRDS = Path(__file__).resolve().parent.parent / "charts" / "rollout" / "crds" / "rollout.dev.yaml"
_DROPPED = frozenset({"title", "$defs", "discriminator"})

_MODULE_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Target", "type": "string", "jsonPath": ".status.targetRevision"},
    {"name": "Stable", "type": "string", "jsonPath": ".status.stableRevision"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
_RESTRICTION_COLUMNS = [
    {"name": "Clusters", "type": "string", "jsonPath": ".spec.allowedClusters.matchLabels"},
    {"name": "Accounts", "type": "string", "jsonPath": ".spec.allowedServiceAccounts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
_CALENDAR_COLUMNS = [
    {"name": "Description", "type": "string", "jsonPath": ".spec.description"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
_REQUEST_COLUMNS = [
    {"name": "Module", "type": "string", "jsonPath": ".spec.module"},
    {"name": "Verdict", "type": "string", "jsonPath": ".status.verdict"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """The pydantic JSON schema `schema` as a Kubernetes structural schema."""
    definitions = schema.get("$defs", {})

    def convert(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return convert({**copy.deepcopy(target), **extra})
        if "anyOf" in node:
            return _any_of(node, convert)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED or (key == "default" and value is None):
                continue
            if key == "additionalProperties" and value is False:
                continue
            if key == "additionalProperties" and value is True:  # free-form JSON (Helm values)
                out["x-kubernetes-preserve-unknown-fields"] = True
                continue
            if key == "const":
                out["enum"] = [value]
            elif key == "properties":
                out[key] = {name: convert(child) for name, child in value.items()}
            elif key in ("items", "additionalProperties"):
                out[key] = convert(value)
            else:
                out[key] = value
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        return out

    return dict(convert(schema))


def _any_of(node: dict[str, Any], convert: Any) -> dict[str, Any]:
    options = [o for o in node["anyOf"] if o.get("type") != "null"]
    rest = {k: v for k, v in node.items() if k != "anyOf" and k not in _DROPPED}
    if rest.get("default", 0) is None:
        rest.pop("default")
    types = sorted(o.get("type", "") for o in options)
    if types == ["integer", "string"]:
        return {**rest, "x-kubernetes-int-or-string": True}
    if len(options) != 1:
        raise ValueError(f"no structural form for anyOf {node['anyOf']}")
    return dict(convert({**options[0], **rest}))


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return structural(model.model_json_schema(by_alias=True, mode="validation"))


_DESCRIPTIONS = {
    "Module": "A sync (a source at an immutable version and a kustomize package) rolled out to the "
    "selected clusters in stages; the same document `rollout apply` takes.",
    "BootstrapModule": "A Module applied from inside the management cluster to each workload cluster "
    "before the others (CNI, Flux itself); the same document `rollout apply` takes.",
    "RolloutApproval": "Approves one stage of a module's rollout; spec.approver must be the user creating it.",
    "RolloutCommand": "Pauses, resumes, aborts or rolls back a module's rollout, or pins/unpins a cluster; "
    "spec.requestedBy must be the user creating it.",
    "RolloutBreakGlass": "Lifts a FreezeCalendar of its namespace for every module it governs until spec.until, "
    "saying why; spec.requestedBy must be the user creating it.",
    "ModuleRestriction": "Limits the Modules and BootstrapModules of its namespace: the clusters they may "
    "select, the source URLs they may use, the service accounts and target namespaces their syncs may use.",
    "FreezeCalendar": "Deny windows (RRULE or cron, in a time zone) in which no Module or BootstrapModule of its "
    "namespace starts moving a cluster to a new revision.",
    "ClusterFreezeCalendar": "Deny windows (RRULE or cron, in a time zone) in which no module of the fleet starts "
    "moving a cluster to a new revision.",
}


def _definition(
    kind: str,
    plural: str,
    *,
    spec: type[BaseModel],
    status: type[BaseModel] | None,
    columns: list[dict[str, Any]],
    short: list[str],
    scope: str = "Namespaced",
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": _schema(spec),
    }
    if status is not None:
        properties["status"] = _schema(status)
        properties["status"].pop("description", None)
    root = {"type": "object", "description": _DESCRIPTIONS[kind], "properties": properties}
    if status is not None:
        root["required"] = ["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["rollout"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if status is not None else {}),
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def _immutable(definition: dict[str, Any]) -> dict[str, Any]:
    spec = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": "spec is immutable"}]
    return definition


def crd_documents() -> list[dict[str, Any]]:
    """The eight CustomResourceDefinitions, as mappings."""
    module = functools.partial(_definition, spec=ModuleSpec, status=ModuleResourceStatus, columns=_MODULE_COLUMNS)
    request = functools.partial(_definition, status=CommandResourceStatus, columns=_REQUEST_COLUMNS)
    return [
        module("Module", "modules", short=["mod"]),
        module("BootstrapModule", "bootstrapmodules", short=["bmod"]),
        _immutable(request("RolloutApproval", "rolloutapprovals", spec=ApprovalSpec, short=["approval"])),
        _immutable(request("RolloutCommand", "rolloutcommands", spec=CommandSpec, short=["rcmd"])),
        _immutable(request("RolloutBreakGlass", "rolloutbreakglasses", spec=BreakGlassSpec, short=["breakglass"])),
        _definition(
            "ModuleRestriction",
            "modulerestrictions",
            spec=ModuleRestrictionSpec,
            status=None,
            columns=_RESTRICTION_COLUMNS,
            short=["mrest"],
        ),
        _definition(
            "FreezeCalendar",
            "freezecalendars",
            spec=FreezeCalendarSpec,
            status=None,
            columns=_CALENDAR_COLUMNS,
            short=["freeze"],
        ),
        _definition(
            "ClusterFreezeCalendar",
            "clusterfreezecalendars",
            spec=FreezeCalendarSpec,
            status=None,
            columns=_CALENDAR_COLUMNS,
            short=["cfreeze"],
            scope="Cluster",
        ),
    ]


def crds_yaml() -> str:
    """The CRDs as one YAML stream, as committed in the chart and printed by `rollout crds`."""
    header = "# Generated from the pydantic models by projections/crd_schema.py; do not edit.\n"
    return header + "".join("---\n" + yaml.safe_dump(d, sort_keys=False, width=120) for d in crd_documents())


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        CHART_CRDS.parent.mkdir(parents=True, exist_ok=True)
        CHART_CRDS.write_text(crds_yaml())
        print(f"wrote {CHART_CRDS}")
    else:
        sys.stdout.write(crds_yaml())
