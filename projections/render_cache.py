"""A sync's Flux objects compiled once, filled in per cluster (the renderer's cache).

What flows through here: the renderer (projections/render.py) asks for one sync of one
cluster's assemblage; it gets back the sync's compiled objects — rendered through the
built-in templates once, with placeholders where the cluster goes — filled in with this
cluster's names, and the same filled into their YAML text. The renderer validates every
filled object against its CRD, as it validates one rendered from scratch.

Why: when a module moves, every cluster it moves gets the same sync (same source, package,
revision, generation) — only the cluster's names differ — and rendering it from scratch
cost ~0.5 ms a cluster (Jinja, parsing its YAML in Python, validation) and dumping it
~0.3 ms more: most of the applier's CPU per cluster moved. Filled in, it is a copy of two
small mappings, a few string replacements and the compiled validator.

What a render reads, and so what a compiled sync is keyed by (`CompiledKey`): the
assemblage's kind and its cluster's namespace, the whole sync (its canonical JSON), and the
renderer's settings (one cache per renderer). What it does not key by is the cluster's name
— it enters the objects only through three values, each a placeholder (`NAME_SLOT`,
`CLUSTER_SLOT`) while compiling: the objects' name (`object_name(module, cluster)`), the
`rollout.dev/cluster` label, and a remote assemblage's kubeconfig secret name
(`<cluster>-kubeconfig`, built around the placeholder). Filling in replaces each
placeholder inside the strings that hold it.

When that equals rendering from scratch: the built-in templates emit these values whole,
and never branch on or transform them (a template that wrote `{{ cluster | upper }}` would
leave no placeholder to fill, and one that tested `{% if cluster == ... %}` would take the
placeholder's branch). So only a renderer without a template directory compiles; with one,
every object is rendered through Jinja, as a user's template may read anything.
Placeholders appear in no sync (a sync whose JSON contains one, or whose cluster namespace
does, is rendered from scratch), and a compile that fails (a template error, an object
that is no YAML mapping) is not cached as compiled: those syncs are rendered from scratch,
and so fail with the real names in their errors. tests/projections/test_render_cache.py
holds filled and from-scratch output equal, objects and bytes, over generated syncs and
cluster names.

The text is filled only when every value is written as itself (`flux_yaml.emits_plain`: a
DNS label that YAML reads as a string; the placeholders are such) — else the filled objects
are dumped. Bounded: at most `COMPILED_SYNCS` compiled syncs (least recently used first
out), and as many remembered canonical JSONs of sync objects by identity.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from projections.flux_yaml import emits_plain
from rollout.wire.assemblages import AssignedSync

__all__ = [
    "CLUSTER_SLOT",
    "COMPILED_SYNCS",
    "NAME_SLOT",
    "CompiledKey",
    "CompiledSync",
    "RenderCache",
    "compile_objects",
    "fill",
    "fill_text",
    "free_of_slots",
]

COMPILED_SYNCS = 1024
"""Compiled syncs kept (each ~4 KB): a fleet's moving (module, generation) pairs fit many
times over; per-cluster bindings make every cluster's sync distinct, and those are compiled
for each cluster (no dearer than rendering from scratch) and evicted first."""

NAME_SLOT = "rollout-slot-name-3e9c7a"
CLUSTER_SLOT = "rollout-slot-cluster-5b1d0f"
_SLOTS = (NAME_SLOT, CLUSTER_SLOT)

CompiledKey = tuple[str, str, bytes]
"""(assemblage kind, cluster namespace, the sync's canonical JSON)."""


@dataclass(frozen=True, slots=True)
class CompiledSync:
    """A sync's objects with placeholders: `objects` as JSON (a fresh copy per cluster),
    `slots` where a placeholder is — (object index, path, the string holding it) — and
    `text`, the objects' YAML stream with the placeholders (`flux_yaml.dump_objects`), None
    when a string holding one is not written as itself (then the filled objects are dumped)."""

    objects: bytes
    slots: tuple[tuple[int, tuple[str | int, ...], str], ...]
    text: str | None
    templates: tuple[str, ...]
    filenames: tuple[str, ...]
    kinds: tuple[str, ...]
    """Per object: its template, the template's file (for the errors of the filled objects)
    and the kind it must be."""


def compile_objects(
    objects: list[dict[str, Any]],
    text: str,
    *,
    templates: tuple[str, ...],
    filenames: tuple[str, ...],
    kinds: tuple[str, ...],
) -> CompiledSync | None:
    """The compiled form of `objects` rendered with the placeholders; None when a placeholder
    is anywhere but inside a string value (a key), or the objects are not JSON (orjson:
    an integer beyond 64 bits)."""
    slots: list[tuple[int, tuple[str | int, ...], str]] = []
    for index, obj in enumerate(objects):
        if not _find_slots(obj, (), index, slots):
            return None
    try:
        encoded = orjson.dumps(objects)
    except orjson.JSONEncodeError:
        return None
    plain = all(emits_plain(holder) for _, _, holder in slots)
    return CompiledSync(
        objects=encoded,
        slots=tuple(slots),
        text=text if plain else None,
        templates=templates,
        filenames=filenames,
        kinds=kinds,
    )


def _find_slots(node: Any, path: tuple[str | int, ...], index: int, into: list[Any]) -> bool:
    if isinstance(node, str):
        if any(slot in node for slot in _SLOTS):
            into.append((index, path, node))
        return True
    if isinstance(node, dict):
        for key, item in node.items():
            if not isinstance(key, str) or any(slot in key for slot in _SLOTS):
                return False
            if not _find_slots(item, (*path, key), index, into):
                return False
        return True
    if isinstance(node, list):
        return all(_find_slots(item, (*path, number), index, into) for number, item in enumerate(node))
    return True


def _filled(holder: str, name: str, cluster: str) -> str:
    return holder.replace(NAME_SLOT, name).replace(CLUSTER_SLOT, cluster)


def fill(compiled: CompiledSync, name: str, cluster: str) -> list[dict[str, Any]]:
    """Fresh objects of `compiled` for a cluster: each placeholder replaced."""
    objects: list[dict[str, Any]] = orjson.loads(compiled.objects)
    for index, path, holder in compiled.slots:
        node: Any = objects[index]
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = _filled(holder, name, cluster)
    return objects


def fill_text(compiled: CompiledSync, name: str, cluster: str) -> bytes | None:
    """The filled objects' YAML stream, when every string holding a placeholder is written
    as itself once filled too (see the module docstring); else None."""
    if compiled.text is None:
        return None
    if not all(emits_plain(_filled(holder, name, cluster)) for holder in {holder for _, _, holder in compiled.slots}):
        return None
    return _filled(compiled.text, name, cluster).encode("utf-8")


class RenderCache:
    """Compiled syncs by `CompiledKey`, least recently used out first; and each sync object's
    canonical JSON remembered by identity (the applier's decoder hands the same object to
    every cluster given the same sync), so a hit costs no serialisation."""

    def __init__(self, capacity: int = COMPILED_SYNCS) -> None:
        self.capacity = capacity
        self._compiled: OrderedDict[CompiledKey, CompiledSync | None] = OrderedDict()
        self._json: OrderedDict[int, tuple[weakref.ref[AssignedSync], bytes]] = OrderedDict()
        self.compiled = 0  # compiles (misses), for tests and benchmarks
        self.hits = 0

    def __len__(self) -> int:
        return len(self._compiled)

    def sync_json(self, sync: AssignedSync) -> bytes:
        """`sync.model_dump_json()`, remembered for the same object."""
        known = self._json.get(id(sync))
        if known is not None and known[0]() is sync:
            self._json.move_to_end(id(sync))
            return known[1]
        encoded = sync.model_dump_json().encode()
        self._json[id(sync)] = (weakref.ref(sync), encoded)
        self._json.move_to_end(id(sync))
        if len(self._json) > self.capacity:
            self._json.popitem(last=False)
        return encoded

    def get(self, key: CompiledKey) -> tuple[bool, CompiledSync | None]:
        """(known, compiled): known False when `key` was never compiled (or was evicted);
        compiled None for a sync that renders from scratch."""
        if key not in self._compiled:
            return False, None
        self._compiled.move_to_end(key)
        self.hits += 1
        return True, self._compiled[key]

    def put(self, key: CompiledKey, compiled: CompiledSync | None) -> None:
        self.compiled += 1
        self._compiled[key] = compiled
        self._compiled.move_to_end(key)
        if len(self._compiled) > self.capacity:
            self._compiled.popitem(last=False)


def free_of_slots(*texts: str | bytes) -> bool:
    """No placeholder in any of `texts` (a sync's JSON, a namespace): then every placeholder
    in the compiled objects stands for the cluster."""
    return not any(
        slot in text if isinstance(text, str) else slot.encode() in text for text in texts for slot in _SLOTS
    )
