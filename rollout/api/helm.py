"""The Helm parts of a Module's sync: a chart source and a values package (API types).

A Module syncs a Helm chart with

    sync:
      source:
        helm: {url: https://stefanprodan.github.io/podinfo, chart: podinfo, version: 6.7.0}
        # or an OCI Helm repository:  {url: oci://ghcr.io/stefanprodan/charts, chart: podinfo, ...}
        # or an OCI artifact:  oci: {url: oci://ghcr.io/stefanprodan/charts/podinfo, version: {tag: 6.7.0}}
      package:
        helm:
          releaseName: podinfo                # default: the module's name
          targetNamespace: podinfo            # default: the HelmRelease's namespace
          chartDefaults: {replicaCount: 1}    # the chart's values.yaml, if known
          values: {replicaCount: 2}           # the module layer
          stageValues: {canary: {...}}        # per stage of spec.rollout, by name
          clusterValues: {region: "$(REGION)"}  # per cluster: bindings expanded
          valuesPolicy:
            - {path: /image/tag, policy: preferChart}
            - {path: /resources/limits/memory, policy: max}
          # and Flux options: storageNamespace, serviceAccountName, timeout, maxHistory;
          # the source's: secretRef, certSecretRef, insecure, provider, passCredentials
          # (docs/modules.md)

and the applier renders a `HelmRepository` (or `OCIRepository`) and a Flux `HelmRelease`
whose `spec.values` are the per-cluster merge of these layers (rollout/values/layers.py has the
rules). The chart version, like Git tags and OCI digests, must be exact: a range such as
`^6.7` would let clusters of one generation run different charts.

`clusterValues` strings are expanded with the module's bindings; a string that refers to
a binding the cluster does not have is left out of that cluster's layer (the lower layers
decide) rather than sent as `$(NAME)`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollout.api.flux_options import (
    RegistryProvider,
    SecretReference,
    check_object_name,
    check_positive_duration,
    check_registry_access,
)
from rollout.api.formats import check_dns1123_label, check_url, shown
from rollout.api.quantities import is_quantity
from rollout.api.value_paths import QUANTITY_POLICIES, Policy, overlapping_policies, parse_pointer, value_at

HELM_SCHEMES = ("http", "https", "oci")
# Semantic Versioning 2.0 (Helm accepts a leading v): an exact version, never a range
SEMVER = re.compile(
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?\Z"
)
CHART_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?\Z")
MAX_VALUES_DEPTH = 32
MAX_POLICIES = 256


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class HelmChartSource(_Strict):
    """A chart in a Helm repository (https://, or oci:// for an OCI Helm repository)."""

    url: str
    chart: str
    version: str
    # Secret with `username`/`password` (https) or of type kubernetes.io/dockerconfigjson (oci)
    secret_ref: SecretReference | None = Field(default=None, alias="secretRef")
    # Secret with `ca.crt` (a private CA) and/or `tls.crt` + `tls.key` (a client certificate)
    cert_secret_ref: SecretReference | None = Field(default=None, alias="certSecretRef")
    # oci:// only: the registry speaks plain HTTP
    insecure: bool = False
    # oci:// only: aws, azure or gcp log in with the cloud's workload identity
    provider: RegistryProvider | None = None
    # https only: send the credentials to chart URLs on other hosts than `url` (mind MITM)
    pass_credentials: bool = Field(default=False, alias="passCredentials")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, schemes=HELM_SCHEMES, what="Helm repository")

    @field_validator("chart")
    @classmethod
    def _chart(cls, value: str) -> str:
        if len(value) > 250 or not CHART_NAME.match(value):
            raise ValueError(f"chart {shown(value)} is not a chart name: lower-case alphanumerics, '-', '_', '.'")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not SEMVER.match(value):
            raise ValueError(
                f"chart version {shown(value)} is not an exact semantic version such as 6.7.0: "
                "a range would let clusters of one generation run different charts"
            )
        return value

    @model_validator(mode="after")
    def _access(self) -> HelmChartSource:
        oci = self.url.startswith("oci://")
        if not oci and (self.insecure or self.provider is not None):
            given = "insecure" if self.insecure else "provider"
            raise ValueError(f"'{given}' applies to an oci:// Helm repository only, not to {shown(self.url)}")
        if oci and self.pass_credentials:
            raise ValueError("'passCredentials' applies to an http(s):// Helm repository only")
        check_registry_access(insecure=self.insecure, cert_secret_ref=self.cert_secret_ref)
        return self

    @property
    def label(self) -> str:
        return self.version


