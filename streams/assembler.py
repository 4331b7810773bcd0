"""The assembler stage: assignments → RemoteAssemblage / ProxyAssemblage snapshots.

    assignments (key: cluster) ──► assemble ──► remote-assemblages, proxy-assemblages

Each assignment is folded into its cluster's `AssemblageRecord` with the pure
`rollout.assembly.snapshots.assemble`; state per cluster, changelogged to `assemble-state` in the
same transaction as the snapshots. Snapshots go to compacted topics, so per batch only
the last snapshot per (kind, cluster) is sent: its version is the record's version, and
no version is ever published with two different contents.

Only that last one is encoded, once the batch is folded: a ProxyAssemblage carries every
module of its cluster, and encoding it after each assignment (`model_dump` of up to 100
syncs) was half of the stage's CPU when modules move the same clusters together, for
snapshots the batch then superseded — 100 modules over 200 clusters, 50 assignments a
batch, in-process: 0.64 → 0.25 ms of CPU per assignment. And each sync of a record is
encoded once while the record keeps it (streams/assemblage_encoding.py): the snapshot and the
state record of a 100-module cluster are put together from their syncs' encodings, so a move
costs its one changed sync (0.70 → 0.05 ms for the snapshot, 0.35 → 0.04 ms for the record).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.assembly.snapshots import AssemblageRecord, assemble
from rollout.engine.core import Assignment
from streams.assemblage_encoding import EncodedSyncs
from streams.outputs import Outputs
from streams.state import PartitionState

STAGE = "assemble"


# one record per cluster that ever had an assignment: the whole fleet once a module has
# rolled out. Decoded, a record costs ~4.7 KiB (its syncs as models); as its bytes ~0.6 KiB. So
# the records are restored as bytes and decoded when read, and only the most recently used
# are held decoded — a batch (one fetch, ~1,700 assignments) touches fewer clusters than
# that. 100,000 clusters: ~470 MiB decoded → ~60 MiB as bytes (+ 2,000 decoded a partition).
LAZY_MAPPINGS = ("assemblages",)
HOT_RECORDS = {"assemblages": 2_000}


def state_mappings() -> dict[str, type]:
    """The assembler's state: one assemblage record per cluster."""
    return {"assemblages": AssemblageRecord}


class AssemblePartition:
    def __init__(self, tp: TopicPartition, topics: TopicNames, metrics: Metrics) -> None:
        self.topics = topics
        self.metrics = metrics
        self.encoded = EncodedSyncs()
        self.state = PartitionState(
            state_mappings(), lazy=LAZY_MAPPINGS, hot=HOT_RECORDS, encoders={"assemblages": self.encoded.record_json}
        )
        self.records = self.state.mappings["assemblages"]

    def reset(self) -> None:
        pass  # no derived state

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        latest: dict[tuple[str, str], tuple[AssemblageRecord, str] | None] = {}  # (topic, cluster) -> its last
        for record in records:
            try:
                assignment = Assignment.model_validate_json(record.value or b"")
            except (ValidationError, ValueError) as error:
                out.reject(f"not an assignment: {str(error)[:500]}", record, STAGE)
                continue
            updated, publications = assemble(self.records.get(assignment.cluster), assignment)
            if not publications:
                continue
            self.records[assignment.cluster] = updated
            self.state.keep_event()
            for kind, cluster, published in publications:
                topic = self.topics.remote if kind == "RemoteAssemblage" else self.topics.proxy
                latest.pop((topic, cluster), None)  # the order of last writes, as `send_latest` keeps it
                latest[(topic, cluster)] = None if published is None else (updated, kind)
                self.metrics.snapshots.labels(kind, "snapshot" if published is not None else "tombstone").inc()
        for (topic, cluster), last in latest.items():
            value = None if last is None else self.encoded.snapshot_json(*last)
            out.send_latest(topic, cluster.encode(), value)
