"""The Flux options of a sync: credentials, signature verification, decryption, health
checks, placement and timing (API types, pure).

`Module.spec.sync` follows Flux's own split (docs/modules.md is the reference):

    sync:
      interval: 5m                         # reconcile interval of the source and its package
      source:
        git:  {url, version, secretRef}
        oci:  {url, version, secretRef, certSecretRef, insecure, provider, verify}
        helm: {url, chart, version, secretRef, certSecretRef, insecure, provider, passCredentials}
      package:
        kustomize: {path, substitute, substituteFrom, targetNamespace, serviceAccountName,
                    wait, healthChecks, healthCheckExprs, timeout, retryInterval,
                    patches, components, decryption, force}
        helm: {..., storageNamespace, serviceAccountName, timeout, maxHistory}

The source and package types (rollout/api/manifests.py, rollout/api/helm.py) declare these fields;
the types they are made of, and the checks they share, live here.

Credentials are named, never given: a manifest travels on Kafka and sits in compacted topics,
so it carries the *name* of a Secret and never its data. Which namespace that Secret must be
in depends on where the Flux objects are applied: a Module's (ProxyAssemblage) objects live in
the workload cluster's `flux-system`, a BootstrapModule's (RemoteAssemblage) objects in the
cluster's namespace of the management cluster — the Secret must be there.

Values are checked as Flux and Kubernetes would take them: names of Secrets, ConfigMaps and
service accounts are DNS-1123 subdomains (at most 253 characters), namespaces DNS-1123 labels,
durations Go durations (rollout/api/formats.py) above zero and at most a year, enums exactly as the
CRDs spell them (projections/crds/), CEL expressions and patches non-empty, and a patch must be
YAML that is a strategic-merge patch (a mapping) or a JSON 6902 patch (a list of operations,
which needs a `target`). A CEL expression is not compiled here (no CEL in the domain); Flux
reports a bad one on the Kustomization.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sized
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollout.api.formats import DNS1123_SUBDOMAIN, check_dns1123_label, check_duration, parse_duration, shown


def omit_if_empty(value: Sized) -> bool:
    """`exclude_if` of the list options: one left empty is not serialized, so events and
    assemblage snapshots of a sync without options stay the bytes they were before the
    options existed (a Module near its topic's size limit stays under it)."""
    return not value


MAX_NAME = 253
MAX_ENTRIES = 64  # health checks, expressions, patches, components, substituteFrom references
MAX_EXPRESSION = 4096
MAX_PATCH = 64 * 1024
JSON6902_OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")

# Flux's enums, as the CRDs spell them (source v1.9.1, kustomize v1.9.4)
RegistryProvider = Literal["generic", "aws", "azure", "gcp"]
VerificationProvider = Literal["cosign", "notation"]
DecryptionProvider = Literal["sops"]
SubstituteKind = Literal["ConfigMap", "Secret"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


# --- checks shared by the sources and packages ----------------------------------------------


def check_object_name(value: str, *, what: str) -> str:
    """The name of a Secret, ConfigMap, service account or object: a DNS-1123 subdomain."""
    if len(value) > MAX_NAME or not DNS1123_SUBDOMAIN.match(value):
        raise ValueError(
            f"{what} {shown(value)} is not a DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', "
            f"starting and ending with an alphanumeric, at most {MAX_NAME} characters"
        )
    return value


def check_positive_duration(value: str, *, field: str) -> str:
    """A Flux duration (`30s`, `5m`, `1h30m`) above zero and at most a year."""
    check_duration(value, field=field, positive=False)
    if parse_duration(value) <= 0:
        raise ValueError(f"{field} must be longer than 0s")
    return value


def check_text(value: str, *, what: str, limit: int = MAX_EXPRESSION) -> str:
    """A non-empty expression or pattern, without control characters other than newlines and tabs."""
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} characters")
    bad = next((ch for ch in value if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf")), None)
    if bad is not None:
        raise ValueError(f"{what} {shown(value)} contains the control character U+{ord(bad):04X}")
    return value


def check_registry_access(*, insecure: bool, cert_secret_ref: SecretReference | None) -> None:
    """`insecure` (plain HTTP) and `certSecretRef` (TLS with a private CA or client certificate) exclude each other."""
    if insecure and cert_secret_ref is not None:
        raise ValueError(
            "give one of 'insecure' (a plain-HTTP registry) or 'certSecretRef' (TLS with a private CA or "
            "client certificate), not both"
        )


def check_entries(value: list[Any], *, field: str) -> list[Any]:
    if len(value) > MAX_ENTRIES:
        raise ValueError(f"{field}: at most {MAX_ENTRIES} entries")
    return value


# --- references ---------------------------------------------------------------------------------


class SecretReference(_Strict):
    """A Secret by name, in the namespace of the Flux object that uses it.

    That is `flux-system` in the workload cluster for a Module (ProxyAssemblage), the
    cluster's namespace in the management cluster for a BootstrapModule (RemoteAssemblage).
    """

    # name of the Secret: a DNS-1123 subdomain
    name: str

    @model_validator(mode="before")
    @classmethod
    def _name_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and set(data) - {"name"}:
            extra = ", ".join(sorted(str(key) for key in set(data) - {"name"}))
            raise ValueError(
                f"a Secret reference takes only 'name', not {extra}: credentials stay in a Secret in the "
                "cluster and never in a manifest (manifests travel on Kafka)"
            )
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_object_name(value, what="Secret name")


# --- OCI signature verification (source.oci.verify) ---------------------------------------------


class OIDCIdentityMatch(_Strict):
    """Who must have signed a keyless (Fulcio) cosign signature: both patterns must match."""

    # Go regular expression matched against the OIDC issuer of the signing certificate,
    # e.g. ^https://token\.actions\.githubusercontent\.com$
    issuer: str
    # Go regular expression matched against the certificate's subject (the workflow identity)
    subject: str

    @field_validator("issuer", "subject")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return check_text(value, what="pattern", limit=1024)


class OCIVerification(_Strict):
    """Verify the artifact's signature before Flux uses it (OCIRepository `spec.verify`)."""

    # cosign (default) or notation
    provider: VerificationProvider = "cosign"
    # Secret with the trusted public keys (cosign: `*.pub`; notation: `trustpolicy.json` and
    # CA certificates); without it, cosign verifies keyless signatures
    secret_ref: SecretReference | None = Field(default=None, alias="secretRef")
    # keyless cosign only: the identities allowed to have signed (any one must match)
    match_oidc_identity: list[OIDCIdentityMatch] = Field(
        default_factory=list, exclude_if=omit_if_empty, alias="matchOIDCIdentity"
    )

    @field_validator("match_oidc_identity")
    @classmethod
    def _identities(cls, value: list[OIDCIdentityMatch]) -> list[OIDCIdentityMatch]:
        return check_entries(value, field="matchOIDCIdentity")

    @model_validator(mode="after")
    def _fits_provider(self) -> OCIVerification:
        if self.provider == "notation" and self.secret_ref is None:
            raise ValueError(
                "provider notation needs 'secretRef': a Secret with trustpolicy.json and the CA certificates"
            )
        if self.match_oidc_identity and (self.provider == "notation" or self.secret_ref is not None):
            raise ValueError(
                "matchOIDCIdentity applies to keyless cosign signatures only: "
                "not with provider notation, nor with a 'secretRef' of public keys"
            )
        return self


# --- kustomize package options ------------------------------------------------------------------


class HealthCheck(_Strict):
    """An object whose readiness the Kustomization waits for (`spec.healthChecks`)."""

    # e.g. apps/v1, helm.toolkit.fluxcd.io/v2, v1
    api_version: str = Field(alias="apiVersion")
    # e.g. Deployment, HelmRelease
    kind: str
    name: str
    # omit for a cluster-scoped object; objects are looked up in the workload cluster
    namespace: str | None = None

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        return check_api_version(value)

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        return check_kind(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_object_name(value, what="name")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return check_namespace(value) if value is not None else None


class HealthCheckExpression(_Strict):
    """How Flux tells the health of a custom resource kind, in CEL (`spec.healthCheckExprs`).

    Evaluated only when the Kustomization waits (`wait: true`) or has `healthChecks`.
    """

    api_version: str = Field(alias="apiVersion")
    kind: str
    # CEL: true when the object reached its desired state, e.g.
    # status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')
    current: str
    # CEL: true when the object failed (Flux stops waiting)
    failed: str | None = None
    # CEL: true while the object is still on its way
    in_progress: str | None = Field(default=None, alias="inProgress")

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        return check_api_version(value)

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        return check_kind(value)

    @field_validator("current", "failed", "in_progress")
    @classmethod
    def _expression(cls, value: str | None) -> str | None:
        return check_text(value, what="a CEL expression") if value is not None else None


class PatchTarget(_Strict):
    """The objects a patch applies to (kustomize's selector); `name` and `namespace` may be regexes."""

    group: str | None = None
    version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    label_selector: str | None = Field(default=None, alias="labelSelector")
    annotation_selector: str | None = Field(default=None, alias="annotationSelector")

    @field_validator("*")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return check_text(value, what="a target selector", limit=1024) if value is not None else None

    @model_validator(mode="after")
    def _selects_something(self) -> PatchTarget:
        if all(value is None for value in self.model_dump().values()):
            raise ValueError(
                "a target selects objects by at least one of group, version, kind, name, namespace, "
                "labelSelector or annotationSelector"
            )
        return self


class Patch(_Strict):
    """A strategic-merge patch (a YAML mapping) or a JSON 6902 patch (a YAML list of operations)."""

    patch: str
    # required for a JSON 6902 patch; for a strategic-merge patch without it, the patch's own
    # kind and metadata.name choose the object
    target: PatchTarget | None = None

    @field_validator("patch")
    @classmethod
    def _patch(cls, value: str) -> str:
        return check_text(value, what="patch", limit=MAX_PATCH)

    @model_validator(mode="after")
    def _well_formed(self) -> Patch:
        try:
            parsed = yaml.safe_load(self.patch)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise ValueError(f"patch is not YAML: {getattr(error, 'problem', None) or error}{where}") from None
        if isinstance(parsed, list):
            self._check_operations(parsed)
        elif isinstance(parsed, dict):
            self._check_strategic_merge(parsed)
        else:
            raise ValueError("patch must be a strategic-merge patch (a YAML mapping) or a JSON 6902 patch (a list)")
        return self

    def _check_operations(self, operations: list[Any]) -> None:
        if self.target is None:
            raise ValueError("a JSON 6902 patch (a list of operations) needs a 'target'")
        for index, operation in enumerate(operations):
            if not isinstance(operation, dict) or operation.get("op") not in JSON6902_OPERATIONS:
                raise ValueError(f"patch operation [{index}] needs 'op', one of {', '.join(JSON6902_OPERATIONS)}")
            if not isinstance(operation.get("path"), str):
                raise ValueError(f"patch operation [{index}] needs a 'path' such as /spec/replicas")

    def _check_strategic_merge(self, patch: dict[Any, Any]) -> None:
        metadata = patch.get("metadata")
        if self.target is None and not (patch.get("kind") and isinstance(metadata, dict) and metadata.get("name")):
            raise ValueError("a strategic-merge patch without a 'target' must name its object: kind and metadata.name")


class SubstituteReference(_Strict):
    """A ConfigMap or Secret whose data become post-build variables (`postBuild.substituteFrom`).

    Read by the Flux that reconciles the Kustomization: from `flux-system` in the workload
    cluster (Module), from the cluster's namespace in the management cluster (BootstrapModule).
    Variables given in `substitute` take precedence over these.
    """

    kind: SubstituteKind
    name: str
    # true: a missing ConfigMap or Secret is no error (its variables are just not set)
    optional: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_object_name(value, what="name")


class Decryption(_Strict):
    """Decrypt SOPS-encrypted Secrets before applying them (`spec.decryption`)."""

    provider: DecryptionProvider
    # Secret with the private keys (age `*.agekey`, OpenPGP `*.asc`) or static cloud KMS
    # credentials, in the Kustomization's namespace
    secret_ref: SecretReference | None = Field(default=None, alias="secretRef")
    # service account whose workload identity reaches a cloud KMS
    service_account_name: str | None = Field(default=None, alias="serviceAccountName")

    @field_validator("service_account_name")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        return check_object_name(value, what="service account name") if value is not None else None


# --- small checks ---------------------------------------------------------------------------------


def check_api_version(value: str) -> str:
    """`v1` or `<group>/<version>`."""
    group, slash, version = value.rpartition("/")
    if not version or len(version) > 63 or not version.isascii() or not version.isalnum() or not version[0].isalpha():
        raise ValueError(f"apiVersion {shown(value)} is not VERSION or GROUP/VERSION, e.g. v1 or apps/v1")
    if slash and (len(group) > MAX_NAME or not DNS1123_SUBDOMAIN.match(group)):
        raise ValueError(f"apiVersion {shown(value)}: group {shown(group)} is not a DNS-1123 subdomain")
    return value


def check_kind(value: str) -> str:
    if not (0 < len(value) <= 63 and value.isascii() and value.isalnum() and value[0].isupper()):
        raise ValueError(
            f"kind {shown(value)} is not a kind such as Deployment: letters and digits, starting upper-case"
        )
    return value


def check_namespace(value: str) -> str:
    return check_dns1123_label(value)


def check_component_path(value: str) -> str:
    """A kustomize Component: a path relative to the package path, inside the source."""
    check_text(value, what="component path", limit=1024)
    if value.startswith("/") or "\\" in value:
        raise ValueError(f"component {shown(value)} must be a relative path with '/' separators, e.g. ../components/ha")
    if "://" in value:
        raise ValueError(f"component {shown(value)} is a URL: Flux builds from the source only (no remote bases)")
    return value
