"""`rollout`: the command line — kubectl-shaped verbs over the engine's Kafka topics.

Users publish intents (`apply`, `delete`, `pause`, `approve`, ...), inspect projections
(`get`, `status`, `history`), and run the processes (`worker`, `applier`, `up`, `kafka`).
Every command that talks to Kafka takes `--bootstrap-servers` / ROLLOUT_BOOTSTRAP_SERVERS
and `--topic-prefix` / ROLLOUT_TOPIC_PREFIX; without a bootstrap server it uses the local
broker `rollout kafka start` (or `rollout up`) recorded.
"""

from __future__ import annotations

import click

from rollout_cli import asking, reading, running
from rollout_cli.clusters import cluster_group
from rollout_cli.dashboarding import dashboard
from rollout_cli.gate_running import gate_runner
from rollout_cli.kafka import kafka as kafka_group
from rollout_cli.module_watching import crds, watch_modules
from rollout_cli.values_reporting import report_values
from rollout_cli.watching import watch_clusters

# `rollout --help` must start fast (tests/cli/test_startup.py): this module imports only
# click and the light option helpers. The domain (pydantic models, CRD schemas), the Kafka
# client, rich and the Kubernetes client are imported inside the commands that use them.

PACKAGE = "rollout-engine"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=PACKAGE, prog_name="rollout", message="%(prog)s %(version)s")
def cli() -> None:
    """Staged, explainable rollouts of Flux syncs across fleets of Kubernetes clusters."""


cli.add_command(kafka_group)
cli.add_command(watch_clusters)
cli.add_command(dashboard)
cli.add_command(cluster_group)
cli.add_command(gate_runner)
cli.add_command(watch_modules)
cli.add_command(crds)
cli.add_command(report_values)
for command in [*asking.COMMANDS, *reading.COMMANDS, *running.COMMANDS]:
    cli.add_command(command)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(rollout completion bash)"     (e.g. in ~/.bashrc)
    zsh:   eval "$(rollout completion zsh)"      (e.g. in ~/.zshrc)
    fish:  rollout completion fish > ~/.config/fish/completions/rollout.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    assert completion_class is not None  # click ships bash, zsh and fish
    click.echo(completion_class(cli, {}, "rollout", "_ROLLOUT_COMPLETE").source())


# --- intents -----------------------------------------------------------------------------


if __name__ == "__main__":
    cli()
