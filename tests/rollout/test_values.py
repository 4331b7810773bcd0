"""Helm values layers and per-path policies (rollout/values/layers.py): one given/when/then test per
rule of docs/rollout-semantics.md, "Helm values", and properties of the merge."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.api.quantities import parse_quantity
from rollout.values.layers import (
    POLICIES,
    ValuesLayers,
    format_pointer,
    merge_values,
    overlapping_policies,
    parse_pointer,
)


def decided(merged: Any, path: str) -> tuple[Any, str, str | None, bool]:
    decision = next(d for d in merged.decisions if d.path == path)
    return decision.value, decision.layer, decision.policy, decision.emitted


# --- without a policy ---------------------------------------------------------------------


def test_highest_declared_layer_decides_a_path_without_policy() -> None:
    layers = ValuesLayers(chart={"replicas": 1}, module={"replicas": 2}, stage={"replicas": 3}, cluster={"replicas": 4})
    merged = merge_values(layers, {})
    assert decided(merged, "/replicas") == (4, "cluster", None, True)
    assert merged.values == {"replicas": 4}


def test_mappings_merge_key_by_key_and_lists_are_replaced_whole() -> None:
    layers = ValuesLayers(
        chart={"image": {"repository": "ghcr.io/app", "tag": "1.0"}, "args": ["--a", "--b"]},
        module={"image": {"tag": "1.1"}, "args": ["--c"]},
    )
    merged = merge_values(layers, {})
    assert merged.effective == {"image": {"repository": "ghcr.io/app", "tag": "1.1"}, "args": ["--c"]}


def test_chart_decided_paths_are_left_to_the_chart() -> None:
    merged = merge_values(ValuesLayers(chart={"a": 1, "b": 2}, module={"b": 3}), {})
    assert merged.values == {"b": 3}
    assert merged.effective == {"a": 1, "b": 3}


def test_live_values_do_not_count_without_a_policy() -> None:
    merged = merge_values(ValuesLayers(module={"color": "blue"}, live={"color": "red", "extra": 1}), {})
    assert merged.values == {"color": "blue"}
    assert decided(merged, "/color")[1] == "module"


def test_a_scalar_replaces_a_lower_mapping_whole() -> None:
    merged = merge_values(ValuesLayers(chart={"ingress": {"enabled": True}}, module={"ingress": None}), {})
    assert merged.values == {"ingress": None}
    assert merged.effective == {"ingress": None}


# --- policies -------------------------------------------------------------------------------


def test_prefer_module_keeps_the_customised_value_over_a_new_chart_default() -> None:
    layers = ValuesLayers(chart={"image": {"tag": "2.0"}}, module={"image": {"tag": "1.9-patched"}})
    merged = merge_values(layers, {"/image/tag": "preferModule"})
    assert decided(merged, "/image/tag") == ("1.9-patched", "module", "preferModule", True)


def test_prefer_module_ignores_a_live_value() -> None:
    layers = ValuesLayers(module={"mode": "safe"}, live={"mode": "fast"})
    merged = merge_values(layers, {"/mode": "preferModule"})
    assert merged.values == {"mode": "safe"}


def test_prefer_chart_lets_a_customised_image_follow_the_chart() -> None:
    layers = ValuesLayers(
        chart={"image": {"tag": "2.0"}}, module={"image": {"tag": "1.9"}}, cluster={"image": {"tag": "x"}}
    )
    merged = merge_values(layers, {"/image/tag": "preferChart"})
    assert decided(merged, "/image/tag") == ("2.0", "chart", "preferChart", False)
    assert merged.values == {}


def test_prefer_chart_without_known_defaults_still_leaves_the_path_to_the_chart() -> None:
    merged = merge_values(
        ValuesLayers(module={"image": {"tag": "1.9", "pullPolicy": "Always"}}), {"/image/tag": "preferChart"}
    )
    assert merged.values == {"image": {"pullPolicy": "Always"}}
    decision = next(d for d in merged.decisions if d.path == "/image/tag")
    assert (decision.known, decision.emitted) == (False, False)
    assert "tag" not in merged.effective["image"]


def test_keep_current_keeps_a_value_changed_on_the_cluster() -> None:
    layers = ValuesLayers(
        chart={"ui": {"color": "blue"}}, module={"ui": {"color": "green"}}, live={"ui": {"color": "red"}}
    )
    merged = merge_values(layers, {"/ui/color": "keepCurrent"})
    assert decided(merged, "/ui/color") == ("red", "live", "keepCurrent", True)
    assert merged.refusals == []


def test_keep_current_without_a_live_value_takes_the_layers() -> None:
    merged = merge_values(ValuesLayers(module={"ui": {"color": "green"}}), {"/ui/color": "keepCurrent"})
    assert decided(merged, "/ui/color") == ("green", "module", "keepCurrent", True)


def test_keep_current_keeps_a_value_only_the_cluster_has() -> None:
    merged = merge_values(
        ValuesLayers(module={"a": 1}, live={"token": {"seed": "generated"}}), {"/token": "keepCurrent"}
    )
    assert merged.values == {"a": 1, "token": {"seed": "generated"}}


def test_read_only_refuses_a_change_and_says_why() -> None:
    layers = ValuesLayers(module={"storage": {"class": "standard"}}, live={"storage": {"class": "fast-ssd"}})
    merged = merge_values(layers, {"/storage/class": "readOnly"})
    assert decided(merged, "/storage/class") == ("fast-ssd", "live", "readOnly", True)
    [refusal] = merged.refusals
    assert (refusal.path, refusal.current, refusal.wanted, refusal.layer) == (
        "/storage/class",
        "fast-ssd",
        "standard",
        "module",
    )
    assert "readOnly" in refusal.reason and "'fast-ssd'" in refusal.reason and "'standard'" in refusal.reason


def test_read_only_sets_the_value_once_when_the_cluster_has_none() -> None:
    merged = merge_values(ValuesLayers(module={"storage": {"class": "standard"}}), {"/storage/class": "readOnly"})
    assert merged.values == {"storage": {"class": "standard"}}
    assert merged.refusals == []


def test_read_only_refuses_nothing_when_the_layers_agree_with_the_cluster() -> None:
    layers = ValuesLayers(module={"seed": "abc"}, live={"seed": "abc"})
    merged = merge_values(layers, {"/seed": "readOnly"})
    assert merged.refusals == []
    assert decided(merged, "/seed")[1] == "module"


def test_max_takes_the_larger_quantity_of_every_layer() -> None:
    layers = ValuesLayers(
        chart={"memory": "512Mi"}, module={"memory": "0.25Gi"}, stage={"memory": "1Gi"}, live={"memory": "768Mi"}
    )
    merged = merge_values(layers, {"/memory": "max"})
    assert decided(merged, "/memory") == ("1Gi", "stage", "max", True)


def test_min_takes_the_smaller_quantity_and_ties_go_to_the_lowest_layer() -> None:
    layers = ValuesLayers(chart={"cpu": "500m"}, module={"cpu": "0.5"}, live={"cpu": "2"})
    merged = merge_values(layers, {"/cpu": "min"})
    assert decided(merged, "/cpu") == ("500m", "chart", "min", True)


def test_max_keeps_a_larger_live_value() -> None:
    merged = merge_values(ValuesLayers(module={"replicas": 2}, live={"replicas": 5}), {"/replicas": "max"})
    assert merged.values == {"replicas": 5}


def test_a_policy_decides_a_mapping_as_one_value() -> None:
    layers = ValuesLayers(module={"secret": {"a": "1", "b": "2"}}, live={"secret": {"a": "live"}})
    merged = merge_values(layers, {"/secret": "keepCurrent"})
    assert merged.values == {"secret": {"a": "live"}}


# --- pointers and quantities -------------------------------------------------------------------


def test_json_pointers_escape_slash_and_tilde() -> None:
    path = parse_pointer("/podAnnotations/prometheus.io~1scrape/a~0b")
    assert path == ("podAnnotations", "prometheus.io/scrape", "a~b")
    assert format_pointer(path) == "/podAnnotations/prometheus.io~1scrape/a~0b"


@pytest.mark.parametrize("pointer", ["", "/", "image/tag", "/image//tag", "/a~2b"])
def test_malformed_pointers_are_refused_with_the_pointer_named(pointer: str) -> None:
    with pytest.raises(ValueError, match=r"pointer|key|escaped"):
        parse_pointer(pointer)


def test_policies_inside_each_other_are_found() -> None:
    assert overlapping_policies(["/image", "/image/tag", "/replicas"]) == [("/image", "/image/tag")]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("512Mi", Decimal(512 * 1024**2)),
        ("1Gi", Decimal(1024**3)),
        ("250m", Decimal("0.25")),
        ("2e3", Decimal(2000)),
        ("1.5", Decimal("1.5")),
        (3, Decimal(3)),
        ("1E", Decimal(10**18)),
    ],
)
def test_kubernetes_quantities_parse_exactly(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Mi", "1.2.3", "12 Mi", "1mi", True, None, "1e999"])
def test_what_is_not_a_quantity_is_refused(text: Any) -> None:
    assert parse_quantity(text) is None


# --- properties -----------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "mem"])
LEAVES = st.one_of(
    st.integers(-5, 5), st.sampled_from(["128Mi", "1Gi", "250m", "x", "y"]), st.booleans(), st.none(), st.just([1, 2])
)
TREES = st.recursive(LEAVES, lambda inner: st.dictionaries(KEYS, inner, max_size=3), max_leaves=8)
LAYER_VALUES = st.one_of(st.none(), st.dictionaries(KEYS, TREES, max_size=3))
POINTERS = st.sampled_from(["/a", "/b", "/mem", "/a/b", "/c/mem"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ValuesLayers, dict[str, Any]]:
    layers = ValuesLayers(
        chart=draw(LAYER_VALUES),
        module=draw(LAYER_VALUES),
        stage=draw(LAYER_VALUES),
        cluster=draw(LAYER_VALUES),
        live=draw(LAYER_VALUES),
    )
    policies: dict[str, Any] = {}
    for pointer in draw(st.lists(POINTERS, max_size=3, unique=True)):
        if not overlapping_policies([*policies, pointer]):
            policies[pointer] = draw(st.sampled_from(POLICIES))
    return layers, policies


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_merge_is_deterministic(scenario: tuple[ValuesLayers, dict[str, Any]]) -> None:
    layers, policies = scenario
    assert merge_values(layers, policies) == merge_values(layers, dict(reversed(list(policies.items()))))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_merging_again_with_what_the_cluster_now_holds_changes_nothing(
    scenario: tuple[ValuesLayers, dict[str, Any]],
) -> None:
    layers, policies = scenario
    first = merge_values(layers, policies)
    again = merge_values(layers.model_copy(update={"live": first.effective}), policies)
    assert (again.values, again.effective) == (first.values, first.effective)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_emitted_value_comes_from_a_layer_and_each_path_is_decided_once(
    scenario: tuple[ValuesLayers, dict[str, Any]],
) -> None:
    layers, policies = scenario
    merged = merge_values(layers, policies)
    paths = [d.path for d in merged.decisions]
    assert paths == sorted(set(paths), key=paths.index) and len(paths) == len(set(paths))
    for decision in merged.decisions:
        source = getattr(layers, decision.layer)
        found = source
        for key in parse_pointer(decision.path):
            found = found[key] if isinstance(found, dict) and key in found else None
        assert not decision.known or found == decision.value or decision.value == {}
