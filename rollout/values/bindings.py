"""`$(NAME)` expansion of a sync's `substitute` values for one cluster.

Semantics follow Kubernetes' `$(VAR)` expansion in container env/args: `$(NAME)` is
replaced by the binding's value, `$$` is a literal `$` (so `$$(NAME)` yields `$(NAME)`),
and a reference to an unknown name is left as written, so Flux's own `${var}`
substitution and unrelated text pass through untouched. Expansion is single-pass: a
value that itself contains `$(...)` is not expanded again, so label values cannot inject
references.

Bound names: `CLUSTER_NAME` and `CLUSTER_NAMESPACE` always; then each of the module's
bindings — a literal `value`, or the value of a cluster label/annotation. A binding whose
label/annotation is absent on the cluster is unbound (and its references stay as written);
`unresolved_references` reports them so the engine can explain it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rollout.api.manifests import Binding, Sync

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def binding_values(
    bindings: Sequence[Binding],
    *,
    cluster_name: str,
    cluster_namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, str]:
    values = {"CLUSTER_NAME": cluster_name, "CLUSTER_NAMESPACE": cluster_namespace}
    for binding in bindings:
        if binding.value is not None:
            values[binding.name] = binding.value
        elif binding.from_label is not None and binding.from_label in labels:
            values[binding.name] = labels[binding.from_label]
        elif binding.from_annotation is not None and binding.from_annotation in annotations:
            values[binding.name] = annotations[binding.from_annotation]
    return values


def expand(text: str, values: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return values[name] if name in values else match.group(0)

    return _REFERENCE.sub(replace, text)


def unresolved_references(text: str, values: Mapping[str, str]) -> list[str]:
    return [m.group(1) for m in _REFERENCE.finditer(text) if m.group(1) and m.group(1) not in values]


def expand_sync(sync: Sync, values: Mapping[str, str]) -> Sync:
    """The sync with every substitute value expanded; everything else unchanged."""
    kustomize = sync.package.kustomize
    if not kustomize.substitute:
        return sync
    substitute = {key: expand(value, values) for key, value in kustomize.substitute.items()}
    expanded = kustomize.model_copy(update={"substitute": substitute})  # every other option kept
    return sync.model_copy(update={"package": sync.package.model_copy(update={"kustomize": expanded})})
