"""Waiting for the engine's word: every command that asks the engine for something.

    subscribe to verdicts at their end offsets ──► publish the event(s) ──► wait for the
    verdict keyed by each event's id (bounded by --timeout) ──► exit 0 / 1 / 2

The worker's decider answers each module intent (and each status report with `reply`) on
the verdicts topic (streams/verdicts.py), each a `VerdictDocument` (rollout/wire/verdicts.py),
read here with that model. The end offsets are taken *before* publishing,
so a verdict can never be missed however fast the engine answers, and only the verdicts
written since are read (`read_committed`: the decider writes them in transactions).

Exit codes, for scripts and CI:

* 0 — every event was accepted (what the engine did is printed);
* 1 — the engine refused one: `error: <the engine's reason>` (nothing else it was asked
  for is undone: each event is judged alone);
* 2 — no verdict within --timeout (no worker running, or it is far behind): the event was
  published and may still apply; `rollout history` / `dead-letters` will tell.

`--no-wait` publishes and exits 0 at once, printing "published" — not "accepted".

Light at import (`rollout apply --help` imports this module for its options): the Kafka client is
imported inside the functions that use it.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from rollout_cli.options import Duration, fail

if TYPE_CHECKING:
    from rollout.wire.verdicts import VerdictDocument
    from rollout_cli.options import Context

DEFAULT_TIMEOUT = 10.0
REFUSED = 1
NO_VERDICT = 2


@dataclass(frozen=True)
class Wait:
    """How the command treats the engine's answer: wait up to `timeout` seconds, or not at all."""

    timeout: float
    enabled: bool = True


