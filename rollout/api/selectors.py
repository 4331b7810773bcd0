"""Label selector matching, with Kubernetes semantics.

A missing selector (`None`) selects nothing — a Module without a selector is inert until
someone says which clusters it is for; an empty selector `{}` selects every cluster.
`matchLabels` and `matchExpressions` are ANDed.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollout.api.manifests import LabelSelector


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, wanted in selector.match_labels.items():
        if labels.get(key) != wanted:
            return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        value = labels.get(requirement.key)
        if requirement.operator == "In" and (not present or value not in requirement.values):
            return False
        if requirement.operator == "NotIn" and present and value in requirement.values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True
