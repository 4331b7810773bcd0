"""Validation against the real Flux CRD schemas: what an API server would reject or prune."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from projections.crds import (
    CRDCatalog,
    SchemaError,
    builtin_catalog,
    catalog_from_directory,
    format_field_path,
    validate,
)

SHARED_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "crds"
PACKAGE_CRDS = Path(__file__).resolve().parents[2] / "projections" / "crds"


def git_repository(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {
            "name": "podinfo-prod-eu-1",
            "namespace": "fleet",
            "labels": {"rollout.dev/module": "podinfo"},
            "annotations": {"rollout.dev/revision": "6.7.0"},
        },
        "spec": {"interval": "10m", "url": "https://github.com/stefanprodan/podinfo", "ref": {"tag": "6.7.0"}, **spec},
    }


def kustomization(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "podinfo-prod-eu-1", "namespace": "fleet"},
        "spec": {
            "interval": "10m",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": "podinfo-prod-eu-1"},
            **spec,
        },
    }


def problems_of(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SchemaError) as caught:
        validate(obj)
    return {problem.field: problem.reason for problem in caught.value.problems}


# --- the shipped CRDs -------------------------------------------------------------------------


@pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="shared/crds is not next to the project")
def test_shipped_crds_are_unmodified_copies_of_shared_crds() -> None:
    for shipped in sorted(PACKAGE_CRDS.glob("*.yaml")):
        assert shipped.read_bytes() == (SHARED_CRDS / shipped.name).read_bytes(), shipped.name


def test_flux_kinds_are_served_only_at_v1() -> None:
    catalog = builtin_catalog()
    assert catalog.served_api_versions("GitRepository") == ["source.toolkit.fluxcd.io/v1"]
    assert catalog.served_api_versions("OCIRepository") == ["source.toolkit.fluxcd.io/v1"]
    assert catalog.served_api_versions("Kustomization") == ["kustomize.toolkit.fluxcd.io/v1"]
    assert catalog.served_api_versions("HelmRelease") == ["helm.toolkit.fluxcd.io/v2"]


def test_loaded_schemas_are_cached() -> None:
    assert builtin_catalog() is builtin_catalog()
    assert catalog_from_directory(PACKAGE_CRDS) is catalog_from_directory(PACKAGE_CRDS)


# --- valid objects --------------------------------------------------------------------------


def test_valid_gitrepository_and_kustomization_pass() -> None:
    validate(git_repository())
    validate(
        kustomization(
            path="./kustomize",
            postBuild={"substitute": {"CLUSTER": "prod-eu-1"}},
            kubeConfig={"secretRef": {"name": "prod-eu-1-kubeconfig", "key": "value"}},
            healthChecks=[{"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo", "namespace": "x"}],
            timeout="5m",
        )
    )


def test_preserve_unknown_fields_keeps_arbitrary_helm_values() -> None:
    validate(
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "fleet"},
            "spec": {
                "interval": "5m",
                "chartRef": {"kind": "OCIRepository", "name": "podinfo"},
                "values": {"anything": {"goes": [1, "two", {"three": None}]}},
            },
        }
    )


# --- what is rejected, with the field named ---------------------------------------------------


def test_bad_interval_is_rejected_naming_spec_interval() -> None:
    problems = problems_of(git_repository(interval="10 minutes"))
    assert list(problems) == ["spec.interval"]
    assert "10 minutes" in problems["spec.interval"]


def test_unknown_spec_field_is_rejected_where_the_api_server_would_prune_it() -> None:
    problems = problems_of(kustomization(healthcheck=[]))
    assert "spec.healthcheck" in problems
    assert "did you mean 'healthChecks'" in problems["spec.healthcheck"]


def test_unknown_nested_field_is_rejected() -> None:
    assert "spec.ref.branchh" in problems_of(git_repository(ref={"tag": "v1", "branchh": "main"}))


def test_unknown_top_level_field_is_rejected() -> None:
    obj = git_repository()
    obj["sepc"] = {}
    assert "sepc" in problems_of(obj)


def test_scp_style_git_url_is_rejected() -> None:
    problems = problems_of(git_repository(url="git@github.com:stefanprodan/podinfo"))
    assert "^(http|https|ssh)://" in problems["spec.url"]


def test_oci_url_without_oci_scheme_is_rejected() -> None:
    obj = git_repository()
    obj["kind"] = "OCIRepository"
    obj["spec"]["url"] = "https://ghcr.io/stefanprodan/manifests/podinfo"
    assert "spec.url" in problems_of(obj)


def test_required_field_missing_is_named() -> None:
    obj = git_repository()
    del obj["spec"]["url"]
    assert problems_of(obj) == {"spec.url": "required field is missing"}


def test_wrong_type_is_named_with_list_index() -> None:
    problems = problems_of(kustomization(healthChecks=[{"kind": "Deployment", "name": 7}]))
    assert problems == {"spec.healthChecks[0].name": "7 is not a string"}


def test_substitute_values_must_be_strings() -> None:
    assert "spec.postBuild.substitute.REPLICAS" in problems_of(kustomization(postBuild={"substitute": {"REPLICAS": 3}}))


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(git_repository(interval="often", url="git@host:repo", refx={}))
    assert set(problems) == {"spec.interval", "spec.url", "spec.refx"}


def test_unserved_api_version_is_rejected() -> None:
    obj = git_repository()
    obj["apiVersion"] = "source.toolkit.fluxcd.io/v1beta2"
    problems = problems_of(obj)
    assert "use source.toolkit.fluxcd.io/v1" in problems["apiVersion"]


def test_unknown_kind_is_rejected() -> None:
    obj = git_repository()
    obj["kind"] = "Bucket"
    assert "kind" in problems_of(obj)


def test_error_names_kind_namespace_name_and_field() -> None:
    with pytest.raises(SchemaError) as caught:
        validate(git_repository(interval="soon"), origin="gitrepository.yaml.j2")
    message = str(caught.value)
    assert message.startswith("GitRepository fleet/podinfo-prod-eu-1 is invalid (rendered from gitrepository.yaml.j2)")
    assert "spec.interval:" in message
    assert caught.value.fields == ["spec.interval"]


# --- metadata, as ObjectMeta validation does it ------------------------------------------------


@pytest.mark.parametrize("name", ["Podinfo", "-podinfo", "podinfo_", "a" * 254, "pod/info", ""])
def test_metadata_name_must_be_a_dns1123_subdomain(name: str) -> None:
    obj = git_repository()
    obj["metadata"]["name"] = name
    assert "metadata.name" in problems_of(obj)


def test_metadata_name_of_253_characters_with_dots_is_accepted() -> None:
    obj = git_repository()
    obj["metadata"]["name"] = ".".join(["a" * 63] * 4)[:253].rstrip(".")
    validate(obj)


def test_namespace_is_required_for_namespaced_kinds() -> None:
    obj = git_repository()
    del obj["metadata"]["namespace"]
    assert problems_of(obj) == {"metadata.namespace": "required field is missing (namespaced kind)"}


def test_label_value_longer_than_63_is_rejected() -> None:
    obj = git_repository()
    obj["metadata"]["labels"]["rollout.dev/cluster"] = "c" * 64
    assert 'metadata.labels["rollout.dev/cluster"]' in problems_of(obj)


def test_bad_label_key_is_rejected() -> None:
    obj = git_repository()
    obj["metadata"]["labels"]["Rollout.dev/x"] = "y"
    assert 'metadata.labels["Rollout.dev/x"]' in problems_of(obj)


def test_non_string_annotation_is_rejected() -> None:
    obj = git_repository()
    obj["metadata"]["annotations"]["rollout.dev/revision"] = 6
    assert 'metadata.annotations["rollout.dev/revision"]' in problems_of(obj)


def test_unknown_metadata_field_is_rejected() -> None:
    obj = git_repository()
    obj["metadata"]["lables"] = {}
    assert "metadata.lables" in problems_of(obj)


def test_status_formats_are_checked() -> None:
    obj = kustomization()
    obj["status"] = {
        "observedGeneration": 2**64,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ok", "message": "", "lastTransitionTime": "yesterday"}
        ],
    }
    problems = problems_of(obj)
    assert set(problems) == {"status.observedGeneration", "status.conditions[0].lastTransitionTime"}


# --- structural schema rules, on a small synthetic CRD ------------------------------------------

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "scope": "Cluster",
        "versions": [
            {"name": "v1alpha1", "served": False, "storage": False, "schema": {"openAPIV3Schema": {}}},
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "maxUnavailable": {
                                        "x-kubernetes-int-or-string": True,
                                    },
                                    "free": {
                                        "type": "object",
                                        "properties": {"known": {"type": "string"}},
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                    "map": {"type": "object", "additionalProperties": {"type": "integer"}},
                                },
                            },
                        },
                    }
                },
            },
        ],
    },
}


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def widget_problems(obj: dict[str, Any]) -> dict[str, str]:
    return {p.field: p.reason for p in CRDCatalog([copy.deepcopy(WIDGET_CRD)]).problems(obj)}


@pytest.mark.parametrize("value", [1, "25%"])
def test_int_or_string_accepts_integers_and_strings(value: object) -> None:
    assert widget_problems(widget(maxUnavailable=value)) == {}


@pytest.mark.parametrize("value", [True, 1.5, [1], None])
def test_int_or_string_rejects_everything_else(value: object) -> None:
    assert "spec.maxUnavailable" in widget_problems(widget(maxUnavailable=value))


def test_preserve_unknown_fields_keeps_unknown_fields_but_checks_known_ones() -> None:
    assert widget_problems(widget(free={"known": "x", "other": {"deep": 1}})) == {}
    assert "spec.free.known" in widget_problems(widget(free={"known": 1}))


def test_additional_properties_schema_is_a_map_not_a_pruned_object() -> None:
    assert widget_problems(widget(map={"a": 1, "b": 2})) == {}
    assert "spec.map.b" in widget_problems(widget(map={"a": 1, "b": "two"}))


def test_unserved_version_of_a_crd_is_rejected() -> None:
    obj = widget()
    obj["apiVersion"] = "example.com/v1alpha1"
    assert "apiVersion" in widget_problems(obj)


def test_cluster_scoped_kind_must_not_have_a_namespace() -> None:
    obj = widget()
    obj["metadata"]["namespace"] = "fleet"
    assert "metadata.namespace" in widget_problems(obj)


def test_field_paths_read_like_kubectl_explain() -> None:
    assert format_field_path(["spec", "healthChecks", 0, "name"]) == "spec.healthChecks[0].name"
    assert format_field_path(["metadata", "labels", "rollout.dev/module"]) == 'metadata.labels["rollout.dev/module"]'


# --- the compiled validator: a fast "valid", never a different verdict ------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from projections.render import FluxRenderer  # noqa: E402
from rollout.api.manifests import Sync  # noqa: E402
from rollout.wire.assemblages import Assemblage, AssignedSync  # noqa: E402

_RICH_SYNCS: list[dict[str, Any]] = [
    {
        "source": {"git": {"url": "https://git.example.com/app", "version": {"tag": "v1"}, "secretRef": {"name": "s"}}},
        "package": {
            "kustomize": {
                "path": "./deploy",
                "substitute": {"a": "b"},
                "substituteFrom": [{"kind": "ConfigMap", "name": "vars"}],
                "targetNamespace": "apps",
                "wait": True,
                "timeout": "5m",
                "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "app", "namespace": "apps"}],
                "patches": [{"patch": "- op: remove\n  path: /x", "target": {"kind": "Deployment"}}],
                "components": ["./c"],
            }
        },
    },
    {
        "source": {
            "oci": {
                "url": "oci://registry.example.com/app",
                "version": {"tag": "v1"},
                "provider": "generic",
                "certSecretRef": {"name": "ca"},
            }
        }
    },
    {
        "source": {"helm": {"url": "https://charts.example.com", "chart": "app", "version": "1.2.0"}},
        "package": {"helm": {"values": {"replicas": 2, "image": {"tag": "v1"}}, "maxHistory": 3, "timeout": "5m"}},
    },
]


def _rendered_objects() -> list[dict[str, Any]]:
    objects = []
    for number, raw in enumerate(_RICH_SYNCS):
        sync = Sync.model_validate(raw)
        assigned = AssignedSync(module=f"m{number}", module_namespace="fleet", revision=sync.revision, sync=sync)
        for kind in ("ProxyAssemblage", "RemoteAssemblage"):
            assemblage = Assemblage.model_validate(
                {"kind": kind, "metadata": {"name": "c1", "namespace": "fleet"}, "version": 1, "spec": {"syncs": []}}
            )
            objects.extend(FluxRenderer().render(assemblage, assigned))
    return objects


RENDERED = _rendered_objects()


def _schema_paths(
    schema: dict[str, Any], path: tuple[str, ...] = (), depth: int = 4
) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """(path, schema) of named properties down to `depth` (where a mutation lands on what the
    schema checks)."""
    found = [(path, schema)] if path else []
    if depth == 0:
        return found
    for name, sub in (schema.get("properties") or {}).items():
        found.extend(_schema_paths(sub, (*path, name), depth - 1))
    return found


def _typed_values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of the property's own type (near its enum, pattern and bounds): mostly accepted."""
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), st.text(max_size=8))
    kind = schema.get("type")
    if kind == "string" or schema.get("x-kubernetes-int-or-string"):
        return _SCALARS.filter(lambda value: isinstance(value, str))
    if kind == "integer":
        return st.one_of(st.integers(min_value=-3, max_value=100), st.sampled_from([2**31, 2**63, -(2**63) - 1]))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(_typed_values(schema.get("items") or {}), max_size=2)
    if kind == "object" and "properties" in schema:
        return st.just({})
    return _VALUES


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, -(2**63) - 1, 1.0, 1.5, float("inf")]),
    st.text(max_size=12),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\n?", fullmatch=True),
    st.sampled_from(
        [
            "10m",
            "10m\n",
            "5m0s",
            "1h",
            "https://x.example.com",
            "oci://x/y",
            "ssh://git@x/y",
            "git@x:y",
            "GitRepository",
            "OCIRepository",
            "Bucket",
            "apps",
            "Apps",
            "a" * 300,
            "",
            "enabled",
            "v1",
            "2026-11-27T00:00:00Z",
            "yesterday",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["name", "kind", "x", "path"]), children, max_size=3),
    ),
    max_leaves=6,
)


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = obj
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_validator_never_accepts_what_jsonschema_rejects(data: st.DataObject) -> None:
    catalog = builtin_catalog()
    obj = copy.deepcopy(data.draw(st.sampled_from(RENDERED)))
    served = catalog._lookup(obj["apiVersion"], obj["kind"])  # the two validators of its CRD
    assert served is not None
    paths = _schema_paths(dict(served.schema))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path, schema = data.draw(st.sampled_from(paths))
        how = data.draw(st.sampled_from(["delete", "typed", "typed", "any"]))
        if how == "delete" and path[-1] in _dig(obj, path[:-1]):
            del _dig(obj, path[:-1])[path[-1]]
        else:
            _set(obj, path, data.draw(_typed_values(schema) if how == "typed" else _VALUES))
    compiled = catalog._compiled_validator(served)
    assert compiled is not None
    try:
        compiled(obj)
    except Exception:
        return  # rejected: jsonschema decides, as it always did
    errors = [
        error for error in catalog._validator(served).iter_errors(obj) if list(error.absolute_path)[:1] != ["metadata"]
    ]
    assert errors == [], f"the compiled validator accepted what jsonschema rejects: {[e.message for e in errors]}"


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = obj
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def test_every_shipped_flux_kind_is_validated_by_a_compiled_validator() -> None:
    catalog = builtin_catalog()
    for obj in RENDERED:
        served = catalog._lookup(obj["apiVersion"], obj["kind"])
        assert served is not None and catalog._compiled_validator(served) is not None, obj["kind"]


def test_an_int64_beyond_its_range_is_rejected_by_both_validators() -> None:
    obj = kustomization()
    obj["status"] = {"observedGeneration": 2**63}
    catalog = builtin_catalog()
    served = catalog._lookup(obj["apiVersion"], obj["kind"])
    assert served is not None
    compiled = catalog._compiled_validator(served)
    assert compiled is not None
    with pytest.raises(Exception, match="observedGeneration"):
        compiled(obj)
    assert set(problems_of(obj)) == {"status.observedGeneration"}


def test_a_schema_keyword_the_compiled_validator_may_read_differently_leaves_jsonschema_alone() -> None:
    crd = copy.deepcopy(WIDGET_CRD)
    spec = crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["code"] = {"type": "string", "format": "hostname"}  # a format only jsonschema would know
    catalog = CRDCatalog([crd])
    assert catalog._compiled_validator(catalog._lookup("example.com/v1", "Widget")) is None  # type: ignore[arg-type]
    assert catalog.problems(widget(code="ok")) == []
    assert "spec.maxUnavailable" in {p.field for p in catalog.problems(widget(maxUnavailable=True))}
