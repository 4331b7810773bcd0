"""Kubernetes API access shared by the applier, the status reporter and the cluster watcher.

Everything here speaks to a real (or test) API server through kubernetes-asyncio:

- Clients. `management_client(kubeconfig, context)` connects to the management cluster from
  a kubeconfig file and context, or — inside a pod, without one — from the service
  account. `workload_client(...)` connects to a workload cluster through the kubeconfig
  Cluster API writes into the secret `<cluster>-kubeconfig` (key `value`) in the cluster's
  namespace; the secret is read when a client is made, so rotated credentials are picked
  up. `WorkloadClients` keeps one such client per workload cluster for everything the
  applier does there (converges, drift and status watches): the secret is still read at
  every use, but the client — kubeconfig parsed, TLS context built, keep-alive connections
  — is made anew only when the secret's content changed (see its docstring). Secret
  contents never leave the process: they are not logged (the client library's
  DEBUG logging of response bodies is switched off here), not put in exception messages
  (`KubeconfigError` names the secret, never its data) and not published.
  kubernetes-asyncio writes certificate and key *data* of a kubeconfig to temporary
  files (mode 0600, one per distinct content, removed at exit) because Python's ssl
  module reads keys only from files; they go to a private 0700 directory.
- Retries. `call(...)` runs one API request with a per-request timeout and retries what is
  transient — 5xx, 429 (honouring Retry-After), 409 conflicts, timeouts and connection
  errors — with capped exponential backoff and jitter. Anything else (400, 401, 403, 404,
  422) is raised at once: retrying would not help.
- Watching lives in `projections.informer` (the list-then-watch loop).
- `Resource`: group/version/plural of the kinds the appliers write, read from the shipped
  CRDs so that there is one source for them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import random
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import yaml
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException, incluster_config, kube_config

from projections import crds
from projections.render import KUBECONFIG_SECRET_KEY

__all__ = [
    "KubeconfigError",
    "Resource",
    "RetryPolicy",
    "SharedClient",
    "WorkloadClients",
    "call",
    "describe",
    "is_transient",
    "kubeconfig_secret_name",
    "management_client",
    "read_kubeconfig",
    "resource",
    "status_code",
    "workload_client",
]

log = logging.getLogger("rollout.kube")

# kubernetes-asyncio logs every response body at DEBUG — kubeconfig secrets included.
# Whatever the process's log level, that logger never goes below INFO.
logging.getLogger("kubernetes_asyncio.client.rest").setLevel(logging.INFO)

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class KubeconfigError(Exception):
    """A kubeconfig that cannot be used. The message names where it came from, not its content."""


def kubeconfig_secret_name(cluster: str) -> str:
    """The secret Cluster API writes for a cluster, in the cluster's namespace."""
    return f"{cluster}-kubeconfig"


# --- clients ---------------------------------------------------------------------------------


@cache
def _private_temp_dir() -> str:
    """Where kubernetes-asyncio may write certificate/key data of kubeconfigs (0700)."""
    return tempfile.mkdtemp(prefix="rollout-kube-")


