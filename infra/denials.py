"""What the broker refused, said plainly: which principal, which operation on what, and the
`kafka-acls.sh` line that would allow it.

    async with explained(Operation.WRITE, ResourceType.TOPIC, topic, bootstrap):
        ...aiokafka calls...
    → NotAuthorized("not authorized to write topic rollout.intents as User:rollout-cli-reader …")
    → NotAuthenticated("the broker at … refused the credentials of User:… (SCRAM-SHA-512) …")

aiokafka reports a refusal in several shapes, none naming who asked: a topic in the
metadata's unauthorized set or a produce answered TOPIC_AUTHORIZATION_FAILED
(`TopicAuthorizationFailedError`), an idempotent producer's InitProducerId refused because
the principal may write no topic at all (`ClusterAuthorizationFailedError`, KIP-679), a
transactional id (`TransactionalIdAuthorizationFailed`), a consumer group
(`GroupAuthorizationFailedError`), and wrong credentials only as "Unable to bootstrap"
(the SASL failure itself is merely logged) — `explained` asks the broker once more, on one
connection, to tell a refused login from a broker that is away.

A refusal is never retried: the ACLs will not change by themselves, and nothing was
written (a refused produce fails before any record is appended; a refused transaction is
never begun). Callers end — the CLI with exit code 1, long-running processes with an
error in their log.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from infra.kafka_acls import (
    VERBS,
    Grant,
    Operation,
    PatternType,
    ResourceType,
    acl_arguments,
    grant_command,
    principal,
    principals,
)
from infra.settings import DEFAULT_PREFIX, env, kafka_client_options


class KafkaDenied(PermissionError):
    """The broker refused who we are or what we asked; retrying will not help."""


class NotAuthorized(KafkaDenied):
    def __init__(
        self,
        principal: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
        pattern: PatternType = PatternType.LITERAL,
    ) -> None:
        self.principal, self.operation, self.resource_type, self.name = principal, operation, resource_type, name
        what = f"{resource_type.value} {name}" + ("…" if pattern is PatternType.PREFIXED else "")
        allowed = [
            p.name
            for p in principals(env("TOPIC_PREFIX") or DEFAULT_PREFIX)
            if p.allows(operation, resource_type, name)
        ]
        who = f" ({', '.join(allowed)} may)" if allowed else ""
        written = "; nothing was written" if operation is Operation.WRITE else ""
        super().__init__(
            f"not authorized to {VERBS[operation]} {what} as {principal}: the broker's ACLs do not allow "
            f"{operation.value} on it{who}{written}. A Kafka admin grants it with: "
            + grant_command(principal, operation, resource_type, name, pattern=pattern)
        )


class NotAuthenticated(KafkaDenied):
    def __init__(self, bootstrap: str, principal: str, detail: str) -> None:
        mechanism = env("KAFKA_SASL_MECHANISM") or "PLAIN"
        super().__init__(
            f"the broker at {bootstrap} refused the credentials of {principal} ({mechanism}): {detail}. "
            "Check ROLLOUT_KAFKA_SASL_USERNAME and ROLLOUT_KAFKA_SASL_PASSWORD (in Kubernetes: the "
            "component's KafkaUser Secret)"
        )


def current_principal() -> str:
    """`User:<name>` the configured credentials authenticate as (ANONYMOUS without SASL)."""
    protocol = (env("KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
    username = env("KAFKA_SASL_USERNAME") if protocol.startswith("SASL") else None
    return f"User:{username or 'ANONYMOUS'}"


def denial(
    error: BaseException,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
    *,
    pattern: PatternType = PatternType.LITERAL,
) -> NotAuthorized | None:
    """`error` as the refusal of `operation` on `name` (what the caller was doing), or None
    when it is no refusal. The error's own resource wins where aiokafka names one."""
    principal = current_principal()
    if isinstance(error, TransactionalIdAuthorizationFailed):
        if resource_type is ResourceType.TRANSACTIONAL_ID:
            return NotAuthorized(principal, Operation.WRITE, resource_type, name, pattern)
        return NotAuthorized(principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, _named(error, name))
    if isinstance(error, GroupAuthorizationFailedError):  # read (a member), or describe (its offsets)
        asked = operation if resource_type is ResourceType.GROUP else Operation.READ
        return NotAuthorized(principal, asked, ResourceType.GROUP, _named(error, name))
    if isinstance(error, TopicAuthorizationFailedError):
        topic = _named(error, name) if resource_type is ResourceType.TOPIC else _named(error, "?")
        return NotAuthorized(
            principal, operation if resource_type is ResourceType.TOPIC else Operation.WRITE, ResourceType.TOPIC, topic
        )
    if isinstance(error, ClusterAuthorizationFailedError) and operation is Operation.WRITE:
        # an idempotent producer may start only if its principal may write some topic
        return NotAuthorized(principal, operation, resource_type, name, pattern)
    return None


