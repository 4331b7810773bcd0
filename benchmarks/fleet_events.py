"""Fleet-sized single events, folded in-process by the engine over plain dicts (what
`rollout replay` folds): a module's first apply, and a new dependent's first link.

    .venv/bin/python benchmarks/fleet_events.py [--clusters 100000] [--ready]

A fleet of N clusters (env=bench); module `base` applied (its join and its moves to the
target continued as the router would: 2,000 an event); with `--ready`, every member reports
`succeeded`, so that each is ready for dependents; then `DependentLinked(base, dep)`, a new
dependent's first link (docs/rollout-semantics.md, "How a rollout moves", rule 10), and its
continuations. Printed: the CPU of the apply event, of the link event (and how many
`DependencyReported` it sent), how many continuations followed and the longest event among
them. The state folded before each measured event is frozen, as the worker's heap policy
does (streams/heap.py): else a full collection of the fleet's objects lands in one of them.
To compare with a release before, run this file with that release's tree first on
PYTHONPATH (`git archive <commit> | tar -x -C DIR`; `PYTHONPATH=DIR`).
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

from bench_events import cluster_event, cluster_name, module_event, report

from rollout.engine.core import Outcome, new_engine
from rollout.wire.events import DependencyReported, DependentLinked, RolloutContinued, Tick, parse_event


def settle() -> None:
    """The worker's heap policy (streams/heap.py): what is folded is frozen, so that a
    collection does not walk the fleet's state in the middle of a measured event."""
    gc.collect()
    gc.freeze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100_000)
    parser.add_argument("--ready", action="store_true", help="every member succeeded before the link")
    args = parser.parse_args()
    engine = new_engine()
    engine.handle(Tick(now=1_700_000_000.0))
    for i in range(args.clusters):
        engine.handle(cluster_event(i, {"env": "bench"}))

    def fold(event: Any) -> tuple[float, Outcome]:
        start = time.process_time()
        out = engine.handle(event)
        return time.process_time() - start, out

    def drain(out: Outcome, worst: float) -> tuple[float, int]:
        """Fold the continuations `out` asked for, and theirs: the longest event, how many."""
        folded = 0
        queue = [e for e in out.dependency_events if isinstance(e, RolloutContinued)]
        while queue:
            spent, out = fold(queue.pop(0))
            worst, folded = max(worst, spent), folded + 1
            queue += [e for e in out.dependency_events if isinstance(e, RolloutContinued)]
        return worst, folded

    settle()
    spent, out = fold(parse_event(module_event("base")))
    print(f"{args.clusters} clusters: the module's apply {spent * 1000:.1f} ms CPU")
    worst, folded = drain(out, 0.0)
    print(f"  its join and moves: {folded} continuations, the longest {worst * 1000:.1f} ms")
    if args.ready:
        for i in range(args.clusters):
            engine.handle(parse_event(report(cluster_name(i), "base")))
        print(f"  every member reported succeeded: {engine.modules['base'].phase}")
    settle()
    spent, out = fold(DependentLinked(module="base", dependent="dep", linked=True, seq=1))
    told = sum(isinstance(e, DependencyReported) for e in out.dependency_events)
    worst, folded = drain(out, spent)
    print(
        f"  a new dependent's first link: {spent * 1000:.1f} ms CPU, {told} DependencyReported;"
        f" then {folded} continuations, the longest event {worst * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
