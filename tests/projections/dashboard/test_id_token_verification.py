"""What the dashboard accepts as an ID token, and what it makes of its claims.

The browser test logs in through a real provider, which only ever issues good tokens; these
tests give the verifier the tokens a provider should never issue — or an attacker would
craft — signed with a key of the test's own (the JWKS the client trusts is that key's), and
check each is refused with the reason: another audience or issuer, expired, another login's
nonce, `alg: none`, HS256 keyed with something public, a key not in the JWKS. And the
claim mapping: kube-apiserver's username and groups prefixes, a groups claim that is a
string, an email the provider has not verified."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from projections.dashboard.identity import ClaimMapping, Identity
from projections.dashboard.oidc import LoginFailed, OIDCClient, OIDCSettings, PendingLogins, code_challenge

ISSUER, CLIENT = "https://login.example.com/", "rollout-dashboard"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def trusting_client() -> OIDCClient:
    """A client whose discovery and JWKS are already known (the test's key, kid k1)."""
    client = OIDCClient(OIDCSettings(ISSUER, CLIENT, "https://rollout.example.com/auth/callback"))
    client._discovery = {"issuer": ISSUER, "jwks_uri": "unused"}
    public = jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    client._keys = jwt.PyJWKSet.from_dict({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})
    return client


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "aud": CLIENT, "sub": "u1", "iat": now, "exp": now + 300, "nonce": "n-1",
            "email": "alice@example.com", "email_verified": True, "groups": ["rollout-operators"]}  # fmt: skip
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def signed(payload: dict[str, Any], *, key: Any = KEY, kid: str = "k1", algorithm: str = "RS256") -> str:
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


def verify(token: str, nonce: str = "n-1") -> dict[str, Any]:
    return asyncio.run(trusting_client().verify(token, nonce=nonce))


def test_a_token_signed_by_the_providers_key_for_this_client_and_login_is_accepted() -> None:
    assert verify(signed(claims()))["email"] == "alice@example.com"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (lambda: signed(claims(aud="another-client")), "Audience doesn't match"),
        (lambda: signed(claims(iss="https://evil.example.com/")), "Invalid issuer"),
        (lambda: signed(claims(exp=int(time.time()) - 120)), "Signature has expired"),
        (lambda: signed(claims(nonce="another-login")), "nonce is not this login's"),
        (lambda: signed(claims(nonce=None)), "nonce is not this login's"),
        (lambda: signed(claims(aud=[CLIENT, "other"])), "not issued to this client (azp)"),
        (lambda: signed(claims(), key=OTHER_KEY), "Signature verification failed"),
        (lambda: signed(claims(), kid="unknown"), "no key 'unknown'"),
        (lambda: jwt.encode(claims(), None, algorithm="none"), "algorithm 'none' is not accepted"),
        (
            lambda: jwt.encode(claims(), "a-client-secret-or-a-public-key-as-hmac", algorithm="HS256"),
            "'HS256' is not accepted",
        ),
        (lambda: "not.a.jwt", "not a JWT"),
    ],
    ids=[
        "audience",
        "issuer",
        "expired",
        "nonce",
        "no-nonce",
        "azp",
        "foreign-key",
        "unknown-kid",
        "alg-none",
        "hs256",
        "garbage",
    ],
)
def test_a_token_the_provider_did_not_issue_for_this_login_is_refused(token: Any, reason: str) -> None:
    client = trusting_client()
    if "unknown" in reason:  # an unknown kid refetches the keys once: the same JWKS again
        client._get_json = _same_keys(client)  # type: ignore[method-assign]
    with pytest.raises(LoginFailed, match=re.escape(reason)):
        asyncio.run(client.verify(token(), nonce="n-1"))


def _same_keys(client: OIDCClient) -> Any:
    keys = {"keys": [k._jwk_data for k in client._keys.keys]}  # type: ignore[union-attr]

    async def get_json(url: str) -> dict[str, Any]:
        return keys

    return get_json


def test_claims_become_the_subject_kube_apiserver_would_see() -> None:
    mapping = ClaimMapping(
        username_claim="email", groups_claim="groups", username_prefix="oidc:", groups_prefix="oidc:"
    )
    assert mapping.identity(claims()) == Identity(
        user="oidc:alice@example.com", groups=("oidc:rollout-operators",), source="oidc", uid="u1"
    )
    assert ClaimMapping(groups_claim="role").identity(claims(role="admin")).groups == ("admin",)
    assert ClaimMapping(username_claim="sub").identity(claims()).user == "u1"


@pytest.mark.parametrize(
    ("mapping", "changes", "reason"),
    [
        (ClaimMapping(), {"email_verified": False}, "email is not verified"),
        (ClaimMapping(username_claim="preferred_username"), {}, "no string claim 'preferred_username'"),
        (ClaimMapping(), {"groups": [1, 2]}, "'groups' is not a list of strings"),
    ],
)
def test_claims_that_name_no_trustworthy_user_are_refused(
    mapping: ClaimMapping, changes: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        mapping.identity(claims(**changes))


def test_a_pending_login_is_used_once_and_its_challenge_is_s256() -> None:
    logins = PendingLogins()
    login = logins.start()
    assert logins.finish(login.state) == login
    with pytest.raises(LoginFailed, match="unknown or expired"):
        logins.finish(login.state)
    # RFC 7636 appendix B
    assert (
        code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )
