"""Validation of rendered Kubernetes objects against the real CRD schemas.

What flows through here: an object as a plain dict (a GitRepository, OCIRepository or
Kustomization the renderer produced, or anything a test API server receives) goes in;
nothing comes out when it is valid, `SchemaError` naming kind, namespace/name and every
offending field path when it is not.

The schemas are the served versions' `openAPIV3Schema` of the upstream CRDs shipped in
`projections/crds/` (see its README for the versions). They are turned into JSON Schema
(Draft 2020-12) the way a Kubernetes API server reads a structural schema:

- `x-kubernetes-int-or-string: true` means "an integer or a string";
- `x-kubernetes-preserve-unknown-fields: true` keeps unknown fields;
- anywhere else an object schema with `properties` and no `additionalProperties` would have
  unknown fields *pruned* silently by the API server. A silently dropped field is almost
  always a typo in a template (`healthcheck:` for `healthChecks:`), so here it is an error;
- `format: int32|int64|date-time` are checked, as the API server does.

`metadata` is checked like the API server's ObjectMeta validation: `name` a DNS-1123
subdomain of at most 253 characters, `namespace` a DNS-1123 label (required for namespaced
kinds), label keys/values and annotation keys well-formed. `apiVersion`/`kind` must name a
version the CRD serves. CEL rules (`x-kubernetes-validations`) are not evaluated.

Two validators, one verdict. Every object is first checked by a validator compiled from
the same structural schema into Python code (`fastjsonschema`): 5 to 7 µs for a GitRepository
or a Kustomization, against 90 to 110 µs for `jsonschema`'s interpreting validator — a tenth
of the applier's CPU per cluster moved. It answers only "valid or not" and stops at the
first problem, so it decides only acceptance: an object it rejects is validated again by
`jsonschema`, whose errors (every one of them) are what `SchemaError` reports, and whose
verdict stands. The compiled one must therefore never accept what `jsonschema` rejects:
the schemas use only keywords both implement alike (`type`, `properties`,
`additionalProperties`, `required`, `items`, `enum`, `pattern`, `minLength`/`maxLength`,
`minItems`/`maxItems`, `minimum`/`maximum`, `minProperties`, `anyOf`, `format`), patterns
are searched with Python's `re` in both (the compiled one reads `$` as the end of the string,
stricter), and the two formats it checks on strings only — `int32`, `int64` — are given to it
as the equivalent bounds (`_bounded_formats`). A keyword or format outside that list makes the
catalog use `jsonschema` alone for that kind; tests/projections/test_crds.py holds the two to
the same verdicts over generated objects.

Loaded CRDs and compiled validators are cached: `builtin_catalog()` is read once per process.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import fastjsonschema
import yaml
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from rollout.api.manifests import DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_NAME, LABEL_VALUE

__all__ = [
    "CRD_DIRECTORY",
    "CRDCatalog",
    "SchemaError",
    "SchemaProblem",
    "builtin_catalog",
    "catalog_from_directory",
    "format_field_path",
    "validate",
]

# the CRDs shipped with the project (package data); `rollout up --clusters` installs them too
CRD_DIRECTORY = Path(__file__).resolve().parent / "crds"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_TOTAL_ANNOTATION_BYTES = 256 * 1024

# ObjectMeta fields a client may send; anything else in metadata is dropped by the server.
_OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "ownerReferences",
        "finalizers",
        "managedFields",
        "selfLink",
    }
)


@dataclass(frozen=True)
class SchemaProblem:
    """One reason an object is invalid: a field path such as `spec.interval` and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


