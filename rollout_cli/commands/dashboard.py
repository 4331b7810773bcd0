"""`rollout dashboard`: the flags; the process — who may use it, then
`projections.dashboard.server.serve` until SIGINT/SIGTERM — is rollout_cli/processes/dashboard.py.

Light at import, so that `rollout dashboard --help` imports neither aiohttp nor aiokafka
(tests/cli/test_startup.py).
"""

from __future__ import annotations

import logging.config
from typing import TYPE_CHECKING

import click

from rollout_cli.options import DEFAULT_WEB_HOST, Context, check_port_free, fail, kafka_options

if TYPE_CHECKING:
    from projections.dashboard.oidc import OIDCSettings

DEFAULT_DASHBOARD_PORT = 6070


@click.command(name="dashboard")
@click.option(
    "--port",
    envvar="ROLLOUT_DASHBOARD_PORT",
    default=DEFAULT_DASHBOARD_PORT,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port of the web UI (env ROLLOUT_DASHBOARD_PORT).",
)
@click.option(
    "--host",
    envvar="ROLLOUT_DASHBOARD_HOST",
    default=DEFAULT_WEB_HOST,
    show_default=True,
    help="Address the web UI listens on; 0.0.0.0 for every interface, as in a container (env ROLLOUT_DASHBOARD_HOST).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig of the management cluster, whose API server checks tokens (TokenReview) and "
    "authorizes every command (SubjectAccessReview); default ~/.kube/config, else in-cluster.",
)
@click.option("--context", default=None, help="Context of --kubeconfig.")
@click.option(
    "--namespace",
    "fallback_namespace",
    envvar="ROLLOUT_DASHBOARD_NAMESPACE",
    default="default",
    show_default=True,
    help="Where commands on a module whose status names no namespace are authorized (env ROLLOUT_DASHBOARD_NAMESPACE).",
)
@click.option(
    "--oidc-issuer-url",
    envvar="ROLLOUT_DASHBOARD_OIDC_ISSUER_URL",
    default=None,
    help="OIDC login: the provider's issuer, exactly as in its discovery document "
    "(env ROLLOUT_DASHBOARD_OIDC_ISSUER_URL).",
)
@click.option(
    "--oidc-client-id",
    envvar="ROLLOUT_DASHBOARD_OIDC_CLIENT_ID",
    default=None,
    help="OIDC client id (env ROLLOUT_DASHBOARD_OIDC_CLIENT_ID).",
)
@click.option(
    "--oidc-client-secret",
    envvar="ROLLOUT_DASHBOARD_OIDC_CLIENT_SECRET",
    default=None,
    help="OIDC client secret; prefer the variable ROLLOUT_DASHBOARD_OIDC_CLIENT_SECRET (from a Secret) to the flag; "
    "none: a public client, PKCE only.",
)
@click.option(
    "--oidc-redirect-url",
    envvar="ROLLOUT_DASHBOARD_OIDC_REDIRECT_URL",
    default=None,
    help="This dashboard's https://HOST/auth/callback as registered with the provider "
    "(env ROLLOUT_DASHBOARD_OIDC_REDIRECT_URL).",
)
@click.option(
    "--oidc-username-claim",
    envvar="ROLLOUT_DASHBOARD_OIDC_USERNAME_CLAIM",
    default="email",
    show_default=True,
    help="ID-token claim that is the Kubernetes user, as kube-apiserver's --oidc-username-claim "
    "(env ROLLOUT_DASHBOARD_OIDC_USERNAME_CLAIM).",
)
@click.option(
    "--oidc-groups-claim",
    envvar="ROLLOUT_DASHBOARD_OIDC_GROUPS_CLAIM",
    default="groups",
    show_default=True,
    help="ID-token claim listing the user's groups (env ROLLOUT_DASHBOARD_OIDC_GROUPS_CLAIM).",
)
@click.option(
    "--oidc-username-prefix",
    envvar="ROLLOUT_DASHBOARD_OIDC_USERNAME_PREFIX",
    default="",
    help="Prepended to the username, as kube-apiserver's --oidc-username-prefix: use the same value so RBAC "
    "subjects match (env ROLLOUT_DASHBOARD_OIDC_USERNAME_PREFIX).",
)
@click.option(
    "--oidc-groups-prefix",
    envvar="ROLLOUT_DASHBOARD_OIDC_GROUPS_PREFIX",
    default="",
    help="Prepended to every group, as kube-apiserver's --oidc-groups-prefix "
    "(env ROLLOUT_DASHBOARD_OIDC_GROUPS_PREFIX).",
)
@click.option(
    "--oidc-extra-scope",
    "oidc_extra_scopes",
    envvar="ROLLOUT_DASHBOARD_OIDC_EXTRA_SCOPES",
    multiple=True,
    help="A scope to ask for besides openid, profile and email (e.g. groups for Dex); repeatable "
    "(env ROLLOUT_DASHBOARD_OIDC_EXTRA_SCOPES, space-separated).",
)
@click.option(
    "--public-url",
    envvar="ROLLOUT_DASHBOARD_PUBLIC_URL",
    default=None,
    help="The URL browsers use (https://rollout.example.com) when a proxy terminates TLS: state-changing "
    "requests must come from its origin (env ROLLOUT_DASHBOARD_PUBLIC_URL; default: the request's own).",
)
@click.option(
    "--session-ttl",
    envvar="ROLLOUT_DASHBOARD_SESSION_TTL",
    default=28800,
    show_default=True,
    type=click.IntRange(60, 7 * 86400),
    help="Seconds a login lasts (env ROLLOUT_DASHBOARD_SESSION_TTL).",
)
@click.option(
    "--insecure-no-auth",
    envvar="ROLLOUT_DASHBOARD_INSECURE_NO_AUTH",
    is_flag=True,
    default=False,
    help="No login and no RBAC: whoever reaches the port may pause, abort and roll back. Only with a loopback "
    "--host, for a laptop (env ROLLOUT_DASHBOARD_INSECURE_NO_AUTH).",
)
@click.option(
    "--insecure-published-on-loopback",
    envvar="ROLLOUT_DASHBOARD_INSECURE_PUBLISHED_ON_LOOPBACK",
    is_flag=True,
    default=False,
    help="With --insecure-no-auth in a container: listen on --host 0.0.0.0 because the container's port is "
    "published on the host's 127.0.0.1 only, as docker-compose.yml does "
    "(env ROLLOUT_DASHBOARD_INSECURE_PUBLISHED_ON_LOOPBACK).",
)
@click.option(
    "--log-format",
    envvar="ROLLOUT_LOG_FORMAT",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="Log lines for humans or for a log pipeline.",
)
@click.option(
    "--loglevel",
    envvar="ROLLOUT_LOGLEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@kafka_options
def dashboard(
    ctx: Context,
    port: int,
    host: str,
    kubeconfig: str | None,
    context: str | None,
    fallback_namespace: str,
    oidc_issuer_url: str | None,
    oidc_client_id: str | None,
    oidc_client_secret: str | None,
    oidc_redirect_url: str | None,
    oidc_username_claim: str,
    oidc_groups_claim: str,
    oidc_username_prefix: str,
    oidc_groups_prefix: str,
    oidc_extra_scopes: tuple[str, ...],
    public_url: str | None,
    session_ttl: int,
    insecure_no_auth: bool,
    insecure_published_on_loopback: bool,
    log_format: str,
    loglevel: str,
) -> None:
    """Serve a live web UI of modules, stages, clusters and dead letters, until stopped.

    It reads the projection topics (read_committed), updates the browser through server-sent
    events, and its approve / pause / resume / rollback / abort buttons publish the same
    commands as the CLI, showing the engine's refusal when there is one. Users log in with
    OIDC or a Kubernetes token; what they may press is what Kubernetes RBAC lets them create
    (RolloutCommands, RolloutApprovals) in the module's namespace.
    """
    check_port_free(port, host, "--port")
    from infra import client
    from infra.observability import logging_config
    from projections.dashboard.guard import is_loopback
    from projections.dashboard.server import serve
    from rollout_cli.processes.dashboard import dashboard_guard
    from rollout_cli.processes.signals import run_until_signalled

    logging.config.dictConfig(logging_config(log_format, loglevel))
    oidc = None
    if oidc_issuer_url or oidc_client_id or oidc_redirect_url:
        oidc = _oidc_settings(
            oidc_issuer_url,
            oidc_client_id,
            oidc_client_secret,
            oidc_redirect_url,
            claims=(oidc_username_claim, oidc_groups_claim, oidc_username_prefix, oidc_groups_prefix),
            extra_scopes=tuple(s for scopes in oidc_extra_scopes for s in scopes.split()),
        )
    loopback = is_loopback(host) or insecure_published_on_loopback
    guard = dashboard_guard(
        loopback, kubeconfig, context, oidc, insecure_no_auth, public_url, fallback_namespace, session_ttl
    )
    bootstrap, topics = ctx.bootstrap, ctx.topics
    click.echo(f"dashboard: http://{host}:{port}/ (topics {ctx.prefix}*, Kafka {bootstrap})")
    if guard.insecure:
        click.secho(
            "INSECURE: --insecure-no-auth: no login, no RBAC; anyone who reaches this port may approve, pause, "
            f"abort and roll back (bound to {host} only)",
            fg="red",
            bold=True,
            err=True,
        )
    else:
        doors = ["Kubernetes tokens (TokenReview)"] + ([f"OIDC ({oidc.issuer_url})"] if oidc else [])
        click.echo(f"login:     {', '.join(doors)}; commands authorized by SubjectAccessReview")

    try:
        run_until_signalled(
            lambda stop: serve(bootstrap=bootstrap, topics=topics, host=host, port=port, guard=guard, stop=stop)
        )
    except client.MissingTopic as error:
        fail(str(error))


def _oidc_settings(
    issuer_url: str | None,
    client_id: str | None,
    client_secret: str | None,
    redirect_url: str | None,
    *,
    claims: tuple[str, str, str, str],
    extra_scopes: tuple[str, ...],
) -> OIDCSettings:
    from projections.dashboard.identity import ClaimMapping
    from projections.dashboard.oidc import DEFAULT_SCOPES, OIDCSettings

    missing = [
        flag
        for flag, value in (
            ("--oidc-issuer-url", issuer_url),
            ("--oidc-client-id", client_id),
            ("--oidc-redirect-url", redirect_url),
        )
        if not value
    ]
    if missing or issuer_url is None or client_id is None or redirect_url is None:
        fail(f"OIDC login needs {', '.join(missing)} as well")
    return OIDCSettings(
        issuer_url=issuer_url,
        client_id=client_id,
        client_secret=client_secret or None,
        redirect_url=redirect_url,
        scopes=tuple(dict.fromkeys((*DEFAULT_SCOPES, *extra_scopes))),
        claims=ClaimMapping(*claims),
    )
