"""The Flux options of `Module.spec.sync` (docs/modules.md): what a manifest may say, what it
is refused with (file, document, field path, why), and that the engine's per-cluster
expansion carries every option to the assemblage."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.api.loading import ManifestError, load_manifests
from rollout.api.manifests import Sync
from rollout.values.bindings import expand_sync
from rollout.values.releases import ObservedValues, release_sync

GIT = {"url": "https://git.example.com/platform/app", "version": {"tag": "v1.2.0"}}
OCI = {"url": "oci://registry.example.com/manifests/app", "version": {"tag": "v1.2.0"}}
HELM = {"url": "https://charts.example.com", "chart": "app", "version": "1.2.0"}
HELM_OCI = {"url": "oci://registry.example.com/charts", "chart": "app", "version": "1.2.0"}
IDENTITY = {"issuer": r"^https://token\.actions\.githubusercontent\.com$", "subject": "^https://github.com/org/.*$"}


def module(sync: dict[str, Any]) -> bytes:
    document = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": "app", "namespace": "fleet"},
        "spec": {"selector": {}, "sync": sync},
    }
    return yaml.safe_dump(document).encode()


def load(sync: dict[str, Any]) -> Sync:
    [loaded] = load_manifests(module(sync), file="app.yaml")
    return loaded.manifest.spec.sync  # type: ignore[no-any-return]


def refusal(sync: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as raised:
        load_manifests(module(sync), file="app.yaml")
    return [str(problem) for problem in raised.value.problems]


def kustomize(**options: Any) -> dict[str, Any]:
    return {"source": {"git": GIT}, "package": {"kustomize": options}}


# --- accepted ------------------------------------------------------------------------------------


def test_a_manifest_without_options_is_still_valid_and_keeps_flux_defaults() -> None:
    sync = load({"source": {"git": GIT}})
    assert sync.interval is None
    assert sync.source.git is not None and sync.source.git.secret_ref is None
    options = sync.package.kustomize
    assert (options.target_namespace, options.wait, options.timeout, options.decryption) == (None, None, None, None)


def test_every_source_option_is_accepted() -> None:
    oci = {
        **OCI,
        "secretRef": {"name": "regcred"},
        "certSecretRef": {"name": "registry-ca"},
        "provider": "generic",
        "verify": {"provider": "cosign", "matchOIDCIdentity": [IDENTITY]},
    }
    sync = load({"source": {"oci": oci}, "interval": "30m"})
    assert sync.source.oci is not None
    assert (sync.source.oci.secret_ref.name, sync.source.oci.cert_secret_ref.name) == ("regcred", "registry-ca")  # type: ignore[union-attr]
    assert sync.source.oci.verify.match_oidc_identity[0].issuer == IDENTITY["issuer"]  # type: ignore[union-attr]
    assert load({"source": {"oci": {**OCI, "insecure": True, "provider": "gcp"}}}).source.oci.insecure  # type: ignore[union-attr]
    helm = load({"source": {"helm": {**HELM_OCI, "insecure": True, "provider": "aws"}}, "package": {"helm": {}}})
    assert helm.source.helm is not None and helm.source.helm.provider == "aws"
    assert (
        load({"source": {"git": {**GIT, "secretRef": {"name": "git.auth"}}}}).source.git.secret_ref.name == "git.auth"
    )  # type: ignore[union-attr]


def test_every_kustomize_option_is_accepted() -> None:
    options = load(
        kustomize(
            targetNamespace="app",
            serviceAccountName="app-deployer",
            wait=True,
            force=True,
            timeout="3m",
            retryInterval="1m30s",
            healthChecks=[{"apiVersion": "v1", "kind": "Service", "name": "web", "namespace": "app"}],
            healthCheckExprs=[{"apiVersion": "x.io/v1", "kind": "W", "current": "status.ready", "inProgress": "true"}],
            patches=[
                {"patch": "kind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n"},
                {"patch": "- {op: remove, path: /spec/replicas}", "target": {"kind": "Deployment", "name": "web-.*"}},
            ],
            components=["../components/ha", "components/monitoring"],
            substituteFrom=[
                {"kind": "ConfigMap", "name": "vars"},
                {"kind": "Secret", "name": "vars", "optional": True},
            ],
            decryption={"provider": "sops", "secretRef": {"name": "sops-age"}},
        )
    ).package.kustomize
    assert options.health_checks[0].namespace == "app"
    assert options.substitute_from[1].optional is True
    assert options.decryption is not None and options.decryption.secret_ref is not None


def test_a_health_check_of_a_cluster_scoped_object_has_no_namespace() -> None:
    [check] = load(
        kustomize(healthChecks=[{"apiVersion": "v1", "kind": "Namespace", "name": "app"}])
    ).package.kustomize.health_checks
    assert check.namespace is None


def test_every_helm_package_option_is_accepted() -> None:
    helm = {
        "targetNamespace": "app",
        "storageNamespace": "app",
        "serviceAccountName": "deployer",
        "timeout": "10m",
        "maxHistory": 0,
    }
    package = load({"source": {"helm": HELM}, "package": {"helm": helm}}).package.helm
    assert package is not None and (package.storage_namespace, package.max_history) == ("app", 0)


# --- refused, with the field path and the reason ---------------------------------------------------

WHERE = "app.yaml: document 1 (Module/app): spec.sync."

REFUSED = [
    pytest.param(
        {"source": {"git": {**GIT, "secretRef": {"name": "git-auth", "password": "hunter2"}}}},
        "source.git.secretRef: a Secret reference takes only 'name', not password: credentials stay in a Secret",
        id="secret-data-in-a-manifest",
    ),
    pytest.param(
        {"source": {"git": {**GIT, "secretRef": {"name": "Git_Auth"}}}},
        "source.git.secretRef.name: Secret name 'Git_Auth' is not a DNS-1123 subdomain",
        id="secret-name",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "insecure": True, "certSecretRef": {"name": "ca"}}}},
        "source.oci: give one of 'insecure' (a plain-HTTP registry) or 'certSecretRef'",
        id="insecure-and-a-ca",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "insecure": "yes"}}},
        "source.oci.insecure: Input should be a valid boolean, not a string",
        id="insecure-not-a-boolean",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "provider": "github"}}},
        "source.oci.provider: Input should be 'generic', 'aws', 'azure' or 'gcp'",
        id="registry-provider",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "verify": {"provider": "gpg"}}}},
        "source.oci.verify.provider: Input should be 'cosign' or 'notation'",
        id="verification-provider",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "verify": {"provider": "notation"}}}},
        "source.oci.verify: provider notation needs 'secretRef'",
        id="notation-without-trust",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "verify": {"secretRef": {"name": "keys"}, "matchOIDCIdentity": [IDENTITY]}}}},
        "source.oci.verify: matchOIDCIdentity applies to keyless cosign signatures only",
        id="identity-with-keys",
    ),
    pytest.param(
        {"source": {"oci": {**OCI, "verify": {"matchOIDCIdentity": [{"issuer": "", "subject": ".*"}]}}}},
        "source.oci.verify.matchOIDCIdentity[0].issuer: pattern must not be empty",
        id="empty-identity-pattern",
    ),
    pytest.param(
        {"source": {"helm": {**HELM, "insecure": True}}, "package": {"helm": {}}},
        "source.helm: 'insecure' applies to an oci:// Helm repository only",
        id="insecure-https-helm",
    ),
    pytest.param(
        {"source": {"helm": {**HELM, "provider": "aws"}}, "package": {"helm": {}}},
        "source.helm: 'provider' applies to an oci:// Helm repository only",
        id="provider-https-helm",
    ),
    pytest.param(
        {"source": {"helm": {**HELM_OCI, "passCredentials": True}}, "package": {"helm": {}}},
        "source.helm: 'passCredentials' applies to an http(s):// Helm repository only",
        id="pass-credentials-oci-helm",
    ),
    pytest.param(
        {"source": {"git": GIT}, "interval": "0s"}, "interval: interval must be longer than 0s", id="interval"
    ),
    pytest.param(
        kustomize(targetNamespace="My_App"),
        "package.kustomize.targetNamespace: 'My_App' is not a DNS-1123 label",
        id="target-namespace",
    ),
    pytest.param(
        kustomize(serviceAccountName="Deployer"),
        "package.kustomize.serviceAccountName: service account name 'Deployer' is not a DNS-1123 subdomain",
        id="service-account",
    ),
    pytest.param(
        kustomize(timeout="5 minutes"),
        "package.kustomize.timeout: '5 minutes' is not a duration such as 90s, 5m or 1h30m",
        id="timeout",
    ),
    pytest.param(
        kustomize(retryInterval="0m"),
        "package.kustomize.retryInterval: retryInterval must be longer than 0s",
        id="retry",
    ),
    pytest.param(kustomize(wait="true"), "package.kustomize.wait: Input should be a valid boolean", id="wait"),
    pytest.param(
        kustomize(healthChecks=[{"kind": "Deployment", "name": "web"}]),
        "package.kustomize.healthChecks[0].apiVersion: Field required",
        id="health-check-api-version",
    ),
    pytest.param(
        kustomize(healthChecks=[{"apiVersion": "apps/v1", "kind": "deployment", "name": "web"}]),
        "package.kustomize.healthChecks[0].kind: kind 'deployment' is not a kind such as Deployment",
        id="health-check-kind",
    ),
    pytest.param(
        kustomize(healthChecks=[{"apiVersion": "apps/v1/x", "kind": "Deployment", "name": "web"}]),
        "package.kustomize.healthChecks[0].apiVersion: apiVersion 'apps/v1/x': group 'apps/v1' is not a DNS-1123",
        id="health-check-api-version-format",
    ),
    pytest.param(
        kustomize(healthCheckExprs=[{"apiVersion": "x.io/v1", "kind": "W", "current": "  "}]),
        "package.kustomize.healthCheckExprs[0].current: a CEL expression must not be empty",
        id="empty-cel",
    ),
    pytest.param(
        kustomize(healthCheckExprs=[{"apiVersion": "x.io/v1", "current": "true"}]),
        "package.kustomize.healthCheckExprs[0].kind: Field required",
        id="cel-without-kind",
    ),
    pytest.param(
        kustomize(patches=[{"patch": "- {op: replace, path: /spec/replicas, value: 1}"}]),
        "package.kustomize.patches[0]: a JSON 6902 patch (a list of operations) needs a 'target'",
        id="json6902-without-target",
    ),
    pytest.param(
        kustomize(patches=[{"patch": "- {op: rename, path: /a}", "target": {"kind": "Deployment"}}]),
        "package.kustomize.patches[0]: patch operation [0] needs 'op', one of add, remove",
        id="json6902-operation",
    ),
    pytest.param(
        kustomize(patches=[{"patch": "spec: [1"}]),
        "package.kustomize.patches[0]: patch is not YAML: expected ',' or ']'",
        id="patch-not-yaml",
    ),
    pytest.param(
        kustomize(patches=[{"patch": "spec: {replicas: 2}"}]),
        "package.kustomize.patches[0]: a strategic-merge patch without a 'target' must name its object",
        id="strategic-merge-without-object",
    ),
    pytest.param(
        kustomize(patches=[{"patch": "spec: {replicas: 2}", "target": {}}]),
        "package.kustomize.patches[0].target: a target selects objects by at least one of",
        id="empty-target",
    ),
    pytest.param(
        kustomize(components=["/srv/components/ha"]),
        "package.kustomize.components: component '/srv/components/ha' must be a relative path",
        id="absolute-component",
    ),
    pytest.param(
        kustomize(components=["https://github.com/org/repo//components/ha"]),
        "package.kustomize.components: component 'https://github.com/org/repo//components/ha' is a URL",
        id="remote-component",
    ),
    pytest.param(
        kustomize(substituteFrom=[{"kind": "Configmap", "name": "vars"}]),
        "package.kustomize.substituteFrom[0].kind: Input should be 'ConfigMap' or 'Secret'",
        id="substitute-from-kind",
    ),
    pytest.param(
        kustomize(substituteFrom=[{"kind": "Secret", "name": "vars", "optional": "no"}]),
        "package.kustomize.substituteFrom[0].optional: Input should be a valid boolean",
        id="substitute-from-optional",
    ),
    pytest.param(
        kustomize(decryption={"provider": "vault"}),
        "package.kustomize.decryption.provider: Input should be 'sops'",
        id="decryption-provider",
    ),
    pytest.param(
        kustomize(decryption={"secretRef": {"name": "sops-age"}}),
        "package.kustomize.decryption.provider: Field required",
        id="decryption-without-provider",
    ),
    pytest.param(
        {"source": {"helm": HELM}, "package": {"helm": {"storageNamespace": "Helm"}}},
        "package.helm.storageNamespace: 'Helm' is not a DNS-1123 label",
        id="storage-namespace",
    ),
    pytest.param(
        {"source": {"helm": HELM}, "package": {"helm": {"timeout": "1d"}}},
        "package.helm.timeout: '1d' is not a duration",
        id="helm-timeout",
    ),
    pytest.param(
        {"source": {"helm": HELM}, "package": {"helm": {"maxHistory": -1}}},
        "package.helm.maxHistory: Input should be greater than or equal to 0",
        id="max-history",
    ),
]


@pytest.mark.parametrize(("sync", "message"), REFUSED)
def test_a_wrong_option_is_refused_naming_its_field_and_why(sync: dict[str, Any], message: str) -> None:
    problems = refusal(sync)
    assert any(problem.startswith(WHERE + message) for problem in problems), problems


def test_secret_data_is_never_echoed_in_the_refusal() -> None:
    problems = refusal({"source": {"git": {**GIT, "secretRef": {"name": "git-auth", "password": "hunter2"}}}})
    assert not any("hunter2" in problem for problem in problems)


# --- carried to the assemblage -------------------------------------------------------------------


def test_the_per_cluster_expansion_of_substitute_keeps_every_other_option() -> None:
    sync = load(
        {
            **kustomize(
                substitute={"CLUSTER": "$(CLUSTER_NAME)"},
                targetNamespace="app",
                wait=True,
                decryption={"provider": "sops", "secretRef": {"name": "sops-age"}},
            ),
            "source": {"git": {**GIT, "secretRef": {"name": "git-auth"}}},
            "interval": "5m",
        }
    )
    expanded = expand_sync(sync, {"CLUSTER_NAME": "prod-eu-1"})
    assert expanded.package.kustomize.substitute == {"CLUSTER": "prod-eu-1"}
    assert expanded.model_copy(update={"package": sync.package}) == sync  # nothing else changed


_words = st.text(alphabet="abcdefgh-$()_", max_size=12)
_values = st.dictionaries(st.sampled_from(["replicas", "image", "tier"]), st.integers() | _words, max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    substitute=st.dictionaries(st.sampled_from(["CLUSTER", "TIER", "REGION"]), _words, max_size=3),
    stage=st.none() | _words,
    bindings=st.dictionaries(st.sampled_from(["CLUSTER_NAME", "TIER"]), _words, max_size=2),
    observed=st.none() | st.builds(ObservedValues, values=st.none() | _values, chart_defaults=st.none() | _values),
    first_sent=st.none() | _values,
)
def test_a_sync_without_a_helm_release_is_assigned_as_expanded_whatever_the_stage_and_values(
    substitute: dict[str, str],
    stage: str | None,
    bindings: dict[str, str],
    observed: ObservedValues | None,
    first_sent: dict[str, object] | None,
) -> None:
    """What `TargetBook.release_for` relies on to skip the cluster's stage and its observed
    and first-sent values for a sync without a Helm release (rollout/engine/targets.py)."""
    sync = expand_sync(load(kustomize(substitute=substitute, path="./deploy") if substitute else kustomize()), bindings)
    released, merged = release_sync(sync, stage=stage, bindings=bindings, observed=observed, first_sent=first_sent)
    assert (released, merged) == (sync, None)


def test_the_per_cluster_release_keeps_every_option_of_the_helm_package_and_source() -> None:
    sync = load(
        {
            "source": {"helm": {**HELM_OCI, "secretRef": {"name": "regcred"}, "insecure": True}},
            "package": {
                "helm": {"values": {"replicas": 2}, "storageNamespace": "app", "timeout": "9m", "maxHistory": 2}
            },
            "interval": "5m",
        }
    )
    released, merged = release_sync(sync, stage=None, bindings={}, observed=None)
    assert merged is not None and released.package.helm is not None
    assert released.source == sync.source and released.interval == "5m"
    helm = released.package.helm
    assert (helm.storage_namespace, helm.timeout, helm.max_history, helm.values) == ("app", "9m", 2, {"replicas": 2})


def test_a_sync_without_options_serializes_as_it_did_before_the_options_existed() -> None:
    """Empty option lists are left out of events and snapshots: a module near its topic's
    size limit stays under it, and the bytes of an unchanged sync do not change."""
    sync = Sync.model_validate({"source": {"git": {"url": "https://example.com/app", "version": {"tag": "v1"}}}})
    assert sync.model_dump_json(by_alias=True, exclude_none=True) == (
        '{"source":{"git":{"url":"https://example.com/app","version":{"tag":"v1"}}},'
        '"package":{"kustomize":{"path":"./","substitute":{}}}}'
    )
