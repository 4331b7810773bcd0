"""The vocabulary of Helm values in the API: layers, per-path policies and JSON pointers.

A HelmPackage's `valuesPolicy` names paths (RFC 6901 pointers, object keys only) and a
policy for each; the merge itself (rollout/values/layers.py) builds on these. They live in
the API layer because validating a manifest needs them and the API imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Layer = Literal["chart", "module", "stage", "cluster", "live"]
LAYERS: tuple[Layer, ...] = ("chart", "module", "stage", "cluster", "live")
DECLARED: tuple[Layer, ...] = ("chart", "module", "stage", "cluster")
Policy = Literal["keepCurrent", "preferModule", "preferChart", "max", "min", "readOnly"]
POLICIES: tuple[Policy, ...] = ("keepCurrent", "preferModule", "preferChart", "max", "min", "readOnly")
QUANTITY_POLICIES: tuple[Policy, ...] = ("max", "min")

Path = tuple[str, ...]
Values = dict[str, Any]


# --- JSON pointers (RFC 6901), object keys only ---------------------------------------------


def parse_pointer(pointer: str) -> Path:
    """`/resources/limits/memory` → ("resources", "limits", "memory"); `~1` is `/`, `~0` is `~`."""
    if not pointer.startswith("/") or pointer == "/":
        raise ValueError(f"{pointer!r} is not a JSON pointer to a value: write /key/subkey (RFC 6901)")
    parts = pointer[1:].split("/")
    for part in parts:
        if part == "":
            raise ValueError(f"{pointer!r} has an empty key: write /key/subkey")
        if "~" in part.replace("~0", "").replace("~1", ""):
            raise ValueError(f"{pointer!r}: '~' must be escaped as ~0 ('/' as ~1)")
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in parts)


def format_pointer(path: Path) -> str:
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in path)


def overlapping_policies(pointers: list[str]) -> list[tuple[str, str]]:
    """Pairs of policy paths where one lies inside the other (a policy decides a whole node)."""
    paths = sorted((parse_pointer(p), p) for p in pointers)
    return [(a, b) for i, (pa, a) in enumerate(paths) for pb, b in paths[i + 1 :] if pb[: len(pa)] == pa]


def value_at(values: Mapping[str, Any] | None, path: Path) -> tuple[bool, Any]:
    """(found, value) at `path` inside nested mappings."""
    node: Any = values
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return (values is not None), node
