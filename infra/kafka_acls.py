"""Who may do what on Kafka: one principal per component, and the ACLs each one needs.

The one source of truth for least-privilege Kafka. Everything else is rendered from
`principals(prefix)`:

    principals(prefix) ──► kafka_acls_commands()   `kafka-acls.sh --add …` lines
                       │                            (`rollout kafka acls`, docs/security.md)
                       ├──► strimzi_acls()          a KafkaUser's `spec.authorization.acls`
                       │                            (charts/rollout/files/kafka-users.yaml,
                       │                             `python -m infra.kafka_acls --write`)
                       └──► LocalKafka.apply_acls   the same command lines, run against the
                                                    local broker (kafka.admin.AclCommand)

What each component touches, read off the code (infra/topics.py has the topics):

* topics (`rollout topics create`, the chart's pre-install Job): creates and describes the
  engine's topics — nothing else.
* worker (`rollout worker`): reads the input topics and its own intermediate topics, writes
  the journal, assignments, projections, history, verdicts, dead letters, ticks and its
  state changelogs; consumer groups `<prefix>rollout-worker.<stage>` and transactional ids
  `<prefix>rollout-worker.<stage>.<topic>.<partition>[.<turn>]`. It never writes what users
  or clusters say (intents, cluster observations, sync status, heartbeats).
* applier: reads the assemblages (group `<prefix>rollout-applier…`), writes sync status and
  heartbeats. It cannot publish intents.
* watcher (`watch-clusters`): reads and writes cluster observations, fenced by its
  transactional id `rollout-watch-clusters.<prefix>`.
* module watcher (`watch-modules`): writes intents and — for ModuleRestriction objects —
  cluster observations (transactional id `rollout-watch-modules.<prefix>`), reads them
  back and the module status and verdicts.
* gate runner: reads module status, writes sync status (gate results).
* promoter (`rollout promoter`): reads module status, writes sync status (PromotionObserved:
  a version it saw). It cannot publish intents: what it observes is only ever a promotion
  the engine decides on, never a manifest.
* notifier (`rollout notifier`): reads the decisions (group `<prefix>rollout-notifier`),
  writes dead letters (notifications a webhook never accepted). It cannot publish intents
  or anything the engine reads: a notification can change no rollout.
* snapshotter (`rollout snapshot take|retain`, the chart's CronJob; `rollout replay
  --from-snapshot` to check a snapshot with the same credentials): reads decide-state and
  assemble-state (read_committed) and what a replay from a snapshot compares — the journal,
  assignments, decisions, module status and assemblages; describes the router's consumer
  group (`<prefix>rollout-worker.route`: what it has routed); and deletes records (Kafka's
  DeleteRecords, ACL operation Delete) of exactly the journal, assignments, sync-status and
  ticks. It writes no topic, holds no transactional id and joins no group: it can change
  no rollout. (Delete is as strong as it sounds — a principal holding it could cut those
  topics past what `retain` would; the worker then refuses to resume rather than skip
  journal records, `InputTruncated` in streams/delivery.py — so it goes to the retention job alone.)
* dashboard: reads the projections it shows and writes commands — the intents topic only.
* cli-reader: every `rollout` command that only reads (status, history, list, replay, …).
* cli-operator: what cli-reader may do, plus `rollout apply|delete|approve|pause|…|cluster
  join|leave` — intents and cluster observations, in transactions `<prefix>rollout-apply-…`
  (and DescribeConfigs on both topics: `apply` checks record sizes against their limits).

Every name is literal but for three prefixed patterns whose prefix is the engine's own
(consumer groups and transactional ids that carry a stage, partition or random suffix; the
topics principal's `Create`, for topics not created yet). Write, Read and Delete imply Describe;
an idempotent producer needs Write on some topic (KIP-679), never IdempotentWrite on the
cluster. `rollout report-status` and `rollout report-values` stand in for an applier
(simulators, tests): they need the applier's principal.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from infra.settings import DEFAULT_PREFIX
from infra.topics import TOPICS, TopicNames


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(StrEnum):
    READ = "Read"
    WRITE = "Write"
    DESCRIBE = "Describe"
    CREATE = "Create"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    DELETE = "Delete"  # on a topic: DeleteRecords (and DeleteTopics, which nothing here asks)


STRIMZI_RESOURCE = {
    ResourceType.TOPIC: "topic",
    ResourceType.GROUP: "group",
    ResourceType.TRANSACTIONAL_ID: "transactionalId",
}
"""`spec.authorization.acls[].resource.type` of a Strimzi KafkaUser."""

VERBS = {
    Operation.READ: "read",
    Operation.WRITE: "write",
    Operation.DESCRIBE: "describe",
    Operation.CREATE: "create",
    Operation.DESCRIBE_CONFIGS: "describe the configs of",
    Operation.DELETE: "delete records of",
}


@dataclass(frozen=True)
class Grant:
    """`operations` on the resources of one type named `names` (literal or prefixed)."""

    resource_type: ResourceType
    names: tuple[str, ...]
    operations: tuple[Operation, ...]
    pattern: PatternType = PatternType.LITERAL


@dataclass(frozen=True)
class Principal:
    """One component's Kafka identity: `User:<user>` and what it may do."""

    component: str
    user: str
    does: str
    grants: tuple[Grant, ...]

    @property
    def name(self) -> str:
        return f"User:{self.user}"

    def allows(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether a grant covers `operation` on the resource (Read, Write and Delete imply Describe)."""
        describing = (Operation.READ, Operation.WRITE, Operation.DELETE)
        implied = {operation, *(describing if operation is Operation.DESCRIBE else ())}
        for grant in self.grants:
            if grant.resource_type is not resource_type or not implied & set(grant.operations):
                continue
            if any(name == n if grant.pattern is PatternType.LITERAL else name.startswith(n) for n in grant.names):
                return True
        return False


COMPONENTS = (
    "topics",
    "worker",
    "applier",
    "watcher",
    "module-watcher",
    "gate-runner",
    "promoter",
    "notifier",
    "snapshotter",
    "dashboard",
    "cli-reader",
    "cli-operator",
)
"""The principals, in the order tables and charts list them."""

WORKER_READS = (
    "intents",
    "clusters",
    "status",
    "ticks",
    "heartbeats",
    "dependencies",
    "journal",
    "assignments",
    "decide_state",
    "assemble_state",
)
WORKER_WRITES = (
    "ticks",
    "dependencies",
    "journal",
    "assignments",
    "decide_state",
    "assemble_state",
    "remote",
    "proxy",
    "module_status",
    "targets",
    "decisions",
    "dead_letters",
    "verdicts",
)
DASHBOARD_READS = (
    "module_status",
    "targets",
    "clusters",
    "remote",
    "proxy",
    "decisions",
    "dead_letters",
    "verdicts",
    "heartbeats",
)
CLI_READS = tuple(spec.role for spec in TOPICS if spec.role != "assemble_state")
"""Everything the engine publishes (`rollout replay` reads the journal and the assignments),
and the decider's state: `rollout history --verify` compares each decision chain's tip
with the head committed there, the one check that sees a well-formed record appended at
the tail. It holds nothing the other topics do not (no secret ever goes onto Kafka)."""
OPERATOR_WRITES = ("intents", "clusters")
SNAPSHOTTER_READS = (
    "decide_state",
    "assemble_state",
    "journal",
    "assignments",
    "decisions",
    "module_status",
    "remote",
    "proxy",
)
"""`snapshot take` reads the two state topics and the decisions' and assignments' end
offsets; `replay --from-snapshot` reads the journal, assignments and decisions past a
snapshot and compares with decide-state, module status and the assemblages."""
SNAPSHOTTER_DELETES = ("journal", "assignments", "status", "ticks")
"""What `snapshot retain` cuts (streams/snapshots.py: the journal and assignments below the
oldest kept snapshot, sync-status and ticks below what the router had routed by then)."""


def router_group(prefix: str) -> str:
    """The worker's router stage's consumer group: what it committed is what it routed
    (`snapshot retain` cuts sync-status and ticks below it)."""
    return f"{prefix}rollout-worker.route"


def default_user(component: str, user_prefix: str = "rollout-") -> str:
    return f"{user_prefix}{component}"


def principals(prefix: str = DEFAULT_PREFIX, *, user_prefix: str = "rollout-") -> list[Principal]:
    """Every component's principal for the engine whose topics start with `prefix`; users
    are named `<user_prefix><component>` (the chart's KafkaUsers: `<fullname>-<component>`)."""
    names = TopicNames(prefix)

    def topics(roles: Iterable[str]) -> tuple[str, ...]:
        return tuple(names.name(role) for role in roles)

    def read(roles: Iterable[str]) -> Grant:
        return Grant(ResourceType.TOPIC, topics(roles), (Operation.READ,))

    def write(roles: Iterable[str]) -> Grant:
        return Grant(ResourceType.TOPIC, topics(roles), (Operation.WRITE,))

    def transactional(name: str, pattern: PatternType = PatternType.LITERAL) -> Grant:
        return Grant(ResourceType.TRANSACTIONAL_ID, (name,), (Operation.WRITE, Operation.DESCRIBE), pattern)

    def group(name: str) -> Grant:
        return Grant(ResourceType.GROUP, (name,), (Operation.READ,), PatternType.PREFIXED)

    cli_read = read(CLI_READS)
    grants: dict[str, tuple[str, tuple[Grant, ...]]] = {
        "topics": (
            "creates the engine's topics (`rollout topics create`, the chart's Job)",
            (Grant(ResourceType.TOPIC, (prefix,), (Operation.CREATE, Operation.DESCRIBE), PatternType.PREFIXED),),
        ),
        "worker": (
            "routes, decides and assembles: the engine's own topics, never what users or clusters say",
            (
                read(WORKER_READS),
                write(WORKER_WRITES),
                group(f"{prefix}rollout-worker."),
                transactional(f"{prefix}rollout-worker.", PatternType.PREFIXED),
            ),
        ),
        "applier": (
            "reads assemblages, reports sync status and heartbeats",
            (read(("remote", "proxy")), write(("status", "heartbeats")), group(f"{prefix}rollout-applier")),
        ),
        "watcher": (
            "publishes Cluster API clusters as cluster observations",
            (
                Grant(ResourceType.TOPIC, topics(("clusters",)), (Operation.READ, Operation.WRITE)),
                transactional(f"rollout-watch-clusters.{prefix}"),
            ),
        ),
        "module-watcher": (
            "publishes rollout.dev objects as intents (restrictions: as cluster observations), writes status back",
            (
                read(("intents", "clusters", "module_status", "verdicts")),
                write(("intents", "clusters")),
                transactional(f"rollout-watch-modules.{prefix}"),
            ),
        ),
        "gate-runner": (
            "evaluates health gates, publishes their results as sync status",
            (read(("module_status",)), write(("status",))),
        ),
        "promoter": (
            "watches auto-promoted sources, publishes newer versions as sync status",
            (read(("module_status",)), write(("status",))),
        ),
        "notifier": (
            "sends decisions as CloudEvents to webhooks; dead-letters what a webhook never accepted",
            (read(("decisions",)), write(("dead_letters",)), group(f"{prefix}rollout-notifier")),
        ),
        "snapshotter": (
            "snapshots the engine's state, deletes the journal, assignments, sync-status and ticks below them",
            (
                read(SNAPSHOTTER_READS),
                Grant(ResourceType.TOPIC, topics(SNAPSHOTTER_DELETES), (Operation.DELETE,)),
                Grant(ResourceType.GROUP, (router_group(prefix),), (Operation.DESCRIBE,)),
            ),
        ),
        "dashboard": (
            "shows the fleet, publishes commands (the intents topic only)",
            (read(DASHBOARD_READS), write(("intents",))),
        ),
        "cli-reader": ("`rollout status|history|list|replay|…`: reads, writes nothing", (cli_read,)),
        "cli-operator": (
            "`rollout apply|delete|approve|pause|…`: cli-reader's reads, plus intents and cluster observations",
            (
                cli_read,
                Grant(ResourceType.TOPIC, topics(OPERATOR_WRITES), (Operation.WRITE, Operation.DESCRIBE_CONFIGS)),
                transactional(f"{prefix}rollout-apply-", PatternType.PREFIXED),
            ),
        ),
    }
    return [Principal(component, default_user(component, user_prefix), *grants[component]) for component in COMPONENTS]


def principal(component: str, prefix: str = DEFAULT_PREFIX, *, user_prefix: str = "rollout-") -> Principal:
    return next(p for p in principals(prefix, user_prefix=user_prefix) if p.component == component)


# --- kafka-acls.sh ---------------------------------------------------------------------------

RESOURCE_FLAG = {
    ResourceType.TOPIC: "--topic",
    ResourceType.GROUP: "--group",
    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
}


def acl_arguments(principal_name: str, grant: Grant) -> list[str]:
    """The `kafka-acls.sh` arguments after `--add` that create `grant` for `principal_name`
    (AclCommand applies every --operation to every resource given)."""
    arguments = ["--allow-principal", principal_name]
    for operation in grant.operations:
        arguments += ["--operation", operation.value]
    for name in grant.names:
        arguments += [RESOURCE_FLAG[grant.resource_type], name]
    return [*arguments, "--resource-pattern-type", grant.pattern.value]


def acl_commands(
    principal: Principal, *, bootstrap: str = "$BOOTSTRAP", command_config: str = "admin.properties"
) -> list[list[str]]:
    """`principal`'s grants as argument lists of `kafka-acls.sh` (without the program name)."""
    connection = ["--bootstrap-server", bootstrap, "--command-config", command_config]
    return [[*connection, "--add", *acl_arguments(principal.name, grant)] for grant in principal.grants]


def kafka_acls_script(
    prefix: str = DEFAULT_PREFIX,
    *,
    user_prefix: str = "rollout-",
    bootstrap: str = "$BOOTSTRAP",
    command_config: str = "admin.properties",
    program: str = "kafka-acls.sh",
) -> str:
    """Every principal's `kafka-acls.sh` lines, commented: what `rollout kafka acls` prints."""
    lines = [
        f"# Least-privilege ACLs of the rollout engine with topic prefix {prefix!r} (rollout kafka acls).",
        "# Run as a Kafka super user; each principal authenticates as User:<name> (SASL/SCRAM).",
    ]
    for each in principals(prefix, user_prefix=user_prefix):
        lines.append(f"\n# {each.name} ({each.component}): {each.does}")
        for arguments in acl_commands(each, bootstrap=bootstrap, command_config=command_config):
            lines.append(shlex.join([program, *arguments]).replace("'$BOOTSTRAP'", '"$BOOTSTRAP"'))
    return "\n".join(lines) + "\n"


def grant_command(
    principal_name: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
    *,
    pattern: PatternType = PatternType.LITERAL,
    bootstrap: str = "$BOOTSTRAP",
) -> str:
    """The one `kafka-acls.sh` line that would allow what was refused (for error messages)."""
    grant = Grant(resource_type, (name,), (operation,), pattern)
    arguments = ["--bootstrap-server", bootstrap, "--add", *acl_arguments(principal_name, grant)]
    return shlex.join(["kafka-acls.sh", *arguments]).replace("'$BOOTSTRAP'", '"$BOOTSTRAP"')


# --- Strimzi KafkaUser -------------------------------------------------------------------------

PREFIX_PLACEHOLDER = "{prefix}"
"""Stands for `kafka.topicPrefix` in charts/rollout/files/kafka-users.yaml; the chart's
template substitutes it."""


def strimzi_acls(principal: Principal) -> list[dict[str, Any]]:
    """`spec.authorization.acls` of `principal`'s KafkaUser (Strimzi's `simple` authorization)."""
    return [
        {
            "resource": {
                "type": STRIMZI_RESOURCE[grant.resource_type],
                "name": name,
                "patternType": grant.pattern.value,
            },
            "operations": [operation.value for operation in grant.operations],
        }
        for grant in principal.grants
        for name in grant.names
    ]


def strimzi_users_yaml(prefix: str = DEFAULT_PREFIX, *, user_prefix: str = "rollout-", cluster: str = "kafka") -> str:
    """Every principal as a Strimzi KafkaUser (SCRAM-SHA-512, simple authorization)."""
    import yaml

    documents = [
        {
            "apiVersion": "kafka.strimzi.io/v1beta2",
            "kind": "KafkaUser",
            "metadata": {"name": each.user, "labels": {"strimzi.io/cluster": cluster}},
            "spec": {
                "authentication": {"type": "scram-sha-512"},
                "authorization": {"type": "simple", "acls": strimzi_acls(each)},
            },
        }
        for each in principals(prefix, user_prefix=user_prefix)
    ]
    return yaml.safe_dump_all(documents, sort_keys=False, width=120)


def chart_users() -> dict[str, Any]:
    """charts/rollout/files/kafka-users.yaml: each component's ACLs with `{prefix}` for the prefix."""
    return {each.component: {"does": each.does, "acls": strimzi_acls(each)} for each in principals(PREFIX_PLACEHOLDER)}


CHART_USERS_FILE = Path(__file__).resolve().parent.parent / "charts" / "rollout" / "files" / "kafka-users.yaml"
CHART_USERS_HEADER = (
    "# Generated by `python -m infra.kafka_acls --write` from infra/kafka_acls.py: do not edit.\n"
    "# The ACLs of each component's Strimzi KafkaUser; {prefix} stands for kafka.topicPrefix.\n"
)


def chart_users_yaml() -> str:
    import yaml

    return CHART_USERS_HEADER + yaml.safe_dump(chart_users(), sort_keys=False, width=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.kafka_acls", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {CHART_USERS_FILE.name} into the chart")
    parser.add_argument("--check", action="store_true", help="exit 1 if the chart's file is out of date")
    options = parser.parse_args(argv)
    wanted = chart_users_yaml()
    if options.write:
        CHART_USERS_FILE.write_text(wanted)
        print(f"wrote {CHART_USERS_FILE}")
        return 0
    if options.check:
        current = CHART_USERS_FILE.read_text() if CHART_USERS_FILE.exists() else ""
        if current != wanted:
            print(f"{CHART_USERS_FILE} is out of date: run `python -m infra.kafka_acls --write`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
