"""Loading manifests: every invalid document of a file is reported with its file, document
number (1-based, counting every `---` document of the stream) and field path, and nothing
is returned from a file that has one."""

from __future__ import annotations

import textwrap

import pytest

from rollout.api.loading import ManifestError, load_manifest_text
from rollout.api.manifests import BootstrapModuleManifest, ClusterManifest, ModuleManifest

HEADER = "apiVersion: rollout.dev/v1alpha1\n"


def doc(body: str) -> str:
    return HEADER + textwrap.dedent(body).strip() + "\n"


CLUSTER = doc("""
    kind: Cluster
    metadata: {name: prod-eu-1, namespace: fleet, labels: {env: prod}}
    status: {controlPlaneReady: true, kubeconfigSecret: true}
""")
MODULE = doc("""
    kind: Module
    metadata: {name: podinfo, namespace: fleet}
    spec:
      selector: {matchLabels: {env: prod}}
      sync: {source: {git: {url: https://github.com/stefanprodan/podinfo, version: {tag: 6.7.0}}}}
      rollout:
        stages:
          - {name: canary, selector: {matchLabels: {ring: canary}}, maxConcurrency: 1, minSuccessTime: 5m}
          - {name: wave-1, maxConcurrency: "25%", maxFailures: "10%", requireApproval: true}
""")
BOOTSTRAP = doc("""
    kind: BootstrapModule
    metadata: {name: flux}
    spec:
      selector: {}
      sync: {source: {oci: {url: oci://ghcr.io/example/flux, version: {tag: v2.4.0}}}}
""")


def problems(text: str, file: str = "fleet.yaml") -> list[tuple[str, int | None, str, str]]:
    with pytest.raises(ManifestError) as raised:
        load_manifest_text(text, file=file)
    return [(p.file, p.document, p.field, p.reason) for p in raised.value.problems]


def test_valid_multi_document_file_loads_every_kind() -> None:
    loaded = load_manifest_text("---\n".join([CLUSTER, MODULE, BOOTSTRAP]), file="fleet.yaml")
    assert [type(m) for m in loaded] == [ClusterManifest, ModuleManifest, BootstrapModuleManifest]
    podinfo = loaded[1]
    assert podinfo.spec.sync.revision == "6.7.0"
    assert [s.name for s in podinfo.spec.rollout.stages] == ["canary", "wave-1"]
    assert loaded[0].status.ready


def test_empty_documents_are_skipped() -> None:
    assert len(load_manifest_text("---\n" + CLUSTER + "---\n---\n", file="f.yaml")) == 1


def test_error_names_file_document_and_field() -> None:
    bad = MODULE.replace("{tag: 6.7.0}", "{branch: main}")
    [(file, document, field, reason)] = problems(CLUSTER + "---\n" + bad, file="apps/podinfo.yaml")
    assert (file, document, field) == ("apps/podinfo.yaml", 2, "spec.sync.source.git.version")
    assert "branch" in reason


def test_every_invalid_document_is_reported_and_nothing_is_returned() -> None:
    text = "---\n".join(
        [
            CLUSTER,
            CLUSTER.replace("prod-eu-1", "Prod_EU"),
            CLUSTER,
            MODULE.replace('maxConcurrency: "25%"', 'maxConcurrency: "150%"'),
        ]
    )
    found = problems(text)
    assert [(d, f) for _, d, f, _ in found] == [(2, "metadata.name"), (4, "spec.rollout.stages[1].maxConcurrency")]
    assert all(file == "fleet.yaml" for file, *_ in found)


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("maxConcurrency: 1,", "maxConcurrency: 1, surprise: 1,", "spec.rollout.stages[0].surprise", "Extra inputs"),
        ("https://github.com", "git@github.com:", "spec.sync.source.git.url", "ssh://git@host/repo"),
        ("minSuccessTime: 5m", "minSuccessTime: soon", "spec.rollout.stages[0].minSuccessTime", "duration"),
        ("maxConcurrency: 1,", "maxConcurrency: 0,", "spec.rollout.stages[0].maxConcurrency", "at least 1"),
        ("{matchLabels: {env: prod}}", "{matchExpressions: [{key: env, operator: In}]}", "spec.selector", "values"),
        ("name: wave-1", "name: canary", "spec.rollout", "unique"),
    ],
)
def test_module_validation_errors_point_at_the_field(old: str, new: str, field: str, words: str) -> None:
    assert old in MODULE
    [(_, document, where, reason)] = problems(MODULE.replace(old, new))
    assert document == 1
    assert where.startswith(field), where
    assert words in reason


def test_unknown_kind_is_reported_on_the_kind_field() -> None:
    [(_, document, field, reason)] = problems(CLUSTER + "---\n" + HEADER + "kind: Gadget\nmetadata: {name: x}\n")
    assert (document, field) == (2, "kind")
    assert "Gadget" in reason


def test_a_document_that_is_not_a_mapping_is_reported() -> None:
    [(_, document, field, reason)] = problems("- just\n- a list\n")
    assert (document, field) == (1, "")
    assert reason.startswith("a manifest is a mapping")


def test_broken_yaml_is_reported_with_its_line() -> None:
    [(file, _, _, reason)] = problems(CLUSTER + "metadata: [unclosed\n", file="broken.yaml")
    assert file == "broken.yaml"
    assert "not valid YAML" in reason
    assert "line" in reason


def test_reserved_binding_names_are_refused() -> None:
    text = MODULE.replace("  rollout:", "  bindings: [{name: CLUSTER_NAME, value: x}]\n  rollout:")
    [(_, _, field, reason)] = problems(text)
    assert field == "spec"
    assert "reserved" in reason
