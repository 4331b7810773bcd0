"""Rendering Flux objects from assemblage sync records, through the Jinja2 templates."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.crds import SchemaError
from projections.render import FluxRenderer, TemplateError, object_name, yaml_value
from rollout.api.manifests import GitSource, GitVersion, KustomizePackage, Package, Source, Sync
from rollout.wire.assemblages import Assemblage, AssignedSync

DIGEST = "sha256:" + "ab" * 32
COMMIT = "0123456789abcdef0123456789abcdef01234567"

HOSTILE = [
    "line one\nline two: 2\n  nested: true",
    "{{ name }} and {% raw %}{{ x }}{% endraw %}",
    "key: value",
    "value # not a comment",
    "&anchor {a: 1}",
    "*alias",
    "---\napiVersion: v1\nkind: Secret",
    "...",
    "\"quoted\" and \\backslash\\ and 'single'",
    "- list: item",
    "[1, 2]",
    "yes",
    "null",
    "0x1F",
    "1e3",
    "  leading and trailing spaces  ",
    "tab\there",
    "unicode é ✓ 😀 \u2028 \u0085 \ufeff \x7f",
    "<<: *alias",
    "!!python/object:os.system",
    "",
]


# --- building assemblages ---------------------------------------------------------------------


def git_sync(
    module: str = "podinfo",
    *,
    tag: str | None = "6.7.0",
    revision: str | None = None,
    url: str = "https://github.com/stefanprodan/podinfo",
    path: str = "./kustomize",
    substitute: dict[str, str] | None = None,
) -> AssignedSync:
    # unvalidated on purpose: the renderer must hold even for URLs and tags the manifests refuse
    version = GitVersion.model_construct(tag=tag if revision is None else None, revision=revision)
    sync = Sync.model_validate(
        {
            "source": {"git": GitSource.model_construct(url=url, version=version)},
            "package": {"kustomize": {"path": path, "substitute": substitute or {}}},
        }
    )
    return AssignedSync(module=module, module_namespace="fleet", revision=sync.revision, sync=sync)


def oci_sync(module: str = "podinfo", *, tag: str | None = "6.7.0", digest: str | None = None) -> AssignedSync:
    version = {"tag": tag} if digest is None else {"digest": digest}
    sync = Sync.model_validate(
        {"source": {"oci": {"url": "oci://ghcr.io/stefanprodan/manifests/podinfo", "version": version}}}
    )
    return AssignedSync(module=module, module_namespace="fleet", revision=sync.revision, sync=sync)


def assemblage(
    *syncs: AssignedSync, kind: str = "RemoteAssemblage", cluster: str = "prod-eu-1", namespace: str = "fleet"
) -> Assemblage:
    return Assemblage.model_validate(
        {
            "kind": kind,
            "metadata": {"name": cluster, "namespace": namespace},
            "version": 1,
            "spec": {"syncs": list(syncs)},  # as built, not re-validated (see git_sync)
        }
    )


def render(sync: AssignedSync, *, kind: str = "RemoteAssemblage", renderer: FluxRenderer | None = None) -> list[dict]:
    return (renderer or FluxRenderer()).render(assemblage(sync, kind=kind), sync)


def shape(value: Any) -> Any:
    """The structure of a document without its scalar values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


# --- sources ------------------------------------------------------------------------------------


