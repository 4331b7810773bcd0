"""Rendering of Flux primitives from the sync records of an assemblage.

What flows through here: one cluster's assemblage snapshot and one of its sync records go
in; two plain dicts come out — the source (a `GitRepository`, `OCIRepository` or
`HelmRepository`) and the `Kustomization` or `HelmRelease` (projections/render_helm.py)
that applies it — already validated against the real CRD schemas
(`projections.crds`), ready for a sink to write to a directory or apply to a cluster.

Where the objects go depends on the assemblage:

- RemoteAssemblage (BootstrapModules): applied in the management cluster, in the cluster's
  namespace, with `spec.kubeConfig.secretRef` -> `<cluster>-kubeconfig` (key `value`), the
  secret Cluster API writes in that namespace.
- ProxyAssemblage (Modules): applied inside the workload cluster, in `proxy_namespace`
  (`flux-system`), reconciled by the cluster's own Flux; no kubeConfig.

Templates. The objects are Jinja2 templates (`projections/templates/*.yaml.j2`) rendered in
an `ImmutableSandboxedEnvironment` with `StrictUndefined`. The `finalize` hook emits every
`{{ value }}` as one JSON-encoded scalar or flow collection — JSON is YAML — so a value with
newlines, `{{ }}`, `: `, `#`, `&anchor`, `*alias` or `---` in it is always just a string and
can never change the shape of the document. The rendered text is parsed with
`yaml.safe_load` (duplicate keys are errors) and validated. A template directory given by the
user is searched first, so any of the three templates can be replaced; the built-in ones
stay reachable as `builtin/<name>` for `{% extends %}` and their `extra_labels`,
`extra_annotations` and `extra_spec` blocks. Whatever a template does, it must keep the
object's name, namespace and `rollout.dev/*` labels — sinks and appliers find and prune
objects by them.

Template variables:

    name, namespace        the object's metadata.name / metadata.namespace
    labels, annotations    mappings: rollout.dev/* labels, the rollout.dev/revision annotation
    interval               reconcile interval of both objects: the sync's `interval`, else the
                           renderer's (`--interval`, "10m")
    prune                  true
    module, module_namespace, cluster, cluster_namespace, revision
    assemblage             "remote" or "proxy"
    source                 {kind, name, url, ref, ...}; ref is {tag} or {commit} (Git),
                           {tag} or {digest} (OCI), {} (Helm repository); and how Flux
                           reaches and trusts it (None / false when not given):
                             secret_ref        name of the Secret with credentials
                             cert_secret_ref   name of the Secret with ca.crt / tls.crt+key
                                               (OCI, Helm)
                             insecure          plain HTTP (OCI, oci:// Helm)
                             provider          generic|aws|azure|gcp (OCI, oci:// Helm)
                             verify            {provider, secretRef?, matchOIDCIdentity?}
                                               as Flux spells it (OCI)
                             pass_credentials  (https Helm)
    kustomize              {path, substitute, substitute_from, target_namespace,
                           service_account_name, wait, force, timeout, retry_interval,
                           health_checks, health_check_exprs, patches, components,
                           decryption} — substitute with bindings already expanded; the
                           lists and decryption already in Flux's shape (field names as
                           in the CRD), None / [] when not given
    helm                   {chart, version, release_name, target_namespace, storage_namespace,
                           create_namespace, service_account_name, timeout, max_history,
                           merged_values} for a Helm sync, else None — see render_helm.py
    kubeconfig             {secretRef: {name, key}} for remote, none for proxy

Secrets named by a sync (`secretRef`, `certSecretRef`, `verify.secretRef`,
`decryption.secretRef`, `substituteFrom` of kind Secret) are read by the Flux that
reconciles the objects, in the objects' namespace: for a proxy assemblage that is
`proxy_namespace` (`flux-system`) in the workload cluster, for a remote one the cluster's
namespace in the management cluster. `serviceAccountName` and `healthChecks` act in the
workload cluster in both cases (remote: through the kubeconfig).

Compiled once per sync. A module that moves gives every cluster it moves the same sync;
only the cluster's names differ. Through the built-in templates (no template directory),
a sync is rendered once per (assemblage kind, cluster namespace, sync) with placeholders for
the cluster's names, and each cluster's objects — and their YAML text, `render_yaml` — are
that compiled sync filled in (projections/render_cache.py says when that equals rendering
from scratch, and how it is bounded). Every filled object is validated against its CRD and
checked (identity, source reference) as one rendered from scratch is: ~55 µs a sync and
cluster instead of ~0.8 ms with its dump.

Errors: a template that does not parse or fails while rendering raises `TemplateError`
naming the template file and line; an object that does not satisfy its CRD raises
`projections.crds.SchemaError` naming kind, namespace/name, field and template.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import yaml
from jinja2 import ChoiceLoader, FileSystemLoader, PackageLoader, PrefixLoader, StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel

from projections import crds
from projections.flux_yaml import dump_objects
from projections.render_cache import (
    CLUSTER_SLOT,
    COMPILED_SYNCS,
    NAME_SLOT,
    CompiledSync,
    RenderCache,
    compile_objects,
    fill,
    fill_text,
    free_of_slots,
)
from projections.render_helm import (
    HELM_CHART_LAYER,
    NO_SOURCE_ACCESS,
    helm_release_context,
    helm_repository_context,
    source_reference,
)
from rollout.api.flux_options import OCIVerification
from rollout.api.manifests import DNS1123_LABEL, KustomizePackage, check_dns1123_label, parse_duration
from rollout.wire.assemblages import Assemblage, AssignedSync

__all__ = [
    "KUBECONFIG_SECRET_KEY",
    "MANAGED_BY",
    "TEMPLATE_NAMES",
    "FluxRenderer",
    "TemplateError",
    "object_name",
    "yaml_value",
]

MANAGED_BY = "rollout"
KUBECONFIG_SECRET_KEY = "value"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_MODULE = "rollout.dev/module"
LABEL_CLUSTER = "rollout.dev/cluster"
LABEL_ASSEMBLAGE = "rollout.dev/assemblage"
ANNOTATION_REVISION = "rollout.dev/revision"
ANNOTATION_GENERATION = "rollout.dev/generation"  # the module generation assigned (status reports echo it)

GIT_TEMPLATE = "gitrepository.yaml.j2"
OCI_TEMPLATE = "ocirepository.yaml.j2"
KUSTOMIZATION_TEMPLATE = "kustomization.yaml.j2"
HELM_REPOSITORY_TEMPLATE = "helmrepository.yaml.j2"
HELM_RELEASE_TEMPLATE = "helmrelease.yaml.j2"
TEMPLATE_NAMES = (GIT_TEMPLATE, OCI_TEMPLATE, KUSTOMIZATION_TEMPLATE, HELM_REPOSITORY_TEMPLATE, HELM_RELEASE_TEMPLATE)
_SOURCE_TEMPLATES = {
    "GitRepository": GIT_TEMPLATE,
    "OCIRepository": OCI_TEMPLATE,
    "HelmRepository": HELM_REPOSITORY_TEMPLATE,
}
BUILTIN_PREFIX = "builtin"

_MAX_NAME = 63
_HASH_CHARS = 10
_COMMIT_PREFIX = re.compile(r"^(sha1|sha256):")


# --- names --------------------------------------------------------------------------------


def object_name(module: str, cluster: str) -> str:
    """The stable name of a sync's Flux objects: `<module>-<cluster>`.

    When that is not a DNS-1123 label of at most 63 characters (the limit of the label
    value `kustomize.toolkit.fluxcd.io/name` Flux puts on everything it applies), it is
    truncated (and lower-cased, other characters replaced by `-`) and suffixed with `-` and
    the first 10 hex characters of the sha256 of the full name: still stable, still valid,
    distinct for distinct inputs in practice.
    """
    full = f"{module}-{cluster}"
    if len(full) <= _MAX_NAME and DNS1123_LABEL.match(full):
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", full.lower())
    prefix = cleaned[: _MAX_NAME - _HASH_CHARS - 1].strip("-")
    return f"{prefix}-{digest}" if prefix else digest


# --- every value as one YAML flow node ------------------------------------------------------

# Characters PyYAML does not accept raw in a stream, or reads as line breaks (\x85, \u2028,
# \u2029) and would fold inside a quoted scalar: always escaped.
_UNSAFE_IN_YAML = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def _quote(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return _UNSAFE_IN_YAML.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def yaml_value(value: Any) -> str:
    """One JSON-encoded scalar or flow collection: a single YAML node whatever the value is.

    This is the environment's `finalize`: it runs on every `{{ expression }}` output.
    """
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined: raises UndefinedError naming the variable
        raise jinja2.UndefinedError("undefined value")  # pragma: no cover - other Undefineds
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} cannot be written to a Kubernetes object")
        mantissa, e, exponent = repr(value).partition("e")  # repr: 1e+20, 1.5e-07, 0.25
        if "." not in mantissa:
            mantissa += ".0"  # PyYAML (YAML 1.1) reads `1e+20` as a string, `1.0e+20` as a float
        return mantissa + e + exponent
    if isinstance(value, str):
        return _quote(str.__str__(value))
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"mapping key {key!r} is not a string")
            items.append(f"{_quote(str.__str__(key))}: {yaml_value(item)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(item) for item in value) + "]"
    raise TypeError(f"a {type(value).__name__} cannot be written as a YAML value; convert it first")


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it (the constructors, ours included, stay
Python): the same documents and errors with their marks, and 7.7x faster — parsing a
snapshot's two rendered objects took 2.7 ms of its ~3.5 ms render, now 0.35 ms."""


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """safe_load, but a key given twice is an error instead of the last one silently winning."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


# --- errors ----------------------------------------------------------------------------------


class TemplateError(Exception):
    """A template failed: which template file, which line (when known), and why."""

    def __init__(self, *, template: str, filename: str | None, lineno: int | None, reason: str) -> None:
        self.template = template
        self.filename = filename
        self.lineno = lineno
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.filename or self.template
        if self.lineno is not None:
            where += f", line {self.lineno}"
        return f"template {where}: {self.reason}"


def _template_frame(error: BaseException) -> tuple[str | None, int | None]:
    """The innermost traceback frame inside a template (Jinja maps them to template lines)."""
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.endswith(".j2"):
            found = (frame.filename, frame.lineno)
    return found


# --- template variables of the source and the kustomize package ------------------------------


def _flux(model: BaseModel) -> dict[str, Any]:
    """A manifest part in Flux's own shape: the API types use Flux's field names."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def source_context(sync: AssignedSync) -> dict[str, Any]:
    """`source` but its name: kind, url, ref, and how Flux reaches and trusts the source."""
    source = sync.sync.source
    if source.helm is not None:
        return helm_repository_context(sync)
    if source.git is not None:
        version = source.git.version
        ref = (
            {"tag": version.tag}
            if version.tag is not None
            else {"commit": _COMMIT_PREFIX.sub("", version.revision or "")}
        )
        access = {"secret_ref": source.git.secret_ref.name if source.git.secret_ref else None}
        return {"kind": "GitRepository", "url": source.git.url, "ref": ref, **NO_SOURCE_ACCESS, **access}
    oci = source.oci
    assert oci is not None  # Source validates exactly one of git/oci/helm
    return {
        "kind": "OCIRepository",
        "url": oci.url,
        "ref": {"tag": oci.version.tag} if oci.version.tag is not None else {"digest": oci.version.digest},
        "layer_media_type": HELM_CHART_LAYER if sync.sync.package.helm is not None else None,
        **NO_SOURCE_ACCESS,
        "secret_ref": oci.secret_ref.name if oci.secret_ref else None,
        "cert_secret_ref": oci.cert_secret_ref.name if oci.cert_secret_ref else None,
        "insecure": oci.insecure,
        "provider": oci.provider,
        "verify": _verify(oci.verify) if oci.verify is not None else None,
    }