async def management_client(kubeconfig: str | Path | None = None, context: str | None = None) -> ApiClient:
    """A client for the management cluster.

    With `kubeconfig` (or $KUBECONFIG, or ~/.kube/config when it exists) and optional
    `context`: that file and context. Otherwise the in-cluster service account.
    """
    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not path and Path("~/.kube/config").expanduser().is_file():
        path = str(Path("~/.kube/config").expanduser())
    configuration = Configuration()
    if path:
        try:
            await kube_config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
                temp_file_path=_private_temp_dir(),
            )
        except (ConfigException, OSError, yaml.YAMLError) as error:
            where = f"{path}" + (f" (context {context})" if context else "")
            raise KubeconfigError(f"kubeconfig {where} cannot be used: {type(error).__name__}: {error}") from None
    else:
        try:
            incluster_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as error:
            raise KubeconfigError(
                "no kubeconfig: pass --kubeconfig (or set KUBECONFIG), or run inside a pod "
                f"with a service account ({error})"
            ) from None
    return ApiClient(configuration=configuration)


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: a kubeconfig is mostly base64 certificate data,
which the pure-Python scanner reads a character at a time (~1 ms a kubeconfig)."""


async def client_from_kubeconfig(
    data: bytes | str, *, source: str, factory: Callable[[Configuration], ApiClient] = ApiClient
) -> ApiClient:
    """A client from kubeconfig text (e.g. a secret's `value`); `source` names it in errors.
    `factory` makes the client from its configuration (`SharedClient` for `WorkloadClients`)."""
    try:
        document = yaml.load(data, Loader=_YAML_LOADER)  # a safe loader (libyaml or Python)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeconfigError(f"{source}: not valid YAML{where}") from None  # no content: it is a secret
    if not isinstance(document, dict):
        raise KubeconfigError(f"{source}: not a kubeconfig (expected a mapping)")
    configuration = Configuration()
    try:
        await kube_config.load_kube_config_from_dict(
            document, client_configuration=configuration, temp_file_path=_private_temp_dir()
        )
    except (ConfigException, KeyError, TypeError, ValueError) as error:
        reason = str(error) if isinstance(error, ConfigException) else type(error).__name__
        raise KubeconfigError(f"{source}: not a usable kubeconfig ({reason})") from None
    return factory(configuration)


async def read_kubeconfig(
    api: ApiClient, *, namespace: str, cluster: str, policy: RetryPolicy | None = None
) -> bytes | None:
    """The kubeconfig in `<namespace>/<cluster>-kubeconfig` (key `value`); None while absent.

    The bytes are a secret: keep them in memory only, for as long as a client is built.
    """
    name = kubeconfig_secret_name(cluster)
    core = CoreV1Api(api)

    async def fetch(_request_timeout: float) -> bytes | None:
        # the raw answer: a V1Secret model would be built (every key decoded) for one key
        response: Any = await core.read_namespaced_secret(
            name, namespace, _preload_content=False, _request_timeout=_request_timeout
        )  # an aiohttp response, unread
        async with response:
            body: bytes = await response.read()
            if response.status == 404:
                return None
            if not 200 <= response.status <= 299:
                error = ApiException(status=response.status, reason=response.reason)
                error.body, error.headers = body, response.headers
                raise error
        return body

    body = await call(fetch, policy=policy or RetryPolicy(), what=f"read secret {name}")
    if body is None:
        return None
    encoded = ((orjson.loads(body) or {}).get("data") or {}).get(KUBECONFIG_SECRET_KEY)
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded)
    except (ValueError, TypeError):
        raise KubeconfigError(f"secret {namespace}/{name}: key {KUBECONFIG_SECRET_KEY!r} is not base64") from None


async def workload_client(
    management: ApiClient, *, namespace: str, cluster: str, policy: RetryPolicy | None = None
) -> ApiClient | None:
    """A client for a workload cluster from its kubeconfig secret; None while the secret is absent."""
    data = await read_kubeconfig(management, namespace=namespace, cluster=cluster, policy=policy)
    if data is None:
        return None
    return await client_from_kubeconfig(data, source=f"secret {namespace}/{kubeconfig_secret_name(cluster)}")


class SharedClient(ApiClient):
    """A workload cluster's client handed out by `WorkloadClients` to several users at once.

    Each `acquire` is one use; leaving `async with client:` ends it (instead of closing the
    client, as a plain ApiClient does). A client no longer its cluster's current one is
    closed when its last user leaves — or at once when its kubeconfig changed, so that the
    watches streaming through it fail and reconnect with the new one."""

    def __init__(self, configuration: Configuration) -> None:
        super().__init__(configuration=configuration)
        self.users = 0
        self.retired = False

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    async def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and self.retired:
            await self.close()

    def retire(self, *, now: bool = False) -> asyncio.Task[None] | None:
        """No longer its cluster's current client: the task closing it, if it is closed now
        (unused, or `now`); else it is closed when its last user leaves."""
        self.retired = True
        if self.users > 0 and not now:
            return None
        return asyncio.get_running_loop().create_task(self.close())


@dataclass
class _Cached:
    fingerprint: bytes  # sha256 of the kubeconfig the client was made from
    client: SharedClient


class WorkloadClients:
    """One client per workload cluster, shared by everything the applier does there.

    Why: a client made per converge and per watch (three per cluster, the status and drift
    watches included) parsed the kubeconfig, built a TLS context and handshook new
    connections each time — in `benchmarks/appliers.py --sink kubernetes` that was a third
    of one replica's CPU. `acquire` still reads the kubeconfig secret (one GET on the
    management cluster) at every use, so a rotated or repointed kubeconfig is used from the
    next converge or reconnect on; only when its content differs from the cached client's
    is a new client made, and the old one closed at once: the watches streaming through it
    fail and reconnect — with the new kubeconfig. A secret gone forgets the cluster.

    Bounded: `forget` drops a cluster the applier stops managing; beyond `size` clusters,
    the least recently acquired ones no one is using are closed and dropped (one in use is
    a cluster whose watches run — at most the clusters this replica manages)."""

    def __init__(self, *, size: int = 1024) -> None:
        self.size = size
        self._clients: OrderedDict[tuple[str, str], _Cached] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._clients)

    def current(self, namespace: str, cluster: str) -> SharedClient | None:
        """The cluster's current client, if one is cached (no use is counted)."""
        cached = self._clients.get((namespace, cluster))
        return cached.client if cached is not None else None

    async def acquire(
        self, management: ApiClient, *, namespace: str, cluster: str, policy: RetryPolicy | None = None
    ) -> SharedClient | None:
        """The cluster's client, one more use of it (end it with `async with` or `release`);
        None while the kubeconfig secret is absent."""
        key = (namespace, cluster)
        data = await read_kubeconfig(management, namespace=namespace, cluster=cluster, policy=policy)
        if data is None:
            self._drop(key)
            return None
        fingerprint = hashlib.sha256(data).digest()
        cached = self._clients.get(key)
        if cached is None or cached.fingerprint != fingerprint:
            client = await client_from_kubeconfig(
                data, source=f"secret {namespace}/{kubeconfig_secret_name(cluster)}", factory=SharedClient
            )
            assert isinstance(client, SharedClient)
            cached = self._clients.get(key)  # another use may have made it meanwhile
            if cached is not None and cached.fingerprint == fingerprint:
                await client.close()
            else:
                if cached is not None:
                    log.info("%s: kubeconfig secret changed; using a new client", cluster)
                    self._drop(key, now=True)
                cached = self._clients[key] = _Cached(fingerprint, client)
        self._clients.move_to_end(key)
        cached.client.users += 1
        self._evict()
        return cached.client

    def forget(self, namespace: str, cluster: str) -> None:
        """Drop the cluster's client (closed once its users have left)."""
        self._drop((namespace, cluster))

    async def close(self) -> None:
        clients = [cached.client for cached in self._clients.values()]
        self._clients.clear()
        for client in clients:
            await client.close()
        await asyncio.gather(*self._closing, return_exceptions=True)

    def _drop(self, key: tuple[str, str], *, now: bool = False) -> None:
        cached = self._clients.pop(key, None)
        if cached is not None:
            closing = cached.client.retire(now=now)
            if closing is not None:  # kept until done: a task only the loop refers to may vanish
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    def _evict(self) -> None:
        if len(self._clients) <= self.size:
            return
        idle = [key for key, cached in self._clients.items() if cached.client.users <= 0]
        for key in idle[: len(self._clients) - self.size]:
            self._drop(key)