def test_git_tag_renders_gitrepository_with_ref_tag() -> None:
    source, kustomization = render(git_sync(tag="6.7.0"))
    assert source["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert source["kind"] == "GitRepository"
    assert source["spec"] == {
        "interval": "10m",
        "url": "https://github.com/stefanprodan/podinfo",
        "ref": {"tag": "6.7.0"},
    }
    assert kustomization["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "podinfo-prod-eu-1"}


@pytest.mark.parametrize("revision", [COMMIT, f"sha1:{COMMIT}"])
def test_git_commit_renders_ref_commit_without_sha1_prefix(revision: str) -> None:
    source, _ = render(git_sync(tag=None, revision=revision))
    assert source["spec"]["ref"] == {"commit": COMMIT}


def test_oci_tag_renders_ocirepository_with_ref_tag() -> None:
    source, kustomization = render(oci_sync(tag="6.7.0"))
    assert source["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert source["kind"] == "OCIRepository"
    assert source["spec"] == {
        "interval": "10m",
        "url": "oci://ghcr.io/stefanprodan/manifests/podinfo",
        "ref": {"tag": "6.7.0"},
    }
    assert kustomization["spec"]["sourceRef"] == {"kind": "OCIRepository", "name": "podinfo-prod-eu-1"}


def test_oci_digest_renders_ref_digest() -> None:
    source, _ = render(oci_sync(tag=None, digest=DIGEST))
    assert source["spec"]["ref"] == {"digest": DIGEST}
    assert source["metadata"]["annotations"] == {"rollout.dev/revision": DIGEST}


# --- remote vs proxy ------------------------------------------------------------------------------


def test_remote_objects_live_in_the_cluster_namespace_and_reach_it_through_its_kubeconfig_secret() -> None:
    source, kustomization = render(git_sync(), kind="RemoteAssemblage")
    assert source["metadata"]["namespace"] == kustomization["metadata"]["namespace"] == "fleet"
    assert kustomization["spec"]["kubeConfig"] == {"secretRef": {"name": "prod-eu-1-kubeconfig", "key": "value"}}
    assert kustomization["spec"]["prune"] is True
    assert kustomization["spec"]["path"] == "./kustomize"
    assert "targetNamespace" not in kustomization["spec"]


def test_proxy_objects_live_in_flux_system_without_kubeconfig() -> None:
    source, kustomization = render(git_sync(), kind="ProxyAssemblage")
    assert source["metadata"]["namespace"] == kustomization["metadata"]["namespace"] == "flux-system"
    assert "kubeConfig" not in kustomization["spec"]
    assert "targetNamespace" not in kustomization["spec"]


def test_proxy_namespace_and_interval_are_configurable() -> None:
    renderer = FluxRenderer(proxy_namespace="gitops", interval="1h30m")
    source, kustomization = render(git_sync(), kind="ProxyAssemblage", renderer=renderer)
    assert kustomization["metadata"]["namespace"] == "gitops"
    assert source["spec"]["interval"] == kustomization["spec"]["interval"] == "1h30m"


@pytest.mark.parametrize("kind, assemblage_label", [("RemoteAssemblage", "remote"), ("ProxyAssemblage", "proxy")])
def test_every_object_carries_rollout_labels_and_the_revision(kind: str, assemblage_label: str) -> None:
    for obj in render(git_sync(), kind=kind):
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "rollout",
            "rollout.dev/module": "podinfo",
            "rollout.dev/cluster": "prod-eu-1",
            "rollout.dev/assemblage": assemblage_label,
        }
        assert obj["metadata"]["annotations"] == {"rollout.dev/revision": "6.7.0"}


def test_expanded_substitute_map_becomes_post_build_substitute() -> None:
    _, kustomization = render(git_sync(substitute={"CLUSTER": "prod-eu-1", "REPLICAS": "3"}))
    assert kustomization["spec"]["postBuild"] == {"substitute": {"CLUSTER": "prod-eu-1", "REPLICAS": "3"}}


def test_empty_substitute_omits_post_build() -> None:
    _, kustomization = render(git_sync(substitute={}))
    assert "postBuild" not in kustomization["spec"]


def test_invalid_interval_or_proxy_namespace_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="10 minutes"):
        FluxRenderer(interval="10 minutes")
    with pytest.raises(ValueError, match="Flux_System"):
        FluxRenderer(proxy_namespace="Flux_System")


# --- values never change the structure --------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_substitute_values_paths_and_tags_keep_the_structure(value: str) -> None:
    baseline = render(git_sync(substitute={"A": "plain", "B": "plain"}, path="./plain", tag="plain"))
    sync = git_sync(substitute={"A": value, "B": value + "\n"}, path=value or "./", tag=value or "x")
    source, kustomization = render(sync)
    assert [shape(source), shape(kustomization)] == [shape(obj) for obj in baseline]
    assert kustomization["spec"]["postBuild"]["substitute"] == {"A": value, "B": value + "\n"}
    assert kustomization["spec"]["path"] == (value or "./")
    assert source["spec"]["ref"] == {"tag": value or "x"}


@pytest.mark.parametrize("value", [v for v in HOSTILE if "\n" not in v and "\u2028" not in v and "\x85" not in v])
def test_hostile_urls_keep_the_structure(value: str) -> None:
    url = f"https://example.com/{value}"
    source, _ = render(git_sync(url=url))
    assert source["spec"]["url"] == url
    assert set(source["spec"]) == {"interval", "url", "ref"}


def test_url_with_a_newline_is_rejected_by_the_crd_pattern() -> None:
    with pytest.raises(SchemaError) as caught:
        render(git_sync(url="https://example.com/repo\nref:\n  branch: main"))
    assert caught.value.fields == ["spec.url"]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), st.text(), max_size=4))