def _verify(verify: OCIVerification) -> dict[str, Any]:
    flux = _flux(verify)
    if not flux.get("matchOIDCIdentity"):
        flux.pop("matchOIDCIdentity", None)
    return flux


def kustomize_context(kustomize: KustomizePackage) -> dict[str, Any]:
    """`kustomize`: the Kustomization's options; lists and mappings already in Flux's shape."""
    return {
        "path": kustomize.path,
        "substitute": dict(kustomize.substitute),
        "substitute_from": [_flux(reference) for reference in kustomize.substitute_from],
        "target_namespace": kustomize.target_namespace,
        "service_account_name": kustomize.service_account_name,
        "wait": kustomize.wait,
        "health_checks": [_flux(check) for check in kustomize.health_checks],
        "health_check_exprs": [_flux(expression) for expression in kustomize.health_check_exprs],
        "timeout": kustomize.timeout,
        "retry_interval": kustomize.retry_interval,
        "patches": [_flux(patch) for patch in kustomize.patches],
        "components": list(kustomize.components),
        "decryption": _flux(kustomize.decryption) if kustomize.decryption is not None else None,
        "force": kustomize.force,
    }


def _labels(module: str, cluster: str, remote: bool) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_MODULE: module,
        LABEL_CLUSTER: cluster,
        LABEL_ASSEMBLAGE: "remote" if remote else "proxy",
    }


