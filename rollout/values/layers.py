"""Helm values in layers, merged path by path under a policy: a pure function.

    merge_values(ValuesLayers, {json pointer: policy}) -> MergedValues

Five layers, lowest first (`LAYERS`): the chart's defaults, the module's values, the values
of the cluster's stage, the cluster's own values (bindings expanded), and the values
observed live on the cluster. The first four are *declared*; live values come from an
observation (`HelmValuesObserved`) and only count where a policy asks for them — without a
policy the declared state is enforced, as Flux would.

Without a policy, mappings merge key by key (as Helm coalesces values) and the highest
declared layer holding a value decides; lists and scalars are replaced whole. At a path
with a policy the node is decided as one value (a list or mapping there is atomic):

| policy        | decides                                                                  |
|---------------|--------------------------------------------------------------------------|
| preferModule  | the highest declared layer above the chart; else the chart               |
| preferChart   | the chart's default, whatever the module, stage or cluster say            |
| keepCurrent   | the live value, if the cluster has one that differs; else as without one |
| readOnly      | as keepCurrent, and a change the layers want is refused, with the reason |
| max / min     | the largest / smallest Kubernetes quantity of all layers (ties: lowest)  |

A path the chart layer decides is left out of the values to emit (`MergedValues.values`),
so Helm takes the default of the chart it installs — a new chart version's default
follows, and preferChart works even when the chart's defaults were never observed. Only
max/min always write their winner: a later chart's default must not undercut it.
`effective` is what the release will hold where it is known (chart defaults included).

Fixed point: merging again with `live = effective` gives the same `values` and
`effective` (tests/rollout/test_values.py checks it by property), so an applier that
reports back what it applied never moves anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.api.quantities import parse_quantity
from rollout.api.value_paths import (
    DECLARED,
    LAYERS,
    POLICIES,
    QUANTITY_POLICIES,
    Layer,
    Path,
    Policy,
    Values,
    format_pointer,
    overlapping_policies,
    parse_pointer,
    value_at,
)

__all__ = [
    "DECLARED",
    "LAYERS",
    "POLICIES",
    "QUANTITY_POLICIES",
    "Layer",
    "Path",
    "Policy",
    "Values",
    "format_pointer",
    "overlapping_policies",
    "parse_pointer",
    "value_at",
]


class ValuesLayers(BaseModel):
    """The values of each layer for one cluster; None: the layer is not known."""

    model_config = ConfigDict(frozen=True)

    chart: Values | None = None
    module: Values | None = None
    stage: Values | None = None
    cluster: Values | None = None
    live: Values | None = None


class PathDecision(BaseModel):
    """Which layer (and policy) decided one path, and the value it gave."""

    model_config = ConfigDict(frozen=True)

    path: str
    value: Any = None
    layer: Layer
    policy: Policy | None = None
    emitted: bool  # written to the HelmRelease's spec.values (False: the chart decides)
    known: bool = True  # False: preferChart with chart defaults never observed


class Refusal(BaseModel):
    """A change a readOnly path refused: what the layers wanted and what stays."""

    model_config = ConfigDict(frozen=True)

    path: str
    current: Any
    wanted: Any
    layer: Layer
    reason: str


class MergedValues(BaseModel):
    model_config = ConfigDict(frozen=True)

    values: Values = Field(default_factory=dict)  # for the HelmRelease
    effective: Values = Field(default_factory=dict)  # what the release holds, where known
    decisions: list[PathDecision] = Field(default_factory=list)  # by path
    refusals: list[Refusal] = Field(default_factory=list)


# --- the merge ------------------------------------------------------------------------------


def merge_values(layers: ValuesLayers, policies: Mapping[str, Policy]) -> MergedValues:
    """Merge `layers` under `policies` (JSON pointer → policy); see the module docstring."""
    parsed = {parse_pointer(pointer): policy for pointer, policy in policies.items()}
    present = {layer: value for layer in LAYERS if (value := getattr(layers, layer)) is not None}
    decisions: list[PathDecision] = []
    refusals: list[Refusal] = []
    _decide_node((), present, parsed, decisions, refusals)
    values: Values = {}
    effective: Values = {}
    for decision in decisions:
        path = parse_pointer(decision.path)
        if decision.emitted:
            _put(values, path, decision.value)
        if decision.known:
            _put(effective, path, decision.value)
    return MergedValues(values=values, effective=effective, decisions=decisions, refusals=refusals)


def _put(tree: Values, path: Path, value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _decide_node(
    path: Path,
    present: dict[Layer, Any],
    policies: Mapping[Path, Policy],
    decisions: list[PathDecision],
    refusals: list[Refusal],
) -> None:
    """Decide `path`, given each layer's value there (layers without one are absent)."""
    if path in policies:
        decision, refusal = _decide_policy(path, present, policies[path])
        if decision is not None:
            decisions.append(decision)
        if refusal is not None:
            refusals.append(refusal)
        return
    declared = [layer for layer in DECLARED if layer in present]
    below = {p[len(path)] for p in policies if len(p) > len(path) and p[: len(path)] == path}
    if declared and not isinstance(present[declared[-1]], Mapping):
        if path:  # a non-mapping root is no values at all
            decisions.append(_plain(path, declared[-1], present[declared[-1]]))
        return
    # the highest declared value is a mapping (or nothing declared): merge key by key, with
    # the mappings of the layers below it; live values only reach paths with a policy
    merged = {layer: value for layer, value in present.items() if isinstance(value, Mapping)}
    keys = set(below)
    for layer in declared:
        if layer in merged:
            keys.update(merged[layer])
    if declared and not keys and path:
        decisions.append(_plain(path, declared[-1], {}))
        return
    for key in sorted(keys):
        child = {layer: value[key] for layer, value in merged.items() if key in value}
        if key in below or any(layer in child for layer in DECLARED):
            _decide_node((*path, key), child, policies, decisions, refusals)


