"""Reading rendered Kubernetes objects: pods, containers, components; typed validation.

`validation_problems` checks an object against the Kubernetes API types the way the API
server's decoder would: it is decoded into kubernetes-asyncio's model of its kind (required
fields enforced) and encoded back; anything that does not survive the round trip — an
unknown or misspelled field, a value of the wrong shape — is a problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes_asyncio.client as kube_models
from kubernetes_asyncio.client import ApiClient, Configuration

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job", "CronJob")
RUN_TO_COMPLETION = ("Job", "CronJob")
COMPONENT_LABEL = "app.kubernetes.io/component"


def _codec() -> ApiClient:
    codec = ApiClient.__new__(ApiClient)  # no HTTP client: only the (de)serializer is used
    codec.configuration = Configuration()
    return codec


_CODEC = _codec()


def model_name(obj: dict[str, Any]) -> str:
    version = obj["apiVersion"].rpartition("/")[2]
    return f"{version[:1].upper()}{version[1:]}{obj['kind']}"


def has_model(obj: dict[str, Any]) -> bool:
    return hasattr(kube_models, model_name(obj))


def validation_problems(obj: dict[str, Any]) -> list[str]:
    name = model_name(obj)
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        model = _CODEC._ApiClient__deserialize(obj, name)  # type: ignore[attr-defined]
    except (ValueError, TypeError) as error:
        return [f"{where}: {error}"]
    encoded = _CODEC.sanitize_for_serialization(model)
    if encoded == obj:
        return []
    return [f"{where}: fields lost in a round trip through {name}: {sorted(_diff(obj, encoded))}"]


def _diff(given: Any, kept: Any, path: str = "") -> Iterator[str]:
    if isinstance(given, dict) and isinstance(kept, dict):
        for key in given:
            if key not in kept:
                yield f"{path}.{key}"
            else:
                yield from _diff(given[key], kept[key], f"{path}.{key}")
    elif isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        for index, (a, b) in enumerate(zip(given, kept, strict=True)):
            yield from _diff(a, b, f"{path}[{index}]")
    elif json.dumps(given, sort_keys=True) != json.dumps(kept, sort_keys=True):
        yield f"{path}={given!r}"


@dataclass(frozen=True)
class Container:
    workload: dict[str, Any]
    spec: dict[str, Any]

    @property
    def component(self) -> str:
        return self.workload["metadata"]["labels"][COMPONENT_LABEL]

    @property
    def pod(self) -> dict[str, Any]:
        return pod_spec(self.workload)

    @property
    def args(self) -> list[str]:
        return [str(arg) for arg in self.spec.get("command", [])[1:] + self.spec.get("args", [])]

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        return {item["name"]: item for item in self.spec.get("env", [])}

    def plain_env(self) -> dict[str, str]:
        """The environment as the process sees it (values from Secrets as placeholders)."""
        return {
            name: str(item.get("value", f"<from {next(iter(item.get('valueFrom', {'?': 0})))}>"))
            for name, item in self.env.items()
        }

    def flag(self, name: str) -> str | None:
        args = self.args
        return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None

    def mount(self, path: str) -> dict[str, Any] | None:
        return next((m for m in self.spec.get("volumeMounts", []) if m["mountPath"] == path), None)

    def volume(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.pod.get("volumes", []) if v["name"] == name), None)


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload's pod template (a CronJob's: of its jobTemplate)."""
    spec = workload["spec"]["jobTemplate"]["spec"] if workload["kind"] == "CronJob" else workload["spec"]
    template: dict[str, Any] = spec["template"]
    return template


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = pod_template(workload)["spec"]
    return spec


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] in WORKLOAD_KINDS]


def containers(objects: list[dict[str, Any]]) -> list[Container]:
    """Every container of every workload, init containers first (they run `rollout` too)."""
    return [
        Container(w, c)
        for w in workloads(objects)
        for c in (*pod_spec(w).get("initContainers", []), *pod_spec(w)["containers"])
    ]


def long_running(objects: list[dict[str, Any]]) -> list[Container]:
    return [c for c in containers(objects) if c.workload["kind"] not in RUN_TO_COMPLETION]


def component(objects: list[dict[str, Any]], name: str) -> Container:
    found = [c for c in containers(objects) if c.component == name]
    assert len(found) == 1, f"expected one {name} container, found {len(found)}"
    return found[0]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def engine_processes(objects: list[dict[str, Any]]) -> list[Container]:
    """The long-running engine processes, with /metrics, /healthz and /readyz on --web-port
    under their own ServiceAccount; the dashboard serves its UI on --port and no API."""
    return [c for c in long_running(objects) if c.component != "dashboard"]
