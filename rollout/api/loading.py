"""Manifest bytes → validated manifests, safely: nothing a file holds can hang, exhaust or crash us.

    bytes ── at most limits.file_bytes ──► text: UTF-8 only (a UTF-8 BOM is dropped; UTF-16/32
          │                                byte-order marks, NUL and invalid bytes are named
          │                                with their byte position)
          ├─► YAML events (libyaml) ─► nodes (yaml_documents.py): nesting depth, nodes per
          │   document, document size, alias expansion and duplicate keys bounded or refused
          ├─► Python objects (PyYAML's safe constructor: no tags that run code)
          └─► models (manifests.py, pydantic, strict)

Every problem becomes a `DocumentProblem`: the file, the document's number in the file
(1-based, counting every `---` document), the object (`Module/podinfo`) when known, the field
path, and why — capped at MAX_REASON characters. `load_manifests` returns every manifest of
a file or raises `ManifestError` with every problem found; callers publish nothing from a
set of files that has one. Pure: bytes in, models out (reading files is the CLI's business).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rollout.api.formats import shown
from rollout.api.manifests import KINDS, MANIFEST_ADAPTER
from rollout.api.yaml_documents import DEFAULT_LIMITS, Limits, YamlProblem, yaml_documents

MAX_REASON = 300
_BYTE_ORDER_MARKS = (  # UTF-32 first: its little-endian mark begins with UTF-16's
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


@dataclass(frozen=True)
class DocumentProblem:
    """One thing wrong with a file: where (file, document, object, field) and why."""

    file: str
    reason: str
    document: int | None = None  # 1-based; None: the file as a whole
    identity: str = ""  # kind/name, when the document says so
    field: str = ""

    def __post_init__(self) -> None:
        if "\n" in self.reason:  # one problem, one line
            object.__setattr__(self, "reason", " ".join(self.reason.split()))
        if len(self.reason) > MAX_REASON:
            object.__setattr__(self, "reason", self.reason[:MAX_REASON] + f"... ({len(self.reason)} characters)")

    def __str__(self) -> str:
        parts = [self.file]
        if self.document is not None:
            parts.append(f"document {self.document}" + (f" ({self.identity})" if self.identity else ""))
        if self.field:
            parts.append(self.field)
        return ": ".join([*parts, self.reason])


class ManifestError(Exception):
    """Every problem of a set of files, each with file, document, object and field."""

    def __init__(self, problems: Sequence[DocumentProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Loaded:
    """A valid manifest and where it came from (for messages about it later)."""

    file: str
    document: int
    manifest: Any

    @property
    def identity(self) -> str:
        return f"{self.manifest.kind}/{self.manifest.metadata.name}"

    @property
    def where(self) -> str:
        return f"{self.file}: document {self.document} ({self.identity})"


def decode(data: bytes, *, file: str) -> str:
    """`data` as text, or ManifestError naming the encoding or the first bad byte."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            raise ManifestError(
                [DocumentProblem(file=file, reason=f"encoded as {encoding} (byte-order mark); save it as UTF-8")]
            )
    data = data.removeprefix(codecs.BOM_UTF8)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ManifestError(
            [DocumentProblem(file=file, reason=f"{_byte_position(data, nul)}: NUL byte; is it UTF-16 without a BOM?")]
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        reason = (
            f"{_byte_position(data, error.start)}: byte 0x{data[error.start]:02x} is not UTF-8 (manifests are UTF-8)"
        )
        raise ManifestError([DocumentProblem(file=file, reason=reason)]) from None


def _byte_position(data: bytes, index: int) -> str:
    line = data.count(b"\n", 0, index) + 1
    column = index - (data.rfind(b"\n", 0, index) + 1) + 1
    return f"byte {index} (line {line}, column {column})"


def load_manifests(data: bytes, *, file: str, limits: Limits = DEFAULT_LIMITS) -> list[Loaded]:
    """Every manifest of one file's bytes, or ManifestError with every problem found."""
    if len(data) > limits.file_bytes:
        reason = f"larger than the {_size(limits.file_bytes)} limit of a manifest file; split it"
        raise ManifestError([DocumentProblem(file=file, reason=reason)])
    text = decode(data, file=file)
    problems: list[DocumentProblem] = []
    loaded: list[Loaded] = []
    try:
        for index, document in yaml_documents(text, limits=limits):
            if document is None:
                continue  # an empty document between '---' separators
            try:
                loaded.append(Loaded(file, index, parse_manifest(document, file=file, index=index)))
            except ManifestError as error:
                problems.extend(error.problems)
    except YamlProblem as error:
        problems.append(
            DocumentProblem(file=file, document=error.document, identity=error.identity, reason=error.reason)
        )
    if problems:
        raise ManifestError(problems)
    return loaded


def load_manifest_text(text: str, *, file: str) -> list[Any]:
    """The manifests of a text (tests, examples): `load_manifests` without the file around it."""
    return [item.manifest for item in load_manifests(text.encode(), file=file)]


def identity_of(document: Any) -> str:
    """`Kind/name` as a document states it (shortened), or '' when it does not say."""
    if not isinstance(document, dict):
        return ""
    kind, metadata = document.get("kind"), document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(kind, str) or not isinstance(name, str):
        return ""
    return f"{_plain(kind)}/{_plain(name)}"


def _plain(text: str) -> str:
    return text if len(text) <= 63 and text.isprintable() else shown(text)


def parse_manifest(document: Any, *, file: str, index: int) -> Any:
    """Validate one parsed YAML document; raise ManifestError naming file/document/field."""
    identity = identity_of(document)

    def problem(field: str, reason: str) -> DocumentProblem:
        return DocumentProblem(file=file, document=index, identity=identity, field=field, reason=reason)

    if not isinstance(document, dict):
        raise ManifestError([problem("", f"a manifest is a mapping (apiVersion, kind, ...), not {_type(document)}")])
    kind = document.get("kind")
    if kind not in KINDS:
        raise ManifestError([problem("kind", f"{shown(kind)} is not one of {', '.join(KINDS)}")])
    try:
        return MANIFEST_ADAPTER.validate_python(document)
    except ValidationError as error:
        raise ManifestError(
            [problem(_field_path(item["loc"], kind), _reason(item)) for item in error.errors(include_url=False)]
        ) from None


def _reason(item: Any) -> str:
    reason = str(item["msg"]).removeprefix("Value error, ")
    if item["type"] in ("string_type", "int_type", "bool_type", "dict_type", "list_type", "model_type"):
        reason += f", not {_type(item['input'])}"
    return reason


def _type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    return names.get(type(value), type(value).__name__)


def _field_path(location: Iterable[int | str], kind: str) -> str:
    parts: list[str] = []
    for item in location:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in KINDS or item == kind or item.startswith(("function-", "tagged-union[")):
            continue  # pydantic's discriminator / validator tags, not fields
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts)


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MiB"
    return f"{count / 1024:.0f} KiB" if count >= 1024 else f"{count} bytes"
