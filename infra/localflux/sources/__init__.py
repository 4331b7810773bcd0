"""Flux sources on loopback: Git over smart HTTP, an OCI registry, a Helm repository.

One module per source kind, each usable on its own and stopped with ``stop()``:

- :mod:`.git` — :class:`GitServer`: bare repositories served by ``git http-backend``;
  ``commit(repo, files, tag=...) -> sha``, ``tag``, ``delete_tag``; optional basic auth.
- :mod:`.oci` — :class:`OCIRegistry`: the distribution registry as a child process (plain
  HTTP or TLS with a private CA, optional htpasswd); ``push_artifact`` (Flux's format) and
  ``push_chart`` (Helm's) through the registry's HTTP API.
- :mod:`.helm` — :func:`build_chart` (a chart archive from template texts) and
  :class:`HelmRepository` (``index.yaml`` + archives over HTTP; optional basic auth).

Shared pieces: :mod:`.serving` (a threaded HTTP server on a free port, basic auth) and
:mod:`.archives` (reproducible tar.gz).
"""

from __future__ import annotations

from infra.localflux.sources.archives import tar_gz
from infra.localflux.sources.git import GitServer
from infra.localflux.sources.helm import HelmRepository, build_chart
from infra.localflux.sources.oci import FLUX_CONTENT, HELM_CHART, OCIRegistry

__all__ = ["FLUX_CONTENT", "HELM_CHART", "GitServer", "HelmRepository", "OCIRegistry", "build_chart", "tar_gz"]
