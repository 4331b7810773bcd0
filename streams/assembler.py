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
That holds while the table keeps them: with each cluster's record holding its own copy of
every sync (decoded from its own assignment), a partition of the 100-concurrent benchmark
held ~25,000 syncs, the table's whole capacity, and encoded them again and again. So an
assignment's sync is decoded once and shared by every cluster assigned an equal one
(streams/assignment_decoding.py), and the snapshot is not built as a model only to be
encoded by the table (`assemble_record`): one partition's share of that benchmark
(benchmarks/assembler_moves.py, 250 clusters x 100 modules moving), 669-786 → 197-200 µs of
CPU a move, peak RSS 411 → 174 MiB, the same bytes written. Then each cluster's syncs kept
as encoded pieces in order (`_KindForms`, same module), so that a move joins them instead of
looking each sync up: 172-196 → 63-65 µs.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.assembly.snapshots import AssemblageRecord, assemble_record
from streams.assemblage_encoding import EncodedSyncs
from streams.assignment_decoding import AssignmentDecoder
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
        self.decoder = AssignmentDecoder()
        self.state = PartitionState(
            state_mappings(), lazy=LAZY_MAPPINGS, hot=HOT_RECORDS, encoders={"assemblages": self.encoded.record_json}
        )
        self.records = self.state.mappings["assemblages"]

    def reset(self) -> None:
        pass  # no derived state

    def process(self, records: Sequence[ConsumerRecord], position: int, out: Outputs) -> None:
        latest: dict[tuple[str, str], tuple[AssemblageRecord, str]] = {}  # (topic, cluster) -> its last
        for record in records:
            try:
                assignment = self.decoder.decode(record.value or b"")
            except (ValidationError, ValueError) as error:
                out.reject(f"not an assignment: {str(error)[:500]}", record, STAGE)
                continue
            cluster = assignment.cluster
            updated, changed = assemble_record(self.records.get(cluster), assignment)
            if not changed:
                continue
            self.records[cluster] = updated
            self.state.keep_event()
            for kind in changed:
                topic = self.topics.remote if kind == "RemoteAssemblage" else self.topics.proxy
                latest.pop((topic, cluster), None)  # the order of last writes, as `send_latest` keeps it
                latest[(topic, cluster)] = (updated, kind)
                self.metrics.snapshots.labels(kind, "snapshot" if updated.syncs.get(kind) else "tombstone").inc()
        for (topic, cluster), last in latest.items():
            out.send_latest(topic, cluster.encode(), self.encoded.snapshot_json(*last))  # None: a tombstone
