"""Many chaos rounds against the real worker; prints a table (rounds, inputs, lost,
miscounted offsets, diverged replays, conflicting snapshot versions, worker exits).

Each round is tests/integration/chaos.py's `run_round`: a 150-cluster fleet streamed in
while the workers are SIGKILLed (mid-stream, during recovery, during a rebalance) or
join and leave, then a new revision rolled out and everything checked.

    .venv/bin/python benchmarks/chaos.py [ROUNDS]     # default 50, spread over the disruptions

Uses the broker of ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`).
A round's topics are deleted after it (kept, with its logs, when the round failed).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.localkafka import discover_bootstrap
from infra.topics import delete_topics
from tests.integration.chaos import DISRUPTIONS, RoundResult, run_round, table


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        print("no broker: start one with `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS", file=sys.stderr)
        return 2
    results: list[RoundResult] = []
    started = time.monotonic()
    for index in range(rounds):
        disruption = DISRUPTIONS[index % len(DISRUPTIONS)]
        workdir = Path(tempfile.mkdtemp(prefix="rollout-chaos-"))
        result = run_round(bootstrap, workdir, disruption, seed=index)
        if result.ok:
            shutil.rmtree(workdir, ignore_errors=True)
            # the round's topics go too: 50 rounds left ~2,900 partitions on a long-lived
            # broker, which slowed everything measured on it afterwards
            asyncio.run(delete_topics(bootstrap, result.prefix))
        else:
            print(f"  logs of the failed round kept in {workdir}", flush=True)
        results.append(result)
        status = "ok" if result.ok else "FAILED " + result.explain()
        print(f"round {index + 1:>3}/{rounds} {disruption:<26} {result.seconds:5.1f}s {status}", flush=True)
    print()
    print(table(results))
    print(f"\n{rounds} rounds in {time.monotonic() - started:.0f}s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
