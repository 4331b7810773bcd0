"""Versions, addresses and directories of the local kube-apiserver and etcd.

Derived from the environment only through ``ROLLOUT_CACHE_DIR`` (shared with the Kafka jar
cache): binaries live in ``<cache>/kube/<name>-<version>/<name>``, keyed by version, so a
version bump builds anew and never reuses an older binary.
"""

from __future__ import annotations

from pathlib import Path

from infra.localkafka.defaults import cache_root

KUBE_VERSION = "v1.33.13"
"""k8s.io/kubernetes used as a library; at 1.33.13 the proxy serves every staging module."""
STAGING_VERSION = "v0.33.13"
"""The published version of each k8s.io/<staging> module that k8s.io/kubernetes lists as v0.0.0."""
ETCD_VERSION = "v3.5.21"
"""The etcd Kubernetes 1.33 is tested with."""

HOST = "127.0.0.1"
GO_MODULES = Path(__file__).with_name("gomod")
"""The scratch Go modules (go.mod templates, main.go, stubs) kept in the repository."""
BUILD_TIMEOUT = 1800.0
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
SERVICE_CIDR = "10.96.0.0/16"


def kube_cache() -> Path:
    """``$ROLLOUT_CACHE_DIR/kube`` (default ``~/.cache/rollout/kube``)."""
    return cache_root() / "kube"


def binary_path(name: str, version: str) -> Path:
    return kube_cache() / f"{name}-{version}" / name
