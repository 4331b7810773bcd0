"""A fake Kubernetes API server, over real HTTP: for fault injection the real one cannot do.

The Kubernetes tests run against real kube-apiservers (`tests/kube/cluster.py`,
`infra.localkube`). This fake stays for what a real server cannot be made to do on demand,
and only these tests use it:

- `test_kubernetes_sink_faults.py`: a 403 on one URL while the rest is allowed (RBAC
  gaps when a restarted applier looks for a cluster's namespace), one injected
  500/409/429/503 on a chosen request (retries within one write), a server that accepts
  requests and hangs (a slow cluster must not stall the others);
- `test_watcher.py::test_an_older_cluster_api_without_v1beta2_is_watched_at_v1beta1`: a
  Cluster API CRD that does not serve v1beta2 (`unserve`), next to the real server's one;
- `test_apiserver.py`: the fake's own behaviour.

One `KubeAPIServer` instance is one cluster — the management cluster, or one workload
cluster. Tests talk to it through kubernetes-asyncio exactly as the appliers do (a
kubeconfig with the server's URL and bearer token); nothing in the client is patched.

What it implements, because the appliers, the status reporter and the cluster watcher rely
on it:

- resources: core `v1` Secrets, and every served version of the CRDs in
  `projections/crds` (Flux sources and Kustomizations, Cluster API Clusters v1beta1 and
  v1beta2). All versions of a CRD share one store; an object is returned in the version it
  was written in (no conversion — the watcher reads both shapes anyway).
- discovery of a group version (`GET /apis/<group>/<version>`: its APIResourceList).
- create (POST), get, list (all namespaces or one, `labelSelector`, `fieldSelector` on
  `metadata.name`/`metadata.namespace`), replace (PUT), JSON merge patch, delete.
- server-side apply (`application/apply-patch+yaml`, `fieldManager` required, `force`):
  create on apply; per-manager field ownership (maps are granular, lists atomic); fields a
  manager stops applying are removed; a change to a field another manager owns is a 409
  conflict unless `force=true`, which takes the field over; `managedFields` in FieldsV1.
  An apply that changes nothing does not write (same resourceVersion, no watch event).
- `resourceVersion` (one counter per server, bumped on every write) and, for custom
  resources, `generation` (bumped when anything but metadata and status changes); a
  `metadata.resourceVersion` in a write is a precondition (409 on mismatch).
- the `status` subresource: writes to the main resource ignore `status`; `/status`
  (PUT or merge patch) changes only `status` and never bumps `generation`.
- watch (`watch=true`): streamed JSON lines from a `resourceVersion` (ADDED for every
  current object without one), filtered by namespace and label selector; `timeoutSeconds`;
  a resourceVersion older than the retained history (see `compact()`) gets a 410 ERROR
  event, as from a real server.
- metadata-only lists (`Accept: ...;as=PartialObjectMetadataList`) and watches
  (`...;as=PartialObjectMetadata`), which the cluster watcher uses so that it never
  receives secret data. Like kube-apiserver, a watch asking for the List form is answered
  200 with an empty body (the server cannot encode watch events that way).
- schema validation: every custom resource written (main resource and status) is checked
  with `projections.crds` and rejected with 422 Invalid, naming each field.
- faults: `inject(path_regex, status=500, delay=..., times=...)` makes matching requests
  fail or hang; `requests` records every request (method, path and query).

Not implemented: JSON patch, strategic merge patch, conversion, finalizers, admission,
RBAC, namespaces as objects, `generateName`, CEL rules.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml
from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import new_client_from_config_dict

from projections import crds

Path = tuple[str, ...]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Metadata the server owns: never tracked as managed fields, never taken from a client.
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")
_UNTRACKED: frozenset[Path] = frozenset(
    {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
    | {("metadata", key) for key in _SERVER_METADATA}
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ResourceType:
    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    custom: bool = True  # custom resources get `generation` and CRD schema validation


@dataclass
class Fault:
    """Requests whose method and path+query match fail with `status` and/or wait `delay`."""

    pattern: re.Pattern[str]
    method: str | None = None
    status: int | None = 500
    delay: float = 0.0
    times: int | None = None  # None: until removed
    hits: int = 0

    def matches(self, method: str, path_qs: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        return self.pattern.search(path_qs) is not None


@dataclass
class Stored:
    resource: ResourceType
    obj: dict[str, Any]  # without managedFields
    owners: dict[str, set[Path]] = field(default_factory=dict)
    operations: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # manager -> (op, apiVersion, time)

    def render(self) -> dict[str, Any]:
        out = copy.deepcopy(self.obj)
        managed = []
        for manager in sorted(self.owners):
            paths = self.owners[manager]
            if not paths:
                continue
            operation, api_version, time = self.operations.get(manager, ("Update", out.get("apiVersion", ""), _now()))
            managed.append(
                {
                    "manager": manager,
                    "operation": operation,
                    "apiVersion": api_version,
                    "time": time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _fields_v1(paths),
                }
            )
        if managed:
            out["metadata"]["managedFields"] = managed
        return out


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    key: tuple[str, str]  # (group, plural)
    namespace: str
    type: str
    obj: dict[str, Any]


class APIError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        self.code, self.reason, self.message = code, reason, message
        super().__init__(message)

    def response(self) -> web.Response:
        return _status_response(self.code, self.reason, self.message)


def _status_response(code: int, reason: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code, headers=headers)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# --- field paths and managed fields ------------------------------------------------------


def _leaves(obj: dict[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    for key, value in obj.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _tracked(path: Path, *, with_status: bool) -> bool:
    if path[:2] in _UNTRACKED or path[:1] in _UNTRACKED:
        return False
    return with_status or path[0] != "status"


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


_MISSING = object()


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(obj.get(key), dict):
            obj[key] = {}
        obj = obj[key]
    if isinstance(value, dict) and not value and isinstance(obj.get(path[-1]), dict):
        return  # an empty map merges into an existing one
    obj[path[-1]] = copy.deepcopy(value)


def _delete(obj: dict[str, Any], path: Path) -> None:
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop maps the deletion left empty
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _overlaps(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


# --- label selectors ---------------------------------------------------------------------

_SET_REQUIREMENT = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def parse_label_selector(text: str) -> Callable[[dict[str, str]], bool]:
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z)` as a predicate on a label map."""
    requirements: list[Callable[[dict[str, str]], bool]] = []
    parts = re.split(r",(?![^(]*\))", text) if text.strip() else []
    for raw in parts:
        part = raw.strip()
        if not part:
            continue
        match = _SET_REQUIREMENT.match(part)
        if match:
            key, operator, values = match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}
            if operator == "in":
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif part.startswith("!"):
            absent = part[1:].strip()
            requirements.append(lambda labels, k=absent: k not in labels)
        else:
            requirements.append(lambda labels, k=part: k in labels)
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _field_selector(text: str) -> Callable[[dict[str, Any]], bool]:
    checks: list[tuple[str, str, bool]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        negate = "!=" in part
        key, value = (s.strip() for s in re.split(r"!=|==|=", part, maxsplit=1))
        if key not in ("metadata.name", "metadata.namespace"):
            raise APIError(400, "BadRequest", f'field label not supported: "{key}"')
        checks.append((key.split(".", 1)[1], value, negate))
    return lambda meta: all((meta.get(k) == v) != negate for k, v, negate in checks)


# --- the server ----------------------------------------------------------------------------


class KubeAPIServer:
    """One fake cluster's API server; see the module docstring."""

    def __init__(self, name: str = "management", *, catalog: crds.CRDCatalog | None = None) -> None:
        self.name = name
        self.catalog = catalog or crds.builtin_catalog()
        self.token = f"token-{name}-{uuid.uuid4().hex[:8]}"
        self.resources: dict[tuple[str, str], ResourceType] = {
            ("", "secrets"): ResourceType("", ("v1",), "secrets", "Secret", custom=False),
        }
        for definition in self.catalog.definitions:
            spec = definition["spec"]
            served = [v for v in spec["versions"] if v.get("served")]
            self.resources[(spec["group"], spec["names"]["plural"])] = ResourceType(
                group=spec["group"],
                versions=tuple(v["name"] for v in served),
                plural=spec["names"]["plural"],
                kind=spec["names"]["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource=any("status" in (v.get("subresources") or {}) for v in served),
            )
        self.store: dict[tuple[str, str], dict[tuple[str, str], Stored]] = {key: {} for key in self.resources}
        self.rv = 0
        self.compacted_rv = 0
        self.events: list[WatchEvent] = []
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self._changed = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> KubeAPIServer:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def stop(self) -> None:
        self._closing = True
        self._wake()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, *, token: str | None = None) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            "users": [{"name": self.name, "user": {"token": token or self.token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": self.name}}],
            "current-context": self.name,
        }

    def kubeconfig_yaml(self) -> str:
        return yaml.safe_dump(self.kubeconfig())

    @asynccontextmanager
    async def client(self) -> AsyncIterator[ApiClient]:
        """A kubernetes-asyncio client for the test itself (to create Clusters, set status)."""
        api = await new_client_from_config_dict(self.kubeconfig())
        try:
            yield api
        finally:
            await api.close()

    # -- test controls ----------------------------------------------------------------------

    def inject(
        self,
        path: str,
        *,
        status: int | None = 500,
        delay: float = 0.0,
        method: str | None = None,
        times: int | None = None,
    ) -> Fault:
        fault = Fault(re.compile(path), method=method, status=status, delay=delay, times=times)
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def compact(self) -> None:
        """Forget the watch history: watches from an older resourceVersion get 410 Gone."""
        self.compacted_rv = self.rv
        self.events.clear()

    def objects(self, plural: str, group: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of a resource (rendered as a GET would return it)."""
        key = next(k for k in self.store if k[1] == plural and (group is None or k[0] == group))
        return [stored.render() for _, stored in sorted(self.store[key].items())]

    def object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = next(k for k in self.store if k[1] == plural)
        stored = self.store[key].get((namespace, name))
        return stored.render() if stored else None

    def requests_to(self, pattern: str, method: str | None = None) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if re.search(pattern, p) and (method is None or m == method)]

    # -- dispatch ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        for fault in list(self.faults):
            if fault.matches(request.method, request.path_qs):
                fault.hits += 1
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status is not None:
                    headers = {"Retry-After": "1"} if fault.status == 429 else None
                    reason = _REASONS.get(fault.status, "InternalError")
                    return _status_response(fault.status, reason, f"injected fault ({fault.status})", headers)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status_response(401, "Unauthorized", "Unauthorized")
        try:
            return await self._dispatch(request)
        except APIError as error:
            return error.response()

    def _route(self, path: str) -> tuple[ResourceType, str, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        namespace = name = subresource = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, plural, tail = rest[1], rest[2], rest[3:]
        elif len(rest) == 1:
            plural, tail = rest[0], []
        else:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if len(tail) > 2:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if tail:
            name = tail[0]
        if len(tail) == 2:
            subresource = tail[1]
        resource = self.resources.get((group, plural))
        if resource is None or version not in resource.versions:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if subresource is not None and (subresource != "status" or not resource.status_subresource):
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        return resource, version, namespace, name, subresource

    def _discovery(self, path: str) -> web.Response | None:
        """`GET /apis/<group>/<version>` (or `/api/v1`): the APIResourceList of a served version."""
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        elif parts == ["api", "v1"]:
            group, version = "", "v1"
        else:
            return None
        served = [r for r in self.resources.values() if r.group == group and version in r.versions]
        if not served:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        resources = []
        for r in served:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            singular = r.kind.lower()
            resources.append(
                {"name": r.plural, "singularName": singular, "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs}
            )
            if r.status_subresource:
                resources.append(
                    {
                        "name": f"{r.plural}/status",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return web.json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "/".join(parts[1:]), "resources": resources}
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            discovery = self._discovery(request.path)
            if discovery is not None:
                return discovery
        resource, version, namespace, name, subresource = self._route(request.path)
        query = request.query
        method = request.method
        if name is None:
            if method == "GET":
                selector = parse_label_selector(query.get("labelSelector", ""))
                fields = _field_selector(query.get("fieldSelector", ""))
                accept = request.headers.get("Accept", "")
                partial = "as=PartialObjectMetadata" in accept
                if query.get("watch", "").lower() in ("true", "1"):
                    if "as=PartialObjectMetadataList" in accept:
                        return web.Response(status=200, content_type="application/json")
                    return await self._watch(request, resource, namespace, selector, fields, partial)
                return self._list(resource, version, namespace, selector, fields, partial)
            if method == "POST" and namespace is not None:
                body = await self._body(request)
                return self._create(resource, namespace, body, manager=query.get("fieldManager") or "unknown")
            raise APIError(405, "MethodNotAllowed", f"{method} is not supported here")
        if namespace is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        key = (namespace, name)
        if method == "GET":
            return web.json_response(self._existing(resource, key).render())
        if method == "DELETE":
            return self._remove(resource, key)
        if method == "PUT":
            body = await self._body(request)
            manager = query.get("fieldManager") or "unknown"
            if subresource == "status":
                return self._write_status(resource, key, body, replace=True)
            return self._replace(resource, key, body, manager=manager)
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            raw = await request.read()
            if content_type == APPLY_PATCH:
                if subresource is not None:
                    raise APIError(415, "UnsupportedMediaType", "apply to subresources is not supported here")
                manager = query.get("fieldManager")
                if not manager:
                    raise APIError(400, "BadRequest", "PATCH /apply requires fieldManager to be set")
                try:
                    config = yaml.safe_load(raw)
                except yaml.YAMLError as error:
                    raise APIError(400, "BadRequest", f"error decoding YAML: {error}") from None
                force = query.get("force", "").lower() in ("true", "1")
                return self._apply(resource, version, key, config, manager=manager, force=force)
            try:
                patch = json.loads(raw)
            except ValueError as error:
                raise APIError(400, "BadRequest", f"error decoding JSON: {error}") from None
            if content_type == MERGE_PATCH:
                if subresource == "status":
                    return self._write_status(resource, key, patch, replace=False)
                return self._merge(resource, key, patch, manager=query.get("fieldManager") or "unknown")
            if content_type == JSON_PATCH and not isinstance(patch, list):
                raise APIError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            raise APIError(415, "UnsupportedMediaType", f"the test server does not implement {content_type}")
        raise APIError(405, "MethodNotAllowed", f"{method} is not supported here")

    def unserve(self, group: str, version: str) -> None:
        """Stop serving one version of a group (e.g. an older Cluster API without v1beta2)."""
        for key, r in list(self.resources.items()):
            if r.group == group and version in r.versions:
                self.resources[key] = ResourceType(
                    r.group,
                    tuple(v for v in r.versions if v != version),
                    r.plural,
                    r.kind,
                    r.namespaced,
                    r.status_subresource,
                    r.custom,
                )

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read())
        except ValueError as error:
            raise APIError(400, "BadRequest", f"error decoding JSON: {error}") from None
        if not isinstance(body, dict):
            raise APIError(400, "BadRequest", "the body must be an object")
        return body

    def _existing(self, resource: ResourceType, key: tuple[str, str]) -> Stored:
        stored = self.store[(resource.group, resource.plural)].get(key)
        if stored is None:
            raise APIError(404, "NotFound", f'{resource.plural}.{resource.group or "core"} "{key[1]}" not found')
        return stored

    # -- reads ------------------------------------------------------------------------------

    def _matching(
        self,
        resource: ResourceType,
        namespace: str | None,
        selector: Callable[[dict[str, str]], bool],
        fields: Callable[[dict[str, Any]], bool],
    ) -> list[Stored]:
        found = []
        for (ns, _), stored in sorted(self.store[(resource.group, resource.plural)].items()):
            meta = stored.obj["metadata"]
            if (namespace is None or ns == namespace) and selector(meta.get("labels") or {}) and fields(meta):
                found.append(stored)
        return found

    @staticmethod
    def _partial(obj: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": obj["metadata"]}

    def _list(
        self,
        resource: ResourceType,
        version: str,
        namespace: str | None,
        selector: Callable[[dict[str, str]], bool],
        fields: Callable[[dict[str, Any]], bool],
        partial: bool,
    ) -> web.Response:
        items = [stored.render() for stored in self._matching(resource, namespace, selector, fields)]
        api_version = f"{resource.group}/{version}" if resource.group else version
        body = {
            "apiVersion": "meta.k8s.io/v1" if partial else api_version,
            "kind": "PartialObjectMetadataList" if partial else f"{resource.kind}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": [self._partial(item) for item in items] if partial else items,
        }
        return web.json_response(body)

    async def _watch(
        self,
        request: web.Request,
        resource: ResourceType,
        namespace: str | None,
        selector: Callable[[dict[str, str]], bool],
        fields: Callable[[dict[str, Any]], bool],
        partial: bool,
    ) -> web.StreamResponse:
        query = request.query
        timeout = float(query.get("timeoutSeconds", "1800"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        key = (resource.group, resource.plural)

        async def send(kind: str, obj: dict[str, Any]) -> None:
            line = json.dumps({"type": kind, "object": self._partial(obj) if partial else obj}) + "\n"
            await response.write(line.encode())

        try:
            since = query.get("resourceVersion", "")
            if since in ("", "0"):
                last = self.rv
                for stored in self._matching(resource, namespace, selector, fields):
                    await send("ADDED", stored.render())
            else:
                last = int(since)
                if last < self.compacted_rv:
                    status = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": f"too old resource version: {last} ({self.compacted_rv})",
                        "reason": "Expired",
                        "code": 410,
                    }
                    await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
                    await response.write_eof()
                    return response
            deadline = asyncio.get_running_loop().time() + timeout
            while not self._closing:
                changed = self._changed
                for event in [e for e in self.events if e.rv > last]:
                    last = event.rv
                    meta = event.obj["metadata"]
                    if event.key != key or (namespace is not None and event.namespace != namespace):
                        continue
                    if selector(meta.get("labels") or {}) and fields(meta):
                        await send(event.type, event.obj)
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    break
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        return response

    # -- writes ----------------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _record(self, resource: ResourceType, kind: str, stored: Stored) -> None:
        self.events.append(
            WatchEvent(
                rv=self.rv,
                key=(resource.group, resource.plural),
                namespace=stored.obj["metadata"]["namespace"],
                type=kind,
                obj=stored.render(),
            )
        )
        self._wake()

    def _validate(self, resource: ResourceType, obj: dict[str, Any]) -> None:
        if resource.custom:
            problems = self.catalog.problems(obj)
            if problems:
                name = obj.get("metadata", {}).get("name")
                detail = "; ".join(str(problem) for problem in problems)
                raise APIError(422, "Invalid", f'{resource.kind}.{resource.group} "{name}" is invalid: {detail}')
            return
        # core Secret: stringData folds into data; data values must be base64
        if "stringData" in obj:
            data = obj.setdefault("data", {})
            for k, v in (obj.pop("stringData") or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        for k, v in (obj.get("data") or {}).items():
            try:
                base64.b64decode(v, validate=True)
            except (ValueError, TypeError):
                raise APIError(422, "Invalid", f'Secret "{obj["metadata"]["name"]}" data[{k}]: not base64') from None

    def _check_identity(
        self, resource: ResourceType, body: dict[str, Any], namespace: str, name: str | None
    ) -> dict[str, Any]:
        meta = body.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise APIError(422, "Invalid", "metadata.name: Required value")
        if name is not None and meta["name"] != name:
            message = f"the name of the object ({meta['name']}) does not match the name in the URL ({name})"
            raise APIError(400, "BadRequest", message)
        if meta.setdefault("namespace", namespace) != namespace:
            raise APIError(400, "BadRequest", "the namespace of the object does not match the namespace in the URL")
        kind = body.get("kind")
        if resource.custom and kind not in (None, resource.kind):
            raise APIError(400, "BadRequest", f"kind {kind!r} does not match the resource {resource.kind}")
        return meta

    def _check_precondition(self, body: dict[str, Any], current: Stored | None) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and (current is None or wanted != current.obj["metadata"]["resourceVersion"]):
            raise APIError(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; "
                "please apply your changes to the latest version and try again",
            )

    def _new_metadata(self, meta: dict[str, Any], resource: ResourceType) -> None:
        for key in _SERVER_METADATA:
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if resource.custom:
            meta["generation"] = 1

    def _commit(
        self,
        resource: ResourceType,
        stored: Stored | None,
        new_obj: dict[str, Any],
        owners: dict[str, set[Path]],
        operations: dict[str, tuple[str, str, str]],
    ) -> tuple[Stored, bool]:
        """Validate and store; bump resourceVersion/generation when something changed."""
        if stored is not None:
            old = stored.obj
            if new_obj == old and owners == stored.owners:
                return stored, False
            meta = new_obj["metadata"]
            for key in ("uid", "creationTimestamp", "generation"):
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]

            def essence(o: dict[str, Any]) -> dict[str, Any]:
                return {k: v for k, v in o.items() if k not in ("metadata", "status")}

            if resource.custom and essence(new_obj) != essence(old):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        self._validate(resource, new_obj)
        self.rv += 1
        new_obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (new_obj["metadata"]["namespace"], new_obj["metadata"]["name"])
        result = Stored(resource, new_obj, owners, operations)
        self.store[(resource.group, resource.plural)][key] = result
        self._record(resource, "ADDED" if stored is None else "MODIFIED", result)
        return result, True

    @staticmethod
    def _take_ownership(
        owners: dict[str, set[Path]], old: dict[str, Any], new: dict[str, Any], manager: str, *, with_status: bool
    ) -> dict[str, set[Path]]:
        """An Update: the manager owns every field it changed; removed fields are nobody's."""
        owners = {m: set(p) for m, p in owners.items()}
        old_leaves = {p: v for p, v in _leaves(old) if _tracked(p, with_status=with_status)}
        new_leaves = {p: v for p, v in _leaves(new) if _tracked(p, with_status=with_status)}
        changed = {p for p, v in new_leaves.items() if old_leaves.get(p, _MISSING) != v}
        removed = set(old_leaves) - set(new_leaves)
        for paths in owners.values():
            paths -= changed | removed
            paths -= {p for p in paths if not any(_overlaps(p, q) for q in new_leaves)}
        if changed:
            owners.setdefault(manager, set()).update(changed)
        return {m: p for m, p in owners.items() if p}

    def _create(self, resource: ResourceType, namespace: str, body: dict[str, Any], *, manager: str) -> web.Response:
        meta = self._check_identity(resource, body, namespace, None)
        key = (namespace, meta["name"])
        if key in self.store[(resource.group, resource.plural)]:
            raise APIError(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
        obj = copy.deepcopy(body)
        obj.setdefault("kind", resource.kind)
        self._new_metadata(obj["metadata"], resource)
        if resource.status_subresource:
            obj.pop("status", None)
        owners = self._take_ownership({}, {}, obj, manager, with_status=not resource.status_subresource)
        operations = {manager: ("Update", obj.get("apiVersion", ""), _now())}
        stored, _ = self._commit(resource, None, obj, owners, operations)
        return web.json_response(stored.render(), status=201)

    def _replace(
        self, resource: ResourceType, key: tuple[str, str], body: dict[str, Any], *, manager: str
    ) -> web.Response:
        stored = self._existing(resource, key)
        self._check_identity(resource, body, key[0], key[1])
        self._check_precondition(body, stored)
        obj = copy.deepcopy(body)
        obj.setdefault("kind", resource.kind)
        if resource.status_subresource:
            obj.pop("status", None)
            if "status" in stored.obj:
                obj["status"] = copy.deepcopy(stored.obj["status"])
        obj["metadata"].pop("managedFields", None)
        with_status = not resource.status_subresource
        owners = self._take_ownership(stored.owners, stored.obj, obj, manager, with_status=with_status)
        operations = {**stored.operations, manager: ("Update", obj.get("apiVersion", ""), _now())}
        result, _ = self._commit(resource, stored, obj, owners, operations)
        return web.json_response(result.render())

    def _merge(self, resource: ResourceType, key: tuple[str, str], patch: Any, *, manager: str) -> web.Response:
        stored = self._existing(resource, key)
        if not isinstance(patch, dict):
            raise APIError(400, "BadRequest", "a merge patch must be an object")
        self._check_precondition(patch, stored)
        obj = _merge_patch(stored.obj, patch)
        for meta_key in _SERVER_METADATA:
            if meta_key in stored.obj["metadata"]:
                obj["metadata"][meta_key] = stored.obj["metadata"][meta_key]
            else:
                obj["metadata"].pop(meta_key, None)
        obj["metadata"]["name"], obj["metadata"]["namespace"] = key[1], key[0]
        if resource.status_subresource:
            obj.pop("status", None)
            if "status" in stored.obj:
                obj["status"] = copy.deepcopy(stored.obj["status"])
        with_status = not resource.status_subresource
        owners = self._take_ownership(stored.owners, stored.obj, obj, manager, with_status=with_status)
        operations = {**stored.operations, manager: ("Update", obj.get("apiVersion", ""), _now())}
        result, _ = self._commit(resource, stored, obj, owners, operations)
        return web.json_response(result.render())

    def _write_status(self, resource: ResourceType, key: tuple[str, str], body: Any, *, replace: bool) -> web.Response:
        stored = self._existing(resource, key)
        if not isinstance(body, dict):
            raise APIError(400, "BadRequest", "the body must be an object")
        self._check_precondition(body, stored)
        obj = copy.deepcopy(stored.obj)
        status = body.get("status") if replace else _merge_patch(stored.obj.get("status") or {}, body.get("status"))
        if "status" in body or replace:
            if status is None:
                obj.pop("status", None)
            else:
                obj["status"] = status
        result, _ = self._commit(resource, stored, obj, stored.owners, stored.operations)
        return web.json_response(result.render())

    def _apply(
        self,
        resource: ResourceType,
        version: str,
        key: tuple[str, str],
        config: Any,
        *,
        manager: str,
        force: bool,
    ) -> web.Response:
        if not isinstance(config, dict):
            raise APIError(400, "BadRequest", "the applied configuration must be an object")
        api_version = f"{resource.group}/{version}" if resource.group else version
        if config.get("apiVersion") is None or config.get("kind") != resource.kind:
            raise APIError(400, "BadRequest", "apiVersion and kind of the applied configuration must be set")
        self._check_identity(resource, config, key[0], key[1])
        stored = self.store[(resource.group, resource.plural)].get(key)
        self._check_precondition(config, stored)
        with_status = not resource.status_subresource
        applied = {p: v for p, v in _leaves(config) if _tracked(p, with_status=with_status)}
        operations = dict(stored.operations) if stored else {}
        operations[manager] = ("Apply", config["apiVersion"] or api_version, _now())

        if stored is None:
            obj = {k: copy.deepcopy(v) for k, v in config.items() if with_status or k != "status"}
            obj["metadata"] = {"name": key[1], "namespace": key[0]}
            for path, value in applied.items():
                _set(obj, path, value)
            self._new_metadata(obj["metadata"], resource)
            result, _ = self._commit(resource, None, obj, {manager: set(applied)}, operations)
            return web.json_response(result.render(), status=201)

        owners = {m: set(p) for m, p in stored.owners.items()}
        merged = copy.deepcopy(stored.obj)
        merged["apiVersion"] = config["apiVersion"]
        for path, value in applied.items():
            _set(merged, path, value)
        conflicts: list[tuple[str, Path]] = []
        for other, paths in owners.items():
            if other == manager:
                continue
            for owned in sorted(paths):
                if any(_overlaps(owned, p) for p in applied) and _get(stored.obj, owned) != _get(merged, owned):
                    conflicts.append((other, owned))
        if conflicts and not force:
            detail = "; ".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
            raise APIError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {detail}")
        for other, owned in conflicts:
            owners[other].discard(owned)
        others = set().union(*(p for m, p in owners.items() if m != manager))
        for path in owners.get(manager, set()) - set(applied):
            if path not in others:
                _delete(merged, path)
        owners[manager] = set(applied)
        owners = {m: p for m, p in owners.items() if p}
        if merged == stored.obj and owners == stored.owners:
            return web.json_response(stored.render())  # a no-op apply writes nothing
        result, _ = self._commit(resource, stored, merged, owners, operations)
        return web.json_response(result.render())

    def _remove(self, resource: ResourceType, key: tuple[str, str]) -> web.Response:
        stored = self._existing(resource, key)
        del self.store[(resource.group, resource.plural)][key]
        self.rv += 1
        stored.obj["metadata"]["resourceVersion"] = str(self.rv)
        self._record(resource, "DELETED", stored)
        return web.json_response(stored.render())
