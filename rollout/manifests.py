"""Manifests users write: Module, BootstrapModule and Cluster (`rollout.dev/v1alpha1`).

A file is a stream of YAML documents. `load_manifest_files` parses every document of every
file, validates each against the pydantic models below and either returns all of them or
raises `ManifestError` listing *every* invalid document with its file, document index,
field path and reason. Callers publish nothing from a file that has any invalid document.

Validation follows the platforms the manifests end up on: DNS-1123 names (Kubernetes),
Flux's URL rules (`http|https|ssh://` for Git, `oci://` for OCI) and immutable versions
only — a Git `tag` or `revision` (commit), an OCI `tag` or `digest`, never a branch, so that
a fleet's state is reproducible from the log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

API_VERSION = "rollout.dev/v1alpha1"

# Kubernetes name patterns, shared with projections/ (CRD validation, object names, paths).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_GIT_URL = re.compile(r"^(http|https|ssh)://")
_OCI_URL = re.compile(r"^oci://")
# Flux checks out `spec.ref.commit` by full hash: a short SHA never resolves.
_COMMIT = re.compile(r"^((sha1:)?[0-9a-f]{40}|sha256:[0-9a-f]{64})$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$")
_PERCENT = re.compile(r"^([0-9]{1,3})%$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Strict(BaseModel):
    """Base for manifest parts: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def check_dns1123_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: lower-case alphanumerics and '-', "
            "starting and ending with an alphanumeric, at most 63 characters"
        )
    return value


def check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {key!r}: prefix {prefix!r} is not a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"label key {key!r}: name part must be 1-63 alphanumerics, '-', '_' or '.'")
    return key


def check_label_value(value: str) -> str:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        raise ValueError(f"label value {value!r}: at most 63 alphanumerics, '-', '_' or '.'")
    return value


def parse_duration(text: str) -> float:
    """Seconds in a Go/Flux duration string such as `5m`, `1h30m`, `90s`, `250ms`."""
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration such as 90s, 5m or 1h30m")
    total = 0.0
    for number, _, unit in re.findall(r"([0-9]+(\.[0-9]+)?)(ms|s|m|h)", text):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    if not math.isfinite(total):
        raise ValueError(f"{text[:40]!r} is too long a duration")
    return total


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
        if self.revision is not None and not _COMMIT.match(self.revision):
            raise ValueError(
                f"revision {self.revision!r} is not a full commit hash (40 hex digits, optionally "
                "prefixed sha1:, or sha256:<64 hex>); Flux cannot check out a short hash"
            )
        if self.tag is not None and not self.tag.strip():
            raise ValueError("tag must not be empty")
        return self

    @property
    def label(self) -> str:
        if self.tag is not None:
            return self.tag
        revision = self.revision or ""
        return revision if revision.startswith("sha256:") else f"sha1:{revision.removeprefix('sha1:')}"


class GitSource(Strict):
    url: str
    version: GitVersion

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not _GIT_URL.match(value):
            raise ValueError(
                f"{value!r}: a Git URL must start with http://, https:// or ssh:// "
                "(scp-style git@host:repo is not accepted by Flux)"
            )
        return value


class OCIVersion(Strict):
    tag: str | None = None
    digest: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> OCIVersion:
        if (self.tag is None) == (self.digest is None):
            raise ValueError("give exactly one of 'tag' or 'digest'")
        if self.digest is not None and not _DIGEST.match(self.digest):
            raise ValueError(f"digest {self.digest!r} must look like sha256:<64 hex>")
        return self

    @property
    def label(self) -> str:
        return self.tag if self.tag is not None else self.digest  # type: ignore[return-value]


class OCISource(Strict):
    url: str
    version: OCIVersion

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not _OCI_URL.match(value):
            raise ValueError(f"{value!r}: an OCI URL must start with oci://")
        return value


class Source(Strict):
    git: GitSource | None = None
    oci: OCISource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        if (self.git is None) == (self.oci is None):
            raise ValueError("give exactly one of 'git' or 'oci'")
        return self

    @property
    def revision(self) -> str:
        """The version label users and appliers talk about: a tag, commit or digest."""
        if self.git is not None:
            return self.git.version.label
        return self.oci.version.label  # type: ignore[union-attr]


