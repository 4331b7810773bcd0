"""The decision document: one record of the decisions topic, as every reader reads it.

    engine (rollout/engine/outcome.py: Decision) ──► decider (streams/chain.py: decision_body,
        linked into its journal partition's hash chain) ──► decisions topic (key: module)
        ──► DecisionDocument.read ──► rollout history, rollout status, the dashboard, rollout replay

A decision says what was done (`action`, a `DecisionAction`: decision_actions.py), why
(`because`, a reason model: decision_reasons.py) and, rendered from it, the sentence a person
reads (`reason`); then what it is about (module, cluster, stage, revision, generation), when
(`at`, engine seconds) and, for a command's decisions, who asked and through which door.
`id` is `<journal partition>-<offset>-<n>`; `chain`, `seq`, `prev`, `hash` link it
(streams/chain.py). A reader takes facts from `because` — never from the sentence.

Versions. The records carry no `schemaVersion`: they are version 1 (documents.py), and
every field added since is additive. Records written before a field existed lack it and
read as its default — `because` is None on the records of releases before structured
reasons (v0.26 and the builds up to it: tests/upgrade/fixtures/v0.26/decisions.jsonl); a
values-refused record written between the readOnly path's field and structured reasons
names its path at the top (`path`) instead of in `because` (`refused_path` reads either).
A `because` of a code this release does not know reads as an `UnrecognisedReason`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rollout.wire.decision_reasons import DecisionReason, UnrecognisedReason, ValuesRefused
from rollout.wire.documents import VersionedDocument


class DecisionDocument(VersionedDocument):
    """One record of the decisions topic."""

    KIND = "decision"

    id: str  # <journal partition>-<offset>-<n>
    module: str
    action: str  # a DecisionAction (compare with its members); a newer worker's reads as is
    reason: str  # the sentence, rendered from `because`
    because: DecisionReason | UnrecognisedReason | None = Field(default=None, union_mode="left_to_right")
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    at: float = 0.0  # engine seconds (0: before the engine's first tick)
    stage: str | None = None  # the stage a stage-* / awaiting-* decision is about
    stage_seconds: float | None = None  # stage-succeeded: engine seconds since the stage started
    user: str | None = None  # a command's decisions: who asked
    via: str | None = None  # a command's decisions: through which door (cli, dashboard, crd)
    path: str | None = None  # values-refused, written before structured reasons: the readOnly path
    chain: int | None = None  # the journal partition whose chain links it (absent: older than the chain)
    seq: int | None = None
    prev: str | None = None
    hash: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The record's fields as its writer set them (a decision record carries no
        `schemaVersion`: it is version 1) — what `rollout history -o json` prints."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"schema_version"})

    @property
    def refused_path(self) -> str | None:
        """A values-refused decision's readOnly path: from `because`, or, on a record written
        before structured reasons, its `path` (None: neither — a record older than both)."""
        if isinstance(self.because, ValuesRefused):
            return self.because.path
        return self.path
