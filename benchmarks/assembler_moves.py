"""The assembler stage's CPU per move, in-process: one partition's share of the
100-concurrent-rollouts benchmark (benchmarks/fleet.py --scenario concurrent).

    .venv/bin/python benchmarks/assembler_moves.py [--clusters 250] [--modules 100] [--batch 50] [--rounds 3]

`--clusters` clusters each get `--modules` modules assigned (as the decider writes them: one
`Assignment` JSON per (cluster, module), the same sync for every cluster of a module), then
each round moves every module to a new revision over every cluster, module after module, in
batches of `--batch` assignments — the real `AssemblePartition.process`, its state changelog
and a commit per batch, as the runtime drives it. Printed: CPU microseconds per move
(`process` + changelog + commit), the process's RSS, and the bytes published — a digest of
every snapshot and state record written, so two versions of the stage can be compared for
byte identity (run this file from each commit: `git archive <rev> | tar -x -C DIR`,
`PYTHONPATH=DIR`).

Figures (rounds' CPU per move; digest 3252fb9553ac06f5 throughout): 669-786 µs before the
syncs were shared, 197-200 after (load 10); c74e00f 172-196 → 8da2d73 63-65 µs (load 5.4) and,
back to back, 181-219 → 94-98 µs (load 6.8): each cluster's syncs kept as encoded pieces per
kind, a move joining them (streams/assemblage_encoding.py `_KindForms`).
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time
from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka import TopicPartition

from infra.observability import Metrics
from infra.topics import TopicNames
from streams.assembler import AssemblePartition
from streams.outputs import Outputs

TOPICS = TopicNames("bench.")


def assignment(cluster: str, module: str, tag: str, generation: int) -> bytes:
    sync = {
        "module": module,
        "moduleNamespace": "fleet",
        "revision": tag,
        "generation": generation,
        "sync": {
            "source": {"git": {"url": f"https://git.example.com/{module}", "version": {"tag": tag}}},
            "package": {"kustomize": {"path": "./deploy", "targetNamespace": "apps", "wait": True, "timeout": "5m"}},
        },
    }
    document = {"cluster": cluster, "clusterNamespace": "fleet", "module": module, "assemblage": "ProxyAssemblage"}
    return orjson.dumps({**document, "sync": sync, "reason": f"assigned {tag} in wave-2"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=250)
    parser.add_argument("--modules", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stage = AssemblePartition(TopicPartition(TOPICS.assignments, 0), TOPICS, Metrics())
    digest = hashlib.sha256()
    clusters = [f"c-{n:05d}" for n in range(args.clusters)]
    modules = [f"m-{n:03d}" for n in range(args.modules)]

    def run(values: list[bytes]) -> float:
        cpu = 0.0
        for start in range(0, len(values), args.batch):
            batch: list[Any] = [
                SimpleNamespace(key=None, value=value, offset=start + n)
                for n, value in enumerate(values[start : start + args.batch])
            ]
            began = time.process_time()
            out = Outputs("bench.dead-letters")
            stage.process(batch, start, out)
            changes = stage.state.changelog()
            stage.state.commit_batch()
            cpu += time.process_time() - began
            for record in [*out.records, *out.latest.values()]:
                digest.update(record.value or b"-")
            for change in changes:
                digest.update(change[0] + (change[1] or b"-"))
        return cpu

    installed = run([assignment(c, m, "1.0.0", 1) for c in clusters for m in modules])
    per_move = installed * 1e6 / len(clusters) / len(modules)
    print(f"installed {args.modules} modules on {args.clusters} clusters: {per_move:.0f} µs/move")
    for round_ in range(args.rounds):
        tag, generation = f"1.{round_ + 1}.0", round_ + 2
        cpu = run([assignment(c, m, tag, generation) for m in modules for c in clusters])
        moves = len(clusters) * len(modules)
        print(f"round {round_ + 1}: {moves} moves, {cpu * 1e6 / moves:.0f} µs CPU/move")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MiB; output digest {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
