"""What each dashboard page shows, cut from a `FleetView` (pure functions, JSON-ready).

    module_list(view)                          the modules page: one row per module
    module_page(view, name)                    one module: stages with their clocks, decisions
    stage_clusters(view, name, query)          the clusters of one module, filtered, one page
    cluster_list(view, query)                  the clusters page, filtered, one page
    cluster_page(view, name)                   one cluster: assemblages, per-module state
    dead_letter_page(view, query)              rejected inputs, newest first, one page

Lists over clusters are always one `Page` of a filtered list: the server does the filtering
and the browser holds at most `MAX_PAGE_SIZE` rows, whatever the fleet's size.

Clocks: a stage's soak ends `minSuccessTime` after the engine decided `stage-succeeded`
(the decision's time is the engine's Tick time), and a gated stage awaits approval from the
end of the previous stage's soak. The browser counts down (and up) from these instants.

What holds a stage (issue 11): its maintenance `window` (open / when it next opens, from the
module status), its health gates as `gateStates` (pass / fail / pending; a passing gate is
soaked at `soakedAt` = passing since + the stage's soak), its `blocked` count with the
module's `dependsOn`. A cluster's `lease`: left the fleet, or the latest heartbeat's time
and `expiresAt`; the browser shows its age and whether it expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from projections.dashboard.fleet import Document, FleetView
from rollout.api.manifests import parse_duration

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
DECISIONS_SHOWN = 50
TARGET_STATES = ("pending", "updating", "succeeded", "failed", "not_ready", "pinned", "blocked")


@dataclass(frozen=True)
class Query:
    """A filter and a page: `text` matches names (and labels on the clusters page)."""

    text: str = ""
    state: str = ""
    stage: str = ""
    offset: int = 0
    limit: int = DEFAULT_PAGE_SIZE

    @classmethod
    def parse(cls, params: dict[str, str]) -> Query:
        """From URL parameters; a bad value is a ValueError naming the parameter."""
        offset = _integer(params, "offset", 0)
        limit = _integer(params, "limit", DEFAULT_PAGE_SIZE)
        if offset < 0:
            raise ValueError(f"offset {offset}: must be 0 or more")
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ValueError(f"limit {limit}: must be between 1 and {MAX_PAGE_SIZE}")
        state = params.get("state", "")
        if state and state not in TARGET_STATES:
            raise ValueError(f"state {state!r}: expected one of {', '.join(TARGET_STATES)}")
        return cls(params.get("q", "").strip().lower(), state, params.get("stage", ""), offset, limit)


def _integer(params: dict[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} {raw[:40]!r}: expected a whole number") from None


def _page(items: list[Document], query: Query) -> Document:
    return {
        "total": len(items),
        "offset": query.offset,
        "limit": query.limit,
        "items": items[query.offset : query.offset + query.limit],
    }


def module_row(status: Document) -> Document:
    stages = status.get("stages") or []
    return {
        "name": status.get("module"),
        "kind": status.get("kind"),
        "phase": status.get("phase"),
        "paused": bool(status.get("paused")),
        "generation": status.get("generation"),
        "targetRevision": status.get("targetRevision"),
        "stableRevision": status.get("stableRevision"),
        "currentStage": status.get("currentStage"),
        "members": sum(s["counts"]["members"] for s in stages),
        "succeeded": sum(s["counts"]["succeeded"] for s in stages),
        "stages": [{"name": s["name"], "state": s["state"], "counts": s["counts"]} for s in stages],
        "reason": status.get("reason") or status.get("lastDecision"),
    }


def module_list(view: FleetView) -> list[Document]:
    return [module_row(view.modules[name]) for name in sorted(view.modules)]


def engine_time(at: Any) -> float | None:
    """A time the engine wrote (a decision's `at`, a status' `observedAt`, a gate's
    `passingSince`): the engine's clock, from Ticks — 0 before the first Tick, when the
    engine knows no time yet. None then (and when absent): not a moment to show or count from."""
    return float(at) if isinstance(at, int | float) and at > 0 else None


def _succeeded_at(stage: Document, decisions: list[Document]) -> float | None:
    """When the engine last decided `stage` succeeded, plus its soak: the stage is passed."""
    marker = f"stage {stage['name']} succeeded"
    for decision in reversed(decisions):
        if decision.get("action") == "stage-succeeded" and str(decision.get("reason", "")).startswith(marker):
            at = engine_time(decision.get("at"))
            if at is None:
                return None  # decided before the engine's first tick: no soak clock to show
            return at + (parse_duration(stage["minSuccessTime"]) if stage.get("minSuccessTime") else 0.0)
    return None


def _stage_clocks(stages: list[Document], index: int, decisions: list[Document]) -> Document:
    """`soakEndsAt` of a soaking stage; `awaitingApprovalSince` of a gated stage (the moment
    the stage before it was passed). Epoch seconds; empty when not known."""
    stage = stages[index]
    if stage["state"] == "Soaking":
        ends = _succeeded_at(stage, decisions)
        return {"soakEndsAt": ends} if ends is not None else {}
    if stage["state"] == "AwaitingApproval" and index > 0:
        since = _succeeded_at(stages[index - 1], decisions)
        return {"awaitingApprovalSince": since} if since is not None else {}
    return {}


def module_page(view: FleetView, name: str) -> Document | None:
    """The module page, or None when the module has neither a status nor decisions."""
    status = view.modules.get(name)
    decisions = list(view.decisions.get(name, ()))
    if status is None and not decisions:
        return None
    shown = (status or {}).get("stages", [])
    stages = [
        {**stage, **_stage_clocks(shown, index, decisions), **_stage_holds(stage)} for index, stage in enumerate(shown)
    ]
    targets = view.targets.get(name, {})
    failed = sorted((t for t in targets.values() if t.get("state") == "failed"), key=lambda t: t["cluster"])
    return {
        "name": name,
        "status": {**status, "stages": stages} if status is not None else None,
        "row": module_row(status) if status is not None else None,
        "failed": [_target_row(t) for t in failed[:20]],
        "failedTotal": len(failed),
        "decisions": decisions[-DECISIONS_SHOWN:][::-1],
        "valuesRefused": values_refused(decisions),
    }


def gate_state(gate: Document, soak_seconds: float) -> Document:
    """One gate of a stage as shown: `pass` / `fail` / `pending` (no result yet, or
    inconclusive), and when a passing gate has passed for the stage's soak."""
    passed, since = gate.get("passed"), engine_time(gate.get("passingSince"))
    state = "pass" if passed is True else "fail" if passed is False else "pending"
    soaked = since + soak_seconds if state == "pass" and since is not None else None
    return {
        "name": gate.get("name"),
        "kind": "prometheus" if gate.get("prometheus") else "webhook",
        "state": state,
        "passingSince": since if state == "pass" else None,
        "soakedAt": soaked,
        "message": gate.get("message") or "",
    }


