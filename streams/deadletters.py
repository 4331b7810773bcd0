"""Dead letters: every input a stage rejects, as one bounded JSON document.

A dead letter names the reason, the stage, and where the input was (topic, partition,
offset, key), and carries the input itself truncated to `PAYLOAD_LIMIT` bytes with its
full size — so a dead letter is never larger than what the broker accepts, whatever the
input was (a multi-megabyte value, 5,000 levels of nesting, bytes that are not UTF-8).
"""

from __future__ import annotations

import base64
import json
from typing import Any

PAYLOAD_LIMIT = 4096
REASON_LIMIT = 1000
KEY_LIMIT = 512


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def dead_letter(reason: str, record: Any, stage: str) -> bytes:
    """The dead-letter document for consumer record `record`, rejected by `stage`."""
    value: bytes | None = record.value
    key = record.key.decode(errors="replace") if isinstance(record.key, bytes) else record.key
    document: dict[str, Any] = {
        "reason": _clip(reason, REASON_LIMIT),
        "stage": stage,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": _clip(key, KEY_LIMIT) if key is not None else None,
        "size": len(value) if value is not None else 0,
    }
    if value is not None:
        head = value[:PAYLOAD_LIMIT]
        document["truncated"] = len(value) > PAYLOAD_LIMIT
        try:
            document["value"] = head.decode()
        except UnicodeDecodeError as error:
            if error.start >= len(head) - 3 and len(value) > PAYLOAD_LIMIT:  # a character cut in two
                document["value"] = head[: error.start].decode(errors="replace")
            else:
                document["valueBase64"] = base64.b64encode(head).decode()
    return json.dumps(document).encode()
