"""Random scenarios for the property tests (test_properties.py): what Hypothesis draws — a
fleet, one or two modules with random strategies, a sequence of operations — and `World`,
which turns each operation into the engine's events; `fixed_scenario`, a busy one built
without Hypothesis."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from rollout.api.manifests import CLUSTER_SCOPE
from rollout.engine.core import stages_of
from rollout.wire.events import (
    FreezeCalendarDeleted,
    HolderClaims,
    HolderHeartbeat,
    PromotionObserved,
    RestrictionApplied,
    RestrictionDeleted,
    claim_chunk,
)
from rollout.wire.status import ModuleStatus
from tests.rollout.builders import (
    GIT_URL,
    Fleet,
    applied,
    calendar_applied,
    calendar_break_glass,
    cluster,
    cluster_command,
    command,
    deleted,
    freeze_calendar,
    gate_result,
    heartbeat,
    heartbeats,
    module,
    next_id,
    observed,
    promotion,
    release_observed,
    removed,
    reported,
    restriction,
    stage,
    tick,
)

ORDER = "rollout.dev/order"
RINGS = ["canary", "wave", None]
STAGE_SELECTORS = [{"ring": "canary"}, {"ring": "wave"}, {"ring": "late"}]
MODULES = ["app", "base"]

# --- what to draw -------------------------------------------------------------------------

# maintenance windows: open 50 minutes of every hour, but for 5 minutes at half past —
# ticks 10 minutes apart (`finish`) always reach an open moment within the hour
# a health gate: its results are drawn as operations ("gate"), and `finish` passes it
GATE = {"name": "errors", "webhook": {"url": "http://gates.test/errors"}}
# ... or the same gate as an analysis (gate_results.py), beside a dry-run analysis that
# holds nothing: measurements drawn as the next one, a repeat, or a run not started
ANALYSIS = {**GATE, "count": 2, "inconclusiveLimit": 1}
DRY_RUN = {"name": "shadow", "webhook": {"url": "http://gates.test/shadow"}, "count": 2, "dryRun": True}
GATE_CHOICES = [[GATE], [ANALYSIS], [ANALYSIS, DRY_RUN], [GATE, DRY_RUN]]
HOURLY = {"schedule": "0 * * * *", "duration": "50m"}
DENY = {"kind": "deny", "schedule": "30 * * * *", "duration": "5m"}

limits = st.one_of(st.none(), st.integers(1, 5), st.sampled_from(["1%", "10%", "25%", "50%", "100%"]))
# randomized waves (rollout/engine/waves.py): a seed given or derived, delays shorter than
# the ticks of `finish`, so that every wave starts within it
waves = st.fixed_dictionaries(
    {"size": st.one_of(st.integers(1, 4), st.sampled_from(["10%", "34%", "100%"]))},
    optional={
        "order": st.sampled_from(["Random", "Sorted"]),
        "seed": st.integers(0, 2**63 - 1),
        "delay": st.sampled_from(["0s", "1m", "5m"]),
    },
)
failure_limits = st.one_of(st.none(), st.integers(0, 3), st.sampled_from(["0%", "10%", "50%"]))


@st.composite
def strategies(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    stages = []
    for index in range(count):
        last = index == count - 1
        labels = None if last and draw(st.booleans()) else STAGE_SELECTORS[index]
        drawn = stage(
            f"s{index}",
            labels,
            concurrency=draw(limits),
            failures=draw(failure_limits),
            soak=draw(st.sampled_from([None, None, "30s", "5m"])),
            approval=draw(st.booleans()) and draw(st.booleans()),
        )
        if drawn.get("requireApproval") and index % 2 == 1:  # no draw of its own: the examples stay as they were
            drawn = {key: value for key, value in drawn.items() if key != "requireApproval"} | {"approval": TWO_SRES}
        drawn = {**drawn, "windows": [HOURLY]} if draw(st.integers(0, 5)) == 0 else drawn
        gates = draw(st.sampled_from(GATE_CHOICES)) if draw(st.integers(0, 3)) == 0 else None
        drawn = {**drawn, "gates": gates} if gates else drawn
        stages.append({**drawn, "waves": draw(waves)} if draw(st.integers(0, 2)) == 0 else drawn)
    return {
        "windows": draw(st.sampled_from([None, None, None, [HOURLY], [HOURLY, DENY]])),
        "stages": stages,
        "on_failure": draw(st.sampled_from([None, "Halt", "Rollback"])),
        "deadline": draw(st.sampled_from([None, None, "2m", "10m"])),
        "sorting": draw(st.sampled_from([None, ORDER])),
    }


# stage graphs (rollout/engine/stage_graph.py): every strategy of a scenario shaped alike —
# each stage a root, a fan out of the first stage, or the last stage joining all the others
# with a quorum — with a soak on the first edge of a stage; None: the chain it was
graph_shapes = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "shape": st.sampled_from(["fan", "roots", "join"]),
            "quorum": st.sampled_from([None, "All", "OneOf", "50%"]),
            "soak": st.sampled_from([None, "1m", "5m"]),
        }
    ),
)


def shaped(stages: list[dict[str, Any]], graph: dict[str, Any] | None) -> list[dict[str, Any]]:
    """`stages` with the `after` edges (and quorum) of the drawn graph shape."""
    if graph is None:
        return stages
    names = [spec["name"] for spec in stages]
    result = []
    for index, spec in enumerate(stages):
        if graph["shape"] == "roots":
            upstreams: list[str] = []
        elif graph["shape"] == "fan":
            upstreams = names[:1] if index else []
        else:
            upstreams = names[:index] if index == len(stages) - 1 else []
        soak = {"soak": graph["soak"]} if graph["soak"] else {}
        edges = [{"stage": name, **(soak if position == 0 else {})} for position, name in enumerate(upstreams)]
        quorum = {"quorum": graph["quorum"]} if graph["quorum"] and edges else {}
        result.append({**spec, "after": edges, **quorum})
    return result


@st.composite
def cluster_specs(draw: st.DrawFn) -> dict[str, Any]:
    labels: dict[str, str] = {"env": draw(st.sampled_from(["prod", "prod", "prod", "dev"]))}
    ring = draw(st.sampled_from(RINGS))
    if ring is not None:
        labels["ring"] = ring
    if draw(st.booleans()):
        labels[ORDER] = str(draw(st.integers(0, 20)))
    return {"labels": labels, "ready": draw(st.integers(0, 4)) > 0}


TWO_SRES = {"required": 2, "groups": ["sre"]}  # an approval policy: two verified people from sre
APPROVERS = ["alice", "bob"]
DOORS = ["dashboard", "cli", "crd"]
DOOR_NAMESPACES = ["fleet", "fleet", "other-team", "fleet"]  # where a drawn RolloutApproval was created
APPROVER_GROUPS = [["sre"], ["dev"]]

OPERATIONS: dict[str, Any] = {
    "report": st.tuples(
        st.just("report"),
        st.integers(0, 99),
        st.sampled_from(MODULES),
        st.sampled_from(["succeeded", "succeeded", "failed", "updating", "stale", "retry", "recover"]),
    ),
    "settle": st.tuples(st.just("settle"), st.sampled_from(MODULES), st.integers(1, 8), st.integers(0, 2)),
    "ready": st.tuples(st.just("ready"), st.integers(0, 99)),
    "leave": st.tuples(st.just("leave"), st.integers(0, 99)),
    "join": st.tuples(st.just("join"), st.integers(0, 99), cluster_specs()),
    "relabel": st.tuples(st.just("relabel"), st.integers(0, 99), st.sampled_from(RINGS)),
    "tick": st.tuples(st.just("tick"), st.sampled_from([1, 10, 30, 60, 120, 300, 900])),
    # the engine running: a tick every 10 s (as the worker's ticker) for this long — ticks
    # further apart are gaps in its clock that leases do not count (clock.py LEASE_TICK_STEP)
    "ticking": st.tuples(st.just("ticking"), st.sampled_from([40, 70, 130, 700])),
    "command": st.tuples(
        st.just("command"),
        st.sampled_from(["pause", "resume", "resume", "approve", "approve", "pin", "unpin", "rollback", "abort"]),
        st.sampled_from(MODULES),
        st.integers(0, 99),
    ),
    "revision": st.tuples(st.just("revision"), st.sampled_from(MODULES)),
    "respec": st.tuples(
        st.just("respec"),
        st.sampled_from(MODULES),
        strategies(),
        st.sampled_from(["keep", "keep", "all", "prod", "none"]),
    ),
    "delete": st.tuples(st.just("delete"), st.sampled_from(MODULES)),
    "dup": st.tuples(st.just("dup")),
    "heartbeat": st.tuples(st.just("heartbeat"), st.integers(0, 99), st.sampled_from([30.0, 60.0, 600.0])),
    # an applier replica (leases.py): its beat, or its claims as the clusters it reaches change
    "holder": st.tuples(
        st.just("holder"),
        st.sampled_from(["a-0", "a-1"]),
        st.sampled_from(["beat", "beat", "claim", "release"]),
        st.integers(0, 99),
        st.sampled_from([30.0, 60.0, 600.0]),
    ),
    "gate": st.tuples(
        st.just("gate"),
        st.sampled_from(MODULES),
        st.sampled_from([True, True, False, None]),
        st.booleans(),
        st.sampled_from(["next", "next", "again", "new-run", "dry-run"]),
    ),
    "participate": st.tuples(st.just("participate"), st.integers(0, 99), st.sampled_from(["leave", "join"])),
    # the cluster's owner holds it (runs.py: rollout.dev/hold), for good or for 10 minutes, or lets it go
    "hold": st.tuples(st.just("hold"), st.integers(0, 99), st.sampled_from(["on", "until", "off"])),
    # the namespace's ModuleRestriction (restriction_rules.py): clusters narrowed, sources
    # the modules do not use (they halt), or none
    "restrict": st.tuples(st.just("restrict"), st.sampled_from(["prod", "canary", "sources", "none"])),
}
# auto-promotion (promotions.py): versions the promoter observes — newer in range, older,
# pre-releases and versions outside the range — holds by command or manifest, and resumes.
# A scenario with any makes its modules auto-promote (range PROMOTION_RANGE, tags vN.0.0).
PROMOTION_RANGE = "<100.0.0"
PROMOTION_STEPS = st.tuples(
    st.just("promote"),
    st.sampled_from(MODULES),
    st.sampled_from(["newer", "newer", "newer", "older", "prerelease", "outside", "hold", "resume", "manifest-hold"]),
    st.integers(1, 9),
)

# freeze calendars (freeze_gate.py), drawn apart from OPERATIONS and last (`scenarios`), so
# that the other draws — and the examples they make — stay what they were: the fleet's
# ClusterFreezeCalendar (a daily rrule, 30 minutes from 00:20 UTC: the scenarios' time is
# the first hours of 1970) and the fleet namespace's FreezeCalendar (cron, 5 minutes of every
# 15, in Berlin), applied or deleted at a drawn step; or an operator's break-glass of app's
# freezes (every calendar, or the fleet's) for 10 minutes, or of the fleet's calendar itself
FREEZE_CHOICES = [
    "cluster",
    "namespace",
    "cluster-off",
    "namespace-off",
    "break-glass",
    "break-glass-one",
    "break-glass-calendar",  # the fleet's calendar's own break-glass: every module, those applied later too
]
FREEZES = {
    "cluster": {"name": "nightly", "rrule": "FREQ=DAILY", "start": "1970-01-01T00:20:00", "duration": "30m"},
    "namespace": {"name": "quarter", "schedule": "*/15 * * * *", "duration": "5m", "timeZone": "Europe/Berlin"},
}
FREEZE_NAMES = {"cluster": (CLUSTER_SCOPE, "org-freeze"), "namespace": ("fleet", "team-freeze")}


def with_freezes(scenario: dict[str, Any], steps: list[Any] | None = None) -> list[Any]:
    """The scenario's steps (or `steps`, the promotions put in already) with its freeze
    steps (`freezes`: (index, choice)) put in."""
    steps = list(scenario["steps"] if steps is None else steps)
    for index, choice in sorted(scenario.get("freezes", []), key=lambda drawn: -drawn[0]):
        steps.insert(min(index, len(steps)), ("freeze", choice))
    return steps


# how often each kind of operation comes up: mostly reports and time, now and then the rest
WEIGHTS = {
    "report": 8,
    "settle": 5,
    "tick": 4,
    "command": 4,
    "dup": 2,
    "ready": 2,
    "heartbeat": 2,
    "holder": 2,
    "ticking": 2,
}
operations = st.sampled_from([kind for kind in OPERATIONS for _ in range(WEIGHTS.get(kind, 1))]).flatmap(
    lambda kind: OPERATIONS[kind]
)


LATE_JOINERS = st.sampled_from([None, "Include", "NextRun", "Exclude"])
"""`rollout.lateJoiners` of every module of a scenario (None: not given, Include)."""
OFFLINE_POLICIES = st.sampled_from([None, {"wait": "0s"}, {"wait": "30s"}, {"wait": "10m", "then": "Skip"}])
"""`rollout.offline` of every module of a scenario (None: skipped at once). `then: Fail` is
not drawn: a run's `finish` expects churn not to fail it (tests/rollout/test_churn_proof_runs.py
holds the Fail rules)."""


@st.composite
def scenarios(draw: st.DrawFn, max_clusters: int = 40, max_steps: int = 60) -> dict[str, Any]:
    size = draw(st.integers(1, max_clusters))
    clusters = draw(st.lists(cluster_specs(), min_size=size, max_size=size))
    specs = [draw(strategies())]
    if draw(st.booleans()):
        specs.append(draw(strategies()))
    scenario = {
        "clusters": clusters,
        "strategies": specs,
        "selector": draw(st.sampled_from([{}, {"env": "prod"}])),
        "first_tick": draw(st.booleans()),
        "final_strategy": draw(strategies()),
        "depends": draw(st.booleans()),  # base dependsOn app
        "steps": draw(st.lists(operations, min_size=max_steps // 3, max_size=max_steps)),
        "graph": draw(graph_shapes),  # drawn last: every other draw is what it was
        # drawn after it, so that every earlier draw — and so every example — stays what it was
        "promotions": draw(st.lists(PROMOTION_STEPS, max_size=8)),
        # drawn after the promotions, last: the draws above stay what they were (FREEZES)
        "freezes": draw(st.lists(st.tuples(st.integers(0, max_steps), st.sampled_from(FREEZE_CHOICES)), max_size=3)),
        "late_joiners": draw(LATE_JOINERS),  # drawn after the freezes: every earlier draw stays what it was
        "offline": draw(OFFLINE_POLICIES),
    }
    # app and base are the members of one Release (with two modules); drawn last, so that
    # every other part of a scenario is drawn as before it existed
    scenario["release"] = draw(st.booleans())
    return scenario


# --- turning operations into events -------------------------------------------------------


@dataclass
class World:
    """What the scenario knows about the fleet it drives, to turn operations into events."""

    fleet: Fleet
    scenario: dict[str, Any]
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)  # present clusters
    gone: dict[str, dict[str, Any]] = field(default_factory=dict)  # removed clusters
    tags: dict[str, int] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    selectors: dict[str, Any] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # deleted modules
    reached: dict[str, set[str]] = field(default_factory=dict)  # holder → the clusters it claims
    previous: Any = None
    manifest_holds: set[str] = field(default_factory=set)  # modules whose manifest holds promotion

    @property
    def promoting(self) -> bool:
        return bool(self.scenario.get("promotions"))

    def release_auto_promotion(self) -> dict[str, Any] | None:
        """The Release's autoPromote as apply gives every member, when a release scenario
        promotes: both members follow PROMOTION_RANGE from their tags; a manifest hold of
        either holds the release (promotions.py, "Releases")."""
        if not (self.promoting and self.in_release()):
            return None
        follow = [
            {
                "module": m,
                "semver": PROMOTION_RANGE,
                "kind": "git",
                "url": GIT_URL,
                "version": f"v{self.tags.get(m, 1)}.0.0",
            }
            for m in MODULES
        ]
        return {"follow": follow, **({"hold": True} if self.manifest_holds else {})}

    def manifest(self, index: int, spec: dict[str, Any], tag: int) -> Any:
        name = MODULES[index]
        hold = bool(self.manifest_holds) if self.in_release() else name in self.manifest_holds
        auto = {"semver": PROMOTION_RANGE, "hold": hold} if self.promoting else None
        return module(
            name,
            self.selectors.get(name, self.scenario["selector"]),
            f"v{tag}.0.0" if self.promoting else f"v{tag}",
            *shaped(spec["stages"], self.scenario.get("graph")),
            auto_promote=auto,
            kind="Module" if index == 0 else "BootstrapModule",
            on_failure=spec["on_failure"],
            deadline=spec["deadline"],
            sorting=spec["sorting"],
            windows=spec.get("windows"),
            depends_on=["app"] if index == 1 and self.scenario.get("depends") else None,
            release=("pair", list(MODULES)) if self.in_release() else None,
            release_promotion=self.release_auto_promotion(),
            late_joiners=self.scenario.get("late_joiners"),
            offline=self.scenario.get("offline"),
        )

    def release_revision(self, name: str) -> list[Any]:
        """A new revision of one member, as `rollout apply` publishes a Release's: every
        member applied in one go (the others unchanged), each stamped with the others'
        intents (`after`)."""
        changed = self.event_for(("revision", name))
        if changed is None:
            return []
        return self.release_applied(changed)

    def release_applied(self, changed: Any) -> list[Any]:
        """`changed` (a member's apply) and the other members', as apply publishes a release."""
        name = changed.module.metadata.name
        events = [changed]
        for peer in MODULES:
            if peer != name and peer in self.specs and peer not in self.dropped:
                events.append(applied(self.manifest(MODULES.index(peer), self.specs[peer], self.tags[peer])))
        ids = {event.module.metadata.name: event.id for event in events}
        return [
            event.model_copy(update={"after": {m: i for m, i in ids.items() if m != event.module.metadata.name}})
            for event in events
        ]

    def in_release(self) -> bool:
        """app and base move as one Release (rollout/api/module_releases.py)."""
        return bool(self.scenario.get("release")) and len(self.scenario["strategies"]) == 2

    def modules(self) -> list[str]:
        """The modules the engine has: applied, not deleted — and not refused by the
        namespace's restriction (`missing`)."""
        return [m for m in MODULES if m in self.specs and m not in self.dropped and m in self.fleet.modules]

    def missing(self) -> list[str]:
        """Modules applied and not deleted that the engine refused (their restriction)."""
        return [m for m in MODULES if m in self.specs and m not in self.dropped and m not in self.fleet.modules]

    def setup_events(self) -> list[Any]:
        events: list[Any] = []
        if self.scenario["first_tick"]:
            events.append(tick(1_000.0))
        for number, spec in enumerate(self.scenario["clusters"]):
            name = f"c{number:02d}"
            self.clusters[name] = spec
            events.append(observed(cluster(name, spec["labels"], ready=spec["ready"])))
        for index, spec in enumerate(self.scenario["strategies"]):
            self.tags[MODULES[index]] = 1
            self.specs[MODULES[index]] = spec
            events.append(applied(self.manifest(index, spec, 1)))
        return events

    def thaw(self) -> list[Any]:
        """Every freeze calendar deleted (the events that say so)."""
        return [FreezeCalendarDeleted(id=next_id(), scope=scope, name=name) for scope, name in FREEZE_NAMES.values()]

    def release_holds(self) -> list[Any]:
        """Every cluster's hold lifted by its owner (the observations that say so)."""
        events = []
        for name in sorted(self.clusters):
            spec = self.clusters[name]
            if spec.get("annotations"):
                self.clusters[name] = {**spec, "annotations": {}}
                events.append(observed(cluster(name, spec["labels"], ready=spec["ready"])))
        return events

    def events_for(self, step: tuple[Any, ...]) -> list[Any]:
        if step[0] == "settle":
            return self.settle(*step[1:])
        if step[0] == "holder":
            return self.holder(*step[1:])
        if step[0] == "ticking":
            start = max(self.fleet.now, 1_000.0)
            return [tick(start + seconds) for seconds in range(10, step[1] + 1, 10)]
        if step[0] == "revision" and self.in_release():
            return self.release_revision(step[1])
        if step[0] == "promote" and self.in_release():
            return self.release_promotion_events(*step[1:])
        event = self.event_for(step)
        return [] if event is None else [event]

    def holder(self, holder: str, what: str, number: int, seconds: float) -> list[Any]:
        """An applier replica beats, or claims two more clusters (present or removed: claims
        outlive a removal), or releases one — a claim for each chunk that changed."""
        if what == "beat":
            return [HolderHeartbeat(id=next_id(), holder=holder, lease_seconds=seconds)]
        before = self.reached.get(holder, set())
        pool = sorted(set(self.clusters) | set(self.gone))
        if what == "claim" and pool:
            after = before | {pool[number % len(pool)], pool[(number + 1) % len(pool)]}
        elif what == "release" and before:
            after = before - {sorted(before)[number % len(before)]}
        else:
            return []
        self.reached[holder] = after
        chunks = sorted({claim_chunk(name) for name in after ^ before})
        return [
            HolderClaims(
                id=next_id(),
                holder=holder,
                chunk=chunk,
                clusters=sorted(name for name in after if claim_chunk(name) == chunk),
                lease_seconds=seconds,
            )
            for chunk in chunks
        ]

    def settle(self, name: str, count: int, failures: int) -> list[Any]:
        """Up to `count` clusters updating on `name` report: `failures` of them fail."""
        if name not in self.modules():
            return []
        record = self.fleet.record(name)
        events = []
        for key in sorted(self.fleet.targets):
            found = self.fleet.targets[key]
            if found.module == name and found.status == "updating" and found.assigned is not None:
                state = "failed" if len(events) < failures else "succeeded"
                events.append(reported(name, found.cluster, record.revisions[found.assigned].revision, state))
                if len(events) == count:
                    break
        return events

    def event_for(self, step: tuple[Any, ...]) -> Any:
        kind = step[0]
        names = sorted(self.clusters)
        fleet = self.fleet
        if kind == "dup":
            return self.previous  # None before any event: nothing to redeliver
        if kind == "tick":
            return tick(max(fleet.now, 1_000.0) + step[1])
        if kind == "report":
            _, number, name, state = step
            if name not in self.modules():
                return None
            holding = [t for t in sorted(fleet.targets) if t.startswith(f"{name}/") and fleet.targets[t].assigned]
            if state in ("retry", "recover"):  # about a failed cluster: Flux retrying, or recovered
                holding = [t for t in holding if fleet.targets[t].status == "failed"]
                state = "updating" if state == "retry" else "succeeded"
            if not holding:
                return None
            found = fleet.targets[holding[number % len(holding)]]
            label = fleet.record(name).revisions[found.assigned].revision  # type: ignore[index]
            if state == "stale":
                return reported(name, found.cluster, "v0", "failed")
            return reported(name, found.cluster, label, state)
        if kind == "hold":
            if not names:
                return None
            name = names[step[1] % len(names)]
            spec = {**self.clusters[name], "annotations": hold_annotations(step[2], fleet.now)}
            self.clusters[name] = spec
            return observed(cluster(name, spec["labels"], ready=spec["ready"], annotations=spec["annotations"]))
        if kind in ("ready", "leave", "relabel"):
            if not names:
                return None
            name = names[step[1] % len(names)]
            spec = self.clusters[name]
            if kind == "leave":
                self.gone[name] = self.clusters.pop(name)
                return removed(name)
            if kind == "ready":
                spec = {**spec, "ready": not spec["ready"]}
            else:
                labels = {k: v for k, v in spec["labels"].items() if k != "ring"}
                if step[2] is not None:
                    labels["ring"] = step[2]
                spec = {**spec, "labels": labels}
            self.clusters[name] = spec
            return observed(cluster(name, spec["labels"], ready=spec["ready"], annotations=spec.get("annotations")))
        if kind == "gate":  # a health gate result for the stage running now (or a stale one)
            _, name, passed, stale, which = step
            if name not in self.modules():
                return None
            record = fleet.record(name)
            current = stages_of(record)[min(record.stage_index, len(stages_of(record)) - 1)].name
            generation = record.target - 1 if stale and record.target > 1 else record.target
            gate = "shadow" if which == "dry-run" else "errors"
            run, measurement = measurement_of(fleet, name, gate, which)
            return gate_result(name, current, gate, passed, generation=generation, run=run, measurement=measurement)
        if kind in ("heartbeat", "participate"):  # leases.py: a lease renewed, a cluster leaving/joining
            if not names:
                return None
            name = names[step[1] % len(names)]
            if kind == "heartbeat" and step[1] % 2:  # as appliers send them: several clusters at once
                return heartbeats(*sorted({names[(step[1] + i) % len(names)] for i in range(3)}), lease_seconds=step[2])
            return heartbeat(name, step[2]) if kind == "heartbeat" else cluster_command(name, step[2])
        if kind == "join":
            _, number, spec = step
            if self.gone and number % 2 == 0:
                name = sorted(self.gone)[number % len(self.gone)]
                spec = self.gone.pop(name)
            else:
                name = f"j{number:02d}"
                if name in self.clusters:
                    return None
                self.gone.pop(name, None)
            self.clusters[name] = spec
            return observed(cluster(name, spec["labels"], ready=spec["ready"], annotations=spec.get("annotations")))
        if kind == "command":
            _, what, name, number = step
            if name not in self.modules():
                return None
            if what == "approve":  # one in ten a rejection (no draw of its own: the examples stay as they were)
                stages = [s["name"] for s in self.specs[name]["stages"]]
                named = stages[number % len(stages)]
                if number % 10 == 9 and self.scenario.get("rejections", True):
                    return command(name, "reject", stage=named, user="carol", via="dashboard", reason="no")
                door = DOORS[number // 2 % 3]
                approval = command(
                    name,
                    "approve",
                    stage=named,
                    user=APPROVERS[number % 2],
                    via=door,
                    groups=APPROVER_GROUPS[number // 6 % 2],
                    # a RolloutApproval's namespace: one in four of them another team's (refused: intents.py)
                    namespace=(DOOR_NAMESPACES[number // 6 % 4] if door == "crd" else None),
                )
                if self.in_release() and number % 3 == 0:  # for every member, through the leader (app)
                    return approval.model_copy(update={"module": "app", "release": "pair"})
                return approval
            if what == "unpin" and fleet.record(name).pinned:
                pinned = fleet.record(name).pinned
                return command(name, "unpin", cluster=pinned[number % len(pinned)])
            if what in ("pin", "unpin"):
                return command(name, what, cluster=names[number % len(names)]) if names else None
            return command(name, what)
        if kind == "revision":  # or the module again, after a delete
            name = step[1]
            if name not in self.specs:
                return None
            self.dropped.discard(name)
            self.tags[name] += 1
            return applied(self.manifest(MODULES.index(name), self.specs[name], self.tags[name]))
        if kind == "delete":
            name = step[1]
            if name not in self.modules():
                return None
            self.dropped.add(name)
            return deleted(name, "Module" if name == MODULES[0] else "BootstrapModule")
        if kind == "promote":
            return self.promotion_event(*step[1:])
        if kind == "freeze" and step[1] == "break-glass-calendar":
            scope, name = FREEZE_NAMES["cluster"]
            return calendar_break_glass(name, max(fleet.now, 1_000.0) + 600, scope=scope, user="alice")
        if kind == "freeze" and step[1].startswith("break-glass"):
            if "app" not in self.modules():
                return None
            until = max(fleet.now, 1_000.0) + 600
            which = "org-freeze" if step[1] == "break-glass-one" else None
            return command("app", "break-glass", reason="sev-1", until=until, calendar=which, user="alice", via="cli")
        if kind == "freeze":
            scope, name = FREEZE_NAMES[step[1].removesuffix("-off")]
            if step[1].endswith("-off"):
                return FreezeCalendarDeleted(id=next_id(), scope=scope, name=name)
            namespace = None if scope == CLUSTER_SCOPE else scope
            return calendar_applied(freeze_calendar(name, FREEZES[step[1]], namespace=namespace))
        if kind == "restrict":
            if step[1] == "none":
                return RestrictionDeleted(id=next_id(), namespace="fleet", name="tenant-lane")
            rules = {
                "prod": {"clusters": {"matchLabels": {"env": "prod"}}},
                "canary": {"clusters": {"matchLabels": {"ring": "canary"}}},
                "sources": {"sources": [r"https://elsewhere\.example/.*"]},
            }[step[1]]
            return RestrictionApplied(id=next_id(), restriction=restriction(**rules))  # type: ignore[arg-type]
        if kind == "respec":
            _, name, spec, *chosen = step
            if name not in self.modules():
                return None
            self.specs[name] = spec
            if chosen and chosen[0] != "keep":
                self.selectors[name] = {"all": {}, "prod": {"env": "prod"}, "none": None}[chosen[0]]
            return applied(self.manifest(MODULES.index(name), spec, self.tags[name]))
        raise AssertionError(kind)

    def release_promotion_events(self, name: str, what: str, number: int) -> list[Any]:
        """In a release scenario: the promoter's observation of `name`'s version goes to the
        release's leader (app, first by name); a hold or resume command to `name` (refused
        but at the leader); the manifest's hold toggled applies every member."""
        if name not in self.modules():
            return []
        if what == "manifest-hold":
            self.manifest_holds ^= {name}
            return self.release_applied(applied(self.manifest(MODULES.index(name), self.specs[name], self.tags[name])))
        event = self.promotion_event(name, what, number)
        if event is None or not isinstance(event, PromotionObserved):
            return [] if event is None else [event]
        return [release_observed("app", "pair", {name: event.version}, promoter=event.promoter)]

    def promotion_event(self, name: str, what: str, number: int) -> Any:
        """A promoter's observation, a hold or resume command, or the manifest's hold toggled."""
        if name not in self.modules():
            return None
        tag = self.tags[name]
        if what == "hold":
            return command(name, "hold-promotion", user="alice", via="cli", reason="drawn")
        if what == "resume":
            return command(name, "resume-promotion", user="bob", via="dashboard")
        if what == "manifest-hold":
            self.manifest_holds ^= {name}
            return applied(self.manifest(MODULES.index(name), self.specs[name], tag))
        version = {
            "newer": f"v{tag}.{number}.0",
            "older": f"v{max(tag - 1, 0)}.{number}.0",
            "prerelease": f"v{tag}.{number}.1-rc.1",
            "outside": f"v{100 + number}.0.0",
        }[what]
        return promotion(name, version, promoter=f"promoter-{number % 2}")


def with_promotions(scenario: dict[str, Any]) -> list[Any]:
    """The scenario's steps with its promotion steps (drawn last) spread evenly among them."""
    steps, promotions = list(scenario["steps"]), scenario.get("promotions", [])
    for number, step in reversed(list(enumerate(promotions))):
        steps.insert((number + 1) * len(steps) // (len(promotions) + 1), step)
    return steps


def hold_annotations(how: str, now: float) -> dict[str, str]:
    """A Cluster's hold annotations (rollout/engine/runs.py): held for good (`on`), until
    10 minutes from `now` (`until`), or not (`off`)."""
    if how == "off":
        return {}
    held = {"rollout.dev/hold": "true", "rollout.dev/hold-reason": "owner's freeze"}
    if how == "until":
        held["rollout.dev/hold-until"] = datetime.fromtimestamp(max(now, 1_000.0) + 600, tz=UTC).isoformat()
    return held


def fixed_scenario() -> dict[str, Any]:
    """A busy scenario built without Hypothesis, for comparing separate processes."""
    rings = ["canary", "wave", "wave", None]
    clusters = [
        {
            "labels": {"env": "prod", **({"ring": rings[i % 4]} if rings[i % 4] else {}), ORDER: str(i % 7)},
            "ready": i % 5 > 0,
        }
        for i in range(40)
    ]
    spec = {
        "stages": [
            stage("s0", {"ring": "canary"}, concurrency=2, failures="50%", soak="30s"),
            stage("s1", {"ring": "wave"}, concurrency="25%", failures=1, approval=True),
            stage("s2", concurrency=3, waves={"size": 4, "delay": "1m"}),  # seed derived
        ],
        "on_failure": "Halt",
        "deadline": "2m",
        "sorting": ORDER,
    }
    steps: list[Any] = []
    for round_ in range(12):
        steps += [
            ("settle", "app", 6, 1 if round_ in (2, 9) else 0),
            ("settle", "base", 4, 0),
            ("tick", 60),
            ("command", "approve", "app", 1),
            ("ready", round_ * 7),
            ("join", round_, {"labels": {"env": "prod", "ring": "wave"}, "ready": True}),
            ("leave", round_ * 3),
            ("hold", round_ * 5, ["on", "until", "off"][round_ % 3]),
            ("command", "resume", "app", 0),
            ("dup",),
        ]
        if round_ == 6:
            steps += [("revision", "app"), ("command", "pin", "app", 5), ("command", "rollback", "base", 0)]
    freezes = [(20, "cluster"), (45, "namespace"), (90, "cluster-off")]
    return {
        "clusters": clusters,
        "strategies": [spec, spec],
        "selector": {},
        "first_tick": True,
        "steps": steps,
        "freezes": freezes,
    }


def calendar_break_glass_scenario() -> dict[str, Any]:
    """`fixed_scenario` under the fleet's calendar (its window: 00:20 to 00:50 every day, from
    1,200 s; the engine's time runs 1,000 to 1,720 s here), whose own break-glass comes at
    step 20 (1,120 s: in force to 1,720 s, the last tick) — so members move inside the window
    while it is in force, and it ends (the drawn scenarios seldom meet all three)."""
    scenario = fixed_scenario()
    scenario["freezes"] = [(0, "cluster"), (20, "break-glass-calendar")]
    return scenario


def measurement_of(
    fleet: Fleet, name: str, gate: str, which: str = "next", stage_name: str | None = None
) -> tuple[int | None, int | None]:
    """(run, measurement) of a result for `gate` of the module's current stage (or
    `stage_name`), as the gate runner numbers them from the status
    (StageGate.next_measurement) — "again": the latest counted once more, "new-run": the
    first of a run not started; (None, None) for a gate without `count` (or none)."""
    status = ModuleStatus.model_validate(fleet.status(name))
    stage = status.stage(stage_name or status.current_stage)
    found = next((g for g in stage.gates if g.name == gate), None) if stage is not None else None
    if found is None or found.count is None:
        return None, None
    analysis = found.analysis
    if which == "again" and analysis is not None and analysis.measured:
        return analysis.run, analysis.measured
    if which == "new-run":
        return (analysis.run if analysis else 1) + 1, 1
    return found.next_measurement() or (analysis.run if analysis else 1, (analysis.measured if analysis else 0) + 1)
