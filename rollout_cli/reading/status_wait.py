"""`rollout status MODULE --wait`: a gate a CI pipeline can stop on.

    module-status topic, from the beginning ──► the module's latest status ──► condition met?
        yes                         exit 0
        a failure phase             exit 1  (Halted, RollingBack, RolledBack, Aborted)
        neither before --timeout    exit 2

The module-status topic is compacted (one document per module, rewritten in the same
transaction as the decisions that change it), so one consumer reads it to its end once and
then follows it: each new document of the module is judged as it arrives — no polling.

The condition is `--for phase=<Phase>` (default phase=Complete). A failure phase ends the
wait unless it is the phase asked for or a phase on the way to it: `--for phase=RolledBack`
waits through `RollingBack` (the engine's rollback in progress) and ends at `RolledBack`.
Run it after `rollout apply` (which returns once the engine has taken the new revision, so
the status read is the new revision's, not the previous one's).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rollout.wire.status import ModuleStatus

PHASES = (
    "Progressing",
    "Soaking",
    "AwaitingApproval",
    "Paused",
    "Halted",
    "RollingBack",
    "RolledBack",
    "Complete",
    "Aborted",
)  # rollout.wire.status.ROLLOUT_PHASES (not imported: `rollout status --help` stays light)
FAILED_PHASES = frozenset({"Halted", "RollingBack", "RolledBack", "Aborted"})
# failure phases that are on the way to another phase: waiting for that one, they are progress
ON_THE_WAY_TO: dict[str, frozenset[str]] = {"RolledBack": frozenset({"RollingBack"})}
MET, FAILED, TIMED_OUT = 0, 1, 2


@dataclass(frozen=True)
class Condition:
    """What `--for` asks: the module's `phase` equal to `value`."""

    field: str
    value: str

    def __str__(self) -> str:
        return f"{self.field}={self.value}"


def parse_condition(text: str) -> Condition:
    """`phase=Complete` → Condition; ValueError naming what is allowed otherwise."""
    field, sep, value = text.partition("=")
    if not sep or field.strip() != "phase":
        raise ValueError(f"{text!r}: expected phase=<phase>, e.g. phase=Complete")
    value = value.strip()
    if value not in PHASES:
        raise ValueError(f"{text!r}: unknown phase {value!r}; phases: {', '.join(PHASES)}")
    return Condition("phase", value)


def judge(status: ModuleStatus, condition: Condition) -> int | None:
    """MET, FAILED, or None while the rollout is still on its way."""
    phase = status.phase
    if phase == condition.value:
        return MET
    if phase in FAILED_PHASES and phase not in ON_THE_WAY_TO.get(condition.value, frozenset()):
        return FAILED
    return None


def progress_line(status: ModuleStatus) -> str:
    """One line of where the rollout stands: phase, stage, clusters on the target."""
    line = f"module/{status.module}: {status.phase}"
    if status.stages:
        done = f"{status.succeeded}/{status.members} cluster(s) on {status.target_revision}"
        line += f", stage {status.current_stage}, {done}"
    if status.waiting:  # stages passed, members still to go: not Complete (rollout/engine/views.py)
        line += f" — waiting: {status.waiting}"
    if status.held is not None:  # pending, or a later apply held back (causal order)
        line += f" — {status.held.intents} intent(s) held: {status.held.reason}"
    return line


async def wait_for(
    bootstrap: str,
    topic: str,
    module: str,
    condition: Condition,
    timeout: float,
    on_status: Callable[[ModuleStatus], None],
) -> tuple[int, ModuleStatus | None]:
    """Follow `module`'s status on `topic` until `condition` holds (MET), the rollout
    fails (FAILED) or `timeout` seconds pass (TIMED_OUT); `on_status` sees every new
    document. (FAILED, None): the module has no status once the topic is read (never
    applied, or deleted while waiting). A document this rollout cannot read (a newer
    schemaVersion) raises `DocumentError`."""
    from infra import client
    from rollout.wire.status import ModuleStatus

    consumer, tps = await client._consumer(bootstrap, topic)
    try:
        ends = await consumer.end_offsets(tps)
        caught_up = all(ends[tp] == 0 for tp in tps)
        latest: ModuleStatus | None = None
        deadline = time.monotonic() + timeout
        while True:
            if caught_up:
                if latest is None:
                    return FAILED, None
                verdict = judge(latest, condition)
                if verdict is not None:
                    return verdict, latest
            left = deadline - time.monotonic()
            if left <= 0:
                return TIMED_OUT, latest
            batch = await consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000) + 1)
            for messages in batch.values():
                for message in messages:
                    if message.key is not None and message.key.decode(errors="replace") == module:
                        latest = ModuleStatus.read(message.value) if message.value is not None else None
                        if caught_up and latest is not None:
                            on_status(latest)
            if not caught_up:
                positions = [await consumer.position(tp) for tp in tps]
                caught_up = all(position >= ends[tp] for position, tp in zip(positions, tps, strict=True))
                if caught_up and latest is not None:
                    on_status(latest)
    finally:
        await consumer.stop()


def gate(ctx: Any, module: str, condition: Condition, timeout: float, output: str) -> None:
    """`status --wait`: print progress (or, with -o json|yaml, the final status document)
    and exit MET / FAILED / TIMED_OUT."""
    from infra import client
    from rollout.wire.documents import DocumentError
    from rollout_cli.options import fail
    from rollout_cli.views.output import emit

    shown: list[str] = []

    def show(status: ModuleStatus) -> None:
        line = progress_line(status)
        if output == "table" and (not shown or shown[-1] != line):
            click.echo(line)
            shown.append(line)

    try:
        code, status = client.run(wait_for(ctx.bootstrap, ctx.topics.module_status, module, condition, timeout, show))
    except LookupError as error:
        fail(str(error))
    except DocumentError as error:
        fail(f"module {module}: {error}")
    except Exception as error:
        fail(f"cannot read {ctx.topics.module_status} at {ctx.bootstrap}: {error}")
    if status is None:
        fail(f"module {module} not found", code=FAILED)
    assert status is not None
    if output != "table":
        emit(status.as_json(), output)
    if code == FAILED:
        click.echo(f"error: module/{module}: rollout {status.phase}: {status.last_decision}", err=True)
    elif code == TIMED_OUT:
        click.echo(
            f"error: module/{module}: still {status.phase} after {timeout:g}s (waiting for {condition})", err=True
        )
    elif output == "table":
        click.echo(f"module/{module}: {condition}")
    sys.exit(code)


class ConditionType(click.ParamType):
    """`--for phase=<Phase>` on the command line."""

    name = "condition"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Condition:
        if isinstance(value, Condition):
            return value
        try:
            return parse_condition(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)
