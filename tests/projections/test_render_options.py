"""The Flux options of a sync (docs/modules.md) rendered where Flux expects them, every
object validated against the real CRDs (projections/crds/) by the renderer itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from projections.crds import SchemaError
from projections.render import FluxRenderer
from rollout.api.flux_options import OCIVerification
from rollout.api.loading import load_manifests
from rollout.api.manifests import Sync
from rollout.api.module_releases import expand_releases
from rollout.wire.assemblages import Assemblage, AssignedSync

GIT = {"url": "https://git.example.com/platform/app", "version": {"tag": "v1.2.0"}}
OCI = {"url": "oci://registry.example.com/manifests/app", "version": {"tag": "v1.2.0"}}
HELM = {"url": "https://charts.example.com", "chart": "app", "version": "1.2.0"}
HELM_OCI = {"url": "oci://registry.example.com/charts", "chart": "app", "version": "1.2.0"}


def render(sync: dict[str, Any], *, kind: str = "ProxyAssemblage") -> tuple[dict[str, Any], dict[str, Any]]:
    validated = Sync.model_validate(sync)
    assigned = AssignedSync(module="app", module_namespace="fleet", revision=validated.revision, sync=validated)
    assemblage = Assemblage.model_validate(
        {"kind": kind, "metadata": {"name": "prod-eu-1", "namespace": "fleet"}, "version": 1, "spec": {"syncs": []}}
    )
    source, package = FluxRenderer().render(assemblage, assigned)
    return source, package


# --- sources ----------------------------------------------------------------------------------------


def test_a_private_git_repository_names_its_credentials_secret() -> None:
    source, _ = render({"source": {"git": {**GIT, "secretRef": {"name": "git-auth"}}}})
    assert source["spec"]["secretRef"] == {"name": "git-auth"}


def test_an_oci_registry_over_plain_http_renders_insecure() -> None:
    source, _ = render({"source": {"oci": {**OCI, "url": "oci://registry.local:5000/app", "insecure": True}}})
    assert source["spec"]["insecure"] is True
    assert "certSecretRef" not in source["spec"]


def test_an_oci_registry_with_a_private_ca_and_credentials_names_both_secrets() -> None:
    oci = {**OCI, "secretRef": {"name": "regcred"}, "certSecretRef": {"name": "registry-ca"}, "provider": "generic"}
    source, _ = render({"source": {"oci": oci}})
    spec = source["spec"]
    assert (spec["secretRef"], spec["certSecretRef"]) == ({"name": "regcred"}, {"name": "registry-ca"})
    assert spec["provider"] == "generic"
    assert "insecure" not in spec


def test_a_cloud_registry_logs_in_with_its_provider() -> None:
    source, _ = render({"source": {"oci": {**OCI, "provider": "aws"}}})
    assert source["spec"]["provider"] == "aws"


def test_keyless_cosign_verification_renders_the_oidc_identities() -> None:
    identity = {"issuer": r"^https://token\.actions\.githubusercontent\.com$", "subject": "^https://github.com/org/.*$"}
    source, _ = render({"source": {"oci": {**OCI, "verify": {"provider": "cosign", "matchOIDCIdentity": [identity]}}}})
    assert source["spec"]["verify"] == {"provider": "cosign", "matchOIDCIdentity": [identity]}


def test_notation_verification_names_its_trust_secret() -> None:
    source, _ = render(
        {"source": {"oci": {**OCI, "verify": {"provider": "notation", "secretRef": {"name": "notation-trust"}}}}}
    )
    assert source["spec"]["verify"] == {"provider": "notation", "secretRef": {"name": "notation-trust"}}


def test_an_oci_helm_repository_gets_credentials_ca_insecure_and_provider() -> None:
    helm = {**HELM_OCI, "secretRef": {"name": "regcred"}, "insecure": True, "provider": "azure"}
    source, _ = render({"source": {"helm": helm}, "package": {"helm": {}}})
    assert source["kind"] == "HelmRepository"
    assert {key: source["spec"][key] for key in ("type", "secretRef", "insecure", "provider")} == {
        "type": "oci",
        "secretRef": {"name": "regcred"},
        "insecure": True,
        "provider": "azure",
    }


def test_an_https_helm_repository_gets_basic_auth_a_private_ca_and_pass_credentials() -> None:
    helm = {**HELM, "secretRef": {"name": "charts-auth"}, "certSecretRef": {"name": "charts-ca"}}
    source, _ = render({"source": {"helm": {**helm, "passCredentials": True}}, "package": {"helm": {}}})
    spec = source["spec"]
    assert (spec["secretRef"], spec["certSecretRef"], spec["passCredentials"]) == (
        {"name": "charts-auth"},
        {"name": "charts-ca"},
        True,
    )


def test_an_oci_chart_artifact_keeps_its_registry_options_beside_the_chart_layer() -> None:
    source, release = render({"source": {"oci": {**OCI, "insecure": True}}, "package": {"helm": {}}})
    assert source["spec"]["insecure"] is True
    assert source["spec"]["layerSelector"]["operation"] == "copy"
    assert release["spec"]["chartRef"]["kind"] == "OCIRepository"


# --- the kustomize package --------------------------------------------------------------------------


def test_target_namespace_places_manifests_that_name_no_namespace() -> None:
    _, kustomization = render({"source": {"git": GIT}, "package": {"kustomize": {"targetNamespace": "app"}}})
    assert kustomization["spec"]["targetNamespace"] == "app"


def test_every_kustomize_option_lands_where_flux_reads_it() -> None:
    patch = "- op: replace\n  path: /spec/replicas\n  value: 3\n"
    kustomize = {
        "path": "./deploy/prod",
        "substitute": {"REGION": "eu"},
        "substituteFrom": [
            {"kind": "ConfigMap", "name": "cluster-vars"},
            {"kind": "Secret", "name": "s", "optional": True},
        ],
        "targetNamespace": "app",
        "serviceAccountName": "app-deployer",
        "wait": True,
        "force": False,
        "timeout": "3m",
        "retryInterval": "30s",
        "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "app"}],
        "healthCheckExprs": [
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "current": "status.ready == true",
                "failed": "has(status.error)",
            }
        ],
        "patches": [{"patch": patch, "target": {"kind": "Deployment", "name": "web"}}],
        "components": ["../components/ha"],
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}},
    }
    _, kustomization = render({"source": {"git": GIT}, "package": {"kustomize": kustomize}})
    spec = kustomization["spec"]
    assert spec["path"] == "./deploy/prod"
    assert spec["postBuild"] == {
        "substitute": {"REGION": "eu"},
        "substituteFrom": [
            {"kind": "ConfigMap", "name": "cluster-vars", "optional": False},
            {"kind": "Secret", "name": "s", "optional": True},
        ],
    }
    assert (spec["targetNamespace"], spec["serviceAccountName"]) == ("app", "app-deployer")
    assert (spec["wait"], spec["force"], spec["timeout"], spec["retryInterval"]) == (True, False, "3m", "30s")
    assert spec["healthChecks"] == kustomize["healthChecks"]
    assert spec["healthCheckExprs"] == kustomize["healthCheckExprs"]
    assert spec["patches"] == [{"patch": patch, "target": {"kind": "Deployment", "name": "web"}}]
    assert spec["components"] == ["../components/ha"]
    assert spec["decryption"] == {"provider": "sops", "secretRef": {"name": "sops-age"}}


def test_substitute_from_alone_makes_a_post_build_without_substitute() -> None:
    kustomize = {"substituteFrom": [{"kind": "Secret", "name": "cluster-secrets"}]}
    _, kustomization = render({"source": {"oci": OCI}, "package": {"kustomize": kustomize}})
    assert kustomization["spec"]["postBuild"] == {
        "substituteFrom": [{"kind": "Secret", "name": "cluster-secrets", "optional": False}]
    }


def test_a_remote_kustomization_keeps_its_options_beside_the_kubeconfig() -> None:
    kustomize = {"targetNamespace": "app", "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}
    _, kustomization = render({"source": {"git": GIT}, "package": {"kustomize": kustomize}}, kind="RemoteAssemblage")
    assert kustomization["metadata"]["namespace"] == "fleet"  # the decryption Secret lives here
    assert kustomization["spec"]["decryption"]["secretRef"] == {"name": "sops-age"}
    assert kustomization["spec"]["kubeConfig"]["secretRef"]["name"] == "prod-eu-1-kubeconfig"


def test_patch_text_is_written_as_one_string_exactly() -> None:
    patch = "kind: ConfigMap\nmetadata:\n  name: web  # '{{ name }}'\ndata: {k: \"---\\nkind: Secret\", v: '*alias'}\n"
    kustomize = {"patches": [{"patch": patch}]}
    _, kustomization = render({"source": {"git": GIT}, "package": {"kustomize": kustomize}})
    assert kustomization["spec"]["patches"] == [{"patch": patch}]


def test_the_sync_interval_applies_to_the_source_and_the_package() -> None:
    source, kustomization = render({"source": {"git": GIT}, "interval": "2m"})
    assert source["spec"]["interval"] == kustomization["spec"]["interval"] == "2m"


@pytest.mark.parametrize(
    "sync",
    [{"source": {"git": GIT}}, {"source": {"oci": OCI}}, {"source": {"helm": HELM}, "package": {"helm": {}}}],
    ids=["git", "oci", "helm"],
)
def test_a_sync_without_options_renders_as_before(sync: dict[str, Any]) -> None:
    source, package = render(sync)
    assert set(source["spec"]) <= {"interval", "url", "ref", "type", "layerSelector"}
    assert source["spec"]["interval"] == "10m"
    assert set(package["spec"]) <= {"interval", "prune", "path", "sourceRef", "releaseName", "chart", "values"}


def test_an_option_the_manifest_would_refuse_is_still_stopped_by_the_crd() -> None:
    # a verification provider Flux does not know, built without validation (as a record from
    # an older or foreign writer could be): the renderer's CRD check refuses the object
    valid = Sync.model_validate({"source": {"oci": OCI}})
    oci = valid.source.oci.model_copy(update={"verify": OCIVerification.model_construct(provider="gpg")})
    sync = valid.model_copy(update={"source": valid.source.model_copy(update={"oci": oci})})
    assigned = AssignedSync(module="app", module_namespace="fleet", revision="v1.2.0", sync=sync)
    assemblage = Assemblage.model_validate(
        {
            "kind": "ProxyAssemblage",
            "metadata": {"name": "c", "namespace": "fleet"},
            "version": 1,
            "spec": {"syncs": []},
        }
    )
    with pytest.raises(SchemaError, match="verify"):
        FluxRenderer().render(assemblage, assigned)


# --- the Helm package -----------------------------------------------------------------------------


def test_a_remote_helm_release_stores_its_history_in_a_namespace_it_creates_in_the_workload_cluster() -> None:
    _, release = render({"source": {"helm": HELM}, "package": {"helm": {}}}, kind="RemoteAssemblage")
    spec = release["spec"]
    # without a targetNamespace: the HelmRelease's namespace *name*, created in the workload cluster
    assert (spec["targetNamespace"], spec["storageNamespace"]) == ("fleet", "fleet")
    assert spec["install"] == {"createNamespace": True}
    assert spec["kubeConfig"]["secretRef"]["name"] == "prod-eu-1-kubeconfig"


def test_a_remote_helm_release_stores_its_history_in_its_target_namespace() -> None:
    _, release = render(
        {"source": {"helm": HELM}, "package": {"helm": {"targetNamespace": "app"}}}, kind="RemoteAssemblage"
    )
    spec = release["spec"]
    assert (spec["targetNamespace"], spec["storageNamespace"], spec["install"]) == (
        "app",
        "app",
        {"createNamespace": True},
    )


def test_an_explicit_storage_namespace_wins_on_remote_and_proxy_releases() -> None:
    helm = {"targetNamespace": "app", "storageNamespace": "helm-history"}
    for kind in ("RemoteAssemblage", "ProxyAssemblage"):
        _, release = render({"source": {"helm": HELM}, "package": {"helm": helm}}, kind=kind)
        assert release["spec"]["storageNamespace"] == "helm-history"


def test_a_proxy_helm_release_keeps_flux_defaults_for_its_namespaces() -> None:
    _, release = render({"source": {"helm": HELM}, "package": {"helm": {}}})
    assert not {"targetNamespace", "storageNamespace", "install"} & set(release["spec"])


def test_helm_release_options_land_where_flux_reads_them() -> None:
    helm = {"serviceAccountName": "app-deployer", "timeout": "10m", "maxHistory": 3}
    _, release = render({"source": {"helm": HELM_OCI}, "package": {"helm": helm}, "interval": "1h"})
    spec = release["spec"]
    assert (spec["serviceAccountName"], spec["timeout"], spec["maxHistory"], spec["interval"]) == (
        "app-deployer",
        "10m",
        3,
        "1h",
    )


# --- the reference's examples -----------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "modules.md"


def doc_examples() -> list[Any]:
    """Each example: a document, or the documents of a block with a Release (and its modules)."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    examples: list[Any] = []
    for block in blocks:
        documents = list(yaml.safe_load_all(block))
        releases = any(isinstance(d, dict) and d.get("kind") == "Release" for d in documents)
        examples += [documents] if releases else documents  # a Release is loaded with its modules
    return examples