def _plain(path: Path, layer: Layer, value: Any, policy: Policy | None = None) -> PathDecision:
    return PathDecision(path=format_pointer(path), value=value, layer=layer, policy=policy, emitted=layer != "chart")


def _without_live(present: dict[Layer, Any], policy: Policy) -> PathDecision | None:
    """What the declared layers give at a policy path: the highest of them."""
    declared = [layer for layer in DECLARED if layer in present]
    return None if not declared else _plain((), declared[-1], present[declared[-1]], policy)


def _decide_policy(path: Path, present: dict[Layer, Any], policy: Policy) -> tuple[PathDecision | None, Refusal | None]:
    pointer = format_pointer(path)
    decision: PathDecision | None
    if policy == "preferChart":
        known = "chart" in present
        decision = PathDecision(
            path=pointer, value=present.get("chart"), layer="chart", policy=policy, emitted=False, known=known
        )
        return decision, None
    if policy in QUANTITY_POLICIES:
        decision = _extreme(present, policy)
    elif policy in ("keepCurrent", "readOnly") and "live" in present:
        layered = _without_live(present, policy)
        live = present["live"]
        if layered is not None and layered.value == live:
            decision = layered
        else:
            decision = _plain((), "live", live, policy)
            if policy == "readOnly" and layered is not None:
                reason = (
                    f"{pointer} is readOnly: the cluster has {_shown(live)}, the {layered.layer} layer wants "
                    f"{_shown(layered.value)}; the change is refused and the cluster's value stays"
                )
                refusal = Refusal(path=pointer, current=live, wanted=layered.value, layer=layered.layer, reason=reason)
                return decision.model_copy(update={"path": pointer}), refusal
    else:
        decision = _without_live(present, policy)
    return (decision.model_copy(update={"path": pointer}) if decision is not None else None), None


def _extreme(present: dict[Layer, Any], policy: Policy) -> PathDecision | None:
    """max/min over every layer's quantity; a tie goes to the lowest layer (the chart first)."""
    best: tuple[Layer, Any] | None = None
    for layer in LAYERS:
        if layer not in present:
            continue
        number = parse_quantity(present[layer])
        if number is None:
            continue
        if best is None:
            best = (layer, number)
            continue
        if (policy == "max" and number > best[1]) or (policy == "min" and number < best[1]):
            best = (layer, number)
    if best is None:
        return _without_live(present, policy)  # no quantity anywhere: as without a policy
    # always written, even when the chart's value wins: another chart version's default
    # must not undercut (max) or exceed (min) what was decided
    return _plain((), best[0], present[best[0]], policy).model_copy(update={"emitted": True})


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