def _stage_holds(stage: Document) -> Document:
    """What may hold a stage: its gates' states and its blocked count (window: as it is)."""
    soak = parse_duration(stage["minSuccessTime"]) if stage.get("minSuccessTime") else 0.0
    gates = stage.get("gates") or []
    return {
        "gateStates": [gate_state(g, soak) for g in gates if isinstance(g, dict)],
        "blocked": int((stage.get("counts") or {}).get("blocked", 0)),
    }


def values_refused(decisions: list[Document]) -> list[Document]:
    """The latest `values-refused` decision per cluster and path (a readOnly Helm value kept)."""
    latest: dict[tuple[str, str], Document] = {}
    for decision in decisions:
        if decision.get("action") == "values-refused" and isinstance(decision.get("reason"), str):
            path = decision["reason"].partition(" is readOnly")[0].rpartition(" ")[2]
            latest[(str(decision.get("cluster")), path)] = {
                "cluster": decision.get("cluster"),
                "reason": decision["reason"],
            }
    return [latest[key] for key in sorted(latest)]


def _target_row(target: Document) -> Document:
    return {
        "cluster": target.get("cluster"),
        "stage": target.get("stage"),
        "state": target.get("state"),
        "revision": target.get("revision"),
        "ready": target.get("ready"),
        "pinned": target.get("pinned"),
        "message": target.get("message"),
    }


