"""Manifests users write: Module, BootstrapModule, Cluster, ModuleRestriction and Release
(`rollout.dev/v1alpha1`; a Release becomes its member modules in rollout/api/module_releases.py).

The API types, with every rule a field must follow. Turning bytes into documents, and
documents into these models with problems named by file, document and field, is
`rollout/api/loading.py`'s job.

Validation follows the platforms the manifests end up on: DNS-1123 names (Kubernetes),
Flux's URL rules (`http|https|ssh://` with a host for Git, `oci://` for OCI), Git's
ref-name rules for tags (no control, bidi or whitespace characters) and immutable versions
only — a Git `tag` or `revision` (commit), an OCI `tag` or `digest`, never a branch, so that
a fleet's state is reproducible from the log. Types are strict: `true` is not a count and
`"yes"` is not a boolean. Every pattern is anchored with `\\Z` (`$` accepts a trailing
newline, and `prod\\n` is not a name). Values quoted in messages are cut to a few dozen
characters (`shown`).

The Flux options of a sync — credentials named by Secret (never their data), signature
verification, decryption, health checks, namespaces, timeouts — are typed in
rollout/api/flux_options.py and documented in docs/modules.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rollout.api.flux_options import (
    Decryption,
    HealthCheck,
    HealthCheckExpression,
    OCIVerification,
    Patch,
    RegistryProvider,
    SecretReference,
    SubstituteReference,
    check_component_path,
    check_entries,
    check_namespace,
    check_object_name,
    check_positive_duration,
    check_registry_access,
    omit_if_empty,
)
from rollout.api.formats import (
    COMMIT,
    DIGEST,
    GIT_SCHEMES,
    OCI_TAG,
    PERCENT,
    VARIABLE,
    check_duration,
    check_git_tag,
    check_label_key,
    check_label_value,
    check_url,
    shown,
)

# re-exported: projections/ and the engine import these from here
from rollout.api.formats import DNS1123_LABEL as DNS1123_LABEL
from rollout.api.formats import DNS1123_SUBDOMAIN as DNS1123_SUBDOMAIN
from rollout.api.formats import LABEL_NAME as LABEL_NAME
from rollout.api.formats import LABEL_VALUE as LABEL_VALUE
from rollout.api.formats import check_dns1123_label as check_dns1123_label
from rollout.api.formats import parse_duration as parse_duration
from rollout.api.freezes import FreezeCalendarSpec
from rollout.api.gates import HealthGate, check_gates
from rollout.api.helm import HelmChartSource, HelmPackage
from rollout.api.promotion import AutoPromote, check_range, is_version
from rollout.api.windows import MaintenanceWindow, check_windows

API_VERSION = "rollout.dev/v1alpha1"
MAX_DEPENDENCIES = 32


class Strict(BaseModel):
    """Base for manifest parts: unknown fields are errors, not silently dropped; no type coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class Metadata(Strict):
    name: str
    namespace: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name", "namespace")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            check_label_key(key)
            check_label_value(label)
        return value


# --- label selectors ------------------------------------------------------------------


class LabelSelectorRequirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        return check_label_key(value)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty 'values' list")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no 'values'")
        return self