def _templates(context: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str]]:
    """(template, kind) of the source object and of the package object."""
    source_kind = context["source"]["kind"]
    package = (HELM_RELEASE_TEMPLATE, "HelmRelease") if context["helm"] else (KUSTOMIZATION_TEMPLATE, "Kustomization")
    return (_SOURCE_TEMPLATES[source_kind], source_kind), package


# --- the renderer ------------------------------------------------------------------------------


class FluxRenderer:
    """Renders the Flux objects of one sync record; see the module docstring."""

    def __init__(
        self,
        template_dir: Path | None = None,
        *,
        interval: str = "10m",
        proxy_namespace: str = "flux-system",
        catalog: crds.CRDCatalog | None = None,
        compiled_syncs: int = COMPILED_SYNCS,
    ) -> None:
        parse_duration(interval)  # ValueError with a readable message for "10 minutes"
        check_dns1123_label(proxy_namespace)
        if template_dir is not None and not Path(template_dir).is_dir():
            raise ValueError(f"template directory {template_dir} does not exist or is not a directory")
        self.template_dir = Path(template_dir) if template_dir is not None else None
        self.interval = interval
        self.proxy_namespace = proxy_namespace
        self.catalog = catalog or crds.builtin_catalog()
        builtin = PackageLoader("projections", "templates")
        loaders: list[jinja2.BaseLoader] = [builtin, PrefixLoader({BUILTIN_PREFIX: builtin})]
        if self.template_dir is not None:
            loaders.insert(0, FileSystemLoader(str(self.template_dir)))
        self.environment = ImmutableSandboxedEnvironment(
            loader=ChoiceLoader(loaders),
            undefined=StrictUndefined,
            autoescape=False,
            finalize=yaml_value,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        # a sync's objects compiled once per (kind, cluster namespace, sync), filled in per
        # cluster (projections/render_cache.py); only through the built-in templates
        self.cache = RenderCache(compiled_syncs)

    def render(self, assemblage: Assemblage, sync: AssignedSync) -> list[dict[str, Any]]:
        """[source object, Kustomization or HelmRelease] for one sync of the assemblage, validated."""
        compiled = self._compiled(assemblage, sync)
        if compiled is None:
            return self._render_from_scratch(assemblage, sync)
        return self._filled(compiled, assemblage, sync)

    def render_yaml(self, assemblage: Assemblage, sync: AssignedSync) -> bytes:
        """The objects of `render` as the YAML stream `flux_yaml.dump_objects` writes: of a
        compiled sync, its text filled in with the cluster's names (the same bytes)."""
        compiled = self._compiled(assemblage, sync)
        if compiled is None:
            return dump_objects(self._render_from_scratch(assemblage, sync))
        objects = self._filled(compiled, assemblage, sync)  # validated, whatever is written
        cluster = assemblage.metadata.name
        text = fill_text(compiled, object_name(sync.module, cluster), cluster)
        return text if text is not None else dump_objects(objects)

    def sync_json(self, sync: AssignedSync) -> bytes:
        """`sync.model_dump_json()`, remembered for the same sync object (bounded)."""
        return self.cache.sync_json(sync)

    def context(self, assemblage: Assemblage, sync: AssignedSync) -> dict[str, Any]:
        """The variables every template sees for this sync (documented in the module docstring)."""
        cluster = assemblage.metadata.name
        return self._context(
            assemblage.kind, cluster, assemblage.metadata.namespace, sync, name=object_name(sync.module, cluster)
        )

    def _context(
        self, kind: str, cluster: str, cluster_namespace: str, sync: AssignedSync, *, name: str
    ) -> dict[str, Any]:
        remote = kind == "RemoteAssemblage"
        namespace = cluster_namespace if remote else self.proxy_namespace
        return {
            "name": name,
            "namespace": namespace,
            "labels": _labels(sync.module, cluster, remote),
            "annotations": {
                ANNOTATION_REVISION: sync.revision,
                **({ANNOTATION_GENERATION: str(sync.generation)} if sync.generation is not None else {}),
            },
            "interval": sync.sync.interval or self.interval,
            "prune": True,
            "module": sync.module,
            "module_namespace": sync.module_namespace,
            "cluster": cluster,
            "cluster_namespace": cluster_namespace,
            "revision": sync.revision,
            "assemblage": "remote" if remote else "proxy",
            "source": {**source_context(sync), "name": name},
            "kustomize": kustomize_context(sync.sync.package.kustomize),
            "helm": helm_release_context(sync, remote=remote, namespace=namespace),
            "kubeconfig": (
                {"secretRef": {"name": f"{cluster}-kubeconfig", "key": KUBECONFIG_SECRET_KEY}} if remote else None
            ),
        }

    # -- from scratch, and compiled ------------------------------------------------------------

    def _render_from_scratch(self, assemblage: Assemblage, sync: AssignedSync) -> list[dict[str, Any]]:
        """Both objects through Jinja, each validated as soon as it is rendered."""
        context = self.context(assemblage, sync)
        templates = _templates(context)
        rendered = []
        for template_name, kind in templates:
            obj, filename = self._render_template(template_name, context)
            self._check_object(obj, context, template_name=template_name, filename=filename, kind=kind)
            rendered.append(obj)
        package_template = templates[1][0]
        self._check_sourceref(
            rendered[1], context, template=package_template, filename=self._filename(package_template)
        )
        return rendered

    def _compiled(self, assemblage: Assemblage, sync: AssignedSync) -> CompiledSync | None:
        """The sync's compiled objects for this kind and cluster namespace (compiled now if
        they were not); None when they render from scratch (see projections/render_cache.py)."""
        if self.template_dir is not None:
            return None  # a user's template may read anything, the cluster's name included
        key = (assemblage.kind, assemblage.metadata.namespace, self.cache.sync_json(sync))
        known, compiled = self.cache.get(key)
        if not known:
            compiled = self._compile(assemblage.kind, assemblage.metadata.namespace, sync, key[2])
            self.cache.put(key, compiled)
        return compiled

    def _compile(self, kind: str, cluster_namespace: str, sync: AssignedSync, sync_json: bytes) -> CompiledSync | None:
        if not free_of_slots(sync_json, cluster_namespace, self.interval, self.proxy_namespace):
            return None
        context = self._context(kind, CLUSTER_SLOT, cluster_namespace, sync, name=NAME_SLOT)
        templates = _templates(context)
        try:
            rendered = [self._render_template(template_name, context) for template_name, _ in templates]
        except TemplateError:
            return None  # from scratch, for an error naming the real object
        objects = [obj for obj, _ in rendered]
        try:
            text = dump_objects(objects).decode("utf-8")
        except yaml.YAMLError:
            return None
        return compile_objects(
            objects,
            text,
            templates=tuple(template_name for template_name, _ in templates),
            filenames=tuple(filename for _, filename in rendered),
            kinds=tuple(kind for _, kind in templates),
        )

    def _filled(self, compiled: CompiledSync, assemblage: Assemblage, sync: AssignedSync) -> list[dict[str, Any]]:
        """`compiled` filled in for the assemblage's cluster, each object validated and checked
        as one rendered from scratch is."""
        cluster = assemblage.metadata.name
        remote = assemblage.kind == "RemoteAssemblage"
        name = object_name(sync.module, cluster)
        identity: dict[str, Any] = {
            "name": name,
            "namespace": assemblage.metadata.namespace if remote else self.proxy_namespace,
            "labels": _labels(sync.module, cluster, remote),
            "source": {"kind": compiled.kinds[0]},
        }
        objects = fill(compiled, name, cluster)
        for obj, template_name, filename, kind in zip(
            objects, compiled.templates, compiled.filenames, compiled.kinds, strict=True
        ):
            self._check_object(obj, identity, template_name=template_name, filename=filename, kind=kind)
        self._check_sourceref(objects[1], identity, template=compiled.templates[1], filename=compiled.filenames[1])
        return objects

    # -- internals ---------------------------------------------------------------------------

    def _render_template(self, template_name: str, context: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The template rendered and parsed: one YAML mapping, and the template's file name."""
        try:
            template = self.environment.get_template(template_name)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateError(
                template=error.name or template_name,
                filename=error.filename,
                lineno=error.lineno,
                reason=f"syntax error: {error.message}",
            ) from None
        filename = template.filename or template_name
        try:
            text = template.render(context)
        except jinja2.TemplateSyntaxError as error:  # e.g. a broken {% extends %} parent
            raise TemplateError(
                template=error.name or template_name,
                filename=error.filename,
                lineno=error.lineno,
                reason=f"syntax error: {error.message}",
            ) from None
        except Exception as error:
            frame_file, lineno = _template_frame(error)
            raise TemplateError(
                template=template_name,
                filename=frame_file or filename,
                lineno=lineno,
                reason=f"{type(error).__name__}: {error}",
            ) from None
        try:
            obj = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = ""
            if mark is not None:
                lines = text.splitlines()
                if 0 <= mark.line < len(lines):
                    line = f" (output line {mark.line + 1}: {lines[mark.line].strip()!r})"
            raise TemplateError(
                template=template_name,
                filename=filename,
                lineno=None,
                reason=f"rendered output is not valid YAML{line}: {error}",
            ) from None
        if not isinstance(obj, dict):
            raise TemplateError(
                template=template_name,
                filename=filename,
                lineno=None,
                reason=f"rendered output must be one YAML mapping, not {type(obj).__name__}",
            )
        return obj, filename

    def _check_object(
        self, obj: dict[str, Any], context: dict[str, Any], *, template_name: str, filename: str, kind: str
    ) -> None:
        """Valid against its CRD, and still the object sinks find it as."""
        self.catalog.validate(obj, origin=filename)
        self._check_identity(obj, context, template_name=template_name, filename=filename, kind=kind)

    @staticmethod
    def _check_identity(
        obj: dict[str, Any], context: dict[str, Any], *, template_name: str, filename: str, kind: str
    ) -> None:
        """Sinks and appliers find, own and prune objects by kind, name, namespace and labels."""
        metadata = obj.get("metadata", {})
        wrong: list[str] = []
        if obj.get("kind") != kind:
            wrong.append(f"kind must be {kind}, not {obj.get('kind')!r}")
        for field in ("name", "namespace"):
            if metadata.get(field) != context[field]:
                wrong.append(f"metadata.{field} must be {context[field]!r}, not {metadata.get(field)!r}")
        labels = metadata.get("labels") or {}
        for key, value in context["labels"].items():
            if labels.get(key) != value:
                wrong.append(f"label {key} must be {value!r}, not {labels.get(key)!r}")
        if wrong:
            raise TemplateError(
                template=template_name,
                filename=filename,
                lineno=None,
                reason="the object's identity was changed: " + "; ".join(wrong),
            )

    def _filename(self, template_name: str) -> str:
        return self.environment.get_template(template_name).filename or template_name

    @staticmethod
    def _check_sourceref(package: dict[str, Any], context: dict[str, Any], *, template: str, filename: str) -> None:
        ref = source_reference(package)
        expected = {"kind": context["source"]["kind"], "name": context["name"]}
        actual = {"kind": ref.get("kind"), "name": ref.get("name")}
        namespace = ref.get("namespace", context["namespace"])
        if actual != expected or namespace != context["namespace"]:
            raise TemplateError(
                template=template,
                filename=filename,
                lineno=None,
                reason=f"its source reference must point at the rendered source {expected}, not {ref}",
            )
