"""A YAML stream → its documents as plain Python values, within limits that make it safe.

PyYAML's safe loader runs no code, but left alone it follows a 500-deep nesting into a
RecursionError, expands a "billion laughs" of aliases into gigabytes, and keeps the last
of two equal keys without a word. This module puts PyYAML's own pieces together with the
checks between them:

    text ─► events (libyaml's parser, a state machine: no recursion, fast)
         ─► nodes (PyYAML's composer, with a depth and a node budget per document)
         ─► checked (size of the document; aliases expanded at most `expanded_nodes` nodes
            and `expanded_chars` characters, without expanding them; no recursive alias;
            no duplicate key in a mapping)
         ─► values (PyYAML's safe constructor)

`yaml_documents` yields (document number, value) and raises `YamlProblem` — the number of
the document and, once it is known, its kind/name — at the first problem: a stream cannot
be read on past a syntax error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver

from rollout.api.formats import shown

try:  # libyaml's event parser: ~6x faster than the pure-Python one
    from yaml._yaml import CParser as _Parser

    _PARSES_TEXT = True
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser as _Parser  # type: ignore[assignment]

    _PARSES_TEXT = False

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Limits:
    """What one manifest file may hold."""

    file_bytes: int = 4 * 1024 * 1024
    documents: int = 10_000
    document_bytes: int = 256 * 1024
    depth: int = 32  # a manifest is about 8 deep
    nodes: int = 100_000  # per document, as written
    expanded_nodes: int = 100_000  # per document, with every alias expanded
    expanded_chars: int = 1024 * 1024  # scalar characters, with every alias expanded


DEFAULT_LIMITS = Limits()


class YamlProblem(Exception):
    def __init__(self, reason: str, *, document: int, identity: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.document = document
        self.identity = identity


def yaml_documents(text: str, *, limits: Limits = DEFAULT_LIMITS) -> Iterator[tuple[int, Any]]:
    """(1-based document number, value) for each document of `text`; YamlProblem at the first problem."""
    loader = _BoundedLoader(text, limits)
    try:
        while loader.check_node():
            if loader.document >= limits.documents:
                raise YamlProblem(
                    f"more than {limits.documents} documents in one file; split it", document=loader.document + 1
                )
            node = loader.get_node()
            assert node is not None  # check_node() said a document follows
            identity = _identity(node)
            _check_document(text, node, limits, loader.document, identity)
            try:
                value = loader.construct_document(node)
            except (yaml.YAMLError, ValueError, OverflowError) as error:  # bad base64, dates, 5000-digit ints
                raise YamlProblem(_yaml_reason(error), document=loader.document, identity=identity) from None
            yield loader.document, value
    except yaml.YAMLError as error:
        raise YamlProblem(_yaml_reason(error, text, limits), document=max(loader.document, 1)) from None
    finally:
        loader.dispose()


class _BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """PyYAML's safe loader with a composer that counts depth and nodes."""

    def __init__(self, text: str, limits: Limits) -> None:
        if _PARSES_TEXT:
            _Parser.__init__(self, text)
        else:  # pragma: no cover
            from yaml.reader import Reader
            from yaml.scanner import Scanner

            Reader.__init__(self, text)  # type: ignore[arg-type]
            Scanner.__init__(self)  # type: ignore[arg-type]
            _Parser.__init__(self)  # type: ignore[call-arg]
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.limits = limits
        self.document = 0  # documents started so far
        self.depth = 0
        self.nodes = 0

    def dispose(self) -> None:
        if _PARSES_TEXT:
            _Parser.dispose(self)

    def compose_document(self) -> Node | None:
        self.document += 1
        self.depth = self.nodes = 0
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.nodes += 1
        if self.nodes > self.limits.nodes:
            raise YamlProblem(f"more than {self.limits.nodes} YAML nodes in one document", document=self.document)
        self.depth += 1
        if self.depth > self.limits.depth:
            event = self.peek_event()
            assert event is not None and event.start_mark is not None  # this node's first event
            mark = event.start_mark
            raise YamlProblem(
                f"line {mark.line + 1}: nested more than {self.limits.depth} levels deep", document=self.document
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check_document(text: str, node: Node, limits: Limits, document: int, identity: str) -> None:
    size = len(text[node.start_mark.index : node.end_mark.index].encode())
    if size > limits.document_bytes:
        raise YamlProblem(
            f"the document is {size} bytes, over the limit of {limits.document_bytes} bytes per document",
            document=document,
            identity=identity,
        )
    try:
        _Walk(limits, document, identity).measure(node, path="")
    except _Exceeded:
        raise YamlProblem(
            f"aliases expand the document beyond {limits.expanded_nodes} nodes or {limits.expanded_chars} "
            "characters (a 'billion laughs'?); write the values out instead",
            document=document,
            identity=identity,
        ) from None


class _Walk:
    """Sizes a node graph as if every alias were expanded — each shared node measured once —
    and refuses recursive aliases and duplicate keys on the way."""

    def __init__(self, limits: Limits, document: int, identity: str) -> None:
        self.limits = limits
        self.document = document
        self.identity = identity
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, characters) expanded
        self.open: set[int] = set()  # nodes being measured: meeting one again is a cycle

    def measure(self, node: Node, *, path: str) -> tuple[int, int]:
        known = self.sizes.get(id(node))
        if known is None:
            if id(node) in self.open:
                self.fail(f"{path or 'the document'}: a recursive alias (an anchor used inside itself)")
            self.open.add(id(node))
            known = self._measure_children(node, path)
            self.open.discard(id(node))
            self.sizes[id(node)] = known
        return known

    def _measure_children(self, node: Node, path: str) -> tuple[int, int]:
        nodes, chars = 1, 0
        if isinstance(node, ScalarNode):
            chars = len(node.value)
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                nodes, chars = self._add((nodes, chars), self.measure(item, path=f"{path}[{index}]"))
        elif isinstance(node, MappingNode):
            self._refuse_duplicate_keys(node, path)
            for key, value in node.value:
                child = f"{path}.{key.value}" if path and isinstance(key, ScalarNode) else str(key.value)
                nodes, chars = self._add((nodes, chars), self.measure(key, path=path))
                nodes, chars = self._add((nodes, chars), self.measure(value, path=child[:200]))
        return nodes, chars

    def _add(self, total: tuple[int, int], part: tuple[int, int]) -> tuple[int, int]:
        nodes, chars = total[0] + part[0], total[1] + part[1]
        if nodes > self.limits.expanded_nodes or chars > self.limits.expanded_chars:
            raise _Exceeded()
        return nodes, chars

    def _refuse_duplicate_keys(self, node: MappingNode, path: str) -> None:
        seen: dict[tuple[str, str], int] = {}  # (tag, key) -> line
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == MERGE_TAG:
                continue
            line = key.start_mark.line + 1
            first = seen.get((key.tag, key.value))
            if first is not None:
                where = f"{path}: " if path else ""
                self.fail(
                    f"{where}duplicate key {shown(key.value)} (lines {first} and {line}); "
                    "YAML would silently keep only the last one"
                )
            seen[(key.tag, key.value)] = line

    def fail(self, reason: str) -> None:
        raise YamlProblem(reason, document=self.document, identity=self.identity)


