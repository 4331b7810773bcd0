"""The dead-letter document: an input a stage rejected, with why and where it was.

    router / decide / assemble ──► dead-letters (key: the input's key)
    notifier (projections/notifier/) ──► dead-letters (key: the module; a notification a
        webhook never accepted, or a decisions record it could not read)

Written by streams/deadletters.py (which bounds it: the payload truncated to a limit, the
reason and key clipped); read by `rollout dead-letters` (rollout_cli/reading/documents.py) and the
dashboard (projections/dashboard/). A dead letter the engine wrote for a refused event names
that event's id (`event`): its verdict, on the verdicts topic, is the same refusal.

The payload is `value` (UTF-8 text) or `valueBase64` (bytes that are not UTF-8, or text
that JSON would escape to more than base64 takes) — never both; neither when the input was
a tombstone.
"""

from __future__ import annotations

from pydantic import Field

from rollout.wire.documents import VersionedDocument


class DeadLetter(VersionedDocument):
    KIND = "dead-letter"

    reason: str
    stage: str | None = None  # the stage that rejected it: route, decide, assemble; notifier (a webhook never took it)
    topic: str | None = None  # where the input was
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    size: int = 0  # the input's size in bytes, before truncation
    event: str | None = None  # the id of the event the engine refused (its verdict's key)
    truncated: bool = False  # the payload holds only the first PAYLOAD_LIMIT bytes
    value: str | None = None
    value_base64: str | None = Field(default=None, alias="valueBase64")

    @property
    def position(self) -> str:
        """Where the input was: `topic[partition]@offset` (`?` for what is unknown)."""
        topic, partition, offset = (
            "?" if part is None else str(part) for part in (self.topic, self.partition, self.offset)
        )
        return f"{topic}[{partition}]@{offset}"
