"""What every document the worker publishes for readers shares: a `schemaVersion`, one
way to read it, one way to write it.

    VersionedDocument.read(bytes | str | dict) ──► the model, or DocumentError
    model.as_json()                            ──► the JSON object on the wire

The documents (module-status and rollout-targets: rollout/wire/status.py; verdicts:
rollout/wire/verdicts.py; dead letters: rollout/wire/dead_letters.py) are each one pydantic
model, imported by the writer and by every reader — the CLI, `rollout up`'s summary, the
dashboard, the module watcher, the gate runner — so a field is named and typed once.

Versions. `schemaVersion` is the document's major version: a writer adds fields without
changing it, and a reader ignores the fields it does not know (a newer worker's), so old
and new processes read each other. A change a reader cannot ignore — a field renamed,
removed or given another meaning — takes the next version, and a reader refuses a version
above its own with `NewerSchema`, saying so, rather than showing something wrong. A
document without `schemaVersion` was written before versions existed: version 1.

On the wire a document holds the fields its writer set, under their JSON names
(`exclude_unset`): an optional field the writer leaves out is absent, not null, and a
reader sees its default. So the JSON keys are exactly what they were before the models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_VERSION = 1


class DocumentError(ValueError):
    """A document a reader cannot read: not JSON, not an object, or not the model's shape."""


class NewerSchema(DocumentError):
    """A document of a major version above what this reader knows (a newer writer)."""


class Part(BaseModel):
    """A nested part of a document: frozen, read by JSON name, unknown fields ignored."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class VersionedDocument(Part):
    """A top-level document: `schemaVersion` and the reading rules above."""

    KIND: ClassVar[str] = "document"  # for messages: "module-status document ..."
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION  # the newest major version this code reads and writes

    schema_version: int = Field(default=SCHEMA_VERSION, alias="schemaVersion")

    @classmethod
    def read(cls, data: bytes | str | Mapping[str, Any]) -> Self:
        """The document in `data` (a record's value, or JSON already parsed)."""
        parsed: Any = data
        if isinstance(data, bytes | str):
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError as error:
                raise DocumentError(f"{cls.KIND} document: not JSON ({error})") from None
        if not isinstance(parsed, Mapping):
            raise DocumentError(f"{cls.KIND} document: expected a JSON object, got {type(parsed).__name__}")
        version = parsed.get("schemaVersion", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise DocumentError(f"{cls.KIND} document: schemaVersion {version!r} is not a version (1, 2, ...)")
        if version > cls.SCHEMA_VERSION:
            raise NewerSchema(
                f"{cls.KIND} document of schemaVersion {version}: this rollout reads up to {cls.SCHEMA_VERSION} "
                "— a newer worker wrote it; upgrade rollout to read it"
            )
        try:
            return cls.model_validate(parsed)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the document"
            raise DocumentError(f"{cls.KIND} document: {where}: {first['msg']}") from None

    def as_json(self) -> dict[str, Any]:
        """The JSON object on the wire: `schemaVersion` and every field the writer set."""
        body = self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"schema_version"})
        return {"schemaVersion": self.schema_version, **body}