def test_any_substitute_text_round_trips_exactly(substitute: dict[str, str]) -> None:
    _, kustomization = render(git_sync(substitute=substitute))
    assert kustomization["spec"].get("postBuild", {}).get("substitute", {}) == substitute


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**70, 0.5, 1e20, 1e-7, "x", {"a": [1, "b", None]}, [], {}, ("t", 1)],
)
def test_every_value_is_emitted_as_one_yaml_node(value: object) -> None:
    expected = list(value) if isinstance(value, tuple) else value
    assert yaml.safe_load(f"key: {yaml_value(value)}\nnext: 1") == {"key": expected, "next": 1}


# --- invalid objects ------------------------------------------------------------------------------


def test_bad_url_scheme_that_slipped_past_the_manifest_is_rejected_by_the_crd() -> None:
    # The manifest model refuses scp-style URLs; the CRD check is the second line of defence.
    source = Source.model_construct(
        git=GitSource.model_construct(url="git@github.com:x/y", version=GitVersion(tag="v1")), oci=None
    )
    sync = Sync.model_construct(source=source, package=Package(kustomize=KustomizePackage()))
    assigned = AssignedSync(module="podinfo", module_namespace="fleet", revision="v1", sync=sync)
    with pytest.raises(SchemaError) as caught:
        FluxRenderer().render(assemblage(), assigned)
    assert caught.value.kind == "GitRepository"
    assert caught.value.namespace == "fleet"
    assert caught.value.name == "podinfo-prod-eu-1"
    assert caught.value.fields == ["spec.url"]


def test_template_rendering_a_bad_interval_is_rejected_naming_the_field_and_template(tmp_path: Path) -> None:
    (tmp_path / "gitrepository.yaml.j2").write_text(
        builtin_template("gitrepository.yaml.j2").replace("interval: {{ interval }}", 'interval: "10 minutes"')
    )
    with pytest.raises(SchemaError) as caught:
        render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.fields == ["spec.interval"]
    assert str(tmp_path / "gitrepository.yaml.j2") in str(caught.value)


def test_template_adding_an_unknown_spec_field_is_rejected(tmp_path: Path) -> None:
    extend(tmp_path, "kustomization.yaml.j2", "{% block extra_spec %}\n  healthcheck: []\n{% endblock %}\n")
    with pytest.raises(SchemaError) as caught:
        render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.kind == "Kustomization"
    assert caught.value.fields == ["spec.healthcheck"]
    assert "did you mean 'healthChecks'" in str(caught.value)


# --- names --------------------------------------------------------------------------------------------


def test_short_names_are_module_dash_cluster() -> None:
    assert object_name("podinfo", "prod-eu-1") == "podinfo-prod-eu-1"
    assert object_name("m" * 31, "c" * 31) == "m" * 31 + "-" + "c" * 31  # exactly 63


def test_long_names_are_truncated_hashed_stable_and_valid() -> None:
    module, cluster = "monitoring-stack-" + "x" * 30, "prod-eu-west-1-" + "y" * 30
    name = object_name(module, cluster)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name.endswith("-" + hashlib.sha256(f"{module}-{cluster}".encode()).hexdigest()[:10])
    assert name.startswith("monitoring-stack-")
    assert object_name(module, cluster) == name
    assert object_name(module, cluster + "z") != name  # same truncated prefix, different hash


def test_truncation_never_leaves_a_dash_before_the_hash() -> None:
    name = object_name("a" * 51 + "-b", "c" * 20)  # the cut falls right after the dash
    assert "--" not in name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


def test_objects_of_long_names_are_valid() -> None:
    sync = git_sync("m" * 63)
    source, kustomization = FluxRenderer().render(assemblage(sync, cluster="c" * 63), sync)
    assert source["metadata"]["name"] == kustomization["spec"]["sourceRef"]["name"] == object_name("m" * 63, "c" * 63)
    assert kustomization["spec"]["kubeConfig"]["secretRef"]["name"] == "c" * 63 + "-kubeconfig"


# --- template overrides -------------------------------------------------------------------------------


def builtin_template(name: str) -> str:
    return (Path(__file__).resolve().parents[2] / "projections" / "templates" / name).read_text()


def extend(directory: Path, name: str, blocks: str) -> Path:
    path = directory / name
    path.write_text(f'{{% extends "builtin/{name}" %}}\n{blocks}')
    return path


