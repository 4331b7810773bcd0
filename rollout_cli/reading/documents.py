"""The engine's documents as the CLI reads them: each parsed with its wire model
(rollout/wire/status.py, verdicts.py, dead_letters.py), attributes read, never keys.

A module-status, rollout-target or decision document this rollout cannot read — of a newer
`schemaVersion`, written by a newer worker, or not the model's shape — ends the command
with the reason and the record's key (a decision: its place on the topic): showing it
half-read would show something wrong. The decisions of a module are read with the decision
document (rollout/wire/decisions.py), one per decision id (a redelivered journal event
re-emits the same ids); a dead letter the model cannot read is kept, as an unreadable dead
letter saying why. Heavy imports (pydantic) happen on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rollout_cli.options import fail

if TYPE_CHECKING:
    from infra import client
    from rollout.wire.dead_letters import DeadLetter
    from rollout.wire.decisions import DecisionDocument
    from rollout.wire.status import ModuleStatus, TargetStatus


def module_status(key: str, document: Any) -> ModuleStatus:
    """The module-status document of module `key` (a record's value, raw or parsed)."""
    from rollout.wire.documents import DocumentError
    from rollout.wire.status import ModuleStatus

    try:
        return ModuleStatus.read(document)
    except DocumentError as error:
        fail(f"module {key}: {error}")
        raise  # not reached: fail exits


def module_statuses(documents: Mapping[str, Any]) -> dict[str, ModuleStatus]:
    """Module → its status, from the latest document per key (`Context.latest`)."""
    return {key: module_status(key, document) for key, document in documents.items()}


def target_statuses(documents: Mapping[str, Any], module: str) -> list[TargetStatus]:
    """The rollout-target documents of `module`'s clusters (keys `module/cluster`), by cluster."""
    from rollout.wire.documents import DocumentError
    from rollout.wire.status import TargetStatus

    targets = []
    for key, document in sorted(documents.items()):
        if key.startswith(f"{module}/"):
            try:
                targets.append(TargetStatus.read(document))
            except DocumentError as error:
                fail(f"rollout target {key}: {error}")
    return targets


def decisions_for(records: list[client.Record], module: str) -> list[DecisionDocument]:
    """The decision documents of `module` on the decisions topic, oldest first, each id once."""
    from rollout.wire.decisions import DecisionDocument
    from rollout.wire.documents import DocumentError

    seen: set[str] = set()
    decisions = []
    for record in records:
        if record.key != module or record.value is None:
            continue
        try:
            decision = DecisionDocument.read(record.value)
        except DocumentError as error:
            fail(f"module {module}: the decision at decisions[{record.partition}]@{record.offset}: {error}")
            raise  # not reached: fail exits
        if decision.id in seen:
            continue  # at-least-once: a redelivered journal event re-emits the same decision ids
        seen.add(decision.id)
        decisions.append(decision)
    return decisions


def dead_letters_from_records(
    records: list[client.Record], since: float | None = None
) -> list[tuple[float | None, DeadLetter]]:
    """The dead letters (rollout/wire/dead_letters.py), oldest first, each with its record's
    timestamp (seconds). `since`: only those at or after that time. A record the model cannot
    read is shown as an unreadable dead letter, with why."""
    from rollout.wire.dead_letters import DeadLetter
    from rollout.wire.documents import DocumentError

    letters: list[tuple[float | None, DeadLetter]] = []
    for record in records:
        at = record.timestamp
        if since is not None and (at is None or at < since):
            continue
        size = len(record.value) if record.value is not None else 0
        try:
            letter = DeadLetter.read(record.value if record.value is not None else b"null")
        except DocumentError as error:
            letter = DeadLetter(reason=f"unreadable dead letter: {error}", size=size)
        letters.append((at, letter))
    letters.sort(key=lambda shown: shown[0] or 0.0)
    return letters
