"""An OCI registry on 127.0.0.1 (the CNCF distribution registry) and pushes in Flux's formats.

:class:`OCIRegistry` runs the ``registry`` binary built by
:func:`infra.localflux.build.ensure_registry` on a free port with filesystem storage in its
workdir: plain HTTP by default (an OCIRepository then needs ``insecure: true``), or HTTPS
with a private CA (``tls=True``; the CA and a serving certificate for 127.0.0.1 come from
:func:`infra.localkube.credentials.make_credentials`, the same openssl recipe as the local
kube-apiserver; an OCIRepository then needs ``certSecretRef`` to a secret with ``ca.crt``).
No registry auth: the distribution registry's htpasswd accepts only bcrypt hashes, which
would add a dependency for a path no test exercises yet (private registries are reached
with a ``secretRef`` to a ``kubernetes.io/dockerconfigjson`` secret — rendered and
CRD-checked, not run against this registry).

Pushes go through the registry's HTTP API (``POST /v2/<repo>/blobs/uploads/``, a monolithic
``PUT ...&digest=``, then ``PUT /v2/<repo>/manifests/<tag>``), with no extra tools:

- :meth:`OCIRegistry.push_artifact` writes what ``flux push artifact`` writes: an OCI image
  manifest whose config has media type ``application/vnd.cncf.flux.config.v1+json`` and
  whose single layer (``application/vnd.cncf.flux.content.v1.tar+gzip``) is a tar.gz of
  the files. source-controller extracts the first layer; the OCIRepository's revision is
  ``<tag>@sha256:<manifest digest>`` — the digest this method returns.
- :meth:`OCIRegistry.push_chart` writes what ``helm push`` writes (config
  ``application/vnd.cncf.helm.config.v1+json`` = Chart.yaml as JSON, layer
  ``application/vnd.cncf.helm.chart.content.v1.tar+gzip``). A HelmRelease ``chartRef`` to
  an OCIRepository of it needs ``layerSelector: {mediaType:
  application/vnd.cncf.helm.chart.content.v1.tar+gzip, operation: copy}``.

The registry is ready (``GET /v2/`` answers 200) 0.2 s after start; an
OCIRepository of a pushed artifact is Ready 1.0 s after its creation (measured).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from infra.localflux.build import Progress, ensure_registry
from infra.localflux.defaults import HOST
from infra.localflux.processes import Process, spawn, terminate, wait_healthy
from infra.localflux.sources.archives import tar_gz
from infra.localflux.sources.helm import chart_metadata
from infra.localkafka.processes import free_ports
from infra.localkube.credentials import make_credentials

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_CONTENT = "application/vnd.cncf.flux.content.v1.tar+gzip"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


class OCIRegistry:
    """The distribution registry as a child process; see the module docstring."""

    def __init__(self, workdir: Path, *, tls: bool = False) -> None:
        self.workdir = workdir
        self.tls = tls
        self.ca: Path | None = None
        self.port = 0
        self._process: Process | None = None
        self._context: ssl.SSLContext | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``, as in an image reference."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """``oci://127.0.0.1:<port>`` — append ``/<repository>`` for an OCIRepository's ``url``."""
        return f"oci://{self.host}"

    @property
    def api(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def start(self, progress: Progress | None = None) -> OCIRegistry:
        binary = ensure_registry(progress)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, debug = free_ports(2)
        config = self.workdir / "config.yml"
        config.write_text(yaml.safe_dump(self._config(debug), sort_keys=False))
        log = self.workdir / "registry.log"
        env = {"OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"}
        self._process = spawn([str(binary), "serve", str(config)], log, env)
        wait_healthy(f"the OCI registry on {self.host}", self._process, log, self._answers)
        return self

    def stop(self) -> None:
        if self._process is not None:
            terminate(self._process)
            self._process = None

    def _config(self, debug_port: int) -> dict[str, Any]:
        http: dict[str, Any] = {"addr": self.host, "secret": secrets.token_hex(16)}
        http["debug"] = {"addr": f"{HOST}:{debug_port}"}
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}, "delete": {"enabled": True}},
            "http": http,
        }
        if self.tls:
            pki = make_credentials(self.workdir / "pki")
            self.ca = pki.ca
            http["tls"] = {"certificate": str(pki.serving_cert), "key": str(pki.serving_key)}
            self._context = ssl.create_default_context(cafile=str(pki.ca))
        return config

    def _answers(self) -> bool:
        try:
            self._request("GET", "/v2/")
        except urllib.error.HTTPError as error:
            return error.code == 401
        except (OSError, urllib.error.URLError):
            return False
        return True

    def push_artifact(
        self, repository: str, tag: str, files: dict[str, str], *, source: str = "", revision: str = ""
    ) -> str:
        """Push `files` as a Flux artifact at `repository`:`tag`; returns the manifest digest.

        Reproducible: the same files (and `source`/`revision`) give the same digest.
        """
        annotations = {}  # no creation time (unlike `flux push artifact`): same files, same digest
        if source:
            annotations["org.opencontainers.image.source"] = source
        if revision:
            annotations["org.opencontainers.image.revision"] = revision
        return self._push(repository, tag, (FLUX_CONFIG, b"{}"), (FLUX_CONTENT, tar_gz(files)), annotations)

    def push_chart(self, repository: str, tag: str, chart: bytes) -> str:
        """Push a chart archive as ``helm push`` does; returns the manifest digest."""
        config = json.dumps(chart_metadata(chart)).encode()
        return self._push(repository, tag, (HELM_CONFIG, config), (HELM_CHART, chart), {})

    def _push(
        self,
        repository: str,
        tag: str,
        config: tuple[str, bytes],
        layer: tuple[str, bytes],
        annotations: dict[str, str],
    ) -> str:
        manifest: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": self._push_blob(repository, *config),
            "layers": [self._push_blob(repository, *layer)],
        }
        if annotations:
            manifest["annotations"] = annotations
        body = json.dumps(manifest).encode()
        path = f"/v2/{repository}/manifests/{tag}"
        self._request("PUT", path, body, {"Content-Type": OCI_MANIFEST})
        return _digest(body)

    def _push_blob(self, repository: str, media_type: str, data: bytes) -> dict[str, Any]:
        digest = _digest(data)
        headers = self._request("POST", f"/v2/{repository}/blobs/uploads/", b"")
        location = urllib.parse.urljoin(self.api + "/", headers["Location"])
        separator = "&" if "?" in location else "?"
        upload = f"{location}{separator}digest={urllib.parse.quote(digest)}"
        self._request("PUT", upload, data, {"Content-Type": "application/octet-stream"})
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def _request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
        url = path if path.startswith("http") else self.api + path
        request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self._context)
        )
        with opener.open(request, timeout=10) as response:
            response.read()
            return response.headers


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
