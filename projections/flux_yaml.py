"""Rendered Flux objects as YAML text: the bytes the directory sink writes.

What flows through here: the validated objects of one sync (the renderer's output) go in; a
multi-document YAML stream comes out, in PyYAML's block style (`sort_keys=False`,
`explicit_start=True`), always the same bytes for the same objects — a file is never
rewritten only because of how it was dumped.

Dumped by libyaml's emitter (`CSafeDumper`, ~3.5x faster) when that writes the same bytes as
PyYAML's pure-Python one — every string printable ASCII, every key a non-empty one
(`_plain_ascii`; outside it they differ: an empty or control-character key, a non-ASCII
string's line folding) — else by PyYAML's (tests/projections/test_directory_sink.py holds
the two equal over generated objects).

`emits_plain(value)`: whether a string is written as itself, unquoted, wherever it is a
mapping value of such a stream — what lets the renderer fill a compiled sync's text with a
cluster's names instead of dumping its objects again (projections/render_cache.py).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["dump_objects", "emits_plain"]

_FAST_DUMPER: type[yaml.SafeDumper] | None = getattr(yaml, "CSafeDumper", None)
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()
_DNS_LABEL_TEXT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _plain_ascii(value: Any) -> bool:
    """Every string in `value` printable ASCII, every key a non-empty one: what libyaml's
    emitter writes byte for byte as PyYAML's does."""
    if isinstance(value, str):
        return value.isascii() and value.isprintable()
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and key and _plain_ascii(key) and _plain_ascii(item) for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_plain_ascii(item) for item in value)
    return value is None or isinstance(value, (bool, int))


def dump_objects(objects: list[dict[str, Any]]) -> bytes:
    """The YAML stream of `objects` (see the module docstring)."""
    fast = _FAST_DUMPER is not None and _plain_ascii(objects)
    dumper = _FAST_DUMPER if fast else yaml.SafeDumper
    text = yaml.dump_all(objects, Dumper=dumper, sort_keys=False, explicit_start=True)
    return text.encode("utf-8")


def emits_plain(value: str) -> bool:
    """True when `value` is dumped as itself (a plain scalar) as a block mapping's value: a
    DNS-1123 label's characters (no space to fold a line at, no character that needs quoting,
    no leading `-`) that YAML does not read as anything but a string (`on`, `123`, `0x1f`,
    `2026-11-27` are quoted)."""
    return bool(_DNS_LABEL_TEXT.match(value)) and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG
