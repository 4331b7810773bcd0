"""What each dashboard page shows, cut from a `FleetView` (pure functions, JSON-ready).

    module_list(view)                          the modules page: one row per module
    module_page(view, name)                    one module: stages with their clocks, decisions
    stage_clusters(view, name, query)          the clusters of one module, filtered, one page
    cluster_list(view, query)                  the clusters page, filtered, one page
    cluster_page(view, name)                   one cluster: assemblages, per-module state
    dead_letter_page(view, query)              rejected inputs, newest first, one page

Lists over clusters are always one `Page` of a filtered list: the server does the filtering
and the browser holds at most `MAX_PAGE_SIZE` rows, whatever the fleet's size.

The pages read the module-status and rollout-target documents as the models the worker
writes them with (rollout/wire/status.py) and answer JSON with the documents' own keys
(`as_json`), so the browser reads what `rollout status -o json` prints.

Clocks: a stage's soak ends `minSuccessTime` after the engine decided `stage-succeeded` for
it (the decision's `stage`; its time is the engine's Tick time), and a gated stage awaits
approval from the end of the previous stage's soak (in a stage graph, from the latest of its
counting upstream edges: the upstream's pass plus the edge's soak). The browser counts down
(and up) from these instants.

What holds a stage (issue 11): its maintenance `window` (open / when it next opens, from the
module status), its health gates as `gateStates` (pass / fail / pending / inconclusive, an
analysis's counts, dry run; a passing gate is
soaked at `soakedAt` = passing since + the stage's soak), its `blocked` count with the
module's `dependsOn`, its `held` count (owners' holds). The module's `run`: its members
fixed at its start and who it went on without, and why (issue 23). A cluster's `lease`:
left the fleet, or the latest heartbeat's time and `expiresAt`; the browser shows its age
and whether it expired. A stage's `waves` (the open wave, when the next starts: the browser
counts down to `nextWave`) and the members of the open wave, from its `wave-started`
decision (`waveMembers`). A stage of a stage graph: its `after` edges (passed, counting,
soaking until when), `quorum` and `needed`, as the module status has them
(rollout/engine/stage_graph.py).

A Release member's page carries its `release` (rollout/wire/status.py `ReleaseStatus`):
the release's phase, each member's phase and revisions, how many clusters are done and the
first few that are not, with where each member stands there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from projections.dashboard.fleet import Document, FleetView
from rollout.api.manifests import parse_duration
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decision_actions import DecisionAction
from rollout.wire.decision_reasons import WaveStarted
from rollout.wire.decisions import DecisionDocument
from rollout.wire.status import (
    TARGET_STATES,
    ModuleStatus,
    ReleaseStatus,
    StageGate,
    StageStatus,
    TargetStatus,
    run_members,
)

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
DECISIONS_SHOWN = 50
RUN_EXCEPTIONS_SHOWN = 50
RUN_EXCEPTIONS = (
    "AwaitingReturn",
    "Failed",
    "SkippedOffline",
    "Held",
    "DeferredByWindow",
    "Left",
    "Pinned",
    "DeferredToNextRun",
    "Excluded",
)
"""The run states the module page lists by name, with why: the offline members a stage waits
for, the failed ones (a report's message, or offline past `offline.wait`), the members the
run went on without and the late joiners it kept out."""


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


def module_row(status: ModuleStatus) -> Document:
    """One row of the modules page: any module-status shape (a pending one has no stages)."""
    return {
        "name": status.module,
        "kind": status.kind,
        "phase": status.phase,
        "paused": status.paused,
        "generation": status.generation,
        "targetRevision": status.target_revision,
        "stableRevision": status.stable_revision,
        "currentStage": status.current_stage,
        "members": status.members,
        "succeeded": status.succeeded,
        "stages": [{"name": s.name, "state": s.state, "counts": s.counts.model_dump()} for s in status.stages],
        "reason": status.reason or status.last_decision or None,  # pending: why; else the latest decision
    }


def module_list(view: FleetView) -> list[Document]:
    return [module_row(view.modules[name]) for name in sorted(view.modules)]


def engine_time(at: Any) -> float | None:
    """A time the engine wrote (a decision's `at`, a status' `observedAt`, a gate's
    `passingSince`): the engine's clock, from Ticks — 0 before the first Tick, when the
    engine knows no time yet. None then (and when absent): not a moment to show or count from."""
    return float(at) if isinstance(at, int | float) and at > 0 else None


def _soak_seconds(stage: StageStatus) -> float:
    return parse_duration(stage.min_success_time) if stage.min_success_time else 0.0


def _succeeded_at(stage: StageStatus, decisions: list[DecisionDocument]) -> float | None:
    """When the engine last decided `stage` succeeded, plus its soak: the stage is passed."""
    for decision in reversed(decisions):
        if decision.action == DecisionAction.STAGE_SUCCEEDED and decision.stage == stage.name:
            at = engine_time(decision.at)
            if at is None:
                return None  # decided before the engine's first tick: no soak clock to show
            return at + _soak_seconds(stage)
    return None


def _stage_clocks(stages: list[StageStatus], index: int, decisions: list[DecisionDocument]) -> Document:
    """`soakEndsAt` of a soaking stage; `awaitingApprovalSince` of a gated stage (the moment
    the stage before it was passed). Epoch seconds; empty when not known."""
    stage = stages[index]
    if stage.state == "Soaking":
        ends = _succeeded_at(stage, decisions)
        return {"soakEndsAt": ends} if ends is not None else {}
    if stage.state == "AwaitingApproval" and stage.after is not None:  # a stage graph: its last edge counting
        by_name = {s.name: s for s in stages}
        counted = [
            (_succeeded_at(by_name[edge.stage], decisions), parse_duration(edge.soak) if edge.soak else 0.0)
            for edge in stage.after
            if edge.counts and edge.stage in by_name
        ]
        times = [at + soak for at, soak in counted if at is not None]
        return {"awaitingApprovalSince": max(times)} if times else {}
    if stage.state == "AwaitingApproval" and index > 0:
        since = _succeeded_at(stages[index - 1], decisions)
        return {"awaitingApprovalSince": since} if since is not None else {}
    return {}


def module_page(view: FleetView, name: str) -> Document | None:
    """The module page, or None when the module has neither a status nor decisions. The
    status is the module-status document (any shape), each stage with its clocks and holds."""
    status = view.modules.get(name)
    decisions = list(view.decisions.get(name, ()))
    if status is None and not decisions:
        return None
    shown = status.stages if status is not None else []
    stages = [
        {
            **_stage_json(stage),
            **_stage_clocks(shown, index, decisions),
            **_stage_holds(stage),
            **_wave_members(stage, decisions),
        }
        for index, stage in enumerate(shown)
    ]
    targets = view.targets.get(name, {})
    failed = sorted((t for t in targets.values() if t.state == "failed"), key=lambda t: t.cluster)
    return {
        "name": name,
        "status": {**status.as_json(), "stages": stages} if status is not None else None,
        "row": module_row(status) if status is not None else None,
        "failed": [_target_row(t) for t in failed[:20]],
        "failedTotal": len(failed),
        "decisions": [decision.as_json() for decision in decisions[-DECISIONS_SHOWN:][::-1]],
        "valuesRefused": values_refused(decisions),
        "run": run_section(status, list(targets.values())) if status is not None and status.run is not None else None,
        "release": release_view(view, status) if status is not None else None,
    }


def run_section(status: ModuleStatus, targets: list[TargetStatus]) -> Document:
    """The module's current run (rollout/engine/runs.py): its fixed members, and who it went
    on without — skipped offline, held, deferred by a window, left, pinned, and the late
    joiners it kept out (deferred to the next run, excluded) — and why, as
    `rollout status` lists them (the same `run_members`), at most RUN_EXCEPTIONS_SHOWN."""
    assert status.run is not None
    run = status.run
    members = [m for m in run_members(status, targets) if m.state in RUN_EXCEPTIONS]
    members.sort(key=lambda m: (RUN_EXCEPTIONS.index(m.state), m.cluster))
    return {
        "number": run.number,
        "mode": run.mode,
        "generation": run.generation,
        "startedAt": engine_time(run.started_at),
        "adopted": run.adopted,
        "members": sum(stage.members for stage in run.stages.values()),
        "left": run.left,
        "joiners": run.joiners,  # late joiners of the run before it took in (lateJoiners)
        "followUp": run.follow_up,  # started for the NextRun joiners of the run before
        "exceptions": [member.model_dump(mode="json") for member in members[:RUN_EXCEPTIONS_SHOWN]],
        "exceptionsTotal": len(members),
    }


RELEASE_CLUSTERS_SHOWN = 20


def release_view(view: FleetView, status: ModuleStatus) -> Document | None:
    """A Release member's release (None: not in one): its phase, every member's phase and
    revisions, how many of its clusters are done (every member succeeded there) and the
    first `RELEASE_CLUSTERS_SHOWN` that are not, with each member's revision and state; and
    how it is auto-promoted as a unit (None: it is not)."""
    if status.release is None:
        return None
    members = status.release.members
    targets = [target for member in members for target in view.targets.get(member, {}).values()]
    release = ReleaseStatus.of(status.release, view.modules, targets)
    waiting = [place for place in release.clusters if not place.done]
    return {
        "name": release.name,
        "leader": status.release.leader,  # where the release's stages are approved for every member
        "phase": release.phase,
        "members": [member.model_dump(mode="json", by_alias=True) for member in release.members],
        "clusters": len(release.clusters),
        "done": len(release.clusters) - len(waiting),
        "notDone": [
            {
                "cluster": place.cluster,
                "members": {m: {"revision": t.revision, "state": t.state} for m, t in sorted(place.members.items())},
            }
            for place in waiting[:RELEASE_CLUSTERS_SHOWN]
        ],
        # auto-promoted as a unit: as its leader says it (the hold, the combination available)
        "autoPromote": release.auto_promote.model_dump(mode="json", by_alias=True)
        if release.auto_promote is not None
        else None,
    }


def _stage_json(stage: StageStatus) -> Document:
    """A stage as the module-status document has it (its JSON keys)."""
    return stage.model_dump(mode="json", by_alias=True, exclude_unset=True)


ANALYSIS_STATES = {"Successful": "pass", "Failed": "fail", "Inconclusive": "inconclusive", "Running": "pending"}


def gate_state(gate: StageGate, soak_seconds: float) -> Document:
    """One gate of a stage as shown: `pass` / `fail` / `pending` (no result yet, or
    inconclusive), and when a passing gate has passed for the stage's soak. A gate with
    `count` (an analysis): its phase as the state (`inconclusive`: it paused the module)
    and its run's counts; `dryRun`: it holds nothing."""
    since = engine_time(gate.passing_since)
    state = "pass" if gate.passed is True else "fail" if gate.passed is False else "pending"
    analysis: Document | None = None
    if gate.count is not None:
        a = gate.analysis
        state = ANALYSIS_STATES.get(a.phase, "pending") if a is not None else "pending"
        analysis = {
            "count": gate.count,
            "interval": gate.interval,
            "failureLimit": gate.failure_limit or 0,
            "inconclusiveLimit": gate.inconclusive_limit or 0,
            "run": a.run if a else 1,
            "measured": a.measured if a else 0,
            "successful": a.successful if a else 0,
            "failed": a.failed if a else 0,
            "inconclusive": a.inconclusive if a else 0,
            "phase": a.phase if a else "NotMeasured",
        }
    soaked = since + soak_seconds if state == "pass" and since is not None and analysis is None else None
    return {
        "name": gate.name,
        "kind": "prometheus" if gate.prometheus is not None else "compare" if gate.compare is not None else "webhook",
        "state": state,
        "passingSince": since if state == "pass" else None,
        "soakedAt": soaked,
        "message": gate.message,
        "dryRun": gate.dry_run,
        "analysis": analysis,
    }


def _stage_holds(stage: StageStatus) -> Document:
    """What may hold a stage: its gates' states and its blocked count (window: as it is)."""
    soak = _soak_seconds(stage)
    return {"gateStates": [gate_state(g, soak) for g in stage.gates], "blocked": stage.counts.blocked}


def _wave_members(stage: StageStatus, decisions: list[DecisionDocument]) -> Document:
    """`waveMembers` of a stage with waves: its latest `wave-started` decision's wave and the
    members it named (rollout/engine/waves.py), in moving order — for the open wave."""
    if stage.waves is None or stage.waves.current is None:
        return {}
    for decision in reversed(decisions):
        because = decision.because
        if isinstance(because, WaveStarted) and because.stage == stage.name:
            if because.wave != stage.waves.current:
                return {}  # the open wave's decision is older than the decisions kept here
            more = because.members - len(because.clusters)
            return {"waveMembers": {"wave": because.wave, "clusters": because.clusters, "more": more}}
    return {}


def values_refused(decisions: list[DecisionDocument]) -> list[Document]:
    """The latest `values-refused` decision per cluster and path (a readOnly Helm value
    kept): its cluster, path (None: a record older than decisions naming it, which counts
    alone) and sentence."""
    latest: dict[tuple[str, str], Document] = {}
    for decision in decisions:
        if decision.action == DecisionAction.VALUES_REFUSED:
            path = decision.refused_path
            latest[(str(decision.cluster), path or decision.reason)] = {
                "cluster": decision.cluster,
                "path": path,
                "reason": decision.reason,
            }
    return [latest[key] for key in sorted(latest)]


def _target_row(target: TargetStatus) -> Document:
    return {
        "cluster": target.cluster,
        "stage": target.stage,
        "state": target.state,
        "revision": target.revision,
        "ready": target.ready,
        "pinned": target.pinned,
        "message": target.message,
    }


def stage_clusters(view: FleetView, name: str, query: Query) -> Document:
    """The clusters of module `name` (in `query.stage` if given), in that stage, by name."""
    rows = []
    for cluster in sorted(view.targets.get(name, {})):
        target = view.targets[name][cluster]
        if query.stage and target.stage != query.stage:
            continue
        if query.state and target.state != query.state:
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
        states = [t.state for t in view.targets_by_cluster.get(name, {}).values()]
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
    """Rejected inputs, newest first: each dead-letter document without its payload, with
    `at`, its record's time."""
    letters: list[Document] = []
    for received in reversed(view.dead_letters):
        letter = received.letter
        if query.text and query.text not in _searchable(letter):
            continue
        summary = {key: value for key, value in letter.as_json().items() if key not in ("value", "valueBase64")}
        letters.append({"at": received.at, **summary})
    return _page(letters, query)


def _searchable(letter: DeadLetter) -> str:
    return " ".join(part or "" for part in (letter.reason, letter.stage, letter.topic, letter.key)).lower()


def verdict(view: FleetView, event_id: str) -> Document:
    """The engine's verdict on event `event_id`: refused / accepted, or pending (none yet)."""
    found: Any = view.verdicts.get(event_id)
    return {"eventId": event_id, **(found or {"state": "pending"})}
