"""`$(NAME)` expansion of substitute values: CLUSTER_NAME/CLUSTER_NAMESPACE, literal
values, fromLabel, fromAnnotation, `$$` escapes, unknown references left alone, and a
single pass (values containing `$(X)` are not expanded again)."""

from __future__ import annotations

from rollout.api.manifests import Binding, Sync
from rollout.values.bindings import binding_values, expand, expand_sync, unresolved_references

LABELS = {"region": "eu-west", "tricky": "x"}
ANNOTATIONS = {"example.com/owner": "team-a", "injected": "$(CLUSTER_NAME)"}


def values(*bindings: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, str]:
    return binding_values(
        [Binding.model_validate(b) for b in bindings],
        cluster_name="prod-eu-1",
        cluster_namespace="fleet",
        labels=LABELS if labels is None else labels,
        annotations=ANNOTATIONS,
    )


def test_cluster_name_and_namespace_are_always_bound() -> None:
    bound = values()
    assert expand("$(CLUSTER_NAME).$(CLUSTER_NAMESPACE)", bound) == "prod-eu-1.fleet"


def test_literal_binding() -> None:
    assert expand("tier=$(TIER)", values({"name": "TIER", "value": "gold"})) == "tier=gold"


def test_binding_from_label() -> None:
    assert expand("$(REGION)", values({"name": "REGION", "fromLabel": "region"})) == "eu-west"


def test_binding_from_annotation() -> None:
    assert expand("$(OWNER)", values({"name": "OWNER", "fromAnnotation": "example.com/owner"})) == "team-a"


def test_binding_from_absent_label_is_unbound_and_left_as_written() -> None:
    bound = values({"name": "ZONE", "fromLabel": "zone"})
    assert "ZONE" not in bound
    assert expand("zone=$(ZONE)", bound) == "zone=$(ZONE)"
    assert unresolved_references("$(ZONE) $(CLUSTER_NAME) $$(ESCAPED)", bound) == ["ZONE"]


def test_dollar_dollar_escapes() -> None:
    bound = values()
    assert expand("$$(CLUSTER_NAME)", bound) == "$(CLUSTER_NAME)"
    assert expand("cost: $$5", bound) == "cost: $5"
    assert expand("$$$(CLUSTER_NAME)", bound) == "$prod-eu-1"


def test_unknown_references_and_flux_syntax_pass_through() -> None:
    bound = values()
    assert expand("$(UNKNOWN) ${flux_var} $(lower_ok) $(1BAD) $( SPACE ) $", bound) == (
        "$(UNKNOWN) ${flux_var} $(lower_ok) $(1BAD) $( SPACE ) $"
    )


def test_expansion_is_a_single_pass() -> None:
    bound = values(
        {"name": "OWNER", "fromAnnotation": "injected"}, {"name": "A", "value": "$(B)"}, {"name": "B", "value": "b"}
    )
    assert bound["OWNER"] == "$(CLUSTER_NAME)"
    assert expand("$(OWNER)", bound) == "$(CLUSTER_NAME)"
    assert expand("$(A)", bound) == "$(B)"


def test_expand_sync_touches_only_substitute_values() -> None:
    sync = Sync.model_validate(
        {
            "source": {"git": {"url": "https://github.com/example/app", "version": {"tag": "v1"}}},
            "package": {
                "kustomize": {"path": "./$(CLUSTER_NAME)", "substitute": {"NAME": "$(CLUSTER_NAME)", "X": "$$"}}
            },
        }
    )
    expanded = expand_sync(sync, values())
    assert expanded.package.kustomize.substitute == {"NAME": "prod-eu-1", "X": "$"}
    assert expanded.package.kustomize.path == "./$(CLUSTER_NAME)"
    assert expanded.source == sync.source
    assert sync.package.kustomize.substitute["NAME"] == "$(CLUSTER_NAME)"  # the input is untouched
