"""source-controller, kustomize-controller and helm-controller as local processes.

:class:`FluxControllers` runs one set of the three against one API server, given a
kubeconfig file: the controllers have no ``--kubeconfig`` flag, so it is passed as
``KUBECONFIG`` (with ``RUNTIME_NAMESPACE=flux-system``). Each API server whose Flux objects
are reconciled gets its own set — the management cluster for the remote objects (which
reach workload clusters through ``kubeConfig.secretRef``), each workload cluster for its
proxy objects. The API server must serve the Flux CRDs and have ``flux-system`` first:
``await infra.localflux.prepare_cluster(kubeconfig, binaries.crds)``.

Every listener is on a free 127.0.0.1 port: ``--metrics-addr``, ``--health-addr`` and,
for source-controller, its artifact server (``--storage-addr``, advertised as
``--storage-adv-addr``: kustomize- and helm-controller download artifacts from the URL in
the source's status). Leader election is off (one replica). Shorter waits than the
defaults, because tests cannot wait 30 s: ``--requeue-dependency=2s`` (an object whose
``dependsOn`` is not ready yet is looked at again after 2 s), ``--max-retry-delay=10s``
(the back-off of a failing object is capped at 10 s instead of 15 min) and, for
helm-controller, ``--graceful-shutdown-timeout=5s`` (default 10 min).

Logs go to ``<workdir>/<name>-<controller>.log`` (JSON lines). :meth:`FluxControllers.start`
starts all three, then waits for each one's ``/readyz``: 0.3 s for the set on two cores
(up to ~2 s on a busy machine); the first object is reconciled ≈ 1 s after it is created.
RSS: source 79-86 MiB, kustomize 115-129, helm 83-97; idle, each uses ≤ 0.1 % of a core. :meth:`FluxControllers.stop`:
SIGTERM (each exits in ~20 ms when idle), then SIGKILL. :meth:`FluxControllers.check`
raises (with the log tail) when one has exited since — useful when a test waits in vain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from infra.localflux.build import FluxBinaries
from infra.localflux.defaults import HOST, RUNTIME_NAMESPACE
from infra.localflux.errors import LocalFluxError
from infra.localflux.processes import Process, http_ok, log_tail, spawn, terminate, wait_healthy
from infra.localkafka.processes import free_ports

COMMON_FLAGS = ("--enable-leader-election=false", "--max-retry-delay=10s", "--log-level=info")


@dataclass
class Controller:
    """One running controller process: its log, and where it answers health checks."""

    name: str
    process: Process
    log: Path
    health_url: str

    def exited(self) -> bool:
        return self.process.poll() is not None


@dataclass
class FluxControllers:
    """The three Flux controllers against one API server; see the module docstring."""

    binaries: FluxBinaries
    kubeconfig: Path
    workdir: Path
    name: str
    storage_url: str = ""
    controllers: dict[str, Controller] = field(default_factory=dict)

    def start(self) -> None:
        """Start the three controllers and wait until each is healthy."""
        if self.controllers:
            raise LocalFluxError(f"the Flux controllers of {self.name} are already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        storage_port, *_ = ports = free_ports(7)
        self.storage_url = f"http://{HOST}:{storage_port}"
        storage_path = self.workdir / f"{self.name}-storage"
        storage_path.mkdir(exist_ok=True)  # source-controller refuses a missing one
        storage = [
            f"--storage-path={storage_path}",
            f"--storage-addr={HOST}:{storage_port}",
            f"--storage-adv-addr={HOST}:{storage_port}",
            "--requeue-dependency=2s",
        ]
        kustomize = ["--no-remote-bases=true", "--requeue-dependency=2s"]
        helm = ["--requeue-dependency=2s", "--graceful-shutdown-timeout=5s"]
        try:
            self._spawn("source-controller", self.binaries.source_controller, storage, ports[1:3])
            self._spawn("kustomize-controller", self.binaries.kustomize_controller, kustomize, ports[3:5])
            self._spawn("helm-controller", self.binaries.helm_controller, helm, ports[5:7])
            for controller in self.controllers.values():
                healthy = functools.partial(http_ok, controller.health_url)
                wait_healthy(f"{controller.name} of {self.name}", controller.process, controller.log, healthy)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, controller: str, binary: Path, flags: list[str], ports: list[int]) -> None:
        metrics, health = ports
        log = self.workdir / f"{self.name}-{controller}.log"
        command = [str(binary), f"--metrics-addr={HOST}:{metrics}", f"--health-addr={HOST}:{health}"]
        command += [*COMMON_FLAGS, *flags]
        env = {"KUBECONFIG": str(self.kubeconfig), "RUNTIME_NAMESPACE": RUNTIME_NAMESPACE}
        process = spawn(command, log, env)
        self.controllers[controller] = Controller(controller, process, log, f"http://{HOST}:{health}/readyz")

    def check(self) -> None:
        """Raise :class:`LocalFluxError` with the log tail if a controller has exited."""
        for controller in self.controllers.values():
            if controller.exited():
                raise LocalFluxError(
                    f"{controller.name} of {self.name} exited with code {controller.process.returncode}; "
                    f"{controller.log}:\n{log_tail(controller.log)}"
                )

    def stop(self) -> None:
        """SIGTERM every controller (SIGKILL after a while); idempotent."""
        for controller in self.controllers.values():
            terminate(controller.process)
        self.controllers.clear()
