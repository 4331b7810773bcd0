"""The worker's heap policy: restored state is frozen out of the cyclic collector's scans,
and garbage is still reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streams.heap import YOUNG_THRESHOLDS, Heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_settle_freezes_what_is_alive() -> None:
    state = [Node() for _ in range(10_000)]
    assert all(gc.is_tracked(record) for record in state)
    Heap().settle()
    assert gc.get_freeze_count() >= len(state)
    scanned = {id(obj) for obj in gc.get_objects()}  # what the collector still walks
    assert not any(id(record) in scanned for record in state)


def test_cyclic_garbage_frozen_while_alive_is_reclaimed_by_the_next_settle() -> None:
    heap = Heap()
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    heap.settle()  # the cycle is alive: frozen
    del a, b
    gc.collect()
    assert alive() is not None, "a frozen cycle is not collected"
    heap.settle()
    assert alive() is None


def test_freezing_what_is_new_leaves_the_frozen_heap_unwalked_and_its_cycles_to_the_next_settle() -> None:
    heap = Heap()
    a, b = Node(), Node()
    a.other, b.other = b, a
    old_cycle = weakref.ref(a)
    heap.settle()  # frozen while alive
    del a, b
    c, d = Node(), Node()
    c.other, d.other = d, c
    new_cycle = weakref.ref(c)
    del c, d
    restored = [Node() for _ in range(1_000)]  # what a take-over brought since

    heap.freeze_new()

    assert new_cycle() is None, "garbage made since the last freeze is collected"
    assert old_cycle() is not None, "the frozen heap is not walked: its cycles wait"
    scanned = {id(obj) for obj in gc.get_objects()}
    assert not any(id(record) in scanned for record in restored), "what is new is frozen"
    heap.settle()
    assert old_cycle() is None, "the next settle reclaims them"


def test_ready_again_after_a_rebalance_freezes_what_is_new_without_walking_the_heap() -> None:
    heap = Heap()
    a, b = Node(), Node()
    a.other, b.other = b, a
    frozen_cycle = weakref.ref(a)
    try:
        heap.ready()  # the first time: a settle, and freezing after full collections from then on
        assert heap.settled_at is not None and heap._on_collection in gc.callbacks
        del a, b
        settled_at = heap.settled_at

        heap.ready()  # again, after a rebalance

        assert frozen_cycle() is not None, "the frozen heap was not walked"
        assert heap.settled_at == settled_at, "not a settle: the periodic one stays due as before"
    finally:
        heap.stop_freezing()


def test_acyclic_state_replaced_after_a_settle_is_freed_at_once() -> None:
    class Record:
        pass

    records = {"t": Record()}
    gone = weakref.ref(records["t"])
    Heap().settle()
    records["t"] = Record()  # the engine replaces a record: reference counting frees the old one
    assert gone() is None


def test_settles_again_only_after_the_interval() -> None:
    now = [100.0]
    heap = Heap(interval=300.0, clock=lambda: now[0])
    assert not heap.settle_if_due(), "the first settle is the caller's"
    heap.settle()
    now[0] += 299.0
    assert not heap.settle_if_due()
    now[0] += 1.0
    assert heap.settle_if_due()
    assert heap.settled_at == now[0]


def test_what_survives_a_full_collection_after_the_first_settle_is_frozen_too() -> None:
    """State that grows after the worker settled (a fleet folded, modules rolled out) must not
    be walked by every later full collection either: each one freezes its survivors."""
    heap = Heap()
    heap.settle()
    heap.freeze_after_full_collections()
    try:
        grown = [Node() for _ in range(10_000)]
        assert any(grown[0] is obj for obj in gc.get_objects())  # walked, until ...
        gc.collect()  # ... a full collection, as the interpreter runs by itself
        assert heap.full_collections >= 1
        scanned = {id(obj) for obj in gc.get_objects()}
        assert not any(id(record) in scanned for record in grown)
    finally:
        heap.stop_freezing()
    later = Node()
    gc.collect()
    assert any(later is obj for obj in gc.get_objects())  # no longer frozen after stop


def test_young_collections_freeze_nothing() -> None:
    heap = Heap()
    heap.freeze_after_full_collections()
    try:
        frozen = gc.get_freeze_count()
        young = [Node() for _ in range(1_000)]
        gc.collect(0)
        gc.collect(1)
        assert gc.get_freeze_count() == frozen and heap.full_collections == 0 and young
    finally:
        heap.stop_freezing()


def test_a_worker_collects_its_young_generation_less_often_and_gives_the_thresholds_back() -> None:
    before = gc.get_threshold()
    heap = Heap()
    heap.collect_young_less_often()
    try:
        assert gc.get_threshold() == YOUNG_THRESHOLDS and YOUNG_THRESHOLDS[0] > before[0]
    finally:
        heap.restore_thresholds()
    assert gc.get_threshold() == before


def test_a_settle_hands_the_c_heaps_free_memory_back_to_the_system() -> None:
    def rss_kib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

    blocks = [bytearray(4096) for _ in range(40_000)]  # ~160 MiB in small malloc'd blocks
    peak = rss_kib()
    keep = blocks[-1]
    del blocks
    Heap().settle()
    assert rss_kib() < peak - 100 * 1024, "most of the freed C heap is back with the system"
    assert keep
