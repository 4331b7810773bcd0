"""The local fleet's example: what `rollout up --clusters N` puts in its Git server and applies.

Pure: repository trees (path → file content) and manifests (YAML text), nothing started.
The example has to work with no network and no container runtime — the workload clusters
are bare kube-apiservers without nodes — so it ships configuration, not workloads:

- repository `fleet-apps`, three tags of the `podinfo` app (a Namespace and ConfigMaps
  under `apps/podinfo/`, namespaced objects written *without* `metadata.namespace`, placed
  by the Kustomization's `targetNamespace`):
  `v1.0.0`; `v1.1.0` changes a ConfigMap and replaces another (Flux prunes the old one);
  `v1.2.0` is broken on purpose (its kustomization lists a file that is not there: Flux's
  `BuildFailed`), to watch a canary fail and the rollout roll back.
  `platform/` holds what the BootstrapModule applies from the management cluster.
- manifests: Module `podinfo` (staged: `canary` = the clusters labelled `ring=canary`,
  then `wave` 50 % at a time, `onFailure: Rollback`) and BootstrapModule `platform`, one
  file per podinfo version so that an upgrade is one `rollout apply -f`.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

REPOSITORY = "fleet-apps"
VERSIONS = ("v1.0.0", "v1.1.0", "v1.2.0")
BROKEN_VERSION = "v1.2.0"
NAMESPACE = "fleet"
CANARY_LABEL = ("ring", "canary")


def cluster_labels(index: int) -> dict[str, str]:
    """Cluster 1 is the canary, the others the wave; all carry `env: local`."""
    return {"env": "local", "ring": "canary" if index == 1 else "wave"}


def _doc(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def podinfo_tree(version: str) -> dict[str, str]:
    """`apps/podinfo/` at `version` (see the module docstring)."""
    resources = ["namespace.yaml", "settings.yaml", "greeting.yaml" if version == "v1.0.0" else "banner.yaml"]
    if version == BROKEN_VERSION:
        resources.append("missing.yaml")  # kustomize build fails: the canary fails in Flux
    files = {
        "namespace.yaml": _doc("""
            apiVersion: v1
            kind: Namespace
            metadata:
              name: podinfo
            """),
        "settings.yaml": _doc(f"""
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: podinfo-settings
            data:
              version: "{version}"
              cluster: "${{CLUSTER}}"
            """),
        "greeting.yaml": _doc("""
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: podinfo-greeting
            data:
              message: hello from the local fleet
            """),
        "banner.yaml": _doc("""
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: podinfo-banner
            data:
              message: a new banner replaces the greeting
            """),
    }
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources}
    tree = {f"apps/podinfo/{name}": files[name] for name in resources if name in files}
    tree["apps/podinfo/kustomization.yaml"] = yaml.safe_dump(kustomization, sort_keys=False)
    return tree


def platform_tree() -> dict[str, str]:
    """`platform/`: what the BootstrapModule applies into every cluster from the management cluster."""
    return {
        "platform/namespace.yaml": _doc("""
            apiVersion: v1
            kind: Namespace
            metadata:
              name: platform
            """),
        "platform/fleet-info.yaml": _doc("""
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: fleet-info
              namespace: platform
            data:
              managedBy: rollout
              cluster: "${CLUSTER}"
            """),
    }


def repository_trees() -> dict[str, dict[str, str]]:
    """Tag → the whole tree of `fleet-apps` at that tag."""
    return {version: {**podinfo_tree(version), **platform_tree()} for version in VERSIONS}


def podinfo_module(git_url: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"env": "local"}},
            "sync": {
                "interval": "1m",
                "source": {"git": {"url": git_url, "version": {"tag": version}}},
                "package": {
                    "kustomize": {
                        "path": "./apps/podinfo",
                        "targetNamespace": "podinfo",
                        "substitute": {"CLUSTER": "$(CLUSTER_NAME)"},
                    }
                },
            },
            "rollout": {
                "stages": [
                    {"name": "canary", "selector": {"matchLabels": dict([CANARY_LABEL])}, "minSuccessTime": "5s"},
                    {"name": "wave", "maxConcurrency": "50%"},
                ],
                "progressDeadline": "2m",
                "onFailure": "Rollback",
            },
        },
    }


def platform_module(git_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "BootstrapModule",
        "metadata": {"name": "platform", "namespace": NAMESPACE},
        "spec": {
            "selector": {},
            "sync": {
                "interval": "1m",
                "source": {"git": {"url": git_url, "version": {"tag": VERSIONS[0]}}},
                "package": {"kustomize": {"path": "./platform", "substitute": {"CLUSTER": "$(CLUSTER_NAME)"}}},
            },
        },
    }


def manifest_files(git_url: str) -> dict[str, str]:
    """File name → YAML: `fleet.yaml` (both modules at v1.0.0) and `podinfo-<version>.yaml`."""
    files = {"fleet.yaml": yaml.safe_dump_all([platform_module(git_url), podinfo_module(git_url, VERSIONS[0])])}
    for version in VERSIONS[1:]:
        files[f"podinfo-{version}.yaml"] = yaml.safe_dump(podinfo_module(git_url, version), sort_keys=False)
    return files
