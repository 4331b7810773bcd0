"""`rollout`: the command line — kubectl-shaped verbs over the engine's Kafka topics.

Users publish intents (`apply`, `delete`, `pause`, `approve`, ...), inspect projections
(`get`, `status`, `history`), and run the processes (`worker`, `applier`, `up`, `kafka`).
Every command that talks to Kafka takes `--bootstrap-servers` / ROLLOUT_BOOTSTRAP_SERVERS
and `--topic-prefix` / ROLLOUT_TOPIC_PREFIX; without a bootstrap server it uses the local
broker `rollout kafka start` (or `rollout up`) recorded.

The commands are loaded lazily. `COMMANDS` names each one's module and attribute in
rollout_cli/commands/ and carries its short help, so `rollout --help` lists them all while
importing click and this module only, and `rollout <command> ...` imports that one command's
module. `rollout --help` imported 181 modules in 0.14 s when this module imported every
command (asyncio and the local broker's helpers with them); it imports 50 — click and the
standard library — in 0.06 s (the interpreter starts in 0.02 s, click imports in 0.02 s). The command
modules in turn import the domain, Kafka, Kubernetes and rich only inside their command.
tests/cli/test_startup.py holds both, and that the table matches the commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import click
from click.shell_completion import CompletionItem

PACKAGE = "rollout-engine"
COMMANDS_PACKAGE = "rollout_cli.commands"


class Lazy(NamedTuple):
    """Where a command is ("module:attribute", the module in rollout_cli/commands/), and its
    short help as `rollout --help` lists it: the first sentence of its docstring (a test
    compares the two)."""

    where: str
    short_help: str

    def load(self) -> click.Command:
        module, _, attribute = self.where.partition(":")
        command = getattr(importlib.import_module(f"{COMMANDS_PACKAGE}.{module}"), attribute)
        assert isinstance(command, click.Command), self.where
        return command

    def short_help_str(self, limit: int = 45) -> str:
        """The short help cut to `limit` as click cuts a command's (by click's own rule)."""
        return click.Command(None, help=self.short_help).get_short_help_str(limit)


COMMANDS: dict[str, Lazy] = {
    # publish intents, wait for the engine's verdict
    "apply": Lazy(
        "apply:apply",
        "Publish Module, BootstrapModule, Cluster, ModuleRestriction and freeze calendar manifests "
        "(files or directories).",
    ),
    "delete": Lazy(
        "delete:delete",
        "Delete a module, bootstrapmodule or cluster (its syncs are pruned everywhere), or a "
        "modulerestriction NAMESPACE/NAME (the namespace is unrestricted from then on), or a "
        "freezecalendar NAMESPACE/NAME or clusterfreezecalendar NAME (its freezes end).",
    ),
    "pause": Lazy("steering:pause", "Stop making new moves in MODULE's rollout until `resume`."),
    "resume": Lazy("steering:resume", "Resume a paused (or halted) rollout."),
    "abort": Lazy("steering:abort", "Stop MODULE's rollout where it stands (phase Aborted) until a new revision."),
    "rollback": Lazy("steering:rollback", "Return every cluster on MODULE's target revision to its stable revision."),
    "approve": Lazy("steering:approve", "Approve STAGE of MODULE's rollout to start."),
    "reject": Lazy("steering:reject", "Reject MODULE's target at STAGE, saying why: it halts or rolls back."),
    "promotion": Lazy(
        "steering:promotion_group",
        "Hold MODULE's auto-promotion of new versions (hold), or let it promote again (resume).",
    ),
    "break-glass": Lazy(
        "steering:break_glass",
        "Let a module move despite the freeze calendars holding it, until the override ends.",
    ),
    "pin": Lazy("steering:pin", "Hold CLUSTER at its current revision of MODULE, whatever happens."),
    "unpin": Lazy("steering:unpin", "Let CLUSTER follow MODULE's rollout again."),
    "cluster": Lazy("cluster:cluster_group", "Take a cluster out of the fleet's rollouts (leave) or back in (join)."),
    "report-status": Lazy(
        "report_status:report_status",
        "Publish a sync status, as an applier does (for simulators and tests).",
    ),
    "report-values": Lazy(
        "report_values:report_values",
        "Publish the live values (and/or chart defaults) of a cluster's Helm release.",
    ),
    # read the projections
    "get": Lazy("get:get", "List modules, clusters, remoteassemblages or proxyassemblages (from the topics)."),
    "status": Lazy("status:status", "Phase, target/stable revisions, per-stage progress and the latest decisions."),
    "history": Lazy("history:history", "Every decision taken for MODULE, oldest first, from the decisions topic."),
    "plan": Lazy(
        "plan:plan",
        "Show which clusters each stage would move, in order and in batches, without publishing.",
    ),
    "dead-letters": Lazy(
        "dead_letters:dead_letters",
        "Inputs the engine rejected, oldest first: when, the stage that refused, where the input was "
        "(topic[partition]@offset), its key and size, and the reason.",
    ),
    "replay": Lazy("replay:replay", "Refold the journal and the assignments log; compare with the live topics."),
    "snapshot": Lazy("snapshot:snapshot", "Snapshots of the engine's state; the journal's retention, tied to them."),
    # run the processes
    "worker": Lazy("worker:worker", "Run the stream processors (router, decider, assembler) until SIGINT/SIGTERM."),
    "applier": Lazy("applier:applier", "Turn assemblage snapshots into Flux objects in a sink, until SIGINT/SIGTERM."),
    "gate-runner": Lazy(
        "gate_runner:gate_runner",
        "Evaluate the health gates (Prometheus queries, webhooks) of every stage that soaks, and publish "
        "each result as a GateEvaluated event, until SIGINT/SIGTERM.",
    ),
    "notifier": Lazy(
        "notifier:notifier",
        "Send stage started, awaiting approval, halted, rollback, complete (and more) decisions as "
        "CloudEvents to webhooks, at least once, until SIGINT/SIGTERM.",
    ),
    "promoter": Lazy(
        "promoter:promoter",
        "Watch auto-promoted sources (OCI tags, Helm repository indexes, Git tags) and publish each "
        "newer version in a module's range as a PromotionObserved event, until SIGINT/SIGTERM.",
    ),
    "dashboard": Lazy(
        "dashboard:dashboard",
        "Serve a live web UI of modules, stages, clusters and dead letters, until stopped.",
    ),
    "watch-clusters": Lazy(
        "watch_clusters:watch_clusters",
        "Publish Cluster API clusters of the management cluster as fleet clusters, until stopped.",
    ),
    "watch-modules": Lazy(
        "watch_modules:watch_modules",
        "Turn Module, BootstrapModule, RolloutApproval, RolloutCommand and RolloutBreakGlass objects into "
        "intents (and "
        "ModuleRestrictions into the policy the engine enforces: a module breaking its namespace's is "
        "refused, not published), and write each module's rollout status back on its object, until "
        "stopped.",
    ),
    "up": Lazy(
        "up:up",
        "Everything on one machine: local broker (started if none), topics, worker, applier, dashboard.",
    ),
    # set up
    "kafka": Lazy("kafka:kafka", "Run the local single-node Kafka broker (KRaft) the engine and the tests use."),
    "topics": Lazy("topics:topics", "Manage the engine's topics."),
    "crds": Lazy(
        "crds:crds",
        "Print the CustomResourceDefinitions of Module, BootstrapModule, RolloutApproval, RolloutCommand, "
        "RolloutBreakGlass, ModuleRestriction and the freeze calendars "
        "(`rollout crds | kubectl apply -f -`; the chart ships the same).",
    ),
    "completion": Lazy("completion:completion", "Print the shell completion script for SHELL."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are named in a table and imported when one is used.

    `list_commands` and the help's command list (and shell completion of command names)
    read the table; `get_command` imports the one module asked for."""

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.lazy.get(cmd_name)
        return entry.load() if entry is not None else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click.Group's, with each short help from the table (no command imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self.lazy[name].short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names from the table, then the group's own options (click.Command's)."""
        names = [
            CompletionItem(name, help=entry.short_help_str())
            for name, entry in sorted(self.lazy.items())
            if name.startswith(incomplete)
        ]
        return names + click.Command.shell_complete(self, ctx, incomplete)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=PACKAGE, prog_name="rollout", message="%(prog)s %(version)s")
def cli() -> None:
    """Staged, explainable rollouts of Flux syncs across fleets of Kubernetes clusters."""


if __name__ == "__main__":
    cli()
