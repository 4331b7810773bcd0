"""The assembler stage (streams/assembler.py) sends each cluster's last snapshot of a batch,
encoded once when the batch is folded — and that snapshot is exactly what folding the
assignments one by one publishes last."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.api.manifests import Sync
from rollout.assembly.snapshots import assemble
from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import AssignedSync
from streams import assembler
from streams.assembler import AssemblePartition
from streams.outputs import Outputs

TOPICS = TopicNames("test.")


def assignment(cluster: str, module: str, *, removed: bool = False) -> Assignment:
    sync = Sync.model_validate(
        {"source": {"git": {"url": f"https://example.com/{module}", "version": {"tag": "1.0.0"}}}}
    )
    return Assignment(
        cluster=cluster,
        cluster_namespace="fleet",
        module=module,
        assemblage="ProxyAssemblage",
        sync=None if removed else AssignedSync(module=module, module_namespace="fleet", revision="1.0.0", sync=sync),
        reason="test",
    )


def records(*assignments: Assignment) -> list[Any]:
    return [
        SimpleNamespace(key=a.cluster.encode(), value=a.model_dump_json(by_alias=True).encode(), offset=n)
        for n, a in enumerate(assignments)
    ]


def one_by_one(*assignments: Assignment) -> dict[str, bytes | None]:
    """What folding each assignment and encoding each snapshot publishes last, per cluster."""
    state: dict[str, Any] = {}
    last: dict[str, bytes | None] = {}
    for a in assignments:
        state[a.cluster], publications = assemble(state.get(a.cluster), a)
        for _, cluster, snapshot in publications:
            last[cluster] = (
                None
                if snapshot is None
                else orjson.dumps(snapshot.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)
            )
    return last


def test_a_batch_sends_each_clusters_last_snapshot_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = [assignment("eu-1", f"m-{n}") for n in range(5)] + [assignment("eu-2", "m-0"), assignment("eu-1", "m-9")]
    stage = AssemblePartition(TopicPartition("test.assignments", 0), TOPICS, Metrics())
    encoded: list[bytes | None] = []
    real_snapshot_json = stage.encoded.snapshot_json

    def counting_snapshot_json(record: Any, kind: str) -> bytes | None:
        encoded.append(real_snapshot_json(record, kind))
        return encoded[-1]

    monkeypatch.setattr(stage.encoded, "snapshot_json", counting_snapshot_json)
    out = Outputs("test.dead-letters")
    stage.process(records(*batch), 0, out)

    sent = {key.decode(): record.value for (topic, key), record in out.latest.items() if topic == TOPICS.proxy}
    assert sent == one_by_one(*batch)
    assert [orjson.loads(value)["version"] for value in sent.values() if value is not None] == [1, 6]
    assert len(encoded) == 2  # one per cluster, not one per assignment
    published = stage.metrics.snapshots.labels("ProxyAssemblage", "snapshot")._value.get()
    assert published == 7  # every version made is counted, as before


def test_a_cluster_emptied_in_a_batch_sends_its_tombstone() -> None:
    batch = [assignment("eu-1", "m-0"), assignment("eu-1", "m-0", removed=True)]
    stage = AssemblePartition(TopicPartition("test.assignments", 0), TOPICS, Metrics())
    out = Outputs("test.dead-letters")
    stage.process(records(*batch), 0, out)
    assert [(key, record.value) for (_, key), record in out.latest.items()] == [(b"eu-1", None)]
    assert one_by_one(*batch) == {"eu-1": None}


def test_the_assembler_holds_only_its_most_recent_records_decoded_and_publishes_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(assembler.HOT_RECORDS, "assemblages", 4)
    capped = AssemblePartition(TopicPartition("test.assignments", 0), TOPICS, Metrics())
    monkeypatch.setitem(assembler.HOT_RECORDS, "assemblages", 1000)
    unbounded = AssemblePartition(TopicPartition("test.assignments", 0), TOPICS, Metrics())
    first = [assignment(f"c-{n}", "m-0") for n in range(20)]
    again = [assignment(f"c-{n}", "m-1") for n in range(0, 20, 3)]  # cold records read and changed

    sent: list[dict[bytes, bytes | None]] = []
    for stage in (capped, unbounded):
        published: dict[bytes, bytes | None] = {}
        for batch in (first, again):
            out = Outputs("test.dead-letters")
            stage.process(records(*batch), 0, out)
            stage.state.changelog()
            stage.state.commit_batch()
            published |= {key: record.value for (_, key), record in out.latest.items()}
        sent.append(published)

    assert sent[0] == sent[1]
    assert capped.records.committed.undecoded() == 20 - 4  # type: ignore[attr-defined]
    assert unbounded.records.committed.undecoded() == 0  # type: ignore[attr-defined]
    assert orjson.loads(sent[0][b"c-0"] or b"{}")["version"] == 2
