"""Running etcd and kube-apiservers on free 127.0.0.1 ports, for tests and local trials.

:class:`LocalKube` owns one etcd and any number of kube-apiservers that share it, each
under its own ``--etcd-prefix`` — so one etcd serves a management cluster and several
workload clusters, each apiserver a separate Kubernetes API with its own objects, CRDs and
namespaces. Every process is started in its own session with its output in
``<workdir>/<name>.log`` and stopped (SIGTERM, then SIGKILL after ``STOP_TIMEOUT``) by
:meth:`LocalKube.stop`.

The apiservers run with RBAC authorization and a static admin token in ``system:masters``,
a serving certificate for 127.0.0.1, the default admission chain (so an apply into a
missing namespace fails as it does in a real cluster) and ``--watch-cache=false``: watches
are served straight from etcd, so a watch from a compacted resourceVersion gets
410 Gone deterministically after :meth:`LocalKube.compact` — with the watch cache an idle
collection would keep serving old revisions from memory. No controller-manager runs:
namespaces cannot be deleted (they stay Terminating), objects without finalizers can.

Readiness: etcd answers ``/health``; an apiserver answers ``/readyz`` (its post-start
hooks done). A process that exits or is not ready within ``START_TIMEOUT`` raises
:class:`LocalKubeError` carrying the end of its log.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.child_processes import spawn, terminate, wait_until_ready
from infra.localkafka.processes import free_ports
from infra.localkube.build import ETCD, KUBE_APISERVER, Progress, ensure_binary
from infra.localkube.credentials import Credentials, make_credentials
from infra.localkube.defaults import HOST, SERVICE_CIDR, START_TIMEOUT, STOP_TIMEOUT
from infra.localkube.errors import LocalKubeError


@dataclass
class APIServer:
    """One running kube-apiserver: where it listens and how to authenticate to it."""

    name: str
    url: str
    token: str
    ca: Path
    process: subprocess.Popen[bytes]
    log: Path

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig (as a mapping) with the CA inline and the admin bearer token."""
        ca_data = base64.b64encode(self.ca.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": self.url, "certificate-authority-data": ca_data}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": "admin"}}],
            "current-context": self.name,
        }

    def kubeconfig_yaml(self) -> str:
        return yaml.safe_dump(self.kubeconfig(), sort_keys=False)

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.kubeconfig_yaml())
        path.chmod(0o600)
        return path


@dataclass
class LocalKube:
    """etcd plus kube-apiservers sharing it; see the module docstring."""

    workdir: Path
    progress: Progress | None = None
    etcd_url: str = ""
    servers: dict[str, APIServer] = field(default_factory=dict)
    _etcd: subprocess.Popen[bytes] | None = None
    _credentials: Credentials | None = None

    def start(self) -> None:
        """Build (once, cached) and start etcd; apiservers come with :meth:`add_apiserver`."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        etcd = ensure_binary(ETCD, self.progress)
        ensure_binary(KUBE_APISERVER, self.progress)
        self._credentials = make_credentials(self.workdir / "pki")
        client, peer = free_ports(2)
        self.etcd_url = f"http://{HOST}:{client}"
        command = [
            str(etcd),
            "--name=rollout-test",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://{HOST}:{peer}",
            f"--initial-advertise-peer-urls=http://{HOST}:{peer}",
            f"--initial-cluster=rollout-test=http://{HOST}:{peer}",
            "--quota-backend-bytes=2147483648",
            "--unsafe-no-fsync",  # test data: durability is not the point, speed on shared disks is
            "--log-level=warn",
        ]
        self._etcd = spawn(command, self.workdir / "etcd.log")
        _wait_ready("etcd", self._etcd, self.workdir / "etcd.log", lambda: _etcd_healthy(self.etcd_url))

    def add_apiserver(self, name: str) -> APIServer:
        """Start a kube-apiserver named `name` on etcd prefix `/<name>`; wait until ready."""
        if self._credentials is None or self._etcd is None:
            raise LocalKubeError("LocalKube.start() must run before add_apiserver()")
        if name in self.servers:
            raise LocalKubeError(f"an API server named {name!r} is already running")
        credentials = self._credentials
        (port,) = free_ports(1)
        log = self.workdir / f"apiserver-{name}.log"
        command = [
            str(KUBE_APISERVER.target),
            f"--etcd-servers={self.etcd_url}",
            f"--etcd-prefix=/{name}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / ('certs-' + name)}",
            f"--tls-cert-file={credentials.serving_cert}",
            f"--tls-private-key-file={credentials.serving_key}",
            f"--client-ca-file={credentials.ca}",
            f"--token-auth-file={credentials.token_file}",
            f"--service-account-key-file={credentials.sa_pub}",
            f"--service-account-signing-key-file={credentials.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--watch-cache=false",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",  # 127.0.0.1 is not a valid endpoint of the kubernetes service
            "--profiling=false",
            "--v=0",
        ]
        process = spawn(command, log)
        url = f"https://{HOST}:{port}"
        server = APIServer(name=name, url=url, token=credentials.token, ca=credentials.ca, process=process, log=log)
        context = ssl.create_default_context(cafile=str(credentials.ca))
        _wait_ready(f"kube-apiserver {name}", process, log, lambda: _apiserver_ready(server, context))
        self.servers[name] = server
        return server

    def compact(self) -> int:
        """Compact etcd's history; every resourceVersion seen before the call now answers 410 Gone.

        A watch from resourceVersion v starts at revision v+1, which survives a compaction at
        v+1: two writes of a marker key first put the compaction point past every earlier
        version. Returns the compacted revision.
        """
        marker = {"key": base64.b64encode(b"/rollout-test/compaction-marker").decode(), "value": ""}
        _etcd_post(self.etcd_url, "/v3/kv/put", marker)
        header = _etcd_post(self.etcd_url, "/v3/kv/put", marker)
        revision = int(header["header"]["revision"])
        _etcd_post(self.etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def stop(self) -> None:
        """Stop every apiserver, then etcd."""
        for server in self.servers.values():
            _terminate(server.process)
        self.servers.clear()
        if self._etcd is not None:
            _terminate(self._etcd)
            self._etcd = None


def _wait_ready(what: str, process: subprocess.Popen[bytes], log: Path, ready: Any) -> None:
    wait_until_ready(
        what, process, log, ready, error=LocalKubeError, timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT, interval=0.2
    )


def _etcd_post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as response:
            return json.loads(response.read()).get("health") == "true"
    except (OSError, ValueError):
        return False


def _apiserver_ready(server: APIServer, context: ssl.SSLContext) -> bool:
    request = urllib.request.Request(server.url + "/readyz", headers={"Authorization": f"Bearer {server.token}"})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _terminate(process: subprocess.Popen[bytes]) -> None:
    terminate(process, STOP_TIMEOUT)
