"""Kubernetes API access shared by the applier, the status reporter and the cluster watcher.

Everything here speaks to a real (or test) API server through kubernetes-asyncio:

- Clients. `management_client(kubeconfig, context)` connects to the management cluster from
  a kubeconfig file and context, or — inside a pod, without one — from the service
  account. `workload_client(...)` connects to a workload cluster through the kubeconfig
  Cluster API writes into the secret `<cluster>-kubeconfig` (key `value`) in the cluster's
  namespace; the secret is read when a client is made, so rotated credentials are picked
  up. Secret contents never leave the process: they are not logged (the client library's
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
import logging
import os
import random
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
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


async def client_from_kubeconfig(data: bytes | str, *, source: str) -> ApiClient:
    """A client from kubeconfig text (e.g. a secret's `value`); `source` names it in errors."""
    try:
        document = yaml.safe_load(data)
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
    return ApiClient(configuration=configuration)


async def read_kubeconfig(
    api: ApiClient, *, namespace: str, cluster: str, policy: RetryPolicy | None = None
) -> bytes | None:
    """The kubeconfig in `<namespace>/<cluster>-kubeconfig` (key `value`); None while absent.

    The bytes are a secret: keep them in memory only, for as long as a client is built.
    """
    name = kubeconfig_secret_name(cluster)
    core = CoreV1Api(api)
    try:
        secret = await call(
            core.read_namespaced_secret, name, namespace, policy=policy or RetryPolicy(), what=f"read secret {name}"
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    encoded = (secret.data or {}).get(KUBECONFIG_SECRET_KEY)
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
