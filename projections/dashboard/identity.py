"""Who is asking: the identity the dashboard verified, and how it maps to a Kubernetes subject.

    OIDC login (oidc.py) ─┐
    pasted token / Bearer ─┼─► Identity(user, groups) ─► SubjectAccessReview (kube_access.py)
    --insecure-no-auth ────┘                           ─► RolloutCommanded.user (commands.py)

One type for every door so that authorization and the recorded author never depend on how
the user logged in. `user` is exactly the string RBAC sees: for a Kubernetes token the
TokenReview's `status.user.username` (e.g. `system:serviceaccount:fleet:alice`); for OIDC the
configured claim with the configured prefix, built the way kube-apiserver's
`--oidc-username-claim` / `--oidc-username-prefix` / `--oidc-groups-prefix` build it, so a
RoleBinding written for the API server's OIDC users holds here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

IdentitySource = Literal["oidc", "token", "insecure"]


@dataclass(frozen=True)
class Identity:
    """A verified user: the RBAC subject (user, groups, uid, extra) and the door it came through."""

    user: str
    groups: tuple[str, ...] = ()
    source: IdentitySource = "token"
    uid: str | None = None
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimMapping:
    """How ID-token claims become a Kubernetes subject (kube-apiserver's --oidc-* flags).

    `username_prefix`: prepended to the username claim; kube-apiserver's default for a
    claim other than `email` is the issuer URL and `#` — pass the same prefix both places.
    `groups_prefix`: prepended to every group."""

    username_claim: str = "email"
    groups_claim: str = "groups"
    username_prefix: str = ""
    groups_prefix: str = ""

    def identity(self, claims: dict[str, object]) -> Identity:
        """The identity of verified ID-token `claims`; ValueError naming the claim when unusable."""
        username = claims.get(self.username_claim)
        if not isinstance(username, str) or not username:
            raise ValueError(f"the ID token has no string claim {self.username_claim!r} (--oidc-username-claim)")
        if self.username_claim == "email" and claims.get("email_verified") is False:
            raise ValueError("the ID token's email is not verified (email_verified: false)")
        groups = claims.get(self.groups_claim, [])
        if isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise ValueError(f"the ID token's {self.groups_claim!r} is not a list of strings (--oidc-groups-claim)")
        subject = claims.get("sub")
        return Identity(
            user=f"{self.username_prefix}{username}",
            groups=tuple(f"{self.groups_prefix}{g}" for g in groups),
            source="oidc",
            uid=subject if isinstance(subject, str) else None,
        )
