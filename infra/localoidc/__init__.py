"""A real OpenID Provider on 127.0.0.1, built from the Go module proxy: the dashboard's logins.

zitadel/oidc (an OpenID-certified Go library) ships an example provider — discovery, JWKS,
the authorization code flow with PKCE, a username/password login page — with in-memory
users and clients. Its hard-coded users have no groups and its ID tokens carry no email,
so ``provider/`` is a 150-line Go main around the example's own ``exampleop`` and
``storage`` packages that registers the clients and users of a JSON file and adds a
``groups`` claim: still the real provider, not a mock.

Flow
----
1. **Build, once per source** (:func:`ensure_provider`): ``go build`` of ``provider/``
   (go.mod/go.sum pin zitadel/oidc v3.52.0), through ``infra.localflux.build`` — the same
   cache, stamp and file lock as the Flux controllers; the version stamp is a digest of the
   Go sources, so an edit rebuilds. ~30 s on two cores with an empty Go cache, then instant.
2. **Run** (:class:`LocalOIDC`): the JSON config (issuer ``http://127.0.0.1:<port>/``,
   clients, users) in a work directory, the process through ``infra.child_processes``,
   ready when discovery answers; stopped with SIGTERM.

Used by the dashboard's browser tests (tests/projections/dashboard/).
"""

from __future__ import annotations

from infra.localoidc.provider import (
    PROVIDER,
    LocalOIDC,
    LocalOIDCError,
    OIDCClientConfig,
    OIDCUser,
    ensure_provider,
)

__all__ = ["PROVIDER", "LocalOIDC", "LocalOIDCError", "OIDCClientConfig", "OIDCUser", "ensure_provider"]