class _Exceeded(Exception):
    pass


def _identity(node: Node) -> str:
    """`Kind/name` from a document's node, before it is constructed (for messages)."""
    if not isinstance(node, MappingNode):
        return ""
    scalars = {k.value: v for k, v in node.value if isinstance(k, ScalarNode)}
    kind, metadata = scalars.get("kind"), scalars.get("metadata")
    name = None
    if isinstance(metadata, MappingNode):
        name = next((v for k, v in metadata.value if isinstance(k, ScalarNode) and k.value == "name"), None)
    if not isinstance(kind, ScalarNode) or not isinstance(name, ScalarNode):
        return ""
    return f"{_plain(kind.value)}/{_plain(name.value)}"


def _plain(text: str) -> str:
    return text if len(text) <= 63 and text.isprintable() else shown(text)


def _yaml_reason(error: Exception, text: str = "", limits: Limits = DEFAULT_LIMITS) -> str:
    if isinstance(error, ReaderError) and isinstance(error.character, int):
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        return f"not valid YAML: line {line}, column {column}: U+{error.character:04X} ({error.reason})"
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(part for part in (error.context, error.problem) if part)
        if "maximum nesting depth" in what:
            # libyaml (0.2.5+) stops a flow nesting past its own limit of 1,000 while scanning,
            # before the composer's depth check sees it: the same problem, said the same way
            return f"{where}nested more than {limits.depth} levels deep"
        return f"not valid YAML: {where}{what}"
    if isinstance(error, yaml.YAMLError):
        return f"not valid YAML: {error}"
    if "integer string conversion" in str(error):
        return "an integer with more than 4300 digits"
    return f"a value that cannot be read: {shown(str(error))}"