def stage_clusters(view: FleetView, name: str, query: Query) -> Document:
    """The clusters of module `name` (in `query.stage` if given), in that stage, by name."""
    rows = []
    for cluster in sorted(view.targets.get(name, {})):
        target = view.targets[name][cluster]
        if query.stage and target.get("stage") != query.stage:
            continue
        if query.state and target.get("state") != query.state:
            continue
        if query.text and query.text not in cluster.lower():
            continue
        rows.append(_target_row(target))
    return _page(rows, query)


def _ready(manifest: Document) -> bool:
    status = manifest.get("status") or {}
    return bool(status.get("controlPlaneReady") and status.get("kubeconfigSecret"))


def _labels(manifest: Document) -> dict[str, str]:
    labels = (manifest.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def lease(view: FleetView, name: str) -> Document:
    """A cluster's lease: `left` after `rollout cluster leave`; the latest heartbeat's `at`,
    `holder`, `leaseSeconds` and `expiresAt` (None: no applier ever heartbeated for it)."""
    beat = view.heartbeats.get(name)
    shown: Document = {"left": name in view.left, "heartbeatAt": None, "expiresAt": None}
    if beat is not None:
        shown.update(
            heartbeatAt=beat["at"],
            expiresAt=beat["at"] + beat["leaseSeconds"],
            holder=beat.get("holder"),
            leaseSeconds=beat["leaseSeconds"],
        )
    return shown


def cluster_list(view: FleetView, query: Query) -> Document:
    """Known clusters (observed, or targeted by a module), filtered by name or label text."""
    rows = []
    for name in sorted(view.clusters.keys() | view.targets_by_cluster.keys()):
        manifest = view.clusters.get(name, {})
        labels = _labels(manifest)
        if query.text and query.text not in name.lower():
            if not any(query.text in f"{k}={v}".lower() for k, v in labels.items()):
                continue
        states = [t.get("state") for t in view.targets_by_cluster.get(name, {}).values()]
        if query.state and query.state not in states:
            continue
        rows.append(
            {
                "name": name,
                "namespace": (manifest.get("metadata") or {}).get("namespace"),
                "observed": name in view.clusters,
                "ready": _ready(manifest),
                "labels": labels,
                "states": {state: states.count(state) for state in TARGET_STATES if state in states},
                "lease": lease(view, name),
            }
        )
    return _page(rows, query)


def cluster_page(view: FleetView, name: str) -> Document | None:
    """One cluster: its observed manifest, assemblages and state in every module; None when
    the dashboard has seen nothing of it."""
    manifest = view.clusters.get(name)
    modules = view.targets_by_cluster.get(name, {})
    remote, proxy = view.remote.get(name), view.proxy.get(name)
    if manifest is None and not modules and remote is None and proxy is None:
        return None
    return {
        "name": name,
        "cluster": manifest,
        "ready": _ready(manifest or {}),
        "labels": _labels(manifest or {}),
        "lease": lease(view, name),
        "modules": [{"module": module, **_target_row(modules[module])} for module in sorted(modules)],
        "remote": remote,
        "proxy": proxy,
    }


def dead_letter_page(view: FleetView, query: Query) -> Document:
    letters: list[Document] = []
    for letter in reversed(view.dead_letters):
        summary = {key: value for key, value in letter.items() if key not in ("value", "valueBase64")}
        if query.text and query.text not in _searchable(summary):
            continue
        letters.append(summary)
    return _page(letters, query)


def _searchable(letter: Document) -> str:
    return " ".join(str(letter.get(k) or "") for k in ("reason", "stage", "topic", "key")).lower()


def verdict(view: FleetView, event_id: str) -> Document:
    """The engine's verdict on event `event_id`: refused / accepted, or pending (none yet)."""
    found: Any = view.verdicts.get(event_id)
    return {"eventId": event_id, **(found or {"state": "pending"})}
