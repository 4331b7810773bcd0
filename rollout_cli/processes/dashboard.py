"""`rollout dashboard`: who may use the web UI, decided before it serves.

Who may use it (docs/security.md, "The dashboard"): the dashboard always needs a Kubernetes
API server — it checks pasted and Bearer tokens with TokenReview and every command with a
SubjectAccessReview — from --kubeconfig ($KUBECONFIG, ~/.kube/config) or the pod's service
account; OIDC login is added with --oidc-issuer-url, --oidc-client-id and
--oidc-redirect-url. Without an API server it refuses to start, unless --insecure-no-auth
is given, which serves everyone as an all-powerful anonymous user and is therefore only
allowed on a loopback address (`rollout up` uses it when it has no local cluster).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rollout_cli.options import fail

if TYPE_CHECKING:
    from projections.dashboard.guard import Guard
    from projections.dashboard.oidc import OIDCSettings


def dashboard_guard(
    loopback: bool,
    kubeconfig: str | None,
    context: str | None,
    oidc: OIDCSettings | None,
    insecure: bool,
    public_url: str | None,
    fallback_namespace: str,
    session_ttl: int,
) -> Guard:
    """How the dashboard knows its users; fails with what to pass when it cannot know them."""
    from projections.dashboard.guard import Guard
    from projections.dashboard.kube_access import KubeAccess
    from projections.dashboard.oidc import OIDCClient
    from projections.dashboard.sessions import SessionStore
    from projections.kube import KubeconfigError, management_client

    sessions = SessionStore(ttl=float(session_ttl))
    if insecure:
        if oidc is not None:
            fail("--insecure-no-auth and --oidc-issuer-url contradict each other: choose one")
        if not loopback:
            fail(
                "--insecure-no-auth serves everyone as an all-powerful user: only on a loopback --host "
                "(or in a container published on 127.0.0.1 only: --insecure-published-on-loopback)"
            )
        return Guard(sessions=sessions, insecure=True, public_url=public_url, fallback_namespace=fallback_namespace)

    async def probe() -> None:
        api = await management_client(kubeconfig, context)
        await api.close()

    try:
        asyncio.run(probe())
    except KubeconfigError as error:
        fail(
            f"the dashboard needs a Kubernetes API server to check logins and authorize commands: {error}; "
            "or, on a laptop only, --insecure-no-auth"
        )
    kube = KubeAccess(lambda: management_client(kubeconfig, context))
    return Guard(
        sessions=sessions,
        oidc=OIDCClient(oidc) if oidc is not None else None,
        kube=kube,
        public_url=public_url,
        fallback_namespace=fallback_namespace,
    )
