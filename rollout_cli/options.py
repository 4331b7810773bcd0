"""Options and context shared by every `rollout` command that talks to Kafka.

One definition per setting, so that a flag, its environment variable and its help read the
same everywhere (docs/configuration.md is the table of them all).

Light on purpose: `rollout <command> --help` imports this module, so Kafka clients (aiokafka) are
imported only when a command runs (tests/cli/test_startup.py holds that).
"""

from __future__ import annotations

import errno
import functools
import getpass
import re
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from infra.settings import DEFAULT_PREFIX

if TYPE_CHECKING:
    from infra import client
    from infra.topics import TopicNames

DEFAULT_WEB_HOST = "127.0.0.1"

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


def worker_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The worker's engine settings, shared by `rollout worker` and `rollout up` (which passes them on)."""
    command = partitions_option(command)
    command = click.option(
        "--tick-interval",
        envvar="ROLLOUT_TICK_INTERVAL",
        default=10.0,
        show_default=True,
        type=float,
        help="Seconds between Tick events (env ROLLOUT_TICK_INTERVAL).",
    )(command)
    return command


DENIED = 1
"""Exit code when the broker refused the credentials or the principal's ACLs (infra/denials.py)."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` and exit with `code` — DENIED instead of 2 when the error being
    handled is a broker's refusal (a wrong password, a missing ACL): retrying will not help."""
    click.echo(f"error: {message}", err=True)
    sys.exit(DENIED if code == 2 and _denied(sys.exc_info()[1]) else code)


def _denied(error: BaseException | None) -> bool:
    if error is None or "infra.denials" not in sys.modules:  # never imported: no refusal raised
        return False
    from infra.denials import KafkaDenied

    while error is not None:  # wrapped (`raise … from error`) counts too
        if isinstance(error, KafkaDenied):
            return True
        error = error.__cause__
    return False


def check_name(name: str) -> None:
    """Exit with the reason when NAME (a module, cluster or namespace argument) is not a
    DNS-1123 label, as the manifests require."""
    from rollout.api.manifests import check_dns1123_label

    try:
        check_dns1123_label(name)
    except ValueError as error:
        fail(str(error))


def current_user() -> str | None:
    """Who runs the command, recorded on the commands it publishes (`user`); None if unknown."""
    try:
        return getpass.getuser()
    except Exception:
        return None


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
    return found


class Context:
    def __init__(self, bootstrap: str | None, prefix: str) -> None:
        self._bootstrap = bootstrap
        self.prefix = prefix

    @functools.cached_property
    def topics(self) -> TopicNames:
        from infra.topics import TopicNames

        return TopicNames(self.prefix)

    @functools.cached_property
    def bootstrap(self) -> str:
        return resolve_bootstrap(self._bootstrap)

    def publish(self, topic: str, messages: list[tuple[str, bytes | None]]) -> None:
        from infra import client

        try:
            client.run(client.publish(self.bootstrap, topic, messages))
        except client.MissingTopic as error:
            fail(f"nothing was published: {error}")
        except Exception as error:
            fail(f"cannot publish to {topic} at {self.bootstrap}: {error}")

    def latest(self, topic: str) -> dict[str, Any]:
        from infra import client

        try:
            return client.run(client.read_latest(self.bootstrap, topic))
        except LookupError as error:
            fail(str(error))
        except Exception as error:
            fail(f"cannot read {topic} at {self.bootstrap}: {error}")
        return {}

    def records(self, topic: str) -> list[client.Record]:
        from infra import client

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
            "--web-host",
            envvar="ROLLOUT_WEB_HOST",
            default=DEFAULT_WEB_HOST,
            show_default=True,
            help="Address /metrics, /healthz, /readyz listen on; 0.0.0.0 for every interface, as in a "
            "container (env ROLLOUT_WEB_HOST).",
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


def check_port_free(port: int, host: str = DEFAULT_WEB_HOST, flag: str = "--web-port") -> None:
    """Exit with a one-line error when `port` cannot be bound on `host` (0: nothing to bind).

    Run by a command before it does anything else, so that a second `rollout worker` on a
    machine fails at once instead of dying later in a log file. The probe binds the way the
    web server will (SO_REUSEADDR, as aiohttp does), so a port only lingering in TIME_WAIT
    counts as free.
    """
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        fail(f"cannot listen on {host} ({flag.replace('port', 'host')}): {error.strerror}")
        return
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    fail(f"port {port} is in use ({flag})")
                fail(f"cannot listen on {host}:{port} ({flag}): {error.strerror or error}")


def free_port(host: str = DEFAULT_WEB_HOST, *, avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A port nothing listens on at `host` now (the kernel's pick), none of `avoid`."""
    while True:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in avoid:
            return port


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration like `90s`, `15m`, `1h30m`, `2d` (ValueError otherwise)."""
    compact = text.strip()
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise ValueError(f"{text!r} is not a duration (examples: 30s, 15m, 1h30m, 2d)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)