def test_template_override_dir_replacing_a_template_adds_a_label(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml.j2").write_text(
        builtin_template("kustomization.yaml.j2").replace(
            "  annotations:\n", '    team: "platform"\n    tier: {{ assemblage ~ "-tier" }}\n  annotations:\n'
        )
    )
    source, kustomization = render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert kustomization["metadata"]["labels"]["team"] == "platform"
    assert kustomization["metadata"]["labels"]["tier"] == "remote-tier"
    assert "team" not in source["metadata"]["labels"]  # the other templates still come from the package


def test_template_override_can_extend_the_builtin_with_spec_fields(tmp_path: Path) -> None:
    extend(
        tmp_path,
        "kustomization.yaml.j2",
        "{% block extra_labels %}\n    team: platform\n{% endblock %}\n"
        "{% block extra_spec %}\n"
        "  timeout: 5m\n"
        "  wait: true\n"
        "  decryption:\n    provider: sops\n    secretRef:\n      name: sops-age\n"
        "  healthChecks:\n"
        "    - {apiVersion: apps/v1, kind: Deployment, name: {{ module }}, namespace: {{ module }}}\n"
        "{% endblock %}\n",
    )
    _, kustomization = render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert kustomization["metadata"]["labels"]["team"] == "platform"
    assert kustomization["spec"]["timeout"] == "5m"
    assert kustomization["spec"]["decryption"] == {"provider": "sops", "secretRef": {"name": "sops-age"}}
    assert kustomization["spec"]["healthChecks"][0]["name"] == "podinfo"


def test_template_changing_the_object_name_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "gitrepository.yaml.j2").write_text(
        builtin_template("gitrepository.yaml.j2").replace("name: {{ name }}", 'name: "renamed"')
    )
    with pytest.raises(TemplateError, match=r"metadata\.name must be 'podinfo-prod-eu-1'"):
        render(git_sync(), renderer=FluxRenderer(tmp_path))


def test_template_giving_a_key_twice_is_rejected(tmp_path: Path) -> None:
    extend(tmp_path, "kustomization.yaml.j2", "{% block extra_spec %}\n  prune: false\n{% endblock %}\n")
    with pytest.raises(TemplateError, match="'prune' is given twice"):
        render(git_sync(), renderer=FluxRenderer(tmp_path))


def test_missing_template_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        FluxRenderer(tmp_path / "nope")


# --- broken templates ------------------------------------------------------------------------------------


def test_template_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "kustomization.yaml.j2"
    path.write_text("apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{ name }\n")
    with pytest.raises(TemplateError) as caught:
        render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.filename == str(path)
    assert caught.value.lineno == 3
    assert f"{path}, line 3" in str(caught.value)


def test_undefined_variable_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gitrepository.yaml.j2"
    path.write_text(builtin_template("gitrepository.yaml.j2").replace("url: {{ source.url }}", "url: {{ source.uri }}"))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "source.uri" in text)
    with pytest.raises(TemplateError) as caught:
        render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.filename == str(path)
    assert caught.value.lineno == line
    assert "uri" in caught.value.reason


def test_error_in_an_extending_template_block_names_its_line(tmp_path: Path) -> None:
    path = extend(
        tmp_path, "kustomization.yaml.j2", "{% block extra_spec %}\n  timeout: {{ 1 // 0 }}\n{% endblock %}\n"
    )
    with pytest.raises(TemplateError) as caught:
        render(git_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.filename == str(path)
    assert caught.value.lineno == 3
    assert "ZeroDivisionError" in caught.value.reason


def test_sandbox_refuses_to_mutate_template_variables(tmp_path: Path) -> None:
    extend(tmp_path, "kustomization.yaml.j2", '{% block extra_spec %}{{ labels.update({"x": "y"}) }}{% endblock %}\n')
    with pytest.raises(TemplateError, match="SecurityError"):
        render(git_sync(), renderer=FluxRenderer(tmp_path))


def test_template_rendering_invalid_yaml_is_named(tmp_path: Path) -> None:
    (tmp_path / "ocirepository.yaml.j2").write_text("kind: OCIRepository\n  bad: indentation\n")
    with pytest.raises(TemplateError, match="not valid YAML") as caught:
        render(oci_sync(), renderer=FluxRenderer(tmp_path))
    assert caught.value.filename == str(tmp_path / "ocirepository.yaml.j2")
