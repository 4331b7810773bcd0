"""Versions, addresses and directories of the local Flux controllers and the OCI registry.

Derived from the environment only through ``ROLLOUT_CACHE_DIR`` (shared with the Kafka jar
and kube-apiserver caches): binaries live in ``<cache>/flux/<name>-<version>/<name>`` (tools
such as sops in ``<cache>/tools/...``), keyed by version, so a version bump builds anew and
never reuses an older binary.
"""

from __future__ import annotations

from pathlib import Path

from infra.localkafka.defaults import cache_root

SOURCE_CONTROLLER_VERSION = "v1.9.1"
KUSTOMIZE_CONTROLLER_VERSION = "v1.9.4"
HELM_CONTROLLER_VERSION = "v1.6.2"
"""Not v1.6.3: it replaces helm.sh/helm/v4 by a fork the Go module proxy refuses (403)."""
REGISTRY_VERSION = "v3.1.2"
"""github.com/distribution/distribution/v3, the CNCF reference OCI registry."""
REGISTRY_MODULE = "github.com/distribution/distribution/v3/cmd/registry"
SOPS_VERSION = "v3.13.2"
"""github.com/getsops/sops/v3, the version kustomize-controller v1.9.4 decrypts with."""
SOPS_MODULE = "github.com/getsops/sops/v3/cmd/sops"
AGE_VERSION = "v1.3.1"
"""filippo.io/age, the version kustomize-controller v1.9.4 requires."""
AGE_KEYGEN_MODULE = "filippo.io/age/cmd/age-keygen"

HOST = "127.0.0.1"
RUNTIME_NAMESPACE = "flux-system"
BUILD_TIMEOUT = 1800.0
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 30


def flux_cache() -> Path:
    """``$ROLLOUT_CACHE_DIR/flux`` (default ``~/.cache/rollout/flux``)."""
    return cache_root() / "flux"


def binary_dir(name: str, version: str, cache: str = "flux") -> Path:
    """``<cache root>/<cache>/<name>-<version>``: ``flux`` for the controllers and the registry,
    ``tools`` for command-line tools the tests run (sops, age-keygen)."""
    return cache_root() / cache / f"{name}-{version}"