class LabelSelector(Strict):
    """Kubernetes label selector. `{}` selects everything; a missing selector nothing."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            check_label_key(key)
            check_label_value(label)
        return value


# --- syncs: source + package ----------------------------------------------------------


class GitVersion(Strict):
    """An immutable Git version: a tag or a commit. Branches are refused on purpose."""

    tag: str | None = None
    revision: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_branch(cls, data: Any) -> Any:
        if isinstance(data, dict) and "branch" in data:
            raise ValueError(
                "a branch is not a version: a fleet's state must be reproducible, use 'tag' or 'revision' (a commit)"
            )
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> GitVersion:
        if (self.tag is None) == (self.revision is None):
            raise ValueError("give exactly one of 'tag' or 'revision'")
        if self.revision is not None and not COMMIT.match(self.revision):
            raise ValueError(
                f"revision {shown(self.revision)} is not a full commit hash (40 hex digits, optionally "
                "prefixed sha1:, or sha256:<64 hex>); Flux cannot check out a short hash"
            )
        if self.tag is not None:
            check_git_tag(self.tag)
        return self

    @property
    def label(self) -> str:
        if self.tag is not None:
            return self.tag
        revision = self.revision or ""
        return revision if revision.startswith("sha256:") else f"sha1:{revision.removeprefix('sha1:')}"


class GitSource(Strict):
    """A Git repository at a tag or commit (GitRepository)."""

    # http(s):// or ssh:// (never scp-style git@host:repo)
    url: str
    version: GitVersion
    # Secret with the credentials: `username`/`password` (basic auth or a token) for
    # http(s), `identity` and `known_hosts` for ssh, `ca.crt` for a private CA
    secret_ref: SecretReference | None = Field(default=None, alias="secretRef")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value.startswith("git@"):
            raise ValueError(
                f"{shown(value)}: scp-style git@host:repo is not accepted by Flux; write ssh://git@host/repo"
            )
        return check_url(value, schemes=GIT_SCHEMES, what="Git")


class OCIVersion(Strict):
    tag: str | None = None
    digest: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> OCIVersion:
        if (self.tag is None) == (self.digest is None):
            raise ValueError("give exactly one of 'tag' or 'digest'")
        if self.digest is not None and not DIGEST.match(self.digest):
            raise ValueError(f"digest {shown(self.digest)} must look like sha256:<64 hex>")
        if self.tag is not None and not OCI_TAG.match(self.tag):
            raise ValueError(
                f"tag {shown(self.tag)} is not an OCI tag: 1-128 of A-Z a-z 0-9 _ . -, not starting with . or -"
            )
        return self

    @property
    def label(self) -> str:
        return self.tag if self.tag is not None else self.digest  # type: ignore[return-value]


class OCISource(Strict):
    """An OCI artifact at a tag or digest (OCIRepository)."""

    # oci://REGISTRY/REPOSITORY
    url: str
    version: OCIVersion
    # Secret of type kubernetes.io/dockerconfigjson with the registry's credentials
    secret_ref: SecretReference | None = Field(default=None, alias="secretRef")
    # Secret with `ca.crt` (a private CA) and/or `tls.crt` + `tls.key` (a client certificate)
    cert_secret_ref: SecretReference | None = Field(default=None, alias="certSecretRef")
    # the registry speaks plain HTTP (no TLS)
    insecure: bool = False
    # aws, azure or gcp: log in with the cloud's workload identity; generic: secretRef or anonymous
    provider: RegistryProvider | None = None
    # verify the artifact's signature (cosign or notation) before it is used
    verify: OCIVerification | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, schemes=("oci",), what="OCI")

    @model_validator(mode="after")
    def _access(self) -> OCISource:
        check_registry_access(insecure=self.insecure, cert_secret_ref=self.cert_secret_ref)
        return self


class Source(Strict):
    git: GitSource | None = None
    oci: OCISource | None = None
    helm: HelmChartSource | None = None  # a chart in a Helm repository (rollout/api/helm.py)
    # follow the highest version of a semver range, seen by `rollout promoter`
    # (rollout/api/promotion.py); left out when unset, so a source without it is stored as before
    auto_promote: AutoPromote | None = Field(default=None, alias="autoPromote", exclude_if=lambda value: value is None)

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        if sum(source is not None for source in (self.git, self.oci, self.helm)) != 1:
            raise ValueError("give exactly one of 'git', 'oci' or 'helm'")
        if self.auto_promote is not None:
            self._check_promotable()
        return self

    def _check_promotable(self) -> None:
        """autoPromote starts from a version: a tag (git, oci) or chart version that is a semver."""
        if self.git is not None and self.git.version.tag is None:
            raise ValueError(
                "autoPromote follows Git tags: give the version as a tag (a semver such as 1.4.0), not a revision"
            )
        if self.oci is not None and self.oci.version.tag is None:
            raise ValueError(
                "autoPromote follows OCI tags: give the version as a tag (a semver such as 1.4.0), not a digest"
            )
        if not is_version(self.revision):
            raise ValueError(
                f"autoPromote starts from the version given, and {shown(self.revision)} is not a semantic version "
                "(such as 1.4.0 or v1.4.0)"
            )

    @property
    def kind(self) -> Literal["git", "oci", "helm"]:
        return "git" if self.git is not None else "helm" if self.helm is not None else "oci"

    @property
    def url(self) -> str:
        source = self.git or self.oci or self.helm
        assert source is not None
        return source.url

    def at_version(self, version: str) -> Source:
        """This source at `version` (a tag, or a chart's version): what a promotion targets."""
        if self.git is not None:
            return self.model_copy(update={"git": self.git.model_copy(update={"version": GitVersion(tag=version)})})
        if self.helm is not None:
            return self.model_copy(update={"helm": self.helm.model_copy(update={"version": version})})
        assert self.oci is not None
        return self.model_copy(update={"oci": self.oci.model_copy(update={"version": OCIVersion(tag=version)})})

    @property
    def revision(self) -> str:
        """The version label users and appliers talk about: a tag, commit, digest or chart version."""
        if self.git is not None:
            return self.git.version.label
        if self.helm is not None:
            return self.helm.label
        return self.oci.version.label  # type: ignore[union-attr]


class KustomizePackage(Strict):
    """How Flux builds and applies the source (Kustomization). Every field but `path` is optional."""

    # the directory of the kustomization.yaml (or plain manifests) inside the source
    path: str = "./"
    # post-build variables, `$(NAME)` bindings expanded per cluster by the engine
    substitute: dict[str, str] = Field(default_factory=dict)
    # more post-build variables, from ConfigMaps and Secrets beside the Kustomization
    substitute_from: list[SubstituteReference] = Field(
        default_factory=list, exclude_if=omit_if_empty, alias="substituteFrom"
    )
    # the namespace of every namespaced object applied (it must exist in the cluster);
    # needed when the manifests give no metadata.namespace
    target_namespace: str | None = Field(default=None, alias="targetNamespace")
    # apply as this service account (in the Kustomization's namespace) instead of Flux's own
    service_account_name: str | None = Field(default=None, alias="serviceAccountName")
    # wait until every applied object is ready (healthChecks are then ignored)
    wait: bool | None = None
    # wait until these objects are ready
    health_checks: list[HealthCheck] = Field(default_factory=list, exclude_if=omit_if_empty, alias="healthChecks")
    # how to tell the health of custom resource kinds (CEL)
    health_check_exprs: list[HealthCheckExpression] = Field(
        default_factory=list, exclude_if=omit_if_empty, alias="healthCheckExprs"
    )
    # for building, applying and health checking; Flux's default: the interval
    timeout: str | None = None
    # retry a failed reconciliation after this long; Flux's default: the interval
    retry_interval: str | None = Field(default=None, alias="retryInterval")
    # strategic-merge or JSON 6902 patches applied after the build
    patches: list[Patch] = Field(default_factory=list, exclude_if=omit_if_empty)
    # kustomize Components, relative to `path`
    components: list[str] = Field(default_factory=list, exclude_if=omit_if_empty)
    # decrypt SOPS-encrypted Secrets before applying them
    decryption: Decryption | None = None
    # recreate objects whose immutable fields changed
    force: bool | None = None

    @field_validator("substitute")
    @classmethod
    def _variables(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not VARIABLE.match(name):
                raise ValueError(f"substitute key {shown(name)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @field_validator("target_namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return check_namespace(value) if value is not None else None

    @field_validator("service_account_name")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        return check_object_name(value, what="service account name") if value is not None else None

    @field_validator("timeout", "retry_interval")
    @classmethod
    def _durations(cls, value: str | None, info: ValidationInfo) -> str | None:
        field = cls.model_fields[str(info.field_name)].alias or str(info.field_name)
        return check_positive_duration(value, field=field) if value is not None else None

    @field_validator("substitute_from", "health_checks", "health_check_exprs", "patches")
    @classmethod
    def _lists(cls, value: list[Any], info: ValidationInfo) -> list[Any]:
        return check_entries(value, field=cls.model_fields[str(info.field_name)].alias or str(info.field_name))

    @field_validator("components")
    @classmethod
    def _components(cls, value: list[str]) -> list[str]:
        for path in check_entries(value, field="components"):
            check_component_path(path)
        if len(value) != len(set(value)):
            raise ValueError("components names a path more than once")
        return value


class Package(Strict):
    """A kustomize package (the default) or a Helm release (`helm`, rollout/api/helm.py)."""

    kustomize: KustomizePackage = Field(default_factory=KustomizePackage)
    helm: HelmPackage | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Package:
        if self.helm is not None and self.kustomize != KustomizePackage():
            raise ValueError("give one of 'kustomize' or 'helm'")
        return self


class Sync(Strict):
    """One unit to apply: a source at an immutable version and a kustomize or Helm package."""

    source: Source
    package: Package = Field(default_factory=Package)
    # reconcile interval of the source and of its Kustomization/HelmRelease (drift
    # correction); default: the applier's `--interval` (10m)
    interval: str | None = None

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        return check_positive_duration(value, field="interval") if value is not None else None

    @model_validator(mode="after")
    def _package_fits_source(self) -> Sync:
        helm = self.package.helm is not None
        if self.source.helm is not None and not helm:
            raise ValueError("a 'helm' source needs a 'helm' package (package: {helm: {...}})")
        if self.source.git is not None and helm:
            raise ValueError("a 'helm' package installs a chart from a 'helm' or 'oci' source, not 'git'")
        return self

    @property
    def revision(self) -> str:
        return self.source.revision

    def as_applied(self) -> Sync:
        """The sync clusters get: without `autoPromote`, which only the engine and the promoter
        read — so holding or changing the range is no new generation of what clusters run."""
        if self.source.auto_promote is None:
            return self
        return self.model_copy(update={"source": self.source.model_copy(update={"auto_promote": None})})


class Binding(Strict):
    """A `$(NAME)` variable for `substitute` values, resolved per cluster by the engine.

    Exactly one of: a literal `value`, the value of a cluster label (`fromLabel`) or of a
    cluster annotation (`fromAnnotation`). `CLUSTER_NAME` and `CLUSTER_NAMESPACE` are
    always bound.
    """

    name: str
    value: str | None = None
    from_label: str | None = Field(default=None, alias="fromLabel")
    from_annotation: str | None = Field(default=None, alias="fromAnnotation")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not VARIABLE.match(value):
            raise ValueError(f"binding name {shown(value)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Binding:
        given = [v for v in (self.value, self.from_label, self.from_annotation) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'value', 'fromLabel' or 'fromAnnotation'")
        return self


# --- rollout strategy -----------------------------------------------------------------

IntOrPercent = int | str


def _check_int_or_percent(value: Any, field: str) -> IntOrPercent | None:
    """An integer or a percentage string — `true` is neither (bool is an int to Python)."""
    if value is None or type(value) is int:
        if value is not None and value < 0:
            raise ValueError(f"{field} must not be negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an integer or a percentage such as '25%', not {shown(value)}")
    match = PERCENT.match(value)
    if not match or int(match.group(1)) > 100:
        raise ValueError(f"{field} {shown(value)} must be an integer or a percentage 0%..100%")
    return value


MAX_WAVE_SEED = 2**63 - 1  # a seed is a signed 64-bit integer, as Kubernetes' int64


class Waves(Strict):
    """`stages[].waves`: the stage moves its members in waves of `size` (an integer, or a
    percentage of the stage's members: rounded down, at least 1), in a seeded random order
    (`order: Random`, the default) or in the stage's sorting order (`Sorted`); each wave
    starts once the one before is done (nothing updating, failures within `maxFailures`)
    and `delay` has passed since. `seed` fixes the order for every revision; without it the
    seed is derived from the module's name and the revision it rolls out, so a new revision
    reshuffles and `rollout plan` can say the order before apply (rollout/engine/waves.py)."""

    size: IntOrPercent
    order: Literal["Random", "Sorted"] = "Random"
    seed: int | None = Field(default=None, ge=0, le=MAX_WAVE_SEED)
    delay: str | None = None

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> IntOrPercent:
        checked = _check_int_or_percent(value, "waves.size")
        if checked is None or checked == 0 or checked == "0%":
            raise ValueError("waves.size must be at least 1 (or a percentage above 0%)")
        return checked

    @field_validator("delay")
    @classmethod
    def _delay(cls, value: str | None) -> str | None:
        return check_duration(value, field="waves.delay", positive=False) if value is not None else None


MAX_APPROVERS = 20  # approval.required at most: who would wait for more people?
MAX_APPROVAL_GROUPS = 20
MAX_GROUP_NAME = 256


class ApprovalPolicy(Strict):
    """Who must approve a stage before it starts (`Stage.approval`).

    `required` distinct people — distinct verified identities: an approval through the
    dashboard (OIDC or a Kubernetes token) or a RolloutApproval object (its approver checked
    by admission), never an unverified `rollout approve` from the CLI — and, when `groups`
    is given, only people who belong (by the same verified identity, never by a claim of the
    client's) to at least one of those groups count. The same person approving twice counts
    once; approvals count for the target generation they were given for (a new target
    starts from none)."""

    required: int = Field(default=1, description="Distinct approvers needed, 1 to 20.")
    groups: list[str] = Field(
        default_factory=list,
        description="Only members of one of these groups count (empty: anyone allowed to approve).",
    )

    @field_validator("required")
    @classmethod
    def _required(cls, value: int) -> int:
        if not 1 <= value <= MAX_APPROVERS:
            raise ValueError(f"approval.required must be 1 to {MAX_APPROVERS}, not {value}")
        return value

    @field_validator("groups")
    @classmethod
    def _groups(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_APPROVAL_GROUPS:
            raise ValueError(f"approval.groups: at most {MAX_APPROVAL_GROUPS} groups")
        for group in value:
            if not group or len(group) > MAX_GROUP_NAME:
                raise ValueError(
                    f"approval.groups: a group name of 1 to {MAX_GROUP_NAME} characters, not {shown(group)}"
                )
        if len(set(value)) != len(value):
            raise ValueError("approval.groups: each group once")
        return value


QUORUMS = ("All", "OneOf")
MAX_UPSTREAMS = 32  # upstream stages of one stage: more than any fleet's environments


class StageUpstream(Strict):
    """One edge of the stage graph (`stages[].after[]`): the stage waits for upstream
    `stage` to pass, then for `soak` more (engine time, from Ticks) before that edge
    counts (rollout/engine/stage_graph.py)."""

    stage: str = Field(description="The upstream stage's name (a stage of this rollout, not this one).")
    soak: str | None = Field(
        default=None,
        description="How long after the upstream stage passed this edge counts, e.g. 30m (default: at once).",
        exclude_if=lambda value: value is None,
    )

    @field_validator("soak")
    @classmethod
    def _soak(cls, value: str | None) -> str | None:
        return check_duration(value, field="after[].soak", positive=False) if value is not None else None


def check_quorum(value: Any) -> str | None:
    """`All`, `OneOf` or a percentage of the upstream stages, 1% to 100%."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"quorum must be All, OneOf or a percentage such as '50%', not {shown(value)}")
    if value in QUORUMS:
        return value
    match = PERCENT.match(value)
    if not match or not 1 <= int(match.group(1)) <= 100:
        raise ValueError(f"quorum {shown(value)} must be All, OneOf or a percentage 1%..100%")
    return value


class Stage(Strict):
    name: str
    selector: LabelSelector | None = None
    max_concurrency: IntOrPercent | None = Field(default=None, alias="maxConcurrency")
    max_failures: IntOrPercent | None = Field(default=None, alias="maxFailures")
    min_success_time: str | None = Field(default=None, alias="minSuccessTime")
    require_approval: bool = Field(default=False, alias="requireApproval")
    # N of M distinct verified approvers, optionally from groups (implies requireApproval)
    # (not serialized when absent: stored specs and events stay the bytes they were before it)
    approval: ApprovalPolicy | None = Field(default=None, exclude_if=lambda value: value is None)
    # maintenance windows of this stage (rollout/api/windows.py), replacing the module's
    windows: list[MaintenanceWindow] = Field(default_factory=list)
    # health gates that must pass while the stage soaks (rollout/api/gates.py)
    gates: list[HealthGate] = Field(default_factory=list)
    # the stage's members move in waves (Waves above; rollout/engine/waves.py); left out of
    # a dump when None, so that a module's spec is stored as the release before stored it
    waves: Waves | None = Field(default=None, exclude_if=lambda value: value is None)
    # the stage graph (rollout/engine/stage_graph.py): the stages this one follows (None:
    # the stage before it in the list, none for the first; []: a root) and how many of them
    # must have passed (`All`, `OneOf`, `N%`); left out when unset, so that a linear
    # strategy's spec is stored as the release before stored it
    after: list[StageUpstream] | None = Field(
        default=None,
        description="The stages this stage follows (default: the stage before it in the list; []: a root).",
        exclude_if=lambda value: value is None,
    )
    quorum: str | None = Field(
        default=None,
        description="How many upstream stages must have passed: All (default), OneOf, or a percentage such as 50%.",
        exclude_if=lambda value: value is None,
    )

    @field_validator("quorum", mode="before")
    @classmethod
    def _quorum(cls, value: Any) -> str | None:
        return check_quorum(value)

    @field_validator("after")
    @classmethod
    def _after(cls, value: list[StageUpstream] | None) -> list[StageUpstream] | None:
        if value is not None and len(value) > MAX_UPSTREAMS:
            raise ValueError(f"after: at most {MAX_UPSTREAMS} upstream stages, not {len(value)}")
        return value

    @field_validator("gates")
    @classmethod
    def _gates(cls, value: list[HealthGate]) -> list[HealthGate]:
        return check_gates(value)

    @property
    def needs_approval(self) -> bool:
        """The stage waits for approval: `requireApproval`, or an `approval` policy."""
        return self.require_approval or self.approval is not None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("max_concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> IntOrPercent | None:
        checked = _check_int_or_percent(value, "maxConcurrency")
        if checked == 0 or checked == "0%":
            raise ValueError("maxConcurrency must be at least 1 (or a percentage above 0%)")
        return checked

    @field_validator("max_failures", mode="before")
    @classmethod
    def _failures(cls, value: Any) -> IntOrPercent | None:
        return _check_int_or_percent(value, "maxFailures")

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: list[MaintenanceWindow]) -> list[MaintenanceWindow]:
        return check_windows(value)

    @field_validator("min_success_time")
    @classmethod
    def _soak(cls, value: str | None) -> str | None:
        return check_duration(value, field="minSuccessTime", positive=False) if value is not None else None


class OfflinePolicy(Strict):
    """`rollout.offline`: a member offline (lease expired, observed not ready) before it was
    moved is waited for up to `wait` (the engine's time, from Ticks) while its stage runs —
    the stage is not done meanwhile — then skipped (`Skip`: SkippedOffline, the run goes on)
    or failed (`Fail`: it counts against the stage's maxFailures). rollout/engine/runs.py."""

    wait: str
    then: Literal["Skip", "Fail"] = "Skip"

    @field_validator("wait")
    @classmethod
    def _wait(cls, value: str) -> str:
        return check_duration(value, field="offline.wait", positive=False)


LateJoiners = Literal["Include", "NextRun", "Exclude"]
"""`rollout.lateJoiners`: what a run does with a cluster that joins the module after it started."""


class RolloutStrategy(Strict):
    stages: list[Stage] = Field(default_factory=list)
    progress_deadline: str | None = Field(default=None, alias="progressDeadline")
    on_failure: Literal["Halt", "Rollback"] = Field(default="Halt", alias="onFailure")
    sorting_label_key: str | None = Field(default=None, alias="sortingLabelKey")
    # maintenance windows of every stage (rollout/api/windows.py): clusters move only inside
    windows: list[MaintenanceWindow] = Field(default_factory=list)
    # what a run does with a cluster that becomes a member after it started (rollout/engine/runs.py):
    # Include (take it in), NextRun (the next run moves it), Exclude (this run never moves it).
    # Not serialized at its default: stored specs and events stay the bytes they were before it
    late_joiners: LateJoiners = Field(
        default="Include", alias="lateJoiners", exclude_if=lambda value: value == "Include"
    )
    # how long a stage waits for a member offline before it moved, and what then (runs.py);
    # None: no wait, skipped at once. Not serialized when absent, like lateJoiners
    offline: OfflinePolicy | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("progress_deadline")
    @classmethod
    def _deadline(cls, value: str | None) -> str | None:
        return check_duration(value, field="progressDeadline", positive=True) if value is not None else None

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: list[MaintenanceWindow]) -> list[MaintenanceWindow]:
        return check_windows(value)

    @field_validator("sorting_label_key")
    @classmethod
    def _sorting_key(cls, value: str | None) -> str | None:
        return check_label_key(value) if value is not None else None

    @model_validator(mode="after")
    def _unique_stage_names(self) -> RolloutStrategy:
        names = [stage.name for stage in self.stages]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"stage names must be unique; repeated: {', '.join(duplicated)}")
        check_stage_graph(self.stages)
        return self


def stage_upstreams(stages: list[Stage]) -> dict[str, list[StageUpstream]]:
    """Each stage's upstream edges: its `after`, or (None) the stage before it in the list —
    none for the first. A strategy without any `after` is the chain it always was."""
    return {
        stage.name: list(stage.after)
        if stage.after is not None
        else ([StageUpstream(stage=stages[index - 1].name)] if index else [])
        for index, stage in enumerate(stages)
    }


def check_stage_graph(stages: list[Stage]) -> None:
    """The stage graph's rules: every upstream a stage of this rollout, other than the
    stage itself, named once; a quorum only with `after`; at least one root (a stage that
    follows none); no cycle. The message names the stage (`stages[i]`) and the edge."""
    names = {stage.name for stage in stages}
    for index, stage in enumerate(stages):
        where = f"stages[{index}] ({stage.name})"
        if stage.quorum is not None and stage.after is None:
            raise ValueError(f"{where}.quorum needs after: the upstream stages the quorum counts")
        seen: set[str] = set()
        for position, edge in enumerate(stage.after or []):
            if edge.stage == stage.name:
                raise ValueError(f"{where}.after[{position}]: a stage cannot follow itself")
            if edge.stage not in names:
                known = ", ".join(sorted(names - {stage.name})) or "none"
                raise ValueError(
                    f"{where}.after[{position}]: no stage {shown(edge.stage)} in this rollout (stages: {known})"
                )
            if edge.stage in seen:
                raise ValueError(f"{where}.after[{position}]: upstream {edge.stage} named twice")
            seen.add(edge.stage)
    upstreams = stage_upstreams(stages)
    if stages and all(upstreams[stage.name] for stage in stages):
        raise ValueError(
            "the stage graph has no root: every stage follows another, so none could ever start "
            "(give one stage after: [], or leave the first stage's after out)"
        )
    cycle = _cycle(stages, upstreams)
    if cycle:
        raise ValueError(f"the stage graph has a cycle: {' -> '.join(cycle)} (a stage would wait for itself)")


def _cycle(stages: list[Stage], upstreams: dict[str, list[StageUpstream]]) -> list[str]:
    """A cycle of the graph as the stages on it, first repeated last ([]: none), found by a
    depth-first walk in the stages' order (the same cycle named for the same manifest)."""
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    path: list[str] = []

    def walk(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for edge in upstreams[name]:
            if state.get(edge.stage) == 1:
                return [*path[path.index(edge.stage) :], edge.stage][::-1]
            if edge.stage not in state and (found := walk(edge.stage)):
                return found
        path.pop()
        state[name] = 2
        return []

    for stage in stages:
        if stage.name not in state and (found := walk(stage.name)):
            return found
    return []


class FollowedMember(Strict):
    """A Release member that follows a semver range (rollout/engine/promotions.py, "Releases"):
    its source (kind, URL, chart: where the promoter looks), its range, and the version the
    release was applied with — where promotion starts, and the floor."""

    module: str
    semver: str
    kind: Literal["git", "oci", "helm"]
    url: str
    chart: str | None = Field(default=None, exclude_if=lambda value: value is None)
    version: str

    @field_validator("semver")
    @classmethod
    def _range(cls, value: str) -> str:
        return check_range(value)


class ReleasePromotion(Strict):
    """A release's auto-promotion as every member carries it: `hold` (the manifest's), and
    the members that follow a range. The release's leader (`ReleaseMembership.leader`)
    decides each new combination; see docs/rollout-semantics.md, "Releases"."""

    hold: bool = Field(default=False, exclude_if=lambda value: not value)
    follow: list[FollowedMember]

    def followed(self, module: str) -> FollowedMember | None:
        return next((member for member in self.follow if member.module == module), None)


class ReleaseMembership(Strict):
    """A module's place in a Release (rollout/api/module_releases.py): the release's name
    and every member module, this one included. Its peers' per-cluster state decides
    whether a cluster is done for it (rollout/engine/dependencies.py, "Releases")."""

    name: str
    members: list[str]
    # the release's auto-promotion, as `rollout apply` gives every member (None: the release
    # moves only when applied with new versions); left out when unset
    auto_promote: ReleasePromotion | None = Field(
        default=None, alias="autoPromote", exclude_if=lambda value: value is None
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @property
    def leader(self) -> str:
        """The member whose partition decides the release's promotions and keeps its hold:
        the first member by name (reordering the release does not move it)."""
        return min(self.members)

    @field_validator("members")
    @classmethod
    def _members(cls, value: list[str]) -> list[str]:
        for name in value:
            check_dns1123_label(name)
        if len(value) != len(set(value)):
            raise ValueError("a release names a module once")
        if len(value) > MAX_DEPENDENCIES:
            raise ValueError(f"at most {MAX_DEPENDENCIES} modules in a release")
        return value

    def peers(self, module: str) -> list[str]:
        """The other members, in order."""
        return sorted(name for name in self.members if name != module)


class ModuleSpec(Strict):
    selector: LabelSelector | None = None
    sync: Sync
    bindings: list[Binding] = Field(default_factory=list)
    rollout: RolloutStrategy | None = None
    # modules whose sync must be on its target and succeeded on a cluster before this
    # module's sync moves there (rollout/engine/dependencies.py); deleted only after its dependents
    depends_on: list[str] = Field(default_factory=list, alias="dependsOn")
    # the Release this module moves with (rollout/api/module_releases.py): set by `rollout
    # apply` from a Release document, never written by hand; left out of the JSON when None,
    # so a module in no release is stored and sent as the bytes it always was
    release: ReleaseMembership | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("depends_on")
    @classmethod
    def _dependencies(cls, value: list[str]) -> list[str]:
        for name in value:
            check_dns1123_label(name)
        if len(value) != len(set(value)):
            raise ValueError("dependsOn names a module more than once")
        if len(value) > MAX_DEPENDENCIES:
            raise ValueError(f"at most {MAX_DEPENDENCIES} dependencies")
        return value

    @model_validator(mode="after")
    def _unique_bindings(self) -> ModuleSpec:
        names = [b.name for b in self.bindings]
        reserved = {"CLUSTER_NAME", "CLUSTER_NAMESPACE"} & set(names)
        if reserved:
            raise ValueError(f"bindings {sorted(reserved)} are reserved and always bound by the engine")
        if len(names) != len(set(names)):
            raise ValueError("binding names must be unique")
        helm = self.sync.package.helm
        stages = {stage.name for stage in self.rollout.stages} if self.rollout else set()
        unknown = sorted(set(helm.stage_values) - stages) if helm is not None else []
        if unknown:
            raise ValueError(f"sync.package.helm.stageValues names no stage of spec.rollout: {', '.join(unknown)}")
        return self


def _not_own_dependency(name: str, spec: ModuleSpec) -> None:
    if name in spec.depends_on:
        raise ValueError(f"spec.dependsOn: {name} cannot depend on itself (a dependency cycle)")


class ModuleManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Module"]
    metadata: Metadata
    spec: ModuleSpec

    @model_validator(mode="after")
    def _no_self_dependency(self) -> ModuleManifest:
        _not_own_dependency(self.metadata.name, self.spec)
        return self

    @property
    def name(self) -> str:
        return self.metadata.name


class BootstrapModuleManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["BootstrapModule"]
    metadata: Metadata
    spec: ModuleSpec

    @model_validator(mode="after")
    def _no_self_dependency(self) -> BootstrapModuleManifest:
        _not_own_dependency(self.metadata.name, self.spec)
        return self

    @property
    def name(self) -> str:
        return self.metadata.name


class ClusterStatus(Strict):
    control_plane_ready: bool = Field(default=False, alias="controlPlaneReady")
    kubeconfig_secret: bool = Field(default=False, alias="kubeconfigSecret")

    @property
    def ready(self) -> bool:
        return self.control_plane_ready and self.kubeconfig_secret


class ClusterManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Cluster"]
    metadata: Metadata
    status: ClusterStatus = Field(default_factory=ClusterStatus)

    @property
    def name(self) -> str:
        return self.metadata.name


# --- ModuleRestriction: what a namespace's modules may do (rollout/api/restrictions.py) ----

MAX_RESTRICTION_PATTERNS = 64
MAX_PATTERN_CHARS = 512


class ModuleRestrictionSpec(Strict):
    """What the modules of the restriction's namespace may do; an empty field allows anything."""

    # clusters the namespace's modules may select; None: any cluster
    allowed_clusters: LabelSelector | None = Field(default=None, alias="allowedClusters")
    # regular expressions, each matched against a whole source URL (Git, OCI or Helm repository)
    allowed_source_patterns: list[str] = Field(default_factory=list, alias="allowedSourcePatterns")
    # service accounts the Kustomization/HelmRelease may run as
    allowed_service_accounts: list[str] = Field(default_factory=list, alias="allowedServiceAccounts")
    # filled in when a module's sync names no serviceAccountName
    default_service_account: str | None = Field(default=None, alias="defaultServiceAccount")
    # namespaces the package may write into (its targetNamespace)
    allowed_target_namespaces: list[str] = Field(default_factory=list, alias="allowedTargetNamespaces")

    @field_validator("allowed_source_patterns")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_RESTRICTION_PATTERNS:
            raise ValueError(f"at most {MAX_RESTRICTION_PATTERNS} patterns")
        for pattern in value:
            if not pattern or len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a pattern has 1 to {MAX_PATTERN_CHARS} characters")
            try:
                re.compile(pattern)  # matched with re.fullmatch (rollout/api/restrictions.py)
            except re.error as error:
                raise ValueError(f"pattern {shown(pattern)} is not a regular expression: {error}") from None
        return value

    @field_validator("allowed_service_accounts")
    @classmethod
    def _accounts(cls, value: list[str]) -> list[str]:
        for name in value:
            check_object_name(name, what="service account name")
        return value

    @field_validator("default_service_account")
    @classmethod
    def _default(cls, value: str | None) -> str | None:
        return check_object_name(value, what="service account name") if value is not None else None

    @field_validator("allowed_target_namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        for name in value:
            check_namespace(name)
        return value

    @model_validator(mode="after")
    def _default_is_allowed(self) -> ModuleRestrictionSpec:
        default = self.default_service_account
        if default is not None and self.allowed_service_accounts and default not in self.allowed_service_accounts:
            raise ValueError(f"defaultServiceAccount {default} is not one of allowedServiceAccounts")
        return self


class ModuleRestrictionManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ModuleRestriction"]
    metadata: Metadata
    spec: ModuleRestrictionSpec = Field(default_factory=ModuleRestrictionSpec)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def identity(self) -> str:
        return f"ModuleRestriction {self.metadata.namespace}/{self.metadata.name}"


# --- Release: several modules' revisions, promoted as one unit -------------------------


class ChartVersion(Strict):
    """A Helm chart's version (the HelmChartSource `version` a release gives its module)."""

    version: str

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not value or len(value) > 128 or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"{shown(value)} is not a chart version (1-128 printable characters, no spaces)")
        return value


class ReleaseModule(Strict):
    """One member of a Release: the module, and the revision the release gives it — a Git
    `tag`/`revision`, an OCI `tag`/`digest` or a Helm chart `version`, matching the module's
    source — and, for a Helm package, the `values` of its module layer. Nothing given: the
    module's own sync as written."""

    name: str
    git: GitVersion | None = None
    oci: OCIVersion | None = None
    chart: ChartVersion | None = None
    values: dict[str, Any] | None = None
    # follow this semver range (Flux's ref.semver) when the release auto-promotes
    # (`spec.autoPromote`): a newer version makes a new combination of the release
    semver: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("semver")
    @classmethod
    def _semver(cls, value: str | None) -> str | None:
        return None if value is None else check_range(value)

    @model_validator(mode="after")
    def _one_version(self) -> ReleaseModule:
        given = [name for name in ("git", "oci", "chart") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of 'git', 'oci' or 'chart', not {' and '.join(given)}")
        return self


class ReleaseAutoPromote(Strict):
    """A Release's auto-promotion: its members' `semver` ranges are followed, and each new
    combination the promoter sees is promoted as one — unless `hold` (or `rollout promotion
    hold release/NAME`): then it is recorded as available, promoted on resume."""

    hold: bool = False


class ReleaseSpec(Strict):
    # the clusters every member module is rolled out to (as a Module's selector)
    selector: LabelSelector | None = None
    # the stages every member module moves through, together (as a Module's rollout)
    rollout: RolloutStrategy | None = None
    modules: list[ReleaseModule]
    # promote the release as a unit: whenever the promoter sees a newer version in a
    # member's `semver` range, the combination becomes a new release generation (unless held)
    auto_promote: ReleaseAutoPromote | None = Field(default=None, alias="autoPromote")

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: list[ReleaseModule]) -> list[ReleaseModule]:
        names = [member.name for member in value]
        if len(names) < 2:
            raise ValueError("a release promotes at least two modules together")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"a release names a module once; repeated: {', '.join(repeated)}")
        if len(names) > MAX_DEPENDENCIES:
            raise ValueError(f"at most {MAX_DEPENDENCIES} modules in a release")
        return value


class ReleaseManifest(Strict):
    """Several modules' revisions that move through one rollout strategy together: a
    cluster is done for each member only when every member is on its revision there and
    succeeded (docs/rollout-semantics.md, "Releases"). `rollout apply` turns it into its
    members' ModuleApplied (rollout/api/module_releases.py); the engine never sees it."""

    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Release"]
    metadata: Metadata
    spec: ReleaseSpec

    @property
    def name(self) -> str:
        return self.metadata.name


# --- freeze calendars: deny windows modules obey (rollout/api/freezes.py) -----------------

CLUSTER_SCOPE = "*"
"""The scope of a ClusterFreezeCalendar (every module); a FreezeCalendar's is its namespace."""


class ClusterMetadata(Strict):
    """The metadata of a cluster-scoped object: no namespace."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    # a namespace given anyway is refused with this (not "extra inputs are not permitted")
    namespace: None = Field(default=None, exclude=True)

    @field_validator("namespace", mode="before")
    @classmethod
    def _no_namespace(cls, value: object) -> None:
        if value is not None:
            raise ValueError("a cluster-scoped object has no namespace (a FreezeCalendar is the namespaced kind)")
        return None

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            check_label_key(key)
            check_label_value(label)
        return value


class FreezeCalendarManifest(Strict):
    """Deny windows every Module and BootstrapModule of its namespace obeys."""

    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["FreezeCalendar"]
    metadata: Metadata
    spec: FreezeCalendarSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def scope(self) -> str:
        return self.metadata.namespace

    @property
    def identity(self) -> str:
        """How decisions, status and the CLI name it: `namespace/name`."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


class ClusterFreezeCalendarManifest(Strict):
    """Deny windows every module of the fleet obeys."""

    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ClusterFreezeCalendar"]
    metadata: ClusterMetadata
    spec: FreezeCalendarSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def scope(self) -> str:
        return CLUSTER_SCOPE

    @property
    def identity(self) -> str:
        """How decisions, status and the CLI name it: its name alone."""
        return self.metadata.name


AnyFreezeCalendar = Annotated[FreezeCalendarManifest | ClusterFreezeCalendarManifest, Field(discriminator="kind")]


def calendar_identity(scope: str, name: str) -> str:
    """`namespace/name` of a FreezeCalendar, `name` of a ClusterFreezeCalendar (scope `*`)."""
    return name if scope == CLUSTER_SCOPE else f"{scope}/{name}"


AnyModule = Annotated[ModuleManifest | BootstrapModuleManifest, Field(discriminator="kind")]
Manifest = Annotated[
    ModuleManifest
    | BootstrapModuleManifest
    | ClusterManifest
    | ModuleRestrictionManifest
    | FreezeCalendarManifest
    | ClusterFreezeCalendarManifest
    | ReleaseManifest,
    Field(discriminator="kind"),
]
MANIFEST_ADAPTER: TypeAdapter[Any] = TypeAdapter(Manifest)
KINDS = (
    "Module",
    "BootstrapModule",
    "Cluster",
    "ModuleRestriction",
    "FreezeCalendar",
    "ClusterFreezeCalendar",
    "Release",
)
