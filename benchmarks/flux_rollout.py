"""How long a staged rollout takes on real Flux, and how much of it is the engine (prints figures).

    .venv/bin/python benchmarks/flux_rollout.py                 # 3 clusters, 4 rollouts
    .venv/bin/python benchmarks/flux_rollout.py --clusters 5 --runs 6

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`); fresh topics
(a random prefix), deleted at the end. Clusters: a local fleet (`infra.localfleet`, what
`rollout up --clusters N` starts): a management cluster and N workload kube-apiservers,
each with the real source-, kustomize- and helm-controller; the Flux binaries are built
once from the Go module proxy (minutes) and cached.

The engine's processes run as the user runs them: `rollout worker --tick-interval 1`,
`rollout applier --sink kubernetes` (sync status from Flux through its status reporter) and
`rollout watch-clusters`. Each run applies the example's podinfo Module (`rollout apply -f`)
at the next tag — v1.0.0 installs, then v1.1.0 and v1.0.0 alternate (upgrades that prune) —
with two stages: `canary` (cluster-1) then `wave` (the others, all at once), no soak, and
waits with `rollout status --wait` (apply → Complete is the printed total).

The split comes from the records' Kafka timestamps (decisions, sync-status): **engine** is
the time from an input to the decision it caused on the rollout's critical path — apply →
canary assigned, canary's success report → wave assigned, last success report → complete;
**CLI** is `rollout apply` until its ModuleApplied is on the intents topic (mostly the
Python process starting); **applier + Flux** is the rest: writing the objects into the
clusters, Flux fetching the source and applying it, the status reporter seeing Ready, and
`rollout status --wait` noticing Complete. **canary** is the canary's assignment → its
success report (applier, Flux and reporter for one cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from infra import client
from infra.localfleet import LocalFleet, example
from infra.localkafka import discover_bootstrap
from infra.topics import TopicNames, delete_topics, ensure_topics
from projections.crds import CRD_DIRECTORY
from rollout.wire.events import SyncStatusReported, parse_event
from rollout_cli.processes.up import wait_for_clusters

MODULE = "podinfo"
APPLIER = ("--sink", "kubernetes", "--namespace", "fleet", "--web-port", "0")
HEADER = f"{'run':>3}  {'revision':<8}  {'apply→Complete':>14}  {'CLI':>5}  {'engine':>6}  {'applier+Flux':>12}  canary"


def module(url: str, version: str) -> dict[str, Any]:
    document = example.podinfo_module(url, version)
    document["spec"]["rollout"] = {
        "stages": [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}],
        "progressDeadline": "2m",
    }
    return document


def rollout(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_cli.main", *args], env=env, capture_output=True, text=True, timeout=300
    )


def spawn(env: dict[str, str], logs: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    log = (logs / f"{name}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "rollout_cli.main", *args], env=env, stdout=log, stderr=log)


def critical_path(bootstrap: str, names: TopicNames, since: float, clusters: list[str]) -> dict[str, float]:
    """Engine seconds and wall seconds on the rollout's critical path (see the module docstring)."""
    decisions = [r for r in asyncio.run(client.read_all(bootstrap, names.decisions)) if (r.timestamp or 0) >= since]
    decisions = sorted((r for r in decisions if r.key == MODULE), key=lambda r: r.timestamp or 0)
    reports: dict[str, float] = {}
    for record in asyncio.run(client.read_all(bootstrap, names.status)):
        event = parse_event(record.value) if record.value is not None else None
        fresh = (record.timestamp or 0) >= since
        if fresh and isinstance(event, SyncStatusReported) and event.module == MODULE and event.state == "succeeded":
            reports.setdefault(event.cluster, record.timestamp or 0)
    intents = [r for r in asyncio.run(client.read_all(bootstrap, names.intents)) if r.key == MODULE]
    applied = max(r.timestamp or 0 for r in intents)  # the ModuleApplied `rollout apply` published
    canary_ok = reports[clusters[0]]
    last_ok = max(reports.values())

    def first_decision_after(moment: float) -> float:
        return next(r.timestamp or 0 for r in decisions if (r.timestamp or 0) >= moment)

    engine = (first_decision_after(applied) - applied) + (first_decision_after(canary_ok) - canary_ok)
    engine += decisions[-1].timestamp - last_ok if decisions[-1].timestamp else 0.0
    return {"cli": applied - since, "engine": engine, "canary_flux": canary_ok - first_decision_after(applied)}


def run(clusters: int, runs: int) -> None:
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if bootstrap is None:
        sys.exit("no broker: start one with `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    workdir = Path(tempfile.mkdtemp(prefix="flux-bench-"))
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    fleet = LocalFleet(workdir / "fleet", clusters, CRD_DIRECTORY, progress=lambda m: print(f"  {m}", flush=True))
    started = time.monotonic()
    fleet.start()
    print(f"local fleet: management + {clusters} clusters on real Flux up in {time.monotonic() - started:.1f}s")
    asyncio.run(ensure_topics(bootstrap, prefix, 4))
    kubeconfig = str(fleet.management_kubeconfig)
    processes = [
        spawn(env, workdir, "worker", "worker", "--tick-interval", "1", "--web-port", "0"),
        spawn(env, workdir, "applier", "applier", *APPLIER, "--kubeconfig", kubeconfig),
        spawn(env, workdir, "watch-clusters", "watch-clusters", "--kubeconfig", kubeconfig, "--web-port", "0"),
    ]
    assert fleet.git is not None
    url = fleet.git.url(example.REPOSITORY)
    totals, engines = [], []
    try:
        wait_for_clusters(bootstrap, prefix, fleet.cluster_names)
        print(HEADER)
        for index in range(runs):
            version = example.VERSIONS[0] if index % 2 == 0 else example.VERSIONS[1]
            path = workdir / f"podinfo-{index}.yaml"
            path.write_text(yaml.safe_dump(module(url, version), sort_keys=False))
            since = time.time()
            applied = rollout(env, "apply", "-f", str(path))
            waited = rollout(env, "status", MODULE, "--wait", "--timeout", "3m")
            total = time.time() - since
            if applied.returncode or waited.returncode:
                sys.exit(f"run {index}: apply/status failed:\n{applied.stderr}\n{waited.stdout}\n{waited.stderr}")
            split = critical_path(bootstrap, names, since - 0.05, fleet.cluster_names)
            totals.append(total)
            engines.append(split["engine"])
            rest = total - split["engine"] - split["cli"]
            print(
                f"{index:>3}  {version:<8}  {total:>13.2f}s  {split['cli']:>4.2f}s  {split['engine']:>6.2f}s  "
                f"{rest:>11.2f}s  {split['canary_flux']:.2f}s"
            )
        upgrades = totals[1:] or totals
        print(
            f"median apply→Complete {statistics.median(totals):.2f}s (upgrades {statistics.median(upgrades):.2f}s), "
            f"engine {statistics.median(engines):.2f}s "
            f"({100 * statistics.median(engines) / statistics.median(totals):.0f} %)"
        )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        fleet.stop()
        asyncio.run(delete_topics(bootstrap, prefix))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=3, help="workload clusters (the first is the canary)")
    parser.add_argument("--runs", type=int, default=4, help="rollouts, alternating two tags")
    arguments = parser.parse_args()
    run(arguments.clusters, arguments.runs)


if __name__ == "__main__":
    main()