# --- resources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@cache
def resource(api_version: str, kind: str) -> Resource:
    """Group, version and plural of a kind served by the shipped CRDs."""
    group, _, version = api_version.rpartition("/")
    for definition in crds.builtin_catalog().definitions:
        spec = definition["spec"]
        if spec["group"] == group and spec["names"]["kind"] == kind:
            if not any(v["name"] == version and v.get("served") for v in spec["versions"]):
                break
            return Resource(group=group, version=version, plural=spec["names"]["plural"], kind=kind)
    raise KeyError(f"{api_version} {kind} is not served by any shipped CRD")


# --- retries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How one API request is retried: `attempts` in all, backoff from `initial` to `maximum`."""

    attempts: int = 4
    initial: float = 0.2
    maximum: float = 5.0
    request_timeout: float = 10.0
    retry_conflicts: bool = True
    """False for a request with a precondition (a resourceVersion): its 409 means "read
    again first", and repeating the same request cannot succeed."""

    def delay(self, attempt: int) -> float:
        """Full-jitter exponential backoff for the `attempt`-th retry (1-based)."""
        return random.uniform(0, min(self.maximum, self.initial * 2 ** (attempt - 1)))


def status_code(error: BaseException) -> int | None:
    return error.status if isinstance(error, ApiException) else None


def is_transient(error: BaseException) -> bool:
    """5xx, 429, 409, timeouts and connection errors: worth trying again."""
    if isinstance(error, ApiException):
        return error.status in TRANSIENT_STATUS or error.status == 0
    return isinstance(error, TimeoutError | asyncio.TimeoutError | aiohttp.ClientError | ConnectionError)


def _retry_after(error: BaseException) -> float | None:
    if isinstance(error, ApiException) and error.status == 429 and error.headers:
        try:
            return float(error.headers.get("Retry-After", ""))
        except ValueError:
            return None
    return None


def describe(error: BaseException) -> str:
    """A one-line reason for logs: status and the API's message, never request bodies."""
    if isinstance(error, ApiException):
        message = error.reason or ""
        body: object = error.body
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        if isinstance(body, str) and body.startswith("{"):
            try:
                message = yaml.safe_load(body).get("message", message)
            except (yaml.YAMLError, AttributeError):
                pass
        return f"HTTP {error.status}: {message}"
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def call(fn: Callable[..., Awaitable[T]], *args: Any, policy: RetryPolicy, what: str, **kwargs: Any) -> T:
    """`await fn(*args, **kwargs)` with a request timeout, retrying transient failures."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return await fn(*args, _request_timeout=policy.request_timeout, **kwargs)
        except Exception as error:
            if not is_transient(error) or attempt == policy.attempts:
                raise
            if status_code(error) == 409 and not policy.retry_conflicts:
                raise
            delay = _retry_after(error)
            delay = min(delay, policy.maximum) if delay is not None else policy.delay(attempt)
            log.debug("%s: %s; retry %d in %.2fs", what, describe(error), attempt, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
