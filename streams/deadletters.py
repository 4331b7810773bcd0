"""Dead letters: every input a stage rejects, as one bounded JSON document.

A dead letter names the reason, the stage, and where the input was (topic, partition,
offset, key), and carries the input itself truncated to `PAYLOAD_LIMIT` bytes with its
full size — so a dead letter is never larger than what the broker accepts, whatever the
input was (a multi-megabyte value, 5,000 levels of nesting, bytes that are not UTF-8).

The document is UTF-8 JSON (non-ASCII characters are not escaped), and the payload is
kept as text (`value`) only when its JSON string is at most what base64 would take
(4/3 of the bytes); otherwise — bytes that are not UTF-8, or text of control characters,
each of which JSON escapes to six bytes — it is `valueBase64`. Either way the payload
takes at most 4/3 of `PAYLOAD_LIMIT` bytes of the document.

The document is a `DeadLetter` (rollout/wire/dead_letters.py), the model its readers — `rollout
dead-letters`, the dashboard — parse it with; the fields left out here are absent from it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from rollout.wire.dead_letters import DeadLetter

PAYLOAD_LIMIT = 4096
REASON_LIMIT = 1000
KEY_LIMIT = 512


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def dead_letter(reason: str, record: Any, stage: str, *, event: str | None = None) -> bytes:
    """The dead-letter document for consumer record `record`, rejected by `stage`;
    `event`: the id of the event the engine refused (its verdict's key), if any."""
    value: bytes | None = record.value
    key = record.key.decode(errors="replace") if isinstance(record.key, bytes) else record.key
    fields: dict[str, Any] = {}
    if event is not None:
        fields["event"] = _clip(event, KEY_LIMIT)
    if value is not None:
        fields.update(_payload(value))
    letter = DeadLetter(
        reason=_clip(reason, REASON_LIMIT),
        stage=stage,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=_clip(key, KEY_LIMIT) if key is not None else None,
        size=len(value) if value is not None else 0,
        **fields,
    )
    return json.dumps(letter.as_json(), ensure_ascii=False).encode()


def _payload(value: bytes) -> dict[str, Any]:
    """`truncated`, and the payload's head as `value` (text) or `valueBase64`."""
    head = value[:PAYLOAD_LIMIT]
    text: str | None
    try:
        text = head.decode()
    except UnicodeDecodeError as error:
        if error.start >= len(head) - 3 and len(value) > PAYLOAD_LIMIT:  # a character cut in two
            text = head[: error.start].decode(errors="replace")
        else:
            text = None
    truncated = len(value) > PAYLOAD_LIMIT
    if text is not None and len(json.dumps(text, ensure_ascii=False).encode()) <= len(head) * 4 // 3 + 4:
        return {"truncated": truncated, "value": text}
    return {"truncated": truncated, "value_base64": base64.b64encode(head).decode()}
