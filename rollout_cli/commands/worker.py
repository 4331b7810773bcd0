"""`rollout worker`: the flags of the stream processors; the process is streams.app.run_worker."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from rollout_cli.options import (
    Context,
    check_port_free,
    fail,
    kafka_options,
    replication_option,
    web_options,
    worker_options,
)


def stages_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--stages",
        envvar="ROLLOUT_STAGES",
        default="route,decide,assemble",
        show_default=True,
        callback=parse_stages,
        help="Comma-separated stages this process runs (env ROLLOUT_STAGES). Run e.g. `--stages route` "
        "and `--stages decide,assemble` as two processes to use two cores.",
    )(command)


def session_timeout_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--session-timeout",
        envvar="ROLLOUT_SESSION_TIMEOUT",
        default=45.0,
        show_default=True,
        type=click.FloatRange(min=6.0, max=1800.0),
        help="Seconds the broker waits for a stage's heartbeats before moving its partitions to "
        "another worker; one batch (a module fanned out to a whole fleet) must fit in it "
        "(env ROLLOUT_SESSION_TIMEOUT).",
    )(command)


def instance_id_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--instance-id",
        envvar="ROLLOUT_INSTANCE_ID",
        default=None,
        callback=check_instance_id,
        help="A stable id of this worker across restarts (Kafka static membership; env "
        "ROLLOUT_INSTANCE_ID, e.g. the pod's name): restarted after a crash, it takes its "
        "partitions back at once instead of after --session-timeout. A graceful stop then keeps "
        "them until the session times out. Two live workers must never share one.",
    )(command)


def check_instance_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > 200 or not re.fullmatch(r"[A-Za-z0-9._-]+", value):
        raise click.BadParameter(f"{value!r}: at most 200 of A-Z a-z 0-9 . _ -")
    return value


def parse_stages(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    from infra.settings import STAGES

    stages = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    unknown = [stage for stage in stages if stage not in STAGES]
    if unknown or not stages:
        raise click.BadParameter(f"{', '.join(unknown) or 'nothing'}: stages are {', '.join(STAGES)}")
    return stages


@click.command()
@worker_options
@stages_option
@session_timeout_option
@instance_id_option
@web_options(6066)
@replication_option
@kafka_options
def worker(
    ctx: Context,
    replication_factor: int,
    partitions: int,
    tick_interval: float,
    stages: tuple[str, ...],
    session_timeout: float,
    instance_id: str | None,
    web_port: int,
    web_host: str,
    log_format: str,
    loglevel: str,
) -> None:
    """Run the stream processors (router, decider, assembler) until SIGINT/SIGTERM."""
    check_port_free(web_port, web_host)
    from infra.settings import Settings
    from infra.topics import ensure_topics_sync
    from streams.app import run_worker

    try:
        ensure_topics_sync(ctx.bootstrap, ctx.prefix, partitions, replication=replication_factor)
    except Exception as error:
        fail(str(error))
    settings = Settings(
        bootstrap_servers=ctx.bootstrap,
        topic_prefix=ctx.prefix,
        partitions=partitions,
        replication_factor=replication_factor,
        tick_interval=tick_interval,
        web_port=web_port,
        web_host=web_host,
        log_format=log_format,
        stages=stages,
        session_timeout=session_timeout,
        instance_id=instance_id,
    )
    run_worker(settings, loglevel=loglevel)