@pytest.mark.parametrize("example", doc_examples())
def test_every_example_of_docs_modules_md_loads_and_renders_valid_flux_objects(example: Any) -> None:
    if isinstance(example, list):  # several documents (a Release and its modules): loaded as apply loads them
        members = expand_releases(load_manifests(yaml.safe_dump_all(example).encode(), file="docs/modules.md"))
        assert members and all(item.manifest.spec.release is not None for item in members)
        for item in members:
            for kind in ("ProxyAssemblage", "RemoteAssemblage"):
                render(item.manifest.spec.sync.model_dump(by_alias=True, exclude_none=True), kind=kind)
        return
    if "gates" in example and "kind" not in example:  # a stage's `gates:` fragment: in a Module's stage
        example = {"rollout": {"stages": [{"name": "canary", **example}]}}
    if "kind" not in example:  # a fragment of a Module's spec (`sync:`, `rollout:`): in a Module
        sync = {"source": {"git": {"url": "https://git.example.com/app", "version": {"tag": "v1"}}}}
        example = {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "app", "namespace": "fleet"},
            "spec": {"selector": {}, "sync": sync, **example},
        }
    [loaded] = load_manifests(yaml.safe_dump(example).encode(), file="docs/modules.md")
    if loaded.manifest.kind in ("ModuleRestriction", "Cluster", "FreezeCalendar", "ClusterFreezeCalendar"):
        return  # load, render nothing
    for kind in ("ProxyAssemblage", "RemoteAssemblage"):
        render(loaded.manifest.spec.sync.model_dump(by_alias=True, exclude_none=True), kind=kind)
