"""A release's upgrade fixture (tests/upgrade/fixtures/RELEASE/, written by make_fixture.py)
restored into this release's decider, the way a worker restores a partition it takes over.

    decide-state.jsonl ──► PartitionState.restore (streams/state.py: the worker's decode path)
                       ──► DecidePartition (streams/decider.py) ──► events after the upgrade

`RestoredDecider.send` folds events as the worker does a batch (parse, engine, outputs),
then commits the batch, keeping what it produced: assignments, decisions, module status and
the state records written (the changelog).
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from aiokafka import TopicPartition
from pydantic import BaseModel, ConfigDict, Field

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.wire.events import EventBase
from streams.decider import DecidePartition
from streams.outputs import Outputs

FIXTURES = Path(__file__).parent / "fixtures"
PREVIOUS_RELEASE = "v0.26"
TOPICS = TopicNames("upgrade.")


def release_info(release: str = PREVIOUS_RELEASE) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((FIXTURES / release / "release.json").read_text())
    return info


def state_documents(release: str = PREVIOUS_RELEASE) -> list[dict[str, Any]]:
    """The fixture's decide-state records, in offset order: {"key": …, "value": JSON or None}."""
    lines = (FIXTURES / release / "decide-state.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def state_records(documents: list[dict[str, Any]]) -> list[tuple[bytes, bytes | None]]:
    """The records as they are on the state topic (key, JSON value or tombstone)."""
    return [
        (doc["key"].encode(), None if doc["value"] is None else json.dumps(doc["value"]).encode()) for doc in documents
    ]


def journal_values(release: str = PREVIOUS_RELEASE) -> list[bytes]:
    """The journal events the release had folded, as they travel on Kafka."""
    lines = (FIXTURES / release / "journal.jsonl").read_text().splitlines()
    return [json.dumps(json.loads(line)).encode() for line in lines if line.strip()]


class RestoredDecider:
    """Journal partition 0's decider, its state restored from a release's fixture."""

    def __init__(self, documents: list[dict[str, Any]], *, journal_length: int) -> None:
        self.decider = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
        self.restored = self.decider.state.restore(state_records(documents))
        self.decider.state.commit_batch()
        self.decider.reset()  # as the runtime does after a catch-up
        self.offset = journal_length  # the next journal offset
        self.outputs: list[Outputs] = []
        self.changelog: list[tuple[bytes, bytes | None]] = []
        self.module_status: dict[str, dict[str, Any] | None] = {}

    def table(self, mapping: str) -> MutableMapping[str, Any]:
        """One of the engine's mappings (state.ENGINE_MAPPINGS) as the decider holds it."""
        return self.decider.state.mappings[mapping]

    def send(self, *events: EventBase | bytes) -> Outputs:
        """One batch of journal records, folded and committed as the worker would."""
        values = [event if isinstance(event, bytes) else event.to_bytes() for event in events]
        records = [
            SimpleNamespace(topic=TOPICS.journal, partition=0, offset=self.offset + n, key=b"k", value=value)
            for n, value in enumerate(values)
        ]
        self.offset += len(records)
        out = Outputs(TOPICS.dead_letters)
        self.decider.process(records, self.offset, out)
        self.changelog += self.decider.state.changelog()
        self.decider.state.commit_batch()
        self.outputs.append(out)
        for record in out.all():
            if record.topic == TOPICS.module_status and record.key is not None:
                self.module_status[record.key.decode()] = None if record.value is None else json.loads(record.value)
        return out

    def documents(self, topic: str, out: Outputs | None = None) -> list[dict[str, Any]]:
        """The documents sent to `topic` (by `out`, or since the restore)."""
        batches = [out] if out is not None else self.outputs
        return [json.loads(r.value) for batch in batches for r in batch.all() if r.topic == topic and r.value]

    def decisions(self, out: Outputs | None = None) -> list[dict[str, Any]]:
        return self.documents(TOPICS.decisions, out)

    def moved(self, out: Outputs) -> dict[str, str | None]:
        """Each "<module>/<cluster>" `out` assigned → its revision (None: taken away)."""
        return {
            f"{doc['module']}/{doc['cluster']}": doc["sync"]["revision"] if doc["sync"] else None
            for doc in self.documents(TOPICS.assignments, out)
        }

    def dead_letters(self, out: Outputs | None = None) -> list[dict[str, Any]]:
        return self.documents(TOPICS.dead_letters, out)

    def written(self, key: str) -> dict[str, Any] | None:
        """The last value written to the state topic under `key` since the restore."""
        values = [value for k, value in self.changelog if k == key.encode()]
        assert values, f"{key} was not written"
        return None if values[-1] is None else json.loads(values[-1])


class PreviousTarget(BaseModel):
    """A Target as v0.26 reads one (rollout/state.py at bf190ea, its fields and defaults as
    they were): unknown fields refused."""

    model_config = ConfigDict(extra="forbid")

    module: str
    cluster: str
    stage: str = "-"
    stage_index: int | None = None
    sort_key: int | None = None
    ready: bool = False
    pinned: bool = False
    assigned: int | None = None
    status: Literal["none", "updating", "succeeded", "failed"] = "none"
    status_message: str = ""
    updating_since: float | None = None
    category: str = "pending"
    dependents_ready: bool = False
    report_ids: list[str] = Field(default_factory=list)
    read_only_values: dict[str, Any] = Field(default_factory=dict)


def without_previous_defaults(document: dict[str, Any]) -> dict[str, Any]:
    """A Target's JSON without the fields at v0.26's defaults: as this release stores it."""
    defaults = PreviousTarget(module="", cluster="").model_dump()
    return {k: v for k, v in document.items() if k in ("module", "cluster") or v != defaults[k]}
