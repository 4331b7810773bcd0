"""The engine's state tables: the mappings one journal partition folds its events into.

    tables.modules["app"]   tables.targets["app/c1"]   tables.clock["now"]   …

One attribute per entry of `ENGINE_MAPPINGS` (state.py says what each holds and why it is
keyed so). The caller owns the mappings — plain dicts in tests and `rollout replay`, the
changelogged layers of `streams/state.py` in the worker — and every part of the engine
reads and writes them through one `StateTables`, passed to it explicitly (core.py).

Writes and undo. The engine changes a stored record only as a copy and stores the copy
back (`Record.working_copy`, state.py: every Record and container in it copied, found
from the fields' types): a value in the mappings is never changed in place. So an event
that fails is undone by dropping its writes — the worker's event layer
(`PartitionState.drop_event`) — and nothing else: there is no list of what to put back.
`tests/rollout/test_failed_event_undo.py` checks it for failures injected anywhere.

Within one batch the worker lets the engine change a module record it copied earlier in
the same batch in place (`private_records`, keyed by module name): nothing outside the
batch holds that copy, and if any event of the batch fails the worker drops the whole
batch and folds it again event by event without sharing (streams/decider.py).

The two tombstone tables (`removed_clusters`, `deleted_modules`) are each wrapped in a
`TombstoneTable` (tombstones.py): what is written to them is stamped with the engine's time
(in `tombstones_noted`) and noted in the index that prunes them a horizon later.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TypeVar

from rollout.engine.state import (
    ClaimChunk,
    ClusterClaims,
    ClusterFacts,
    DeletedModule,
    Dependents,
    FleetPosition,
    FreezeRecord,
    HeldIntent,
    HeldQueue,
    HolderLease,
    ModuleRecord,
    RemovedCluster,
    RestrictionRecord,
    RunRecord,
    Sequence,
    Target,
    TickLog,
    Upstream,
)
from rollout.engine.tombstones import TombstoneTable, always, cluster_ids_changed
from rollout.values.releases import ObservedValues


class StateTables:
    """The mappings of one journal partition, and the partition's number."""

    def __init__(
        self,
        *,
        clusters: MutableMapping[str, ClusterFacts],
        modules: MutableMapping[str, ModuleRecord],
        targets: MutableMapping[str, Target],
        clock: MutableMapping[str, float],
        removed_clusters: MutableMapping[str, RemovedCluster],
        deleted_modules: MutableMapping[str, DeletedModule],
        tombstones_noted: MutableMapping[str, float],
        fleet_positions: MutableMapping[str, FleetPosition],
        held_queues: MutableMapping[str, HeldQueue],
        held_intents: MutableMapping[str, HeldIntent],
        capped_ticks: MutableMapping[str, TickLog],
        observed_values: MutableMapping[str, ObservedValues],
        dependents: MutableMapping[str, Dependents],
        upstream: MutableMapping[str, Upstream],
        sequences: MutableMapping[str, Sequence],
        restrictions: MutableMapping[str, RestrictionRecord],
        holders: MutableMapping[str, HolderLease],
        holder_claims: MutableMapping[str, ClaimChunk],
        claims: MutableMapping[str, ClusterClaims],
        runs: MutableMapping[str, RunRecord],
        partition: int,
        freezes: MutableMapping[str, FreezeRecord] | None = None,
    ) -> None:
        self.clusters = clusters
        self.modules = modules
        self.targets = targets
        self.clock = clock
        self.tombstones_noted = tombstones_noted
        noted = (tombstones_noted, clock)
        self.removed_clusters = TombstoneTable("removed_clusters", removed_clusters, *noted, cluster_ids_changed)
        self.deleted_modules = TombstoneTable("deleted_modules", deleted_modules, *noted, always)
        self.fleet_positions = fleet_positions
        self.held_queues = held_queues
        self.held_intents = held_intents
        self.capped_ticks = capped_ticks
        self.observed_values = observed_values
        self.dependents = dependents
        self.upstream = upstream
        self.sequences = sequences
        self.restrictions = restrictions
        self.holders = holders
        self.holder_claims = holder_claims
        self.claims = claims
        self.runs = runs
        self.freezes: MutableMapping[str, FreezeRecord] = freezes if freezes is not None else {}
        self.partition = partition
        # module name → the copy of its record this batch made (see the module doc); None:
        # every event works on its own copies
        self.private_records: dict[str, ModuleRecord] | None = None

    @property
    def now(self) -> float:
        """The engine's time: what the latest Tick said (clock.py); 0 before any."""
        return self.clock.get("now", 0.0)

    @property
    def live(self) -> float:
        """The engine's live time, which leases are measured in: its time less the gaps
        between ticks that leases do not count (clock.py LEASE_TICK_STEP)."""
        return self.clock.get("now", 0.0) - self.clock.get("paused", 0.0)

    def working_module(self, stored: ModuleRecord) -> ModuleRecord:
        """A copy of `stored` that this event may change — or `stored` itself when it is the
        copy this batch made already (`private_records`). The caller stores it back."""
        private = self.private_records
        if private is None:
            return stored.working_copy()
        if private.get(stored.name) is stored:
            return stored
        record = stored.working_copy()
        private[record.name] = record
        return record


Value = TypeVar("Value")


def peek(table: MutableMapping[str, Value], key: str) -> Value | None:
    """`table.get(key)` for a scan over many records (an index rebuild): a table that keeps
    only its most recently used records decoded (the worker's targets: streams/state.py
    `peek`) does not count the read as a use, so a scan does not push out the records in use.
    Any other mapping (a dict in tests and `rollout replay`): its `get`."""
    reader = getattr(table, "peek", None)
    return reader(key) if reader is not None else table.get(key)
