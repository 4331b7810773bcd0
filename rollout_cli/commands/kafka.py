"""``rollout kafka start|stop|status``: the project's local single-node Kafka broker;
``rollout kafka acls``: the least-privilege ACLs of every component (infra/kafka_acls.py).

Thin wrapper over :mod:`infra.localkafka` (`start --foreground` stays attached:
rollout_cli/processes/local_broker.py). The broker is found through its state file
(``$ROLLOUT_STATE_DIR/kafka.json``, default ``~/.local/state/rollout/kafka.json``); jars are
cached under ``$ROLLOUT_CACHE_DIR`` (default ``~/.cache/rollout``). A restarted broker
listens on the port it used last time (recorded in its data dir) unless that port is taken
now. Errors are printed as ``error: ...`` on stderr with exit code 2; ``status`` exits 1
when no broker is running.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from infra.localkafka import DEFAULT_HEAP, BrokerInfo, KafkaError, LocalKafka


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _describe(info: BrokerInfo) -> str:
    return (
        f"bootstrap: {info.bootstrap}\n"
        f"pid:       {info.pid}\n"
        f"log:       {info.log_file}\n"
        f"data dir:  {info.data_dir}\n"
        f"started:   {info.started_at} (Kafka {info.kafka_version}, heap {info.heap})"
    )


def _state_option(f):
    return click.option(
        "--state-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Broker state file (default: $ROLLOUT_STATE_DIR/kafka.json).",
    )(f)


@click.group("kafka")
def kafka() -> None:
    """Run the local single-node Kafka broker (KRaft) the engine and the tests use."""


@kafka.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Broker port (default: the one it used last time with this data dir, if free; else a free one).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where topics live (default: next to the state file). Kept across restarts.",
)
@click.option("--heap", default=DEFAULT_HEAP, show_default=True, help="JVM max heap (-Xmx).")
@click.option("--foreground", is_flag=True, help="Stay attached, follow the broker log, stop on Ctrl-C.")
@_state_option
def start(port: int | None, data_dir: Path | None, heap: str, foreground: bool, state_file: Path | None) -> None:
    """Start the broker (downloads its jars on first use) and wait until it serves."""
    broker = LocalKafka(state_file, progress=_progress)
    try:
        running = broker.status()
        if running is not None:
            if port is not None and port != running.port:
                _fail(f"a broker is already running at {running.bootstrap} (pid {running.pid}); stop it first")
            click.echo(f"already running\n{_describe(running)}")
            if not foreground:
                return
            info = running
        else:
            started = time.monotonic()
            info = broker.start(port, data_dir=data_dir, heap=heap)
            click.echo(f"Kafka started in {time.monotonic() - started:.1f}s\n{_describe(info)}")
    except (KafkaError, OSError) as e:
        _fail(str(e))
        return
    if foreground:
        from rollout_cli.processes.local_broker import follow

        follow(broker, info)


@kafka.command()
@_state_option
def stop(state_file: Path | None) -> None:
    """Stop the broker (SIGTERM, SIGKILL after 20s)."""
    try:
        info = LocalKafka(state_file).stop()
    except (KafkaError, OSError) as e:
        _fail(str(e))
        return
    if info is None:
        click.echo("not running")
    else:
        click.echo(f"stopped Kafka at {info.bootstrap} (pid {info.pid})")


@kafka.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The broker's data dir (default: the running broker's, else $ROLLOUT_STATE_DIR/kafka-data).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_state_option
def reset(data_dir: Path | None, yes: bool, state_file: Path | None) -> None:
    """Stop the broker and delete its data: every topic, offset and consumer group."""
    broker = LocalKafka(state_file)
    if not yes:
        click.confirm("Stop the local broker and delete all of its data?", abort=True)
    try:
        removed = broker.reset(data_dir)
    except (KafkaError, OSError) as e:
        _fail(str(e))
        return
    click.echo(f"removed {removed}" if removed is not None else "no broker data to remove")


@kafka.command()
@_state_option
def status(state_file: Path | None) -> None:
    """Show the running broker; exit code 1 when none is running."""
    try:
        info = LocalKafka(state_file).status()
    except (KafkaError, OSError) as e:
        _fail(str(e))
        return
    if info is None:
        click.echo("not running")
        sys.exit(1)
    click.echo(_describe(info))


@kafka.command()
@click.option(
    "--topic-prefix",
    envvar="ROLLOUT_TOPIC_PREFIX",
    default="rollout.",
    show_default=True,
    help="The engine's topic prefix (env ROLLOUT_TOPIC_PREFIX).",
)
@click.option(
    "--user-prefix",
    default="rollout-",
    show_default=True,
    help="Principals are User:<user-prefix><component> (the chart's KafkaUsers: <release fullname>-<component>).",
)
@click.option("--bootstrap-server", default="$BOOTSTRAP", show_default=True, help="Put into every kafka-acls line.")
@click.option(
    "--command-config",
    default="admin.properties",
    show_default=True,
    help="The admin's client properties file, put into every kafka-acls line.",
)
@click.option(
    "--format",
    "output",
    type=click.Choice(["kafka-acls", "strimzi"]),
    default="kafka-acls",
    show_default=True,
    help="kafka-acls.sh command lines, or Strimzi KafkaUser manifests.",
)
def acls(topic_prefix: str, user_prefix: str, bootstrap_server: str, command_config: str, output: str) -> None:
    """Print the ACLs each component's principal needs: least privilege, one user per component."""
    from infra import kafka_acls

    if output == "strimzi":
        click.echo(kafka_acls.strimzi_users_yaml(topic_prefix, user_prefix=user_prefix), nl=False)
        return
    script = kafka_acls.kafka_acls_script(
        topic_prefix, user_prefix=user_prefix, bootstrap=bootstrap_server, command_config=command_config
    )
    click.echo(script, nl=False)