def verdict_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--timeout` and `--no-wait`, passed to the command as `wait: Wait`."""

    @functools.wraps(command)
    def with_wait(*args: Any, timeout: float, no_wait: bool, **kwargs: Any) -> Any:
        return command(*args, wait=Wait(timeout, enabled=not no_wait), **kwargs)

    decorated = click.option(
        "--no-wait",
        is_flag=True,
        help="Publish and exit at once (prints 'published'), without waiting for the engine's verdict.",
    )(with_wait)
    return click.option(
        "--timeout",
        type=Duration(),
        default=f"{DEFAULT_TIMEOUT:g}s",
        show_default=True,
        help="How long to wait for the engine's verdict (30s, 2m); past it the exit code is 2.",
    )(decorated)


async def _watch(bootstrap: str, topic: str) -> Any:
    """A consumer of every partition of `topic`, positioned at its current end offsets."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from infra import client
    from infra.settings import kafka_client_options

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level="read_committed",
        **kafka_client_options(),
    )
    await consumer.start()
    try:
        await client.require_topic(consumer._client, topic)
        await consumer._client.force_metadata_update()
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        for tp, offset in (await consumer.end_offsets(tps)).items():
            consumer.seek(tp, offset)
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def publish_and_wait(
    bootstrap: str, topic: str, ids: list[str], publish: Awaitable[Any], timeout: float
) -> dict[str, VerdictDocument]:
    """Subscribe to `topic` (the verdicts), await `publish`, then collect the verdicts of
    `ids` until all are in or `timeout` seconds have passed; event id → verdict. A verdict
    this rollout cannot read (a newer schemaVersion) raises `DocumentError`."""
    from rollout.wire.verdicts import VerdictDocument

    try:
        consumer = await _watch(bootstrap, topic)
    except BaseException:
        if inspect.iscoroutine(publish):
            publish.close()  # never started: nothing was published (and no "never awaited" warning)
        raise
    try:
        await publish
        wanted, found = set(ids), dict[str, VerdictDocument]()
        deadline = time.monotonic() + timeout
        while wanted - found.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            batch = await consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000) + 1)
            for messages in batch.values():
                for message in messages:
                    key = message.key.decode(errors="replace") if message.key is not None else None
                    if key in wanted and message.value is not None:
                        found[key] = VerdictDocument.read(message.value)
        return found
    finally:
        await consumer.stop()


def request(ctx: Context, wait: Wait, *, topic: str, messages: list[tuple[str, bytes]], ids: list[str]) -> Any:
    """Publish `messages` to `topic` and, unless `wait` says not to, return the verdicts on
    `ids` (event id → document; missing: none in time). Kafka errors end the command."""
    from infra import client
    from rollout.wire.documents import DocumentError

    try:
        if not wait.enabled:
            client.run(client.publish(ctx.bootstrap, topic, messages))
            return None
        publish = client.publish(ctx.bootstrap, topic, messages)
        return client.run(publish_and_wait(ctx.bootstrap, ctx.topics.verdicts, ids, publish, wait.timeout))
    except client.MissingTopic as error:
        fail(f"nothing was published: {error}")
    except DocumentError as error:
        fail(f"published, but cannot read the engine's verdict: {error}")
    except Exception as error:
        fail(f"cannot publish to {topic} at {ctx.bootstrap}: {error}")


def decide(what: str, verdicts: dict[str, VerdictDocument] | None, event_id: str, wait: Wait) -> None:
    """Report the verdict on `event_id` for `what` (say, `module/podinfo: pause`): print the
    acceptance, or exit 1 with the engine's reason, or 2 when none came in time."""
    if verdicts is None:
        click.echo(f"{what}: published (not waiting for the engine's verdict)")
        return
    found = verdicts.get(event_id)
    if found is None:
        no_verdict(what, wait)
    assert found is not None
    if not found.accepted:
        fail(f"{what} refused: {found.reason or 'no reason given'}", code=REFUSED)
    click.echo(f"{what} accepted: {found.reason}")
    for decision in found.decisions[1:]:
        click.echo(f"  {decision.action}: {decision.reason}")
    more = found.decision_count - len(found.decisions)
    if more > 0:
        click.echo(f"  … and {more} more decision(s) (rollout history)")


def no_verdict(what: str, wait: Wait) -> None:
    fail(
        f"{what}: no verdict from the engine within {wait.timeout:g}s — is `rollout worker` running? "
        "The request was published and may still apply (see `rollout history` / `rollout dead-letters`)",
        code=NO_VERDICT,
    )


async def awaiting(
    ctx: Context, wait: Wait, ids: list[str], publish: Awaitable[Any]
) -> dict[str, VerdictDocument] | None:
    """Await `publish`, and the verdicts on `ids` unless `wait` says not to (None then)."""
    if not wait.enabled or not ids:
        await publish
        return None
    return await publish_and_wait(ctx.bootstrap, ctx.topics.verdicts, ids, publish, wait.timeout)


def apply_result(found: VerdictDocument) -> str:
    """What an accepted ModuleApplied did, as kubectl says it: created, configured, unchanged."""
    if found.created:
        return "created"
    if not found.decision_count:
        return "unchanged"
    return f"configured: {found.reason}"


def report_apply(
    published: Sequence[tuple[str, str | None]], verdicts: dict[str, VerdictDocument] | None, wait: Wait
) -> None:
    """One line per manifest applied, `published` being (kind/name, event id or None for a
    cluster observation, which the engine does not answer); exit 1 if the engine refused
    any module, 2 if a verdict did not come in time."""
    refused = late = False
    for description, event_id in published:
        if event_id is None:
            click.echo(f"{description} applied")
        elif verdicts is None:
            click.echo(f"{description} published (not waiting for the engine's verdict)")
        elif event_id not in verdicts:
            late = True
            click.echo(f"{description}: no verdict from the engine within {wait.timeout:g}s", err=True)
        elif not verdicts[event_id].accepted:
            refused = True
            click.echo(f"error: {description} refused: {verdicts[event_id].reason}", err=True)
        else:
            click.echo(f"{description} {apply_result(verdicts[event_id])}")
    if refused:
        raise SystemExit(REFUSED)
    if late:
        no_verdict("apply", wait)