class SchemaError(ValueError):
    """An object does not satisfy its CRD: which object, and every problem with its field."""

    def __init__(
        self,
        *,
        kind: str,
        namespace: str | None,
        name: str | None,
        problems: Sequence[SchemaProblem],
        origin: str | None = None,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.problems = list(problems)
        self.origin = origin
        super().__init__(str(self))

    @property
    def fields(self) -> list[str]:
        return [problem.field for problem in self.problems]

    def with_origin(self, origin: str) -> SchemaError:
        """The same error, saying where the object came from (e.g. a template file)."""
        return SchemaError(
            kind=self.kind, namespace=self.namespace, name=self.name, problems=self.problems, origin=origin
        )

    def __str__(self) -> str:
        who = "/".join(part for part in (self.namespace, self.name) if part) or "<unnamed>"
        origin = f" (rendered from {self.origin})" if self.origin else ""
        lines = [f"{self.kind or '<no kind>'} {who} is invalid{origin}:"]
        lines.extend(f"  - {problem}" for problem in self.problems)
        return "\n".join(lines)


def format_field_path(parts: Iterable[str | int]) -> str:
    """`["spec", "healthChecks", 0, "name"]` -> `spec.healthChecks[0].name`.

    Keys that are not identifiers (label keys like `rollout.dev/module`) are bracketed:
    `metadata.labels["rollout.dev/module"]`.
    """
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


# --- turning an openAPIV3Schema into a JSON Schema -------------------------------------


def _structural(schema: Any) -> Any:
    """A JSON Schema that accepts what the API server keeps, and rejects what it would prune."""
    if not isinstance(schema, dict):
        return schema
    result = {key: value for key, value in schema.items() if key not in ("default", "description")}
    if "properties" in result:
        result["properties"] = {name: _structural(sub) for name, sub in result["properties"].items()}
    if isinstance(result.get("items"), dict):
        result["items"] = _structural(result["items"])
    if isinstance(result.get("additionalProperties"), dict):
        result["additionalProperties"] = _structural(result["additionalProperties"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in result:
            result[combinator] = [_structural(sub) for sub in result[combinator]]
    if "not" in result:
        result["not"] = _structural(result["not"])
    if result.get("x-kubernetes-int-or-string") and "anyOf" not in result:
        result["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if result.get("nullable") and "type" in result:
        result["type"] = [result["type"], "null"]
    preserve = result.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in result and "additionalProperties" not in result and not preserve:
        result["additionalProperties"] = False
    return result


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())

    @checker.checks("int32")
    def _int32(instance: object) -> bool:
        return not isinstance(instance, int) or -(2**31) <= instance < 2**31

    @checker.checks("int64")
    def _int64(instance: object) -> bool:
        return not isinstance(instance, int) or -(2**63) <= instance < 2**63

    @checker.checks("date-time")
    def _date_time(instance: object) -> bool:
        if not isinstance(instance, str):
            return True
        if not _RFC3339.match(instance):
            return False
        try:
            datetime.fromisoformat(instance.replace("z", "Z").replace("t", "T"))
        except ValueError:
            return False
        return True

    return checker


_FORMAT_CHECKER = _format_checker()

# --- the compiled validator (acceptance only; see the module docstring) --------------------

# keywords both validators implement alike, and those without effect on validation
_COMPILED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minProperties",
        "anyOf",
        "format",
        "nullable",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-validations",  # CEL: evaluated by neither
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-embedded-resource",
    }
)
_INTEGER_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _date_time_format(instance: str) -> bool:
    return bool(_FORMAT_CHECKER.conforms(instance, "date-time"))


class _NotCompilable(ValueError):
    """A schema uses something the compiled validator may judge differently."""


def _bounded_formats(schema: Any) -> Any:
    """`schema` for the compiled validator: the integer formats (which it would check on
    strings only) as the bounds `_FORMAT_CHECKER` checks them with; `_NotCompilable` for a
    keyword or format outside what both validators implement alike."""
    if isinstance(schema, list):
        return [_bounded_formats(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    unknown = set(schema) - _COMPILED_KEYWORDS
    if unknown:
        raise _NotCompilable(f"keywords {sorted(unknown)}")
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            result[key] = {name: _bounded_formats(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf"):
            result[key] = _bounded_formats(value)
        elif key == "x-kubernetes-validations":
            continue  # a list of CEL rules, not schemas
        else:
            result[key] = value
    form = result.get("format")
    if form in _INTEGER_BOUNDS:
        low, high = _INTEGER_BOUNDS[form]
        del result["format"]
        return {"allOf": [result, {"minimum": low, "maximum": high}]}
    if form is not None and form != "date-time":
        raise _NotCompilable(f"format {form!r}")
    return result


def _compiled_validator(schema: dict[str, Any]) -> Callable[[Any], Any] | None:
    """The structural `schema` compiled to Python (`fastjsonschema`, draft 7: the keywords
    used mean the same there), or None when it cannot be compiled faithfully."""
    try:
        bounded = _bounded_formats(schema)
        return fastjsonschema.compile(
            {"$schema": "http://json-schema.org/draft-07/schema#", **bounded},
            formats={"date-time": _date_time_format},
            use_default=False,  # never fill in defaults: validation must not change the object
        )
    except (_NotCompilable, fastjsonschema.JsonSchemaDefinitionException):
        return None


def _accepts(compiled: Callable[[Any], Any] | None, obj: Any) -> bool:
    if compiled is None:
        return False
    try:
        compiled(obj)
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


# --- turning jsonschema errors into problems a user can act on ---------------------------


def _json(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true/false)",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


def _problems_of(error: ValidationError) -> Iterator[SchemaProblem]:
    path = list(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    validator = error.validator
    expected: Any = error.validator_value  # what the failing keyword asks for
    if validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        for extra in sorted(set(instance) - set(known)):
            close = difflib.get_close_matches(str(extra), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(known)}"
            yield SchemaProblem(
                format_field_path([*path, extra]),
                f"unknown field (the API server would silently drop it){hint}",
            )
        return
    if validator == "required" and isinstance(instance, dict):
        for missing in expected:
            if missing not in instance:
                yield SchemaProblem(format_field_path([*path, missing]), "required field is missing")
        return
    where = format_field_path(path)
    if validator == "type":
        wanted: list[str] = expected if isinstance(expected, list) else [expected]
        reason = f"{_json(instance)} is not {' or '.join(_TYPE_NAMES.get(t, t) for t in wanted)}"
    elif validator == "pattern":
        reason = f"{_json(instance)} does not match the pattern {expected}"
    elif validator == "enum":
        reason = f"{_json(instance)} is not one of {', '.join(_json(v) for v in expected)}"
    elif validator == "anyOf" and schema.get("x-kubernetes-int-or-string"):
        reason = f"{_json(instance)} is not an integer or a string"
    elif validator == "format":
        reason = f"{_json(instance)} is not a valid {expected}"
    elif validator in ("maxLength", "minLength"):
        bound = "at most" if validator == "maxLength" else "at least"
        reason = f"{_json(instance)} must be {bound} {expected} characters long"
    else:
        reason = error.message
    yield SchemaProblem(where, reason)


# --- metadata: what ObjectMeta validation of an API server checks ------------------------


def _check_qualified_key(key: Any) -> str | None:
    if not isinstance(key, str):
        return "key must be a string"
    return _qualified_key_problem(key)


@functools.lru_cache(maxsize=1024)
def _qualified_key_problem(key: str) -> str | None:
    """The problem of a label or annotation key; remembered (bounded): a fleet's objects use
    the same few keys."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"key prefix {prefix!r} must be a DNS-1123 subdomain of at most 253 characters"
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        return (
            f"key name {name!r} must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def _metadata_problems(metadata: Any, *, namespaced: bool) -> list[SchemaProblem]:
    if not isinstance(metadata, dict):
        return [SchemaProblem("metadata", f"{_json(metadata)} is not a mapping")]
    problems: list[SchemaProblem] = []
    for extra in sorted(set(metadata) - _OBJECT_META_FIELDS):
        problems.append(SchemaProblem(format_field_path(["metadata", extra]), "unknown metadata field"))
    name = metadata.get("name")
    if name is None:
        problems.append(SchemaProblem("metadata.name", "required field is missing"))
    elif not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        problems.append(
            SchemaProblem(
                "metadata.name",
                f"{_json(name)} is not a DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', "
                "starting and ending with an alphanumeric, at most 253 characters",
            )
        )
    namespace = metadata.get("namespace")
    if namespace is None:
        if namespaced:
            problems.append(SchemaProblem("metadata.namespace", "required field is missing (namespaced kind)"))
    elif not namespaced:
        problems.append(SchemaProblem("metadata.namespace", "must not be set: the kind is cluster-scoped"))
    elif not isinstance(namespace, str) or len(namespace) > 63 or not DNS1123_LABEL.match(namespace):
        problems.append(
            SchemaProblem(
                "metadata.namespace",
                f"{_json(namespace)} is not a DNS-1123 label: lower-case alphanumerics and '-', "
                "starting and ending with an alphanumeric, at most 63 characters",
            )
        )
    problems.extend(_label_problems(metadata.get("labels")))
    problems.extend(_annotation_problems(metadata.get("annotations")))
    return problems


def _label_problems(labels: Any) -> list[SchemaProblem]:
    if labels is None:
        return []
    problems, _ = _entry_problems(labels, "labels", _label_value_problem)
    return problems


def _label_value_problem(value: str) -> str | None:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        return (
            f"{_json(value)} is not a label value: at most 63 alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )
    return None


def _annotation_problems(annotations: Any) -> list[SchemaProblem]:
    if annotations is None:
        return []
    problems, strings = _entry_problems(annotations, "annotations")
    total = sum(len(str(key).encode()) + len(value.encode()) for key, value in strings)
    if total > _TOTAL_ANNOTATION_BYTES:
        problems.append(SchemaProblem("metadata.annotations", f"{total} bytes, more than the 256 KiB allowed"))
    return problems


def _entry_problems(
    entries: Any, what: str, value_problem: Callable[[str], str | None] | None = None
) -> tuple[list[SchemaProblem], list[tuple[Any, str]]]:
    """The problems of a labels or annotations mapping, entry by entry (not a mapping, a
    key that is not a qualified name, a value that is not a string or that `value_problem`
    refuses), and its entries with string values."""
    if not isinstance(entries, dict):
        return [SchemaProblem(f"metadata.{what}", f"{_json(entries)} is not a mapping")], []
    problems: list[SchemaProblem] = []
    strings: list[tuple[Any, str]] = []
    for key, value in entries.items():
        reasons = []
        key_problem = _check_qualified_key(key)
        if key_problem:
            reasons.append(key_problem)
        if not isinstance(value, str):
            reasons.append(f"{_json(value)} is not a string")
        else:
            strings.append((key, value))
            reason = value_problem(value) if value_problem is not None else None
            if reason is not None:
                reasons.append(reason)
        if reasons:  # the field's path only for a problem: formatting it is most of the cost
            field = format_field_path(["metadata", what, str(key)])
            problems.extend(SchemaProblem(field, reason) for reason in reasons)
    return problems, strings


# --- the catalog ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _ServedVersion:
    group: str
    version: str
    kind: str
    namespaced: bool
    schema: Mapping[str, Any]


class CRDCatalog:
    """The served versions of a set of CRDs, and validation of objects against them."""

    def __init__(self, definitions: Iterable[Mapping[str, Any]]) -> None:
        self.definitions: list[Mapping[str, Any]] = []
        self._served: dict[tuple[str, str], dict[str, _ServedVersion]] = {}
        self._validators: dict[tuple[str, str, str], Draft202012Validator] = {}
        self._compiled: dict[tuple[str, str, str], Callable[[Any], Any] | None] = {}
        for crd in definitions:
            if not isinstance(crd, Mapping) or crd.get("kind") != "CustomResourceDefinition":
                continue
            self.definitions.append(crd)
            spec = crd["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for version in spec.get("versions", []):
                if not version.get("served"):
                    continue
                self._served.setdefault((group, kind), {})[version["name"]] = _ServedVersion(
                    group=group,
                    version=version["name"],
                    kind=kind,
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    schema=version["schema"]["openAPIV3Schema"],
                )

    @classmethod
    def from_directory(cls, directory: Path) -> CRDCatalog:
        """Every CRD in the `*.yaml` files of a directory (multi-document files are fine)."""
        documents: list[Mapping[str, Any]] = []
        for path in sorted(Path(directory).glob("*.yaml")):
            documents.extend(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
        return cls(documents)

    @property
    def kinds(self) -> list[tuple[str, str]]:
        """(group, kind) of every CRD with at least one served version."""
        return sorted(self._served)

    def served_api_versions(self, kind: str) -> list[str]:
        return sorted(
            f"{group}/{version}"
            for (group, crd_kind), versions in self._served.items()
            if crd_kind == kind
            for version in versions
        )

    def schema(self, api_version: str, kind: str) -> Mapping[str, Any]:
        """The upstream `openAPIV3Schema` of a served version (not the structural rewrite)."""
        served = self._lookup(api_version, kind)
        if served is None:
            raise KeyError(f"{api_version} {kind} is not a served version of any known CRD")
        return served.schema

    def _lookup(self, api_version: str, kind: str) -> _ServedVersion | None:
        group, _, version = api_version.rpartition("/")
        return self._served.get((group, kind), {}).get(version)

    def _validator(self, served: _ServedVersion) -> Draft202012Validator:
        key = (served.group, served.version, served.kind)
        if key not in self._validators:
            schema = _structural(copy.deepcopy(dict(served.schema)))
            self._validators[key] = Draft202012Validator(schema, format_checker=_FORMAT_CHECKER)
        return self._validators[key]

    def _compiled_validator(self, served: _ServedVersion) -> Callable[[Any], Any] | None:
        key = (served.group, served.version, served.kind)
        if key not in self._compiled:
            self._compiled[key] = _compiled_validator(_structural(copy.deepcopy(dict(served.schema))))
        return self._compiled[key]

    def problems(self, obj: Mapping[str, Any]) -> list[SchemaProblem]:
        """Every reason the object would be rejected (or silently changed) by an API server."""
        if not isinstance(obj, Mapping):
            return [SchemaProblem("", f"{_json(obj)} is not a mapping")]
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(kind, str) or not kind:
            return [SchemaProblem("kind", "required field is missing")]
        if not isinstance(api_version, str) or not api_version:
            return [SchemaProblem("apiVersion", "required field is missing")]
        served = self._lookup(api_version, kind)
        if served is None:
            known = self.served_api_versions(kind)
            if known:
                reason = f"{api_version!r} is not served for {kind}; use {' or '.join(known)}"
            else:
                reason = f"no known CRD defines kind {kind!r}; known kinds: " + ", ".join(k for _, k in self.kinds)
            return [SchemaProblem("apiVersion" if known else "kind", reason)]
        problems = _metadata_problems(obj.get("metadata"), namespaced=served.namespaced)
        if _accepts(self._compiled_validator(served), obj):
            return sorted(problems, key=lambda problem: problem.field)  # jsonschema would find none
        seen: set[SchemaProblem] = set(problems)
        errors = sorted(self._validator(served).iter_errors(dict(obj)), key=lambda e: [str(p) for p in e.absolute_path])
        for error in errors:
            if list(error.absolute_path)[:1] == ["metadata"]:
                continue  # ObjectMeta is checked above, field by field
            for problem in _problems_of(error):
                if problem not in seen:
                    seen.add(problem)
                    problems.append(problem)
        return sorted(problems, key=lambda problem: problem.field)

    def validate(self, obj: Mapping[str, Any], *, origin: str | None = None) -> None:
        """Raise SchemaError naming kind, namespace/name and every invalid field."""
        problems = self.problems(obj)
        if problems:
            metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
            metadata = metadata if isinstance(metadata, Mapping) else {}
            raise SchemaError(
                kind=str(obj.get("kind", "")) if isinstance(obj, Mapping) else "",
                namespace=_str_or_none(metadata.get("namespace")),
                name=_str_or_none(metadata.get("name")),
                problems=problems,
                origin=origin,
            )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@functools.cache
def builtin_catalog() -> CRDCatalog:
    """The CRDs shipped in `projections/crds/`, loaded once per process."""
    package = resources.files("projections") / "crds"
    documents: list[Mapping[str, Any]] = []
    for entry in sorted(package.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            documents.extend(doc for doc in yaml.safe_load_all(entry.read_text(encoding="utf-8")) if doc)
    return CRDCatalog(documents)


@functools.cache
def _catalog_for(directory: str) -> CRDCatalog:
    return CRDCatalog.from_directory(Path(directory))


def catalog_from_directory(directory: Path) -> CRDCatalog:
    """The CRDs of a directory (e.g. `shared/crds`), loaded once per process and path."""
    return _catalog_for(str(Path(directory).resolve()))


def validate(obj: Mapping[str, Any], *, origin: str | None = None) -> None:
    """Validate against the shipped CRDs; raise SchemaError naming every invalid field."""
    builtin_catalog().validate(obj, origin=origin)