class KustomizePackage(Strict):
    path: str = "./"
    substitute: dict[str, str] = Field(default_factory=dict)

    @field_validator("substitute")
    @classmethod
    def _variables(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _VARIABLE.match(name):
                raise ValueError(f"substitute key {name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return value


class Package(Strict):
    kustomize: KustomizePackage = Field(default_factory=KustomizePackage)


class Sync(Strict):
    """One unit to apply: a source at an immutable version and a kustomize package."""

    source: Source
    package: Package = Field(default_factory=Package)

    @property
    def revision(self) -> str:
        return self.source.revision


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
        if not _VARIABLE.match(value):
            raise ValueError(f"binding name {value!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Binding:
        given = [v for v in (self.value, self.from_label, self.from_annotation) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'value', 'fromLabel' or 'fromAnnotation'")
        return self


# --- rollout strategy -----------------------------------------------------------------

IntOrPercent = int | str


def _check_int_or_percent(value: IntOrPercent | None, field: str) -> IntOrPercent | None:
    if value is None or isinstance(value, int):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{field} must not be negative")
        return value
    match = _PERCENT.match(value)
    if not match or int(match.group(1)) > 100:
        raise ValueError(f"{field} {value!r} must be an integer or a percentage 0%..100%")
    return value


class Stage(Strict):
    name: str
    selector: LabelSelector | None = None
    max_concurrency: IntOrPercent | None = Field(default=None, alias="maxConcurrency")
    max_failures: IntOrPercent | None = Field(default=None, alias="maxFailures")
    min_success_time: str | None = Field(default=None, alias="minSuccessTime")
    require_approval: bool = Field(default=False, alias="requireApproval")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @field_validator("max_concurrency")
    @classmethod
    def _concurrency(cls, value: IntOrPercent | None) -> IntOrPercent | None:
        checked = _check_int_or_percent(value, "maxConcurrency")
        if checked == 0 or checked == "0%":
            raise ValueError("maxConcurrency must be at least 1 (or a percentage above 0%)")
        return checked

    @field_validator("max_failures")
    @classmethod
    def _failures(cls, value: IntOrPercent | None) -> IntOrPercent | None:
        return _check_int_or_percent(value, "maxFailures")

    @field_validator("min_success_time")
    @classmethod
    def _soak(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value


class RolloutStrategy(Strict):
    stages: list[Stage] = Field(default_factory=list)
    progress_deadline: str | None = Field(default=None, alias="progressDeadline")
    on_failure: Literal["Halt", "Rollback"] = Field(default="Halt", alias="onFailure")
    sorting_label_key: str | None = Field(default=None, alias="sortingLabelKey")

    @field_validator("progress_deadline")
    @classmethod
    def _deadline(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

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
        return self


class ModuleSpec(Strict):
    selector: LabelSelector | None = None
    sync: Sync
    bindings: list[Binding] = Field(default_factory=list)
    rollout: RolloutStrategy | None = None

    @model_validator(mode="after")
    def _unique_bindings(self) -> ModuleSpec:
        names = [b.name for b in self.bindings]
        reserved = {"CLUSTER_NAME", "CLUSTER_NAMESPACE"} & set(names)
        if reserved:
            raise ValueError(f"bindings {sorted(reserved)} are reserved and always bound by the engine")
        if len(names) != len(set(names)):
            raise ValueError("binding names must be unique")
        return self


class ModuleManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Module"]
    metadata: Metadata
    spec: ModuleSpec

    @property
    def name(self) -> str:
        return self.metadata.name


class BootstrapModuleManifest(Strict):
    api_version: Literal["rollout.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["BootstrapModule"]
    metadata: Metadata
    spec: ModuleSpec

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


AnyModule = Annotated[ModuleManifest | BootstrapModuleManifest, Field(discriminator="kind")]
Manifest = Annotated[ModuleManifest | BootstrapModuleManifest | ClusterManifest, Field(discriminator="kind")]
MANIFEST_ADAPTER: TypeAdapter[Any] = TypeAdapter(Manifest)
KINDS = ("Module", "BootstrapModule", "Cluster")


# --- loading files --------------------------------------------------------------------


class DocumentProblem(BaseModel):
    file: str
    document: int
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}: document {self.document}"
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


class ManifestError(Exception):
    """Every invalid document of a set of files, each with file, document index, field."""

    def __init__(self, problems: Sequence[DocumentProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _field_path(location: Iterable[int | str], kind: str | None) -> str:
    parts: list[str] = []
    for item in location:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in KINDS or item in {kind, "function-after", "function-before"}:
            continue  # pydantic's discriminator / validator tags, not fields
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts)


def parse_manifest(document: Any, *, file: str, index: int) -> Any:
    """Validate one parsed YAML document; raise ManifestError naming file/document/field."""
    if not isinstance(document, dict):
        raise ManifestError([DocumentProblem(file=file, document=index, field="", reason="not a mapping")])
    kind = document.get("kind")
    if kind not in KINDS:
        raise ManifestError(
            [
                DocumentProblem(
                    file=file,
                    document=index,
                    field="kind",
                    reason=f"{kind!r} is not one of {', '.join(KINDS)}",
                )
            ]
        )
    try:
        return MANIFEST_ADAPTER.validate_python(document)
    except ValidationError as error:
        raise ManifestError(
            [
                DocumentProblem(
                    file=file,
                    document=index,
                    field=_field_path(item["loc"], kind),
                    reason=item["msg"].removeprefix("Value error, "),
                )
                for item in error.errors()
            ]
        ) from None


def load_manifest_text(text: str, *, file: str) -> list[Any]:
    problems: list[DocumentProblem] = []
    manifests: list[Any] = []
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError(
            [DocumentProblem(file=file, document=0, field="", reason=f"not valid YAML{where}: {error}")]
        ) from None
    for index, document in enumerate(documents):
        if document is None:
            continue  # an empty document between '---' separators
        try:
            manifests.append(parse_manifest(document, file=file, index=index))
        except ManifestError as error:
            problems.extend(error.problems)
    if problems:
        raise ManifestError(problems)
    return manifests


def load_manifest_files(paths: Sequence[str | Path]) -> list[Any]:
    """All manifests of the given files (directories: their *.yaml/*.yml, sorted).

    Raises ManifestError with every problem of every file; returns nothing partial.
    """
    problems: list[DocumentProblem] = []
    manifests: list[Any] = []
    for path in expand_paths(paths):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            problems.append(DocumentProblem(file=str(path), document=0, field="", reason=str(error)))
            continue
        try:
            manifests.extend(load_manifest_text(text, file=str(path)))
        except ManifestError as error:
            problems.extend(error.problems)
    if problems:
        raise ManifestError(problems)
    return manifests


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    expanded: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            expanded.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")))
        else:
            expanded.append(path)
    return expanded
