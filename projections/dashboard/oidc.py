"""OIDC login: the authorization code flow with PKCE (S256), state and nonce.

    browser ─GET /auth/oidc──► dashboard: PendingLogin(state, nonce, code_verifier) kept
                               server-side by state; the browser gets a short-lived
                               login cookie holding the state, and a 302 to
    provider /authorize?response_type=code&code_challenge=S256(verifier)&state&nonce
    browser ◄─ login page of the provider (username, password) ─►
    browser ─GET /auth/callback?code&state──► dashboard: state == login cookie == a pending
                               login (one use, 10 min); POST code + verifier (+ client
                               secret) to the token endpoint; verify the ID token
                               (signature by the provider's JWKS, iss, aud, exp, iat,
                               nonce, azp) ─► Identity (identity.ClaimMapping) ─► session

As Argo CD and Headlamp do. Why each piece: PKCE binds the code to this login (a stolen
code is useless without the verifier, which never left the server); `state` in a cookie
binds the callback to the browser that started the login (no login CSRF: an attacker
cannot make a victim's browser finish the attacker's login); `nonce` binds the ID token to
the login (no replay of an older token). The ID token is verified here although it came
straight from the token endpoint over the back channel: the issuer may be plain http in a
test, and verifying costs one signature check.

Only asymmetric signatures are accepted (RS*, PS*, ES*, EdDSA): `alg: none` and HS256 keyed
with the client secret are refused whatever the provider advertises. Discovery and keys
are fetched on first use and cached; an unknown `kid` (key rotation) refetches the keys.
PyJWT does the JWT work; aiohttp the HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import jwt

from projections.dashboard.identity import ClaimMapping, Identity

log = logging.getLogger(__name__)

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
DEFAULT_SCOPES = ("openid", "profile", "email")
PENDING_LOGIN_SECONDS = 600.0
PENDING_LOGINS_KEPT = 1000
CLOCK_SKEW_SECONDS = 30
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)


class LoginFailed(Exception):
    """The login cannot complete; the message says why, for the login page and the log."""


@dataclass(frozen=True)
class OIDCSettings:
    """The dashboard as an OIDC client (`rollout dashboard --oidc-*`)."""

    issuer_url: str
    client_id: str
    redirect_url: str
    """This dashboard's /auth/callback as the provider knows it (registered with the client)."""
    client_secret: str | None = None
    """None: a public client (PKCE alone); otherwise client_secret_basic."""
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    claims: ClaimMapping = field(default_factory=ClaimMapping)


@dataclass(frozen=True)
class PendingLogin:
    """A login between the redirect to the provider and its callback."""

    state: str
    nonce: str
    code_verifier: str
    started: float


class PendingLogins:
    """Logins in flight, by state: bounded (the oldest go first) and expiring; each used once."""

    def __init__(self, kept: int = PENDING_LOGINS_KEPT, ttl: float = PENDING_LOGIN_SECONDS) -> None:
        self._by_state: dict[str, PendingLogin] = {}
        self._kept, self._ttl = kept, ttl

    def start(self) -> PendingLogin:
        now = time.monotonic()
        self._by_state = {s: p for s, p in self._by_state.items() if now - p.started < self._ttl}
        while len(self._by_state) >= self._kept:
            self._by_state.pop(next(iter(self._by_state)))
        login = PendingLogin(secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48), now)
        self._by_state[login.state] = login
        return login

    def finish(self, state: str) -> PendingLogin:
        login = self._by_state.pop(state, None)
        if login is None or time.monotonic() - login.started >= self._ttl:
            raise LoginFailed("this login is unknown or expired (over 10 minutes, or already used); log in again")
        return login


