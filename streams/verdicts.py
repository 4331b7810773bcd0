"""Verdict documents: the decider's answer to an event that asked for one, on `verdicts`.

    journal ──► decide ──► verdicts (key: the event's id)

The engine answers every module intent, and every status report with `reply`, with a
`rollout.engine.outcome.Verdict`. The decider writes each as one small `VerdictDocument`
(rollout/wire/verdicts.py, the model every reader parses it with), keyed by the id of the
event it answers, in the same transaction as the decisions it names:

    {"schemaVersion": 1, "event": "<id>", "verdict": "accepted" | "refused", "reason": "...",
     "module": "...", "decisions": [{"id", "action", "reason", "cluster"}, ...], "decisionCount": n}

`decisions` lists at most `DECISIONS_LISTED` of the decisions the event caused (an apply to
a large fleet causes one per cluster); `decisionCount` counts them all. A refusal is also a
dead letter (streams/deadletters.py) that names the event's id.

The CLI (rollout_cli/publishing/verdicts.py) reads the topic from its end offsets, taken before it
publishes, until the document for its event arrives.
"""

from __future__ import annotations

import orjson

from rollout.engine.outcome import Decision, Verdict
from rollout.wire.verdicts import DECISIONS_LISTED, ListedDecision, VerdictDocument
from streams.outputs import exact

__all__ = ["DECISIONS_LISTED", "refusal_document", "verdict_document"]


def verdict_document(verdict: Verdict, decisions: list[Decision], id_prefix: str) -> bytes:
    """The document for `verdict`; `decisions` are its outcome's, decision n has the id
    `<id_prefix>n` (the decider's `<journal partition>-<offset>-n`)."""
    start, stop = verdict.decisions
    listed = [
        _listed(f"{id_prefix}{index}", decisions[index]) for index in range(start, min(stop, start + DECISIONS_LISTED))
    ]
    document = VerdictDocument(
        event=verdict.event,
        verdict="accepted" if verdict.accepted else "refused",
        reason=verdict.reason,
        module=verdict.module,
        decisions=listed,
        decision_count=stop - start,
    )
    return exact(orjson.dumps(document.as_json(), option=orjson.OPT_SORT_KEYS))


def _listed(decision_id: str, decision: Decision) -> ListedDecision:
    if decision.cluster:
        return ListedDecision(id=decision_id, action=decision.action, reason=decision.reason, cluster=decision.cluster)
    return ListedDecision(id=decision_id, action=decision.action, reason=decision.reason)


def refusal_document(event: str, module: str, reason: str) -> bytes:
    """A refusal the engine could not give itself (it failed on the event)."""
    return verdict_document(Verdict(event, module, False, reason), [], "")
