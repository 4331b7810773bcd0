"""Label selectors with Kubernetes semantics: matchLabels AND matchExpressions, In/NotIn/
Exists/DoesNotExist; a missing selector selects nothing, `{}` selects everything."""

from __future__ import annotations

import pytest

from rollout.api.manifests import LabelSelector
from rollout.api.selectors import selects

PROD_EU = {"env": "prod", "region": "eu", "tier": "1"}


def sel(**document: object) -> LabelSelector:
    return LabelSelector.model_validate(document)


def expression(key: str, operator: str, *values: str) -> LabelSelector:
    requirement: dict[str, object] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return sel(matchExpressions=[requirement])


def test_missing_selector_selects_nothing() -> None:
    assert not selects(None, PROD_EU)
    assert not selects(None, {})


def test_empty_selector_selects_everything() -> None:
    assert selects(sel(), PROD_EU)
    assert selects(sel(), {})
    assert selects(sel(matchLabels={}, matchExpressions=[]), {"x": "y"})


def test_match_labels_needs_every_pair() -> None:
    assert selects(sel(matchLabels={"env": "prod"}), PROD_EU)
    assert selects(sel(matchLabels={"env": "prod", "region": "eu"}), PROD_EU)
    assert not selects(sel(matchLabels={"env": "prod", "region": "us"}), PROD_EU)
    assert not selects(sel(matchLabels={"owner": "me"}), PROD_EU)


@pytest.mark.parametrize(
    ("operator", "values", "labels", "expected"),
    [
        ("In", ("prod", "staging"), {"env": "prod"}, True),
        ("In", ("staging",), {"env": "prod"}, False),
        ("In", ("prod",), {}, False),  # an absent key is in no set
        ("NotIn", ("staging",), {"env": "prod"}, True),
        ("NotIn", ("prod",), {"env": "prod"}, False),
        ("NotIn", ("prod",), {}, True),  # an absent key is in no set, so NotIn holds
        ("Exists", (), {"env": ""}, True),
        ("Exists", (), {"other": "x"}, False),
        ("DoesNotExist", (), {"other": "x"}, True),
        ("DoesNotExist", (), {"env": "prod"}, False),
    ],
)
def test_match_expression_operators(operator: str, values: tuple[str, ...], labels: dict[str, str], expected: bool):
    assert selects(expression("env", operator, *values), labels) is expected


def test_match_labels_and_expressions_are_anded() -> None:
    selector = sel(
        matchLabels={"env": "prod"},
        matchExpressions=[
            {"key": "region", "operator": "In", "values": ["eu", "us"]},
            {"key": "quarantined", "operator": "DoesNotExist"},
        ],
    )
    assert selects(selector, PROD_EU)
    assert not selects(selector, {**PROD_EU, "quarantined": "yes"})
    assert not selects(selector, {**PROD_EU, "env": "dev"})
    assert not selects(selector, {**PROD_EU, "region": "ap"})


def test_label_values_compare_as_exact_strings() -> None:
    assert not selects(sel(matchLabels={"tier": "01"}), PROD_EU)
    assert not selects(sel(matchLabels={"env": "Prod"}), PROD_EU)
