"""The engine on a real-Flux fleet, driven only the way users drive it.

:class:`EngineOnFlux` starts, as real processes against the session broker (fresh topics):
`rollout worker`, `rollout applier --sink kubernetes` (the management cluster's kubeconfig;
no `--simulate-status`: sync status comes from the real Flux controllers through the
applier's status reporter) and `rollout watch-clusters`. Workload clusters are registered
in the management cluster as Cluster API would (`infra.localfleet.capi`: a `Cluster`
object with an initialized control plane, its kubeconfig secret). Everything else goes
through the `rollout` CLI as a subprocess: `apply -f`, `status --wait`, `history -o json`,
`delete module`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.localfleet.capi import register_cluster
from rollout_cli.processes.up import ready_clusters
from tests.flux.fleet import FluxFleet
from tests.integration.stack import Stack, free_port, wait_for

NAMESPACE = "fleet"


@dataclass
class Run:
    """What one `rollout` command did."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class EngineOnFlux:
    stack: Stack
    fleet: FluxFleet
    workdir: Path
    applied: list[Path] = field(default_factory=list)

    @classmethod
    async def start(
        cls, bootstrap: str, fleet: FluxFleet, workdir: Path, labels: dict[str, dict[str, str]]
    ) -> EngineOnFlux:
        """Register `labels` (cluster → labels) as Cluster API clusters, start the processes and
        wait until the engine knows every cluster as ready."""
        stack = await asyncio.to_thread(Stack, bootstrap, workdir, tick_interval=1.0)
        engine = cls(stack, fleet, workdir)
        async with fleet.management.client() as api:
            for cluster, cluster_labels in labels.items():
                kubeconfig = fleet.workloads[cluster].kubeconfig_yaml()
                await register_cluster(api, cluster, NAMESPACE, cluster_labels, kubeconfig)
        kubeconfig = str(fleet.kubeconfigs[fleet.management.name])
        stack.worker = stack.start_worker_process()  # the three start at once: Python imports take seconds
        stack.applier = stack._spawn(
            "applier",
            *("applier", "--sink", "kubernetes", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE),
            *("--interval", "1m", "--not-ready-interval", "1", "--web-port", str(free_port())),
        )
        engine.watcher = stack._spawn(
            "watch-clusters", "watch-clusters", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--web-port", "0"
        )
        await asyncio.to_thread(stack.wait_ready, stack.worker)
        await asyncio.to_thread(engine._wait_for_clusters, set(labels))
        return engine

    watcher: subprocess.Popen[bytes] | None = None

    def _wait_for_clusters(self, names: set[str]) -> None:
        def ready() -> bool:
            for name, process in (("applier", self.stack.applier), ("watch-clusters", self.watcher)):
                if process is not None and process.poll() is not None:
                    raise AssertionError(f"{name} exited:\n{self.stack.log(name)[-3000:]}")
            return ready_clusters(self.stack.bootstrap, self.stack.prefix) >= names

        wait_for("watch-clusters to publish every cluster as ready", ready, timeout=60, interval=0.2)

    def stop(self) -> None:
        """SIGTERM all three at once, then wait for each (a graceful stop takes seconds)."""
        processes = [p for p in (self.watcher, self.stack.applier, self.stack.worker) if p is not None]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            Stack._stop(process)

    # -- the CLI ---------------------------------------------------------------------------

    def rollout(self, *args: str, timeout: float = 120) -> Run:
        done = subprocess.run(
            [sys.executable, "-m", "rollout_cli.main", *args],
            env=self.stack.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    def apply(self, *documents: dict[str, Any]) -> Run:
        path = self.workdir / f"manifests-{len(self.applied)}.yaml"
        path.write_text(yaml.safe_dump_all(list(documents), sort_keys=False))
        self.applied.append(path)
        return self.apply_file(path)

    def apply_file(self, path: Path) -> Run:
        applied = self.rollout("apply", "-f", str(path))
        assert applied.code == 0, f"rollout apply -f {path} failed:\n{applied.stdout}\n{applied.stderr}"
        return applied

    def wait(self, module: str, phase: str = "Complete", timeout: str = "90s") -> Run:
        """`rollout status MODULE --wait --for phase=PHASE -o json` (its exit code is asserted by callers)."""
        return self.rollout("status", module, "--wait", "--for", f"phase={phase}", "--timeout", timeout, "-o", "json")

    def history(self, module: str) -> list[dict[str, Any]]:
        run = self.rollout("history", module, "-o", "json")
        assert run.code == 0, run.stderr
        return list(run.json())

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.stack.log(n)[-4000:]}" for n in ("worker", "applier", "watch-clusters"))