def code_challenge(verifier: str) -> str:
    """PKCE S256: base64url(sha256(verifier)) without padding (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class OIDCClient:
    """The provider as the dashboard uses it: discovery, the authorize URL, the code exchange."""

    def __init__(self, settings: OIDCSettings) -> None:
        self.settings = settings
        self.logins = PendingLogins()
        self._discovery: dict[str, Any] | None = None
        self._keys: jwt.PyJWKSet | None = None

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http, http.get(url) as response:
            if response.status != 200:
                raise LoginFailed(f"GET {url}: HTTP {response.status}")
            body = await response.json(content_type=None)
        if not isinstance(body, dict):
            raise LoginFailed(f"GET {url}: not a JSON object")
        return body

    async def discovery(self) -> dict[str, Any]:
        """The provider's /.well-known/openid-configuration; its issuer must be ours exactly."""
        if self._discovery is None:
            url = self.settings.issuer_url.rstrip("/") + "/.well-known/openid-configuration"
            document = await self._get_json(url)
            if document.get("issuer") != self.settings.issuer_url:
                raise LoginFailed(
                    f"the provider at {url} names its issuer {document.get('issuer')!r}, "
                    f"not {self.settings.issuer_url!r} (--oidc-issuer-url must be the issuer exactly)"
                )
            self._discovery = document
        return self._discovery

    async def authorization_url(self, login: PendingLogin) -> str:
        endpoint = (await self.discovery())["authorization_endpoint"]
        query = {
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": self.settings.redirect_url,
            "scope": " ".join(self.settings.scopes),
            "state": login.state,
            "nonce": login.nonce,
            "code_challenge": code_challenge(login.code_verifier),
            "code_challenge_method": "S256",
        }
        return f"{endpoint}?{urlencode(query)}"

    async def finish(self, login: PendingLogin, code: str) -> Identity:
        """Exchange `code` for tokens and return the verified ID token's identity."""
        id_token = await self._exchange(login, code)
        claims = await self.verify(id_token, nonce=login.nonce)
        try:
            return self.settings.claims.identity(claims)
        except ValueError as error:
            raise LoginFailed(str(error)) from None

    async def _exchange(self, login: PendingLogin, code: str) -> str:
        endpoint = (await self.discovery())["token_endpoint"]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.settings.redirect_url,
            "code_verifier": login.code_verifier,
        }
        auth = None
        if self.settings.client_secret is None:
            form["client_id"] = self.settings.client_id
        else:
            auth = aiohttp.BasicAuth(self.settings.client_id, self.settings.client_secret)
        async with (
            aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http,
            http.post(endpoint, data=form, auth=auth, headers={"Accept": "application/json"}) as response,
        ):
            text = await response.text()
        if response.status != 200:
            raise LoginFailed(f"the provider refused the code (HTTP {response.status}): {text[:300]}")
        try:
            id_token = json.loads(text)["id_token"]
        except (ValueError, KeyError, TypeError):
            raise LoginFailed("the provider's token response has no id_token") from None
        if not isinstance(id_token, str):
            raise LoginFailed("the provider's id_token is not a string")
        return id_token

    async def _signing_key(self, kid: str | None) -> jwt.PyJWK:
        for refetch in (False, True):
            if self._keys is None or refetch:
                self._keys = jwt.PyJWKSet.from_dict(await self._get_json((await self.discovery())["jwks_uri"]))
            keys = [k for k in self._keys.keys if kid is None or k.key_id == kid]
            if len(keys) == 1:
                return keys[0]
        raise LoginFailed(f"no key {kid!r} in the provider's JWKS")

    async def verify(self, id_token: str, *, nonce: str) -> dict[str, Any]:
        """The claims of `id_token` once signature, iss, aud, exp, iat, nonce and azp hold."""
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.PyJWTError as error:
            raise LoginFailed(f"the ID token is not a JWT: {error}") from None
        if header.get("alg") not in ASYMMETRIC_ALGORITHMS:
            raise LoginFailed(f"the ID token's algorithm {header.get('alg')!r} is not accepted")
        key = await self._signing_key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key,
                algorithms=[header["alg"]],
                audience=self.settings.client_id,
                issuer=self.settings.issuer_url,
                leeway=CLOCK_SKEW_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as error:
            raise LoginFailed(f"the ID token does not verify: {error}") from None
        if not secrets.compare_digest(str(claims.get("nonce", "")), nonce):
            raise LoginFailed("the ID token's nonce is not this login's")
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.settings.client_id:
            raise LoginFailed("the ID token has several audiences and was not issued to this client (azp)")
        return claims