def _named(error: BaseException, default: str) -> str:
    """The resource aiokafka's error carries (a topic, a set of topics, a group, an id)."""
    argument = error.args[0] if error.args else None
    if isinstance(argument, str) and argument:
        return argument
    if isinstance(argument, (set, frozenset, list, tuple)) and argument:
        return ", ".join(sorted(map(str, argument)))
    return default


async def check_credentials(bootstrap: str) -> None:
    """Raise `NotAuthenticated` if the first broker of `bootstrap` refuses our SASL login;
    return quietly otherwise (unreachable, or no SASL: the caller's error stands)."""
    from aiokafka.conn import create_conn

    options = kafka_client_options()
    if not str(options.get("security_protocol", "")).startswith("SASL"):
        return
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        connection = await create_conn(host or "localhost", int(port), **options)
    except SaslAuthenticationFailed as error:
        raise NotAuthenticated(bootstrap, current_principal(), str(error).split(": ", 1)[-1]) from None
    except (OSError, KafkaError, TimeoutError, ValueError):
        return
    connection.close()


@asynccontextmanager
async def explained(
    operation: Operation,
    resource_type: ResourceType,
    name: str,
    bootstrap: str,
    *,
    pattern: PatternType = PatternType.LITERAL,
) -> AsyncIterator[None]:
    """Raise a refusal inside the block as `NotAuthorized` / `NotAuthenticated` (see the
    module docstring); every other error as it was."""
    try:
        yield
    except KafkaConnectionError:
        await check_credentials(bootstrap)
        raise
    except KafkaError as error:
        refused = denial(error, operation, resource_type, name, pattern=pattern)
        if refused is None:
            raise
        raise refused from error


AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)


def refused_by_acls(error: BaseException, component: str, prefix: str) -> str | None:
    """For a long-running component (worker, applier): a plain account of the broker's
    refusal `error`, with the line of the component's ACLs (infra/kafka_acls.py) that covers
    what was refused; None when `error` is no refusal. The component retries, consuming and
    writing nothing meanwhile: ACLs applied after the pods started (Strimzi's User Operator
    takes a few seconds) need no restart."""
    if not isinstance(error, AUTHORIZATION_ERRORS):
        return None
    resource_type = {
        GroupAuthorizationFailedError: ResourceType.GROUP,
        TransactionalIdAuthorizationFailed: ResourceType.TRANSACTIONAL_ID,
    }.get(type(error), ResourceType.TOPIC)
    names = _named(error, "").split(", ")
    identity = current_principal()
    lines = [
        shlex.join(["kafka-acls.sh", "--add", *acl_arguments(identity, grant)])
        for grant in principal(component, prefix).grants
        if grant.resource_type is resource_type and any(_covers(grant, name) for name in names if name)
    ]
    what = f"{resource_type.value} {', '.join(n for n in names if n) or '(unnamed)'}"
    if isinstance(error, ClusterAuthorizationFailedError):
        what = "an idempotent producer (it may write no topic at all)"
    fix = (
        f"the {component}'s ACLs grant it with: " + " ; ".join(dict.fromkeys(lines))
        if lines
        else f"grant {identity} the {component}'s ACLs: `rollout kafka acls --topic-prefix {prefix}`"
    )
    return (
        f"the broker refused {identity} access to {what} ({type(error).__name__}); {fix}. "
        "Nothing is consumed or written until it is allowed; retrying"
    )


def _covers(grant: Grant, name: str) -> bool:
    return any(name == n if grant.pattern is PatternType.LITERAL else name.startswith(n) for n in grant.names)
