"""The `rollout` CLI as the packaging sees it: which command lines and variables are real.

The chart, docker-compose.yml and the chart's NOTES run `rollout <subcommand> --flag ...`
and set `ROLLOUT_*` variables. Here those are checked against the click group itself
(`rollout_cli.main.cli`): a command line is parsed by click exactly as the container would
parse it (with the container's environment, so required options given by variable count),
without running anything.

PENDING lists what the packaging already uses but the program does not provide yet — the
flags and variables being added by others at the time this was written. A pending entry
only excuses its absence; once the CLI has it, it is checked like everything else (and
`test_pending_entries_still_missing` says which entries can be deleted).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import click

from rollout_cli.main import cli

REPO = Path(__file__).resolve().parents[2]

# Paths inside the image that the Dockerfile fills from the repository (COPY examples
# /app/examples): a command line naming them is parsed against the repository's copy.
IMAGE_PATHS = {"/app/examples": REPO / "examples"}

# The Kafka security settings every Kafka-speaking command reads from the environment
# directly (not through click options): the list the issue names. `infra.settings`
# exports the program's own list as SECURITY_ENV; the tests compare the two.
KAFKA_SECURITY_ENV = frozenset(
    {
        "ROLLOUT_KAFKA_SECURITY_PROTOCOL",
        "ROLLOUT_KAFKA_SASL_MECHANISM",
        "ROLLOUT_KAFKA_SASL_USERNAME",
        "ROLLOUT_KAFKA_SASL_PASSWORD",
        "ROLLOUT_KAFKA_CA_FILE",
    }
)


@dataclass(frozen=True)
class Pending:
    """What the packaging uses of one subcommand before the CLI has it."""

    options: Mapping[str, bool] = field(default_factory=dict)  # flag -> takes a value
    env: frozenset[str] = frozenset()
    command: bool = False  # the subcommand itself is not registered yet


PENDING: dict[tuple[str, ...], Pending] = {}


def subcommand(group: click.Group, name: str) -> click.Command | None:
    """`rollout`'s group loads its commands on demand (rollout_cli/main.py): ask, never `.commands`."""
    return group.get_command(click.Context(group), name)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name in group.list_commands(click.Context(group)):
        command = subcommand(group, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def commands() -> dict[tuple[str, ...], click.Command]:
    """Every leaf subcommand of `rollout`, by its path (`("topics", "create")`)."""
    return dict(_commands(cli))


def options_of(command: click.Command) -> dict[str, click.Option]:
    found: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                found[name] = param
    return found


def envvars_of(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        if isinstance(envvar, str):
            names.add(envvar)
        elif envvar:
            names.update(envvar)
    return names


def talks_to_kafka(command: click.Command) -> bool:
    return "--bootstrap-servers" in options_of(command)


def split_command(args: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """(subcommand path, remaining args) — the path as far as it names commands or pending ones."""
    group: click.Command = cli
    path: list[str] = []
    rest = list(args)
    while isinstance(group, click.Group) and rest:
        name = rest[0]
        found = subcommand(group, name)
        if found is None:
            if (*path, name) in PENDING:
                return (*path, name), rest[1:]
            break
        path.append(rest.pop(0))
        group = found
    return tuple(path), rest


def readable_env(path: tuple[str, ...]) -> set[str]:
    """Every variable the subcommand at `path` reads (or will, per PENDING)."""
    pending = PENDING.get(path, Pending())
    command = commands().get(path)
    names = set(pending.env)
    if command is not None:
        names |= envvars_of(command)
        if talks_to_kafka(command):
            names |= KAFKA_SECURITY_ENV
    return names


def _image_path(value: str) -> str:
    for inside, outside in IMAGE_PATHS.items():
        if value == inside or value.startswith(inside + "/"):
            return str(outside) + value[len(inside) :]
    return value


def invocation_problems(args: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Why `rollout ARGS` (with `env` as its whole environment) would not parse; [] if it does."""
    shown = "rollout " + " ".join(args)
    path, rest = split_command(args)
    known = commands()
    command = known.get(path)
    pending = PENDING.get(path, Pending())
    if command is None and path and any(other[: len(path)] == path for other in known):
        return [f"{shown}: {' '.join(path)!r} needs a subcommand"]
    if command is None:
        if pending.command:
            unknown = [a.split("=")[0] for a in rest if a.startswith("-") and a.split("=")[0] not in pending.options]
            return [f"{shown}: {flag} is neither in the CLI nor pending" for flag in unknown]
        return [f"{shown}: no such subcommand {' '.join(args[: len(path) + 1])!r}"]
    real = options_of(command)
    remaining: list[str] = []
    tokens = iter(rest)
    for token in tokens:
        flag = token.split("=")[0]
        if token.startswith("--") and flag not in real and flag in pending.options:
            if pending.options[flag] and "=" not in token:
                next(tokens, None)
            continue
        remaining.append(_image_path(token))
    with mock.patch.dict(os.environ, dict(env or {}), clear=True):
        try:
            with command.make_context(" ".join(("rollout", *path)), remaining) as _context:
                pass
        except click.ClickException as error:
            return [f"{shown}: {error.format_message()}"]
    return []


PROGRAM_PACKAGES = ("rollout", "infra", "streams", "projections", "rollout_cli")


def kafka_security_env_in_source() -> set[str]:
    """The KAFKA_SECURITY_ENV names the program's source mentions (with or without ROLLOUT_)."""
    text = "\n".join(
        path.read_text(encoding="utf-8") for package in PROGRAM_PACKAGES for path in (REPO / package).rglob("*.py")
    )
    return {name for name in KAFKA_SECURITY_ENV if name.removeprefix("ROLLOUT_") in text}


def pending_entries_now_in_cli() -> list[str]:
    """PENDING entries the CLI provides by now (they can be deleted from PENDING)."""
    found: list[str] = []
    known = commands()
    for path, pending in PENDING.items():
        command = known.get(path)
        if command is None:
            continue
        if pending.command:
            found.append(f"command {' '.join(path)}")
        found += [f"{' '.join(path)} {flag}" for flag in pending.options if flag in options_of(command)]
        found += [f"{' '.join(path)} {name}" for name in sorted(pending.env) if name in envvars_of(command)]
    return found
