"""`rollout up`'s live summary: one line per module each time what it shows changes.

    module-status topic (compacted, key: module) ──► ModuleStatus.read (rollout/wire/status.py)
                                                 ──► ModuleSummary.of(status)
                                                 ──► StatusSummary.line(module, document)
                                                 ──► a line, or None (nothing changed)

The module-status topic holds documents of several shapes (rollout/wire/status.py), all
read through the one model:

* a staged module: phase, target, current stage, stages with counts; with `deleting` while
  it waits for its dependents, `waiting` when its stages passed but members do not run the
  target yet, `held` when a later intent waits for cluster observations, `frozen` while a
  freeze calendar holds it and `breakGlass` while an override of its freezes is in force;
* a pending module, whose first apply waits for cluster observations: phase `Pending`,
  `held` with its reason, no stages and no target (`-`);
* a deleted module: a tombstone (None).

A document the model cannot read (not JSON, another shape, a newer schemaVersion) is
summarised by what is wrong with it, never an error: the summary must not stop, restart or
replay the topic because of one document. A line is printed only when what it shows
changes (`observedAt` moving, say, is no change), so each module is shown once per change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.wire.documents import DocumentError
from rollout.wire.status import ModuleStatus

DELETED = "Deleted"


@dataclass(frozen=True)
class ModuleSummary:
    """What the summary shows of one module-status document."""

    phase: str
    target: str = "-"
    stage: str = "-"
    succeeded: int = 0
    members: int = 0
    note: str = ""  # held back, deleting, waiting: why the module is where it is

    @classmethod
    def of(cls, status: ModuleStatus | None) -> ModuleSummary:
        if status is None:
            return cls(DELETED)
        return cls(
            phase=status.phase,
            target=status.target_revision or "-",
            stage=status.current_stage or "-",
            succeeded=status.succeeded,
            members=status.members,
            note=_note(status),
        )

    @classmethod
    def read(cls, document: bytes | Mapping[str, Any] | Any | None) -> ModuleSummary:
        """The summary of a record's value, raw or parsed (None: a tombstone)."""
        if document is None:
            return cls(DELETED)
        try:
            return cls.of(ModuleStatus.read(document))
        except DocumentError as error:
            return cls("-", note=str(error))

    def text(self, module: str) -> str:
        if self.phase == DELETED:
            return f"{module}: deleted"
        line = (
            f"{module:<14} {self.phase:<16} target {self.target:<8} stage {self.stage:<8} "
            f"{self.succeeded}/{self.members} succeeded"
        )
        return line + (f"  ({self.note})" if self.note else "")


def _note(status: ModuleStatus) -> str:
    notes = []
    if status.paused and status.phase != "Paused":
        notes.append("paused")
    if status.deleting:
        notes.append("deleting once the modules depending on it are")
    if status.waiting:
        notes.append(f"waiting: {status.waiting}")
    if status.held is not None:
        notes.append(f"{status.held.intents} intent(s) held: {status.held.reason or status.reason or 'held'}")
    if status.frozen is not None:  # rollout/engine/freeze_gate.py
        until = f" until {status.frozen.until_at}" if status.frozen.until_at else ""
        notes.append(f"frozen by calendar {', '.join(status.frozen.calendars)}{until}")
    if status.break_glass is not None:
        notes.append(f"break-glass until {status.break_glass.until_at}")
    for glass in status.calendar_break_glass:
        notes.append(f"break-glass of calendar {glass.calendar} until {glass.until_at}")
    return "; ".join(notes)


class StatusSummary:
    """The latest summary shown per module: a document that shows nothing new prints nothing."""

    def __init__(self) -> None:
        self.shown: dict[str, ModuleSummary] = {}

    def line(self, module: str, document: bytes | Mapping[str, Any] | Any | None) -> str | None:
        """The line to print for `document` of `module` (its record's value, raw or parsed;
        None: a tombstone), or None if it shows what was shown."""
        summary = ModuleSummary.read(document)
        if self.shown.get(module) == summary:
            return None
        self.shown[module] = summary
        return summary.text(module)
