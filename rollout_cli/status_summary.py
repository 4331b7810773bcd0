"""`rollout up`'s live summary: one line per module each time what it shows changes.

    module-status topic (compacted, key: module) ──► ModuleSummary.of(document)
                                                 ──► StatusSummary.line(module, document)
                                                 ──► a line, or None (nothing changed)

The module-status topic holds documents of several shapes (rollout/engine/views.py), and the
summary reads every one of them without a key lookup that can fail:

* a module's status (`module_view`): phase, target, current stage, stages with counts; with
  `deleting` while it waits for its dependents, `waiting` when its stages passed but members
  do not run the target yet, `held` when a later intent waits for cluster observations;
* a module the engine has not staged yet because its apply waits for cluster observations
  (`held_view` without a status: phase `Pending`, `reason`, `held`, no stages);
* a deleted module: a tombstone (None).

A document of any other shape is summarised from what it has (`-` for the rest), never an
error: the summary must not stop, restart or replay the topic because of one document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    def of(cls, document: Any) -> ModuleSummary:
        if document is None:
            return cls(DELETED)
        if not isinstance(document, dict):
            return cls("-", note="not a module-status document")
        stages = [stage for stage in document.get("stages") or [] if isinstance(stage, dict)]
        counts = [stage.get("counts") if isinstance(stage.get("counts"), dict) else {} for stage in stages]
        return cls(
            phase=str(document.get("phase") or "-"),
            target=str(document.get("targetRevision") or "-"),
            stage=str(document.get("currentStage") or "-"),
            succeeded=sum(_count(c, "succeeded") for c in counts),
            members=sum(_count(c, "members") for c in counts),
            note=_note(document),
        )

    def text(self, module: str) -> str:
        if self.phase == DELETED:
            return f"{module}: deleted"
        line = (
            f"{module:<14} {self.phase:<16} target {self.target:<8} stage {self.stage:<8} "
            f"{self.succeeded}/{self.members} succeeded"
        )
        return line + (f"  ({self.note})" if self.note else "")


def _count(counts: dict[str, Any], category: str) -> int:
    value = counts.get(category)
    return value if isinstance(value, int) else 0


def _note(document: dict[str, Any]) -> str:
    notes = []
    if document.get("paused") and document.get("phase") != "Paused":
        notes.append("paused")
    if document.get("deleting"):
        notes.append("deleting once the modules depending on it are")
    if isinstance(document.get("waiting"), str) and document["waiting"]:
        notes.append(f"waiting: {document['waiting']}")
    held = document.get("held")
    if isinstance(held, dict):
        reason = held.get("reason") or document.get("reason") or "held"
        notes.append(f"{held.get('intents', '?')} intent(s) held: {reason}")
    return "; ".join(notes)


class StatusSummary:
    """The latest summary shown per module: a document that shows nothing new prints nothing."""

    def __init__(self) -> None:
        self.shown: dict[str, ModuleSummary] = {}

    def line(self, module: str, document: Any) -> str | None:
        """The line to print for `document` of `module`, or None if it shows what was shown."""
        summary = ModuleSummary.of(document)
        if self.shown.get(module) == summary:
            return None
        self.shown[module] = summary
        return summary.text(module)
