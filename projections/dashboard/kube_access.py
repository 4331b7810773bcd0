"""The API server decides: TokenReview for who a bearer token is, SubjectAccessReview for
what an identity may do.

    Authorization: Bearer <token> / pasted token ─► TokenReview ─► Identity (identity.py)
    Identity + module namespace ─► SubjectAccessReview(create rolloutcommands|rolloutapprovals|
                                   rolloutbreakglasses.rollout.dev in <namespace>) ─► allowed / 403

The dashboard keeps no user list and no policy of its own: a user may press a button exactly
when the same user may create the CRD object that means the same thing (a RolloutCommand,
or a RolloutApproval for an approval) — one RBAC for both doors. The dashboard's service
account needs `create` on `tokenreviews` and `subjectaccessreviews` (the chart grants it).

Answers are cached briefly (`CACHE_SECONDS`, bounded), as kube-apiserver's own webhook
authenticator and authorizer do, so that /api/me and each page do not cost a review per
request; a revoked RoleBinding or token takes effect within that time. The cache keys a
token by its SHA-256, never the token itself.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kubernetes_asyncio.client import (
    ApiClient,
    AuthenticationV1Api,
    AuthorizationV1Api,
    V1ResourceAttributes,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
    V1TokenReview,
    V1TokenReviewSpec,
)

from projections.dashboard.identity import Identity

GROUP = "rollout.dev"
COMMANDS = "rolloutcommands"
APPROVALS = "rolloutapprovals"
# break-glass of freeze calendars (rollout/engine/freeze_gate.py): granted apart from commands
# and approvals — the same grant that lets a user create a RolloutBreakGlass object
BREAK_GLASS = "rolloutbreakglasses"
CACHE_SECONDS = 10.0
CACHE_ENTRIES = 4096

K = TypeVar("K")
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """At most `entries` answers, each kept `ttl` seconds; the least recently stored go first."""

    def __init__(self, ttl: float = CACHE_SECONDS, entries: int = CACHE_ENTRIES) -> None:
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._ttl, self._entries = ttl, entries

    async def get(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        now = time.monotonic()
        hit = self._items.get(key)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        value = await compute()
        self._items[key] = (now, value)
        self._items.move_to_end(key)
        while len(self._items) > self._entries:
            self._items.popitem(last=False)
        return value


@dataclass(frozen=True)
class Permission:
    """One SubjectAccessReview's question and answer."""

    verb: str
    resource: str
    namespace: str
    allowed: bool
    reason: str = ""

    def describe(self) -> str:
        return f"{self.verb} {self.resource}.{GROUP} in namespace {self.namespace}"


class KubeAccess:
    """TokenReview and SubjectAccessReview against the management cluster's API server."""

    def __init__(self, connect: Callable[[], Awaitable[ApiClient]]) -> None:
        self._connect = connect
        self._api: ApiClient | None = None
        self._tokens: ExpiringCache[str, Identity | None] = ExpiringCache()
        self._permissions: ExpiringCache[tuple[object, ...], Permission] = ExpiringCache()

    async def _client(self) -> ApiClient:
        if self._api is None:
            self._api = await self._connect()
        return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def authenticate(self, token: str) -> Identity | None:
        """Who `token` is, by the API server's TokenReview; None when it is not authenticated."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return await self._tokens.get(digest, lambda: self._review_token(token))

    async def _review_token(self, token: str) -> Identity | None:
        review = await AuthenticationV1Api(await self._client()).create_token_review(
            V1TokenReview(spec=V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        user = status.user
        return Identity(
            user=user.username,
            groups=tuple(user.groups or ()),
            source="token",
            uid=user.uid,
            extra={k: list(v) for k, v in (user.extra or {}).items()},
        )

    async def may_create(self, identity: Identity, resource: str, namespace: str) -> Permission:
        """May `identity` create `resource`.rollout.dev objects in `namespace`?"""
        key = (identity.user, identity.groups, identity.uid, resource, namespace)
        return await self._permissions.get(key, lambda: self._review_access(identity, resource, namespace))

    async def _review_access(self, identity: Identity, resource: str, namespace: str) -> Permission:
        spec = V1SubjectAccessReviewSpec(
            user=identity.user,
            groups=list(identity.groups),
            uid=identity.uid,
            extra=identity.extra or None,
            resource_attributes=V1ResourceAttributes(
                verb="create", group=GROUP, resource=resource, namespace=namespace
            ),
        )
        review = await AuthorizationV1Api(await self._client()).create_subject_access_review(
            V1SubjectAccessReview(spec=spec)
        )
        status = review.status
        allowed = bool(status and status.allowed and not status.denied)
        return Permission("create", resource, namespace, allowed, (status.reason or "") if status else "")
