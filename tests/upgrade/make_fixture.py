"""Write the upgrade fixture of this release: a decider partition's state, mid-rollout.

    .venv/bin/python -m tests.upgrade.make_fixture RELEASE

folds a scenario (tests/upgrade/scenario.py's `PREVIOUS_RELEASE_EVENTS`, built here with
the release's own builders) through the release's engine over a `PartitionState` — the
worker's changelogged state — and writes, under tests/upgrade/fixtures/RELEASE/:

* ``decide-state.jsonl`` — the `decide-state` records the worker would have committed
  (``{"key": "<mapping>:<key>", "value": <JSON or null>}``, in order);
* ``journal.jsonl``      — the journal events folded so far, as they travel on Kafka;
* ``release.json``       — the release (its commit) and what the state holds.

Run it on the last release's tree (``git worktree add /tmp/prev <tag>``) before a change to
the stored records lands; tests/upgrade/test_previous_release.py restores the fixture into
the current engine and finishes the rollout. The scenario leaves a module mid-rollout
(canary done, the wave waiting for approval), a finished module, a deleted module's
tombstone, a removed cluster's tombstone, leases from heartbeats, a namespace restriction
and the clock — every kind of record a running engine holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rollout.engine.core import RolloutEngine
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.wire.events import RestrictionApplied
from streams.state import PartitionState
from tests.rollout.builders import (
    AT,
    applied,
    cluster,
    command,
    deleted,
    heartbeats,
    module,
    next_id,
    observed,
    removed,
    reported,
    restriction,
    stage,
    tick,
)

FIXTURES = Path(__file__).parent / "fixtures"


def scenario() -> list[Any]:
    """The events of the previous release's run, in journal order."""
    fleet = [cluster("c1", {"ring": "canary"})] + [cluster(f"c{i}", {"ring": "wave"}) for i in range(2, 6)]
    app = module(
        "app",
        {},
        "v1",
        stage("canary", {"ring": "canary"}),
        stage("wave", {"ring": "wave"}, concurrency=2, approval=True),
    )
    app_v2 = module(
        "app",
        {},
        "v2",
        stage("canary", {"ring": "canary"}),
        stage("wave", {"ring": "wave"}, concurrency=2, approval=True),
    )
    infra = module("infra", {"ring": "wave"}, "v1")
    events: list[Any] = [tick(1_000.0)]
    events += [observed(c) for c in fleet]
    events += [observed(cluster("c6", {"ring": "wave"})), removed("c6")]
    events += [heartbeats(*(f"c{i}" for i in range(1, 6)), lease_seconds=600.0)]
    events += [
        RestrictionApplied(id=next_id(), at=AT, restriction=restriction("fleet", sources=["https://github\\.com/.*"]))
    ]
    events += [applied(infra)] + [reported("infra", f"c{i}", "v1", "succeeded") for i in range(2, 6)]
    events += [applied(module("old", {}, "v1")), deleted("old")]
    events += [applied(app), reported("app", "c1", "v1", "succeeded"), tick(1_010.0)]
    events += [command("app", "approve", stage="wave")]
    events += [reported("app", f"c{i}", "v1", "succeeded") for i in range(2, 6)]
    events += [tick(1_020.0), applied(app_v2), reported("app", "c1", "v2", "succeeded"), tick(1_030.0)]
    return events


def fold(events: list[Any]) -> tuple[PartitionState, RolloutEngine]:
    state = PartitionState(ENGINE_MAPPINGS)
    engine = RolloutEngine(**{name: state.mappings[name] for name in ENGINE_MAPPINGS}, partition=0)  # type: ignore[arg-type]
    for event in events:
        out = engine.handle(event)
        if out.rejections:
            raise SystemExit(f"the scenario's {type(event).__name__} was refused: {out.rejections}")
        state.keep_event()
    return state, engine


def write(release: str) -> Path:
    events = scenario()
    state, engine = fold(events)
    records = state.changelog()
    target = FIXTURES / release
    target.mkdir(parents=True, exist_ok=True)
    with (target / "decide-state.jsonl").open("w") as out:
        for key, value in records:
            out.write(json.dumps({"key": key.decode(), "value": None if value is None else json.loads(value)}) + "\n")
    with (target / "journal.jsonl").open("w") as out:
        for event in events:
            out.write(json.dumps(json.loads(event.to_bytes())) + "\n")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    summary = {
        "release": release,
        "commit": commit,
        "records": len(records),
        "modules": {name: engine.modules[name].phase for name in sorted(engine.modules)},
    }
    (target / "release.json").write_text(json.dumps(summary, indent=2) + "\n")
    return target


if __name__ == "__main__":
    print(write(sys.argv[1] if len(sys.argv) > 1 else "previous"))
