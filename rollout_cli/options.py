"""Options and context shared by every `rollout` command that talks to Kafka.

One definition per setting, so that a flag, its environment variable and its help read the
same everywhere (docs/configuration.md is the table of them all).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from infra import client
from infra.settings import DEFAULT_PREFIX
from infra.topics import TopicNames

partitions_option = click.option(
    "--partitions",
    envvar="ROLLOUT_PARTITIONS",
    default=4,
    show_default=True,
    type=int,
    help="Partitions of the journal/assignments topics (env ROLLOUT_PARTITIONS).",
)
replication_option = click.option(
    "--replication-factor",
    envvar="ROLLOUT_REPLICATION_FACTOR",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Replication factor of created topics, the worker's state topics included (env ROLLOUT_REPLICATION_FACTOR).",
)


def fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def resolve_bootstrap(given: str | None) -> str:
    if given:
        return given
    from infra.localkafka import discover_bootstrap

    found = discover_bootstrap()
    if found is None:
        fail(
            "no Kafka broker: pass --bootstrap-servers (or set ROLLOUT_BOOTSTRAP_SERVERS), "
            "or start the local one with `rollout kafka start` / `rollout up`"
        )
    return found  # type: ignore[return-value]


class Context:
    def __init__(self, bootstrap: str | None, prefix: str) -> None:
        self._bootstrap = bootstrap
        self.prefix = prefix
        self.topics = TopicNames(prefix)

    @functools.cached_property
    def bootstrap(self) -> str:
        return resolve_bootstrap(self._bootstrap)

    def publish(self, topic: str, messages: list[tuple[str, bytes | None]]) -> None:
        try:
            client.run(client.publish(self.bootstrap, topic, messages))
        except Exception as error:
            fail(f"cannot publish to {topic} at {self.bootstrap}: {error}")

    def latest(self, topic: str) -> dict[str, Any]:
        try:
            return client.run(client.read_latest(self.bootstrap, topic))
        except LookupError as error:
            fail(str(error))
        except Exception as error:
            fail(f"cannot read {topic} at {self.bootstrap}: {error}")
        return {}

    def records(self, topic: str) -> list[client.Record]:
        try:
            return client.run(client.read_all(self.bootstrap, topic))
        except LookupError as error:
            fail(str(error))
        except Exception as error:
            fail(f"cannot read {topic} at {self.bootstrap}: {error}")
        return []


def kafka_options(command: Callable[..., Any]) -> Callable[..., Any]:
    @click.option(
        "--bootstrap-servers",
        envvar="ROLLOUT_BOOTSTRAP_SERVERS",
        default=None,
        help="Kafka bootstrap servers, host:port[,host:port] (env ROLLOUT_BOOTSTRAP_SERVERS; "
        "default: the local broker).",
    )
    @click.option(
        "--topic-prefix",
        envvar="ROLLOUT_TOPIC_PREFIX",
        default=DEFAULT_PREFIX,
        show_default=True,
        help="Prefix of every topic name (env ROLLOUT_TOPIC_PREFIX).",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, bootstrap_servers: str | None, topic_prefix: str, **kwargs: Any) -> Any:
        return command(Context(bootstrap_servers, topic_prefix), *args, **kwargs)

    return wrapper


def web_options(default_port: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--web-port",
            envvar="ROLLOUT_WEB_PORT",
            default=default_port,
            show_default=True,
            type=int,
            help="Port of /metrics, /healthz, /readyz; 0 turns them off (env ROLLOUT_WEB_PORT).",
        )(command)
        command = click.option(
            "--log-format",
            envvar="ROLLOUT_LOG_FORMAT",
            default="text",
            show_default=True,
            type=click.Choice(["text", "json"]),
            help="Log lines for humans or for a log pipeline.",
        )(command)
        return click.option(
            "--loglevel",
            envvar="ROLLOUT_LOGLEVEL",
            default="info",
            show_default=True,
            type=click.Choice(["debug", "info", "warning", "error"]),
        )(command)

    return decorate
