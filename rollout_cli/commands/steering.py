"""Commands that ask the engine for something: `apply`, `delete`, `pause`/`resume`/`abort`/
`rollback`, `approve`, `pin`/`unpin`, `report-status`. Each publishes an intent and, unless
`--no-wait`, reports the engine's verdict on it (rollout_cli/verdicts.py)."""

from typing import Any

import click

from rollout_cli.options import (
    Context,
    fail,
    kafka_options,
)
from rollout_cli.verdicts import Wait, verdict_options


@click.command()
@click.option("-f", "--filename", "files", multiple=True, required=True, type=click.Path(exists=True))
@verdict_options
@kafka_options
def apply(ctx: Context, files: tuple[str, ...], wait: Wait) -> None:
    """Publish Module, BootstrapModule, Cluster and ModuleRestriction manifests (files or
    directories).

    Every document is validated and every event's size checked against its topic's limit
    first, and every module against its namespace's ModuleRestriction (in the files, or the
    one already published); if anything is wrong nothing is published and every problem is
    listed with its file, document and field (a restriction's: the rule and the value).
    Then all events are published in one Kafka transaction (all or nothing), with a warning
    for a module or stage that matches no known cluster, and it waits for the engine's
    verdict on each module: created, configured or unchanged, or refused (exit 1). Clusters
    and restrictions are created, configured or unchanged against the topic.
    """
    from infra import client
    from rollout_cli import applying
    from rollout_cli.verdicts import awaiting, report_apply

    prepared = applying.prepare(ctx, applying.load(files))
    for warning in prepared.warnings:
        click.echo(f"warning: {warning}", err=True)
    modules = [(i.description, i.event.id) for i in prepared.intents if i.role == "intents"]
    publishing = applying.publish(ctx, prepared)
    try:
        verdicts = client.run(awaiting(ctx, wait, [event_id for _, event_id in modules], publishing))
    except Exception as error:
        publishing.close()  # not awaited if the verdicts topic could not be read first: nothing was sent
        if not prepared.committed:
            fail(f"nothing was applied: {error}")
        fail(f"applied, but cannot read the engine's verdicts at {ctx.bootstrap}: {error}")
    for cluster, change in prepared.cluster_changes.items():
        click.echo(f"{cluster} {change}")
    report_apply(modules, verdicts, wait)


@click.command()
@click.argument("kind", type=click.Choice(["module", "bootstrapmodule", "cluster", "modulerestriction"]))
@click.argument("name")
@verdict_options
@kafka_options
def delete(ctx: Context, kind: str, name: str, wait: Wait) -> None:
    """Delete a module, bootstrapmodule or cluster (its syncs are pruned everywhere), or a
    modulerestriction NAMESPACE/NAME (the namespace is unrestricted from then on).

    Waits for the engine's verdict: an unknown name is an error (exit 1). A restriction is
    looked up on the cluster-observations topic instead (the engine does not answer it)."""
    from rollout.wire.events import ClusterRemoved, ModuleDeleted
    from rollout_cli.verdicts import decide, request

    if kind == "modulerestriction":
        delete_restriction(ctx, name)
        return
    check_name(name)
    if kind == "cluster":
        event: Any = ClusterRemoved(name=name, reply=True if wait.enabled else None)
        topic = ctx.topics.clusters
    else:
        event = ModuleDeleted(kind="Module" if kind == "module" else "BootstrapModule", name=name)
        topic = ctx.topics.intents
    verdicts = request(ctx, wait, topic=topic, messages=[(name, event.to_bytes())], ids=[event.id])
    decide(f"{kind}/{name}: delete", verdicts, event.id, wait)


def delete_restriction(ctx: Context, qualified: str) -> None:
    """Publish RestrictionDeleted for NAMESPACE/NAME, if the topic holds that restriction."""
    from infra import client
    from rollout.wire.events import RestrictionDeleted, restriction_key
    from rollout_cli.applying import restrictions_from_records

    namespace, _, name = qualified.partition("/")
    if not name:
        fail(f"name a modulerestriction as NAMESPACE/NAME, not {qualified!r}")
    check_name(namespace)
    check_name(name)
    current = restrictions_from_records(ctx.records(ctx.topics.clusters)).get(namespace)
    if current is None or current.metadata.name != name:
        found = f" (its restriction is {current.metadata.name})" if current is not None else ""
        fail(f"modulerestriction {namespace}/{name} not found{found}", code=1)
    event = RestrictionDeleted(namespace=namespace, name=name)
    client.run(client.publish(ctx.bootstrap, ctx.topics.clusters, [(restriction_key(namespace), event.to_bytes())]))
    click.echo(f"modulerestriction/{namespace}/{name} deleted")


