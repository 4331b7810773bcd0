"""Write the upgrade fixture of a release: a decider partition's state, mid-rollout.

    .venv/bin/python -m tests.upgrade.make_fixture RELEASE [--out DIR]

folds a scenario (`scenario()`, built with the release's own tests/rollout/builders.py)
through the release's engine over a `PartitionState` — the worker's changelogged state —
and writes, under DIR (default tests/upgrade/fixtures/RELEASE/):

* ``decide-state.jsonl`` — the `decide-state` records the worker would have committed
  (``{"key": "<mapping>:<key>", "value": <JSON or null>}``, in order);
* ``journal.jsonl``      — the journal events folded so far, as they travel on Kafka;
* ``decisions.jsonl``    — the records the release's decider wrote to the decisions topic for
  that journal (one batch per event, hash-chained: streams/chain.py), as stored — what
  `rollout replay --check` and `rollout history` of a later release must still read
  (tests/upgrade/test_previous_release_decisions.py);
* ``release.json``       — the release (its commit) and what the state holds.

The scenario leaves a module mid-rollout (canary done, the wave waiting for approval), a
finished module, a deleted module's tombstone, a removed cluster's tombstone, leases from
heartbeats, a namespace restriction and the clock — every kind of record a running engine
holds. tests/upgrade/test_previous_release.py restores the fixture into the current engine
(through the worker's decode path) and finishes the rollout; test_previous_release_on_kafka.py
does the same with a real worker on the session broker.

Release process. A fixture is always written by the release it is named after, on that
release's tree — never by the current code, which would only test itself:

1. When a release is tagged, or at the latest before a change to the stored records
   (rollout/engine/state.py, a migration in rollout/engine/migrations.py, an API rule that
   may refuse stored specs) lands, write the fixture of the last release:

       git worktree add /tmp/last-release vX.Y            # the tag
       mkdir -p /tmp/last-release/tests/upgrade
       cp tests/upgrade/__init__.py tests/upgrade/make_fixture.py /tmp/last-release/tests/upgrade/
       (cd /tmp/last-release && $OLDPWD/.venv/bin/python -m tests.upgrade.make_fixture vX.Y \
           --out $OLDPWD/tests/upgrade/fixtures/vX.Y)
       git worktree remove --force /tmp/last-release

   (run from the worktree's root, its packages come before the venv's editable install on
   sys.path, so the release's own engine folds the scenario; this script imports both the
   layout since rollout/ became sub-packages and the flat one of v0.26 and before).
2. Point `PREVIOUS_RELEASE` (tests/upgrade/release_fixture.py) at it, and keep the fixture of
   the release before only while upgrades from it are supported.
3. The change must pass tests/upgrade: the old state restores and its rollout completes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

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

try:  # the layout since rollout/ became sub-packages (after v0.26)
    from rollout.engine.core import RolloutEngine
    from rollout.engine.state import ENGINE_MAPPINGS
    from rollout.wire.events import RestrictionApplied
except ImportError:  # v0.26 and before: one flat rollout/ package
    from rollout.events import RestrictionApplied  # type: ignore[no-redef,import-not-found]
    from rollout.state import ENGINE_MAPPINGS  # type: ignore[no-redef,import-not-found]

    from rollout.engine import RolloutEngine  # type: ignore[no-redef,attr-defined]

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


def fold(events: list[Any]) -> PartitionState:
    """The scenario folded by the release's engine over the worker's changelogged state."""
    state = PartitionState(ENGINE_MAPPINGS)
    engine = RolloutEngine(**{name: state.mappings[name] for name in ENGINE_MAPPINGS}, partition=0)
    for event in events:
        out = engine.handle(event)
        if out.rejections:
            raise SystemExit(f"the scenario's {type(event).__name__} was refused: {out.rejections}")
        state.keep_event()
    return state


def decided(events: list[Any]) -> list[bytes]:
    """The decisions topic's records the release's decider writes for `events` (journal
    partition 0, offsets 0, 1, …, one batch per event), as stored."""
    from types import SimpleNamespace

    from aiokafka import TopicPartition

    from infra.observability import Metrics
    from infra.topics import TopicNames
    from streams.decider import DecidePartition
    from streams.outputs import Outputs

    topics = TopicNames("fixture.")
    decider = DecidePartition(TopicPartition(topics.journal, 0), topics, Metrics())
    written: list[bytes] = []
    for offset, event in enumerate(events):
        out = Outputs(topics.dead_letters)
        record = SimpleNamespace(topic=topics.journal, partition=0, offset=offset, key=b"k", value=event.to_bytes())
        decider.process([record], offset + 1, out)  # type: ignore[list-item]
        decider.state.commit_batch()
        written += [sent.value for sent in out.all() if sent.topic == topics.decisions and sent.value is not None]
    return written


def write(release: str, target: Path | None = None) -> Path:
    events = scenario()
    state = fold(events)
    records = state.changelog()
    target = target or FIXTURES / release
    target.mkdir(parents=True, exist_ok=True)
    with (target / "decide-state.jsonl").open("w") as out:
        for key, value in records:
            out.write(json.dumps({"key": key.decode(), "value": None if value is None else json.loads(value)}) + "\n")
    with (target / "journal.jsonl").open("w") as out:
        for event in events:
            out.write(json.dumps(json.loads(event.to_bytes())) + "\n")
    with (target / "decisions.jsonl").open("wb") as stored:
        for value in decided(events):
            stored.write(value + b"\n")  # the stored bytes: the hash is over them
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    modules = state.mappings["modules"]
    summary = {
        "release": release,
        "commit": commit,
        "records": len(records),
        "modules": {name: modules[name].phase for name in sorted(modules)},
    }
    (target / "release.json").write_text(json.dumps(summary, indent=2) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", help="the release the fixture is of (its tag), e.g. v0.26")
    parser.add_argument("--out", type=Path, help="the fixture's directory (default: tests/upgrade/fixtures/RELEASE)")
    arguments = parser.parse_args()
    print(write(arguments.release, arguments.out))


if __name__ == "__main__":
    main()
