"""The status documents `rollout status` shows, built from the engine's records.

    module_view(record, now)   -> module-status (compacted: O(stages), not O(clusters))
    target_view(record, target) -> target-status, one per (module, cluster)
    held_view(...)             -> the module-status of a module with intents held back
                                  for causal order (causal.py)

Pure functions: the engine calls them whenever it stores a record, and puts the result in
`Outcome.module_status` / `Outcome.target_status`.
"""

from __future__ import annotations

from typing import Any

from rollout.api.gates import gate_key
from rollout.api.manifests import Stage
from rollout.api.windows import iso, stage_window_state, stage_windows
from rollout.engine.state import CATEGORIES, UNSTAGED, ModuleRecord, StageCounts, Target
from rollout.engine.strategy import resolve_count, stages_of

NO_COUNTS = StageCounts()  # read only: the counts of a stage nobody is in yet


def module_view(record: ModuleRecord, now: float) -> dict[str, Any]:
    """The compacted module-status document (size: O(stages), not O(clusters))."""
    stages = stages_of(record)
    views = []
    for index, stage in enumerate(stages):
        counts = record.counts.get(stage.name, NO_COUNTS)
        members = counts.members
        if index < record.stage_index or (record.mode == "rollout" and record.stable == record.target):
            state = "Succeeded"
        elif index == record.stage_index:
            state = {"Soaking": "Soaking", "AwaitingApproval": "AwaitingApproval"}.get(
                record.phase, "Running" if record.stage_started else "Pending"
            )
        else:
            state = "Pending"
        window = window_view(record, stage, now)
        views.append(
            {
                **({"window": window} if window is not None else {}),
                **({"gates": gates_view(record, stage)} if stage.gates else {}),
                "name": stage.name,
                "state": state,
                "maxConcurrency": resolve_count(stage.max_concurrency, total=members, default=max(members, 1)),
                "maxFailures": resolve_count(stage.max_failures, total=members, default=0),
                "minSuccessTime": stage.min_success_time,
                "requireApproval": stage.require_approval,
                "approved": stage.name in record.approvals,
                "counts": {c: getattr(counts, c) for c in ("members", *CATEGORIES)},
            }
        )
    unstaged = record.counts.get(UNSTAGED, NO_COUNTS)
    return {
        "module": record.name,
        "kind": record.kind,
        "namespace": record.namespace,
        "generation": record.target,
        "targetRevision": record.revisions[record.target].revision,
        "stableRevision": record.revisions[record.stable].revision
        if record.stable is not None and record.stable in record.revisions
        else None,
        "phase": record.phase,
        "mode": record.mode,
        "paused": record.paused,
        "currentStage": stages[min(record.stage_index, len(stages) - 1)].name,
        "stages": views,
        "unstaged": {c: getattr(unstaged, c) for c in ("members", *CATEGORIES)},
        "pinned": record.pinned,
        "dependsOn": list(record.spec.depends_on),
        "deleting": record.deleting is not None,  # held until its dependents are deleted
        # dependencies applied with it whose partition has not said it folded that apply
        # yet: none of their readiness counts until then (dependencies.py)
        **({"awaiting": sorted(record.awaiting)} if record.awaiting else {}),
        "lastDecision": record.last_reason,
        # why a module whose stages all passed is not Complete: members not ready or waiting
        **({"waiting": waiting} if record.stable == record.target and (waiting := waiting_reason(record, now)) else {}),
        "observedAt": now,
        # the rule of its namespace's ModuleRestriction it breaks (restriction_rules.py)
        **({"restricted": record.restricted} if record.restricted is not None else {}),
    }


def outstanding_members(record: ModuleRecord) -> int:
    """Staged members not running the target: pending (waiting for a window, say),
    updating, blocked, or not ready — the members a Complete module may not have."""
    return sum(
        counts.pending + counts.updating + counts.blocked + counts.not_ready
        for name, counts in record.counts.items()
        if name != UNSTAGED
    )