class ValuesPolicyRule(_Strict):
    """How one JSON path (RFC 6901 pointer, e.g. `/resources/limits/memory`) is decided."""

    path: str
    policy: Policy

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        parse_pointer(value)
        return value


def check_values(value: Any, where: str, depth: int = 0) -> None:
    """Helm values are JSON: string keys; strings, finite numbers, booleans, null, lists, maps."""
    if depth > MAX_VALUES_DEPTH:
        raise ValueError(f"{where}: values nest deeper than {MAX_VALUES_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: key {shown(key)} is not a string")
            check_values(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_values(item, f"{where}[{index}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value!r} is not a number JSON allows")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError(f"{where}: a {type(value).__name__} is not a Helm value (quote it as a string)")


class HelmPackage(_Strict):
    """The HelmRelease of a sync: release, target namespace, values layers and policies."""

    release_name: str | None = Field(default=None, alias="releaseName")
    # where the chart's objects go (created if missing); default: the HelmRelease's
    # namespace — for a BootstrapModule, that namespace's name in the workload cluster
    target_namespace: str | None = Field(default=None, alias="targetNamespace")
    # where Helm keeps the release's history; default: the HelmRelease's namespace (Module),
    # the target namespace (BootstrapModule: the release lives in the workload cluster)
    storage_namespace: str | None = Field(default=None, alias="storageNamespace")
    # install and upgrade as this service account (in the HelmRelease's namespace; for a
    # BootstrapModule, impersonated in the workload cluster)
    service_account_name: str | None = Field(default=None, alias="serviceAccountName")
    # for each Kubernetes operation of a Helm action (hooks, waiting); Flux's default: 5m
    timeout: str | None = None
    # release revisions Helm keeps; Flux's default: 5 (0: unlimited)
    max_history: int | None = Field(default=None, alias="maxHistory", ge=0)
    chart_defaults: dict[str, Any] | None = Field(default=None, alias="chartDefaults")
    values: dict[str, Any] = Field(default_factory=dict)
    stage_values: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="stageValues")
    cluster_values: dict[str, Any] = Field(default_factory=dict, alias="clusterValues")
    values_policy: list[ValuesPolicyRule] = Field(default_factory=list, alias="valuesPolicy")

    @field_validator("release_name", "target_namespace", "storage_namespace")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return check_dns1123_label(value) if value is not None else None

    @field_validator("service_account_name")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        return check_object_name(value, what="service account name") if value is not None else None

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        return check_positive_duration(value, field="timeout") if value is not None else None

    @model_validator(mode="after")
    def _layers_and_policies(self) -> HelmPackage:
        layers = {"chartDefaults": self.chart_defaults or {}, "values": self.values}
        layers |= {f"stageValues.{stage}": values for stage, values in self.stage_values.items()}
        layers["clusterValues"] = self.cluster_values
        for where, values in layers.items():
            check_values(values, where)
        if len(self.values_policy) > MAX_POLICIES:
            raise ValueError(f"valuesPolicy: at most {MAX_POLICIES} paths")
        paths = [rule.path for rule in self.values_policy]
        repeated = sorted({p for p in paths if paths.count(p) > 1})
        if repeated:
            raise ValueError(f"valuesPolicy: each path once; repeated: {', '.join(repeated)}")
        overlaps = overlapping_policies(paths)
        if overlaps:
            outer, inner = overlaps[0]
            raise ValueError(
                f"valuesPolicy: {inner} lies inside {outer}; a policy decides its whole node, so give one of them"
            )
        for rule in self.values_policy:
            if rule.policy in QUANTITY_POLICIES:
                self._check_quantities(rule, layers)
        return self

    @staticmethod
    def _check_quantities(rule: ValuesPolicyRule, layers: dict[str, dict[str, Any]]) -> None:
        path = parse_pointer(rule.path)
        for where, values in layers.items():
            found, value = value_at(values, path)
            if found and not is_quantity(value):
                raise ValueError(
                    f"{where}{rule.path} is {shown(value)}, but policy {rule.policy} compares Kubernetes "
                    "quantities such as 512Mi, 250m or 3"
                )

    @property
    def policies(self) -> dict[str, Policy]:
        return {rule.path: rule.policy for rule in self.values_policy}
