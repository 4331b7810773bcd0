"""A sync's Flux objects compiled once and filled in per cluster (projections/render_cache.py):
the same objects and the same bytes as rendering from scratch, still validated against the
CRDs, bounded, and compiled again for whatever the render reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.crds import SchemaError
from projections.flux_yaml import dump_objects, emits_plain
from projections.render import FluxRenderer, TemplateError
from projections.render_cache import CLUSTER_SLOT, NAME_SLOT
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync


@pytest.fixture(scope="module")
def from_scratch(tmp_path_factory: pytest.TempPathFactory) -> FluxRenderer:
    """The reference: a renderer with a template directory (empty: the built-in templates)
    renders every object through Jinja, as every render did before the cache."""
    return FluxRenderer(template_dir=tmp_path_factory.mktemp("no-overrides"))


def assigned(raw: dict[str, Any], module: str = "app", generation: int | None = 1) -> AssignedSync:
    sync = Sync.model_validate(raw)
    return AssignedSync(
        module=module, module_namespace="fleet", revision=sync.revision, generation=generation, sync=sync
    )


def assemblage(kind: str, cluster: str, namespace: str = "fleet", *syncs: AssignedSync) -> Assemblage:
    return Assemblage.model_validate(
        {"kind": kind, "metadata": {"name": cluster, "namespace": namespace}, "version": 1, "spec": {"syncs": syncs}}
    )


# --- generated syncs: every source kind and package option the templates read ----------------------

_WORDS = st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
_TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
    st.sampled_from(["yes", "on", "null", "0x1F", "1e3", "a: b", "- x", "{{ name }}", "line\nbreak", "", "é ✓"]),
)
_SECRET = st.one_of(st.none(), st.builds(lambda name: {"name": name}, _WORDS))
_DURATION = st.one_of(st.none(), st.sampled_from(["30s", "5m", "1h", "2m30s"]))
_SLOT_FREE_WORDS = _WORDS.filter(lambda word: NAME_SLOT not in word and CLUSTER_SLOT not in word)


def _without_none(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


_GIT = st.builds(
    lambda url, version, secret: {"git": _without_none(url=url, version=version, secretRef=secret)},
    st.sampled_from(["https://github.com/stefanprodan/podinfo", "ssh://git@git.example.com/team/app"]),
    st.one_of(
        st.builds(lambda tag: {"tag": tag}, st.sampled_from(["6.7.0", "v1.2.3", "release-2026"])),
        st.just({"revision": "sha1:0123456789abcdef0123456789abcdef01234567"}),
    ),
    _SECRET,
)
_OCI = st.builds(
    lambda version, secret, cert, insecure, provider, verify: {
        "oci": _without_none(
            url="oci://ghcr.io/stefanprodan/manifests/podinfo",
            version=version,
            secretRef=secret,
            certSecretRef=cert,
            insecure=insecure or None,
            provider=provider,
            verify=verify,
        )
    },
    st.one_of(st.just({"tag": "6.7.0"}), st.just({"digest": "sha256:" + "ab" * 32})),
    _SECRET,
    _SECRET,
    st.booleans(),
    st.sampled_from([None, "generic", "aws"]),
    st.sampled_from([None, {"provider": "cosign", "secretRef": {"name": "keys"}}]),
)
_HELM_SOURCE = st.builds(
    lambda url, secret, pass_credentials: {
        "helm": _without_none(
            url=url,
            chart="podinfo",
            version="6.7.0",
            secretRef=secret,
            passCredentials=(pass_credentials and url.startswith("https")) or None,
        )
    },
    st.sampled_from(["https://stefanprodan.github.io/podinfo", "oci://ghcr.io/stefanprodan/charts"]),
    _SECRET,
    st.booleans(),
)
_KUSTOMIZE = st.builds(
    lambda path, substitute, substitute_from, target, wait, force, timeout, checks, components, patches, decryption: (
        _without_none(
            path=path,
            substitute=substitute or None,
            substituteFrom=substitute_from or None,
            targetNamespace=target,
            wait=wait,
            force=force,
            timeout=timeout,
            healthChecks=checks or None,
            components=components or None,
            patches=patches or None,
            decryption=decryption,
        )
    ),
    st.sampled_from(["./", "./kustomize", "./deploy/prod"]),
    st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,6}", fullmatch=True), _TEXT, max_size=3),
    st.lists(_WORDS, max_size=2, unique=True).map(lambda names: [{"kind": "ConfigMap", "name": n} for n in names]),
    st.one_of(st.none(), _WORDS),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.booleans()),
    _DURATION,
    st.lists(st.builds(lambda name: {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, _WORDS), max_size=2),
    st.lists(st.sampled_from(["./c1", "./c2"]), max_size=2, unique=True),
    st.lists(st.just({"patch": "- op: remove\n  path: /spec/replicas", "target": {"kind": "Deployment"}}), max_size=1),
    st.sampled_from([None, {"provider": "sops", "secretRef": {"name": "sops-age"}}]),
)
_HELM_PACKAGE = st.builds(
    lambda values, release, target, history, timeout: {
        "helm": _without_none(
            values=values, releaseName=release, targetNamespace=target, maxHistory=history, timeout=timeout
        )
    },
    st.dictionaries(
        st.sampled_from(["replicas", "image", "name", "enabled", "ratio"]),
        st.one_of(st.integers(-5, 10**6), st.booleans(), _TEXT, st.floats(allow_nan=False, allow_infinity=False)),
        max_size=4,
    ),
    st.one_of(st.none(), _WORDS),
    st.one_of(st.none(), _WORDS),
    st.one_of(st.none(), st.integers(0, 10)),
    _DURATION,
)
SYNCS = st.one_of(
    st.builds(lambda source, kustomize: {"source": source, "package": {"kustomize": kustomize}}, _GIT, _KUSTOMIZE),
    st.builds(lambda source, kustomize: {"source": source, "package": {"kustomize": kustomize}}, _OCI, _KUSTOMIZE),
    st.builds(lambda source, helm: {"source": source, "package": helm}, _HELM_SOURCE, _HELM_PACKAGE),
    st.builds(
        lambda helm: {
            "source": {"oci": {"url": "oci://ghcr.io/x/chart", "version": {"tag": "1.0.0"}}},
            "package": helm,
        },
        _HELM_PACKAGE,
    ),
)
CLUSTERS = st.one_of(
    _SLOT_FREE_WORDS,
    st.sampled_from(["on", "yes", "no", "null", "true", "123", "0x1f", "1e3", "2026-11-27", "app", "c" * 63]),
)
MODULES = st.one_of(_SLOT_FREE_WORDS, st.just("m" * 60))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    raw=SYNCS,
    interval=st.one_of(st.none(), st.sampled_from(["1m", "15m"])),
    module=MODULES,
    generation=st.one_of(st.none(), st.integers(1, 50)),
    kind=st.sampled_from(["ProxyAssemblage", "RemoteAssemblage"]),
    namespace=st.sampled_from(["fleet", "team-a"]),
    clusters=st.lists(CLUSTERS, min_size=1, max_size=4),
)
def test_a_compiled_sync_fills_in_the_objects_and_bytes_rendering_from_scratch_gives(
    from_scratch: FluxRenderer,
    raw: dict[str, Any],
    interval: str | None,
    module: str,
    generation: int | None,
    kind: str,
    namespace: str,
    clusters: list[str],
) -> None:
    try:
        sync = assigned({**raw, **({"interval": interval} if interval else {})}, module=module, generation=generation)
    except ValueError:
        return  # a combination the manifests refuse (e.g. passCredentials over oci://)
    compiled = FluxRenderer()
    for cluster in clusters:  # the first compiles, the others fill in the same compiled sync
        place = assemblage(kind, cluster, namespace, sync)
        try:
            expected = from_scratch.render(place, sync)
        except (SchemaError, TemplateError) as error:
            with pytest.raises(type(error)) as caught:
                compiled.render(place, sync)
            assert str(caught.value) == str(error)
            continue
        assert compiled.render(place, sync) == expected
        text = compiled.render_yaml(place, sync)
        assert text == dump_objects(expected)
        assert list(yaml.safe_load_all(text)) == expected
    assert compiled.cache.compiled == 1


def test_a_cluster_named_like_a_yaml_boolean_is_quoted_in_the_filled_text(from_scratch: FluxRenderer) -> None:
    sync = assigned({"source": {"git": {"url": "https://git.example.com/app", "version": {"tag": "v1"}}}})
    renderer = FluxRenderer()
    renderer.render_yaml(assemblage("ProxyAssemblage", "prod", "fleet", sync), sync)  # compiles
    text = renderer.render_yaml(assemblage("ProxyAssemblage", "on", "fleet", sync), sync)
    assert "rollout.dev/cluster: 'on'" in text.decode()
    assert text == dump_objects(from_scratch.render(assemblage("ProxyAssemblage", "on", "fleet", sync), sync))
    assert not emits_plain("on") and emits_plain("prod-eu-1")


# --- what the cache is keyed by -----------------------------------------------------------------------


def git(tag: str = "v1", **kustomize: Any) -> dict[str, Any]:
    return {
        "source": {"git": {"url": "https://git.example.com/app", "version": {"tag": tag}}},
        "package": {"kustomize": kustomize},
    }


def test_a_new_revision_of_a_module_is_compiled_again() -> None:
    renderer = FluxRenderer()
    first, second = assigned(git("v1")), assigned(git("v2"))
    old = renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", first), first)
    new = renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", second), second)
    assert renderer.cache.compiled == 2
    assert (old[0]["spec"]["ref"], new[0]["spec"]["ref"]) == ({"tag": "v1"}, {"tag": "v2"})


def test_a_new_generation_of_the_same_revision_is_compiled_again() -> None:
    renderer = FluxRenderer()
    first, second = assigned(git(), generation=1), assigned(git(), generation=2)
    renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", first), first)
    source, _ = renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", second), second)
    assert renderer.cache.compiled == 2
    assert source["metadata"]["annotations"]["rollout.dev/generation"] == "2"


def test_every_cluster_gets_its_own_names_from_one_compiled_sync() -> None:
    renderer = FluxRenderer()
    sync = assigned(git(), module="podinfo")
    for cluster in ("prod-eu-1", "prod-us-2"):
        source, package = renderer.render(assemblage("RemoteAssemblage", cluster, "fleet", sync), sync)
        assert source["metadata"]["name"] == package["spec"]["sourceRef"]["name"] == f"podinfo-{cluster}"
        assert package["metadata"]["labels"]["rollout.dev/cluster"] == cluster
        assert package["spec"]["kubeConfig"]["secretRef"]["name"] == f"{cluster}-kubeconfig"
    assert renderer.cache.compiled == 1


def test_a_cluster_relabelled_with_new_substitutions_is_rendered_with_them() -> None:
    """Per-cluster bindings are expanded into the sync by the engine: a relabelled cluster's
    new values are a new sync, compiled for it."""
    renderer = FluxRenderer()
    before, after = assigned(git(substitute={"REGION": "eu"})), assigned(git(substitute={"REGION": "us"}))
    renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", before), before)
    _, package = renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", after), after)
    assert package["spec"]["postBuild"]["substitute"] == {"REGION": "us"}
    assert renderer.cache.compiled == 2


def test_another_cluster_namespace_or_assemblage_kind_is_compiled_apart() -> None:
    renderer = FluxRenderer()
    sync = assigned(git())
    remote_a, _ = renderer.render(assemblage("RemoteAssemblage", "c1", "team-a", sync), sync)
    remote_b, _ = renderer.render(assemblage("RemoteAssemblage", "c1", "team-b", sync), sync)
    proxy, _ = renderer.render(assemblage("ProxyAssemblage", "c1", "team-b", sync), sync)
    assert [o["metadata"]["namespace"] for o in (remote_a, remote_b, proxy)] == ["team-a", "team-b", "flux-system"]
    assert renderer.cache.compiled == 3


def test_the_compiled_syncs_kept_are_bounded() -> None:
    renderer = FluxRenderer(compiled_syncs=4)
    for number in range(10):
        sync = assigned(git(f"v{number}"))
        renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", sync), sync)
    assert len(renderer.cache) == 4
    oldest = assigned(git("v0"))
    renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", oldest), oldest)  # evicted: compiled again
    assert renderer.cache.compiled == 11


def test_the_filled_objects_are_fresh_for_every_cluster() -> None:
    renderer = FluxRenderer()
    sync = assigned(git())
    first, _ = renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", sync), sync)
    first["spec"]["url"] = "changed by a caller"
    second, _ = renderer.render(assemblage("ProxyAssemblage", "c2", "fleet", sync), sync)
    assert second["spec"]["url"] == "https://git.example.com/app"


# --- still validated, still rejected ------------------------------------------------------------------


def test_a_filled_object_the_crd_rejects_is_refused_for_its_cluster(from_scratch: FluxRenderer) -> None:
    """Each filled object is validated, not only the compiled one: a cluster whose name is no
    label value (longer than 63 characters) is refused, though the same sync compiled and
    filled in fine for another cluster — with the error rendering from scratch gives."""
    renderer = FluxRenderer()
    sync = assigned(git(), module="app")
    renderer.render(assemblage("ProxyAssemblage", "short", "fleet", sync), sync)
    bad = assemblage("ProxyAssemblage", "c" * 70, "fleet", sync)
    with pytest.raises(SchemaError) as caught:
        renderer.render_yaml(bad, sync)
    assert 'metadata.labels["rollout.dev/cluster"]' in caught.value.fields
    assert "gitrepository.yaml.j2" in str(caught.value)
    with pytest.raises(SchemaError) as expected:
        from_scratch.render(bad, sync)
    assert str(caught.value) == str(expected.value)
    assert renderer.cache.compiled == 1


def test_a_bad_url_that_slipped_past_the_manifest_is_still_rejected_by_the_crd_from_the_cache() -> None:
    renderer = FluxRenderer()
    good = assigned(git())
    renderer.render(assemblage("ProxyAssemblage", "c1", "fleet", good), good)
    bad_sync = good.model_copy(
        update={"sync": good.sync.model_copy(update={"source": _git_source_with_url("ftp://example.com/app")})}
    )
    for cluster in ("c1", "c2"):  # compiled, then filled: rejected both times
        with pytest.raises(SchemaError) as caught:
            renderer.render(assemblage("ProxyAssemblage", cluster, "fleet", bad_sync), bad_sync)
        assert "spec.url" in caught.value.fields
        assert f"app-{cluster}" in str(caught.value)


def _git_source_with_url(url: str) -> Any:
    from rollout.api.manifests import GitSource, GitVersion, Source

    return Source.model_construct(
        git=GitSource.model_construct(url=url, version=GitVersion(tag="v1")), oci=None, helm=None
    )


def test_a_renderer_with_a_template_directory_renders_every_object_from_scratch(tmp_path: Path) -> None:
    (tmp_path / "gitrepository.yaml.j2").write_text(
        '{% extends "builtin/gitrepository.yaml.j2" %}\n'
        "{% block extra_labels %}\n    cluster-upper: {{ cluster | upper }}\n{% endblock %}\n"
    )
    renderer = FluxRenderer(template_dir=tmp_path)
    sync = assigned(git())
    labels = [
        renderer.render(assemblage("ProxyAssemblage", cluster, "fleet", sync), sync)[0]["metadata"]["labels"]
        for cluster in ("c1", "c2")
    ]
    assert [label["cluster-upper"] for label in labels] == ["C1", "C2"]
    assert renderer.cache.compiled == 0


def test_a_sync_holding_a_placeholder_is_rendered_from_scratch(from_scratch: FluxRenderer) -> None:
    renderer = FluxRenderer()
    sync = assigned(git(substitute={"TRAP": f"x-{CLUSTER_SLOT}-{NAME_SLOT}"}))
    for cluster in ("c1", "c2"):
        place = assemblage("ProxyAssemblage", cluster, "fleet", sync)
        assert renderer.render(place, sync) == from_scratch.render(place, sync)
        assert (
            renderer.render(place, sync)[1]["spec"]["postBuild"]["substitute"]["TRAP"]
            == f"x-{CLUSTER_SLOT}-{NAME_SLOT}"
        )
