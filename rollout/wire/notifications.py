"""Notifications: the CloudEvent a decision becomes, as the notifier sends it and a receiver reads it.

    decisions topic ──► DecisionDocument ──► cloud_event(decision, source) ──► DecisionCloudEvent
        ──► the notifier (projections/notifier/) POSTs it to each webhook
            (CloudEvents 1.0, HTTP binding, structured mode: `application/cloudevents+json`)

Which decisions are sent is `EVENT_TYPES`: one line per `DecisionAction` notified, naming
its CloudEvents `type`. A decision whose action is not in the table is not sent. Adding a
notification is adding its line (tests/rollout/test_notifications.py checks every key is a
`DecisionAction` on the wire and every type is distinct and well formed).

The event's attributes come from the decision record, never from its sentence:

* `id` — the decision's id (`<journal partition>-<offset>-<n>`), the same on every
  redelivery, so a receiver deduplicates on (`source`, `id`) as CloudEvents prescribes;
* `source` — the engine instance (the notifier's `source`, by default `/rollout/<prefix>`):
  ids are unique per journal, so per topic prefix;
* `type` — from `EVENT_TYPES`; `subject` — the module;
* `time` — the decision's engine time (`at`, the engine's clock: ticks), absent when the
  engine had not ticked yet (`at` 0) rather than a made-up 1970;
* `data` — `DecisionFacts`: the record's typed fields and its structured `because` (the
  same `DecisionReason` model the decision record holds), plus the sentence as `summary`
  for chat relays that show text. A receiver reads the facts from `because`.

Pure: no I/O, no clock (the time is the decision's).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from rollout.api.windows import iso
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import DecisionReason, UnrecognisedReason
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import Part

EVENT_TYPES: dict[DecisionAction, str] = {
    DecisionAction.STAGE_STARTED: "dev.rollout.stage.started",
    DecisionAction.AWAITING_APPROVAL: "dev.rollout.stage.awaiting-approval",
    DecisionAction.STAGE_SUCCEEDED: "dev.rollout.stage.succeeded",
    DecisionAction.GATE_FAILED: "dev.rollout.gate.failed",
    DecisionAction.GATE_INCONCLUSIVE: "dev.rollout.gate.inconclusive",
    DecisionAction.HALTED: "dev.rollout.module.halted",
    DecisionAction.ROLLBACK: "dev.rollout.module.rollback-started",
    DecisionAction.COMPLETE: "dev.rollout.module.complete",
    DecisionAction.ABORTED: "dev.rollout.module.aborted",
}
"""The decisions that are notified, each with its CloudEvents `type` — one line each.
(`gate-inconclusive`: a gate analysis paused the rollout, rollout/engine/gate_results.py.)"""

TYPE_PATTERN = re.compile(r"^dev\.rollout\.[a-z]+\.[a-z][a-z-]*$")
"""What a `type` looks like: reverse-DNS prefix `dev.rollout`, the thing, what happened."""

CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
"""The structured mode's media type (CloudEvents HTTP binding, 3.2)."""


class DecisionFacts(Part):
    """The `data` of a notification: what the decision is about and why (typed)."""

    module: str
    action: str  # a DecisionAction
    stage: str | None = None
    cluster: str | None = None
    revision: str | None = None
    generation: int | None = None
    stage_seconds: float | None = None  # stage-succeeded: engine seconds the stage took
    user: str | None = None  # a command's decisions: who asked
    via: str | None = None
    because: DecisionReason | UnrecognisedReason | None = Field(default=None, union_mode="left_to_right")
    summary: str  # the decision's sentence, for people (facts are in `because`)


class DecisionCloudEvent(Part):
    """A CloudEvents 1.0 event in structured mode (the JSON body of the HTTP request)."""

    specversion: Literal["1.0"] = "1.0"
    id: str
    source: str
    type: str
    subject: str
    time: str | None = None  # RFC 3339, the decision's engine time
    datacontenttype: Literal["application/json"] = "application/json"
    data: DecisionFacts

    def body(self) -> bytes:
        """The HTTP request body: the event as JSON, absent attributes left out."""
        return self.model_dump_json(exclude_none=True).encode()

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def event_type(action: str) -> str | None:
    """The CloudEvents `type` of a decision's action; None: not notified."""
    try:
        return EVENT_TYPES.get(DecisionAction(action))
    except ValueError:  # an action a newer worker wrote: not notified by this release
        return None


def cloud_event(decision: DecisionDocument, source: str) -> DecisionCloudEvent | None:
    """The notification of `decision` from engine `source`; None when its action is not notified."""
    kind = event_type(decision.action)
    if kind is None:
        return None
    facts = DecisionFacts(
        module=decision.module,
        action=decision.action,
        stage=decision.stage,
        cluster=decision.cluster,
        revision=decision.revision,
        generation=decision.generation,
        stage_seconds=decision.stage_seconds,
        user=decision.user,
        via=decision.via,
        because=decision.because,
        summary=decision.reason,
    )
    when = iso(decision.at) if decision.at > 0 else None
    return DecisionCloudEvent(id=decision.id, source=source, type=kind, subject=decision.module, time=when, data=facts)