def waiting_reason(record: ModuleRecord, now: float) -> str:
    """Why a module whose stages have passed is not Complete ('' : nothing outstanding),
    e.g. "2 clusters not ready; stage wave waits for a maintenance window"."""
    if record.mode != "rollout" or not outstanding_members(record):
        return ""
    staged = [counts for name, counts in record.counts.items() if name != UNSTAGED]
    reasons: list[str] = []
    not_ready = sum(counts.not_ready for counts in staged)
    if not_ready:
        reasons.append(f"{not_ready} cluster{'s' if not_ready != 1 else ''} not ready")
    moving = sum(counts.pending + counts.updating + counts.blocked for counts in staged)
    if moving:
        reasons.append(f"{moving} cluster{'s' if moving != 1 else ''} not on the target yet")
    for stage in stages_of(record):
        if stage.name in record.window_waits:
            state = stage_window_state(record.spec, stage, now) if now > 0 else None
            opens = f", next opens at {iso(state.next_open)}" if state is not None and state.next_open else ""
            reasons.append(f"stage {stage.name} waits for a maintenance window{opens}")
    return "; ".join(reasons)


def window_view(record: ModuleRecord, stage: Stage, now: float) -> dict[str, Any] | None:
    """A stage's maintenance windows at `now` (None: it has none): open, when the next
    opens or the current closes (seconds since the epoch, and ISO 8601 in UTC)."""
    windows = stage_windows(record.spec, stage)
    state = stage_window_state(record.spec, stage, now)
    if state is None:
        return None
    return {
        "open": state.open,
        "nextOpen": state.next_open,
        "nextOpenAt": iso(state.next_open),
        "closesAt": iso(state.closes_at),
        "windows": [w.model_dump(by_alias=True) for w in windows],
    }


def gates_view(record: ModuleRecord, stage: Stage) -> list[dict[str, Any]]:
    """A stage's health gates (gates.py): each one's definition, for the gate runner, and
    its latest result for the current target (passed None: none yet, or inconclusive)."""
    views = []
    for gate in stage.gates:
        state = record.gates.get(gate_key(stage.name, gate.name))
        current = state if state is not None and state.generation == record.target else None
        views.append(
            {
                **gate.model_dump(by_alias=True, exclude_none=True),
                "passed": current.passed if current else None,
                "passingSince": current.since if current else None,
                "message": current.message if current else "",
            }
        )
    return views


def target_view(record: ModuleRecord, target: Target) -> dict[str, Any]:
    """The target-status document of one (module, cluster)."""
    revision = record.revisions.get(target.assigned) if target.assigned is not None else None
    return {
        "module": target.module,
        "cluster": target.cluster,
        "stage": target.stage,
        "state": target.category,
        "ready": target.ready,
        "pinned": target.pinned,
        "revision": revision.revision if revision else None,
        "generation": target.assigned,
        "status": target.status,
        "message": blocked_message(record) if target.category == "blocked" else target.status_message,
        "updatingSince": target.updating_since,
    }


def blocked_message(record: ModuleRecord) -> str:
    """Why a blocked member does not move: the dependencies it waits for (dependencies.py)."""
    return f"waiting for {', '.join(record.spec.depends_on)}: not on its target and succeeded here"


def format_positions(fleet: dict[int, int]) -> str:
    return ", ".join(f"partition {p} offset {o}" for p, o in sorted(fleet.items())) or "nothing"


def held_view(
    name: str, view: dict[str, Any] | None, held_intents: int, waiting: dict[int, int], now: float
) -> dict[str, Any]:
    """`view` (None: the module does not exist yet) with what the module holds back."""
    held = {
        "intents": held_intents,
        "waitingFor": {str(p): o for p, o in sorted(waiting.items())},
        "reason": f"waiting for cluster observations up to {format_positions(waiting)}",
    }
    if view is None:
        return {"module": name, "phase": "Pending", "reason": held["reason"], "held": held, "observedAt": now}
    return {**view, "held": held}
