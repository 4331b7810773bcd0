"""`-l SELECTOR` of `rollout get`: kubectl's label-selector syntax, matched as the engine does.

    env=prod,ring!=canary,region in (eu,us),tier notin (db),gpu,!legacy

Terms are ANDed. The text becomes a `rollout.api.manifests.LabelSelector` (`a=b` / `a==b` →
matchLabels; `a!=b` → NotIn [b]; `in`, `notin`; `a` → Exists; `!a` → DoesNotExist) and is
matched by `rollout.api.selectors.selects`, so `get clusters -l ...` lists exactly the clusters
a Module with that selector would cover.
"""

from __future__ import annotations

import re
from typing import Any

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_TERMS = (
    (re.compile(rf"!\s*({_KEY})"), "not-exists"),
    (re.compile(rf"({_KEY})\s+(in|notin)\s+\(([^()]*)\)"), "set"),
    (re.compile(rf"({_KEY})\s*(==|=|!=)\s*({_VALUE})"), "equality"),
    (re.compile(rf"({_KEY})"), "exists"),
)


def _split_terms(text: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term.strip() for term in terms]


def _term(term: str, labels: dict[str, str], expressions: list[dict[str, Any]]) -> None:
    for pattern, kind in _TERMS:
        match = pattern.fullmatch(term)
        if match is None:
            continue
        if kind == "not-exists":
            expressions.append({"key": match[1], "operator": "DoesNotExist"})
        elif kind == "exists":
            expressions.append({"key": match[1], "operator": "Exists"})
        elif kind == "set":
            values = [v.strip() for v in match[3].split(",") if v.strip()]
            expressions.append({"key": match[1], "operator": "In" if match[2] == "in" else "NotIn", "values": values})
        elif match[2] == "!=":
            expressions.append({"key": match[1], "operator": "NotIn", "values": [match[3]]})
        else:
            labels[match[1]] = match[3]
        return
    raise ValueError(f"{term!r} is not a selector term (key=value, key!=value, key in (a,b), key notin (a), key, !key)")


def parse_label_selector(text: str) -> Any:
    """The `LabelSelector` for kubectl-style `text`; ValueError saying which term is wrong."""
    from pydantic import ValidationError

    from rollout.api.manifests import LabelSelector

    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for term in _split_terms(text):
        if not term:
            raise ValueError(f"{text!r} has an empty term")
        _term(term, labels, expressions)
    try:
        return LabelSelector.model_validate({"matchLabels": labels, "matchExpressions": expressions})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5])
        raise ValueError(f"{text!r}: {problems}") from None


def matching(documents: dict[str, Any], selector: Any, labels_of: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The documents whose labels (`labels_of[name]`; none: no labels) `selector` picks."""
    from rollout.api.selectors import selects

    return {name: doc for name, doc in documents.items() if selects(selector, labels_of.get(name, {}))}