def check_name(name: str) -> None:
    from rollout.api.manifests import check_dns1123_label

    try:
        check_dns1123_label(name)
    except ValueError as error:
        fail(str(error))


def command_verb(verb: str, help_text: str) -> click.Command:
    @click.command(name=verb, help=help_text)
    @click.argument("module")
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, wait: Wait) -> None:
        from rollout.wire.events import RolloutCommanded
        from rollout_cli import views

        check_name(module)
        event = RolloutCommanded(module=module, command=verb, user=views.current_user(), via="cli")  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb}")

    return _command


def ask_engine(ctx: Context, wait: Wait, event: Any, key: str, what: str) -> None:
    """Publish intent `event` and report the engine's verdict on it (rollout_cli/verdicts.py)."""
    from rollout_cli.verdicts import decide, request

    verdicts = request(ctx, wait, topic=ctx.topics.intents, messages=[(key, event.to_bytes())], ids=[event.id])
    decide(what, verdicts, event.id, wait)


@click.command()
@click.argument("module")
@click.option("--stage", required=True, help="The stage to approve.")
@verdict_options
@kafka_options
def approve(ctx: Context, module: str, stage: str, wait: Wait) -> None:
    """Approve STAGE of MODULE's rollout to start."""
    from rollout.wire.events import RolloutCommanded
    from rollout_cli import views

    check_name(module)
    event = RolloutCommanded(module=module, command="approve", stage=stage, user=views.current_user(), via="cli")
    ask_engine(ctx, wait, event, module, f"module/{module}: approve stage {stage}")


def pin_verb(verb: str, help_text: str) -> click.Command:
    @click.command(name=verb, help=help_text)
    @click.argument("module")
    @click.option("--cluster", required=True)
    @verdict_options
    @kafka_options
    def _command(ctx: Context, module: str, cluster: str, wait: Wait) -> None:
        from rollout.wire.events import RolloutCommanded
        from rollout_cli import views

        check_name(module)
        check_name(cluster)
        event = RolloutCommanded(module=module, command=verb, cluster=cluster, user=views.current_user(), via="cli")  # type: ignore[arg-type]
        ask_engine(ctx, wait, event, module, f"module/{module}: {verb} {cluster}")

    return _command


@click.command(name="report-status")
@click.option("--cluster", required=True)
@click.option("--module", required=True)
@click.option("--revision", required=True)
@click.option("--state", required=True, type=click.Choice(["succeeded", "failed", "updating"]))
@click.option("--message", default=None)
@click.option(
    "--generation",
    type=click.IntRange(min=1),
    default=None,
    help="The module generation the report answers (as appliers send it); without it the report "
    "is matched by revision only.",
)
@verdict_options
@kafka_options
def report_status(
    ctx: Context,
    cluster: str,
    module: str,
    revision: str,
    state: str,
    message: str | None,
    generation: int | None,
    wait: Wait,
) -> None:
    """Publish a sync status, as an applier does (for simulators and tests).

    Waits for the engine's verdict: a report about an unknown cluster or module, or not
    about the assignment in force, is an error (exit 1) naming why."""
    from rollout.wire.events import SyncStatusReported
    from rollout_cli.verdicts import decide, request

    check_name(cluster)
    check_name(module)
    event = SyncStatusReported(
        cluster=cluster,
        module=module,
        revision=revision,
        state=state,  # type: ignore[arg-type]
        message=message,
        generation=generation,
        reply=True if wait.enabled else None,
    )
    verdicts = request(ctx, wait, topic=ctx.topics.status, messages=[(cluster, event.to_bytes())], ids=[event.id])
    decide(f"{cluster}/{module}: {state} at {revision}", verdicts, event.id, wait)


# --- reading projections -----------------------------------------------------------------

COMMANDS: list[click.Command] = [
    apply,
    delete,
    approve,
    report_status,
    command_verb("pause", "Stop making new moves in MODULE's rollout until `resume`."),
    command_verb("resume", "Resume a paused (or halted) rollout."),
    command_verb("abort", "Stop MODULE's rollout where it stands (phase Aborted) until a new revision."),
    command_verb("rollback", "Return every cluster on MODULE's target revision to its stable revision."),
    pin_verb("pin", "Hold CLUSTER at its current revision of MODULE, whatever happens."),
    pin_verb("unpin", "Let CLUSTER follow MODULE's rollout again."),
]
