"""Sync options (docs/modules.md) honoured by the real source-, kustomize- and helm-controller.

Every Module here is applied with `rollout apply` and can only reach `Complete` if Flux
honoured its option: a private Git repository reached with `secretRef`, a SOPS-encrypted
Secret decrypted with an age key from `decryption.secretRef`, a custom resource judged by
`healthCheckExprs`, OCI artifacts over plain HTTP (`insecure`) and over TLS with a private CA
(`certSecretRef`), a Helm release kept in its `storageNamespace`. Where an option is left
out, the same sync fails in Flux and the engine halts the canary (`onFailure: Halt` and a
short `progressDeadline` when Flux only retries) — the wave never gets it.

Secrets live where docs/modules.md says a Module's do: `flux-system` of every workload
cluster, created by the test. Nothing is mocked and no test writes a Flux status. SOPS
encryption is done by the real `sops` and key generation by `age-keygen`, built from the Go
module proxy at the versions kustomize-controller decrypts with and cached in
`~/.cache/rollout/tools/` (`infra.localflux.ensure_sops`/`ensure_age_keygen`).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from infra.localflux import (
    GitServer,
    HelmRepository,
    LocalFluxError,
    OCIRegistry,
    build_chart,
    ensure_age_keygen,
    ensure_sops,
)
from infra.localflux.build import Progress
from tests.flux.engine import EngineOnFlux, Run
from tests.flux.fleet import CHART_CONFIGMAP, config_map, create, get
from tests.kube.cluster import KubeCluster

pytestmark = pytest.mark.integration
FLUX_NAMESPACE = "flux-system"
FAILING_DEADLINE = "20s"
"""progressDeadline of the syncs that must fail: Flux retries a source it cannot reach forever."""


# --- manifests ------------------------------------------------------------------------------


def module(name: str, source: dict[str, Any], package: dict[str, Any], **rollout: Any) -> dict[str, Any]:
    """A Module for every `env: local` cluster: the canary (c1) first, then the wave (c2)."""
    stages = [{"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}}, {"name": "wave"}]
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"env": "local"}},
            "sync": {"interval": "1m", "source": source, "package": package},
            "rollout": {"stages": stages, "onFailure": "Halt", **rollout},
        },
    }


def configmap(name: str, **data: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    """A Secret in flux-system, where a Module's Flux objects look for it."""
    metadata = {"name": name, "namespace": FLUX_NAMESPACE}
    encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": encoded}


async def create_namespaces(engine: EngineOnFlux, *names: str) -> None:
    for cluster in engine.fleet.workloads.values():
        for name in names:
            await cluster.create_namespace(name)


async def put_secret(engine: EngineOnFlux, name: str, data: dict[str, bytes]) -> None:
    """What an operator provisions with each workload cluster (docs/modules.md, Where Secrets live)."""
    for cluster in engine.fleet.workloads.values():
        await create(cluster, secret(name, data))


def completed(engine: EngineOnFlux, name: str, phase: str = "Complete") -> Run:
    done = engine.wait(name, phase)
    assert done.code == 0, f"{name} did not reach {phase}: {done.stdout}\n{done.stderr}\n{engine.logs()}"
    return done


def assigned(engine: EngineOnFlux, name: str) -> list[str]:
    """Clusters the engine assigned `name` to, in order."""
    return [d["cluster"] for d in engine.history(name) if d["action"] == "assign"]


def failure(engine: EngineOnFlux, name: str) -> dict[str, Any]:
    return next(d for d in engine.history(name) if d["action"] == "failed")


async def ready_message(cluster: KubeCluster, kind: str, name: str) -> str:
    """`reason: message` of a Flux object's Ready condition in flux-system."""
    obj = await get(cluster, kind, FLUX_NAMESPACE, name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c["type"] == "Ready"), {})
    return f"{ready.get('status')} {ready.get('reason')}: {ready.get('message')}"


async def secret_data(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str] | None:
    """The decoded data of a Secret, or None when there is none."""
    async with cluster.client() as api:
        try:
            found = await CoreV1Api(api).read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
    return {key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()}


# --- 1 + 2: a private Git repository, SOPS ----------------------------------------------------


def age_key(workdir: Path) -> tuple[bytes, str]:
    """A new age identity from the real `age-keygen`: (the key file, its public recipient)."""
    keygen = _tool(ensure_age_keygen)
    path = workdir / "age.agekey"
    _run([str(keygen), "-o", str(path)], workdir)
    recipient = _run([str(keygen), "-y", str(path)], workdir).strip()
    return path.read_bytes(), recipient


def sops_encrypt(workdir: Path, manifest: str, recipient: str) -> str:
    """`manifest` with its data encrypted by the real `sops` for an age recipient."""
    sops = _tool(ensure_sops)
    path = workdir / "secret.yaml"
    path.write_text(manifest)
    command = [str(sops), "encrypt", "--age", recipient, "--encrypted-regex", "^(data|stringData)$", str(path)]
    return _run(command, workdir)


def _tool(ensure: Callable[[Progress], Path]) -> Path:
    try:
        return ensure(lambda message: print(f"\n[localflux] {message}", file=sys.__stderr__, flush=True))
    except LocalFluxError as error:
        pytest.fail(f"cannot build the tool the SOPS test needs: {error}", pytrace=False)


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}"
    return done.stdout


async def test_a_private_git_repository_completes_with_its_secret_ref_and_sops_secrets_are_decrypted_with_an_age_key(
    engine: EngineOnFlux, private_git_server: GitServer
) -> None:
    assert private_git_server.credentials is not None
    user, password = private_git_server.credentials
    key, recipient = age_key(engine.workdir)
    value = secrets.token_hex(12)
    plain = textwrap.dedent(f"""\
        apiVersion: v1
        kind: Secret
        metadata:
          name: db-credentials
        type: Opaque
        stringData:
          password: {value}
        """)
    encrypted = sops_encrypt(engine.workdir, plain, recipient)
    assert value not in encrypted and "ENC[AES256_GCM," in encrypted and recipient in encrypted
    repository = f"private-{uuid.uuid4().hex[:6]}"
    tree = {"deploy/settings.yaml": configmap("private-settings", origin="private-git")}
    tree |= {"secrets/db-credentials.yaml": encrypted}
    private_git_server.commit(repository, tree, tag="v1")
    await create_namespaces(engine, "private-app", "sops-app", "sops-undecrypted")
    await put_secret(engine, "git-auth", {"username": user.encode(), "password": password.encode()})
    await put_secret(engine, "sops-age", {"age.agekey": key})

    git = {"url": private_git_server.url(repository), "version": {"tag": "v1"}}
    authenticated = git | {"secretRef": {"name": "git-auth"}}
    decryption = {"provider": "sops", "secretRef": {"name": "sops-age"}}
    engine.apply(
        module(
            "private-app", {"git": authenticated}, {"kustomize": {"path": "./deploy", "targetNamespace": "private-app"}}
        ),
        module(
            "sops-app",
            {"git": authenticated},
            {"kustomize": {"path": "./secrets", "targetNamespace": "sops-app", "decryption": decryption}},
        ),
        module(
            "sops-undecrypted",
            {"git": authenticated},
            {"kustomize": {"path": "./secrets", "targetNamespace": "sops-undecrypted"}},
        ),
        module(
            "anonymous-app",
            {"git": git},
            {"kustomize": {"path": "./deploy", "targetNamespace": "private-app"}},
            progressDeadline=FAILING_DEADLINE,
        ),
    )

    completed(engine, "private-app")
    completed(engine, "sops-app")
    for cluster in engine.fleet.workloads.values():
        assert await config_map(cluster, "private-app", "private-settings") == {"origin": "private-git"}
        assert await secret_data(cluster, "sops-app", "db-credentials") == {"password": value}

    # Without `decryption` the value never reaches a cluster, but Flux does not refuse the Secret
    # either: kustomize-controller v1.9.4 normalizes objects (a Secret through its typed form,
    # which drops the top-level `sops` key) before its "is SOPS encrypted, configuring
    # decryption is required" guard looks for that key, so it applies the ciphertext and the
    # sync succeeds (internal/controller/kustomization_controller.go, apply()).
    completed(engine, "sops-undecrypted")
    for cluster in engine.fleet.workloads.values():
        undecrypted = await secret_data(cluster, "sops-undecrypted", "db-credentials")
        assert undecrypted is not None and undecrypted["password"].startswith("ENC[AES256_GCM,"), undecrypted

    # without `secretRef` the source never gets the revision: the canary halts on the deadline
    completed(engine, "anonymous-app", "Halted")
    assert assigned(engine, "anonymous-app") == ["c1"]
    c1 = engine.fleet.workloads["c1"]
    refused = await ready_message(c1, "GitRepository", "anonymous-app-c1")
    assert refused.startswith("False") and "authentication required" in refused, refused


# --- 3: healthCheckExprs ----------------------------------------------------------------------
#
# A `status` written in Git never reaches the cluster: Flux's server-side apply drops it from
# every object but a CRD (fluxcd/pkg/ssa v0.76.1, normalize/normalize.go). So the test plays
# the Widgets' controller, as a real operator would: OPERATOR_DELAY after it sees a Widget's
# generation it copies `spec.outcome` into `status.phase`, with `status.observedGeneration`,
# through the status subresource. Until then the CEL expressions cannot be evaluated (no
# `status.phase`), or Flux holds the Widget InProgress (an observedGeneration behind
# `metadata.generation`, checked before the expressions): Flux keeps waiting.

WIDGETS = ("health.rollout.dev", "v1", "widgets")
WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.health.rollout.dev
spec:
  group: health.rollout.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""
OPERATOR_DELAY = 2.0
"""Seconds the Widgets' controller takes to report a Widget's phase."""


def widget(outcome: str) -> str:
    """A Widget whose controller will report `status.phase: <outcome>`."""
    manifest = {"apiVersion": "health.rollout.dev/v1", "kind": "Widget", "metadata": {"name": "gadget"}}
    return yaml.safe_dump(manifest | {"spec": {"outcome": outcome}})


async def widget_controller(clusters: list[KubeCluster], reported: dict[tuple[str, str], float]) -> None:
    """Report `spec.outcome` as `status.phase` of each cluster's Widget, OPERATOR_DELAY after
    seeing it; `reported[(cluster, outcome)]` = when (wall clock)."""
    loop = asyncio.get_running_loop()
    seen: dict[tuple[str, str], float] = {}
    while True:
        for cluster in clusters:
            async with cluster.client() as api:
                custom = CustomObjectsApi(api)
                try:
                    found = await custom.get_namespaced_custom_object(*WIDGETS[:2], "widgets", WIDGETS[2], "gadget")
                except ApiException as error:
                    if error.status == 404:
                        continue
                    raise
                outcome, generation = found["spec"]["outcome"], found["metadata"]["generation"]
                status = {"phase": outcome, "observedGeneration": generation}
                first_seen = seen.setdefault((cluster.name, outcome), loop.time())
                if found.get("status") == status or loop.time() < first_seen + OPERATOR_DELAY:
                    continue
                await custom.patch_namespaced_custom_object_status(
                    *WIDGETS[:2],
                    "widgets",
                    WIDGETS[2],
                    "gadget",
                    {"status": status},
                    _content_type="application/merge-patch+json",
                )
                reported[(cluster.name, outcome)] = time.time()
        await asyncio.sleep(0.2)


async def ready_since(cluster: KubeCluster, name: str) -> float:
    """When the Kustomization `name` in flux-system last became Ready=True (whole seconds)."""
    obj = await get(cluster, "Kustomization", FLUX_NAMESPACE, name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    ready = next(c for c in conditions if c["type"] == "Ready" and c["status"] == "True")
    return datetime.fromisoformat(ready["lastTransitionTime"]).timestamp()


async def test_health_check_exprs_complete_a_ready_custom_resource_and_halt_the_canary_on_a_failed_one(
    engine: EngineOnFlux, git_server: GitServer
) -> None:
    repository = f"widgets-{uuid.uuid4().hex[:6]}"
    for tag, outcome in (("v1", "Ready"), ("v2", "Failed")):
        git_server.commit(repository, {"deploy/crd.yaml": WIDGET_CRD, "deploy/widget.yaml": widget(outcome)}, tag=tag)
    await create_namespaces(engine, "widgets")
    exprs = [
        {
            "apiVersion": "health.rollout.dev/v1",
            "kind": "Widget",
            "current": "status.phase == 'Ready'",
            "failed": "status.phase == 'Failed'",
        }
    ]
    package = {
        "kustomize": {
            "path": "./deploy",
            "targetNamespace": "widgets",
            "wait": True,
            "healthCheckExprs": exprs,
            "timeout": "30s",
        }
    }

    def widgets(tag: str) -> dict[str, Any]:
        return module("widgets", {"git": {"url": git_server.url(repository), "version": {"tag": tag}}}, package)

    c1, c2 = engine.fleet.workloads["c1"], engine.fleet.workloads["c2"]
    reported: dict[tuple[str, str], float] = {}
    controller = asyncio.create_task(widget_controller([c1, c2], reported))
    try:
        engine.apply(widgets("v1"))
        await asyncio.to_thread(completed, engine, "widgets")
        for name, cluster in engine.fleet.workloads.items():
            # Flux waited for the phase: Ready only once the controller reported it
            assert await ready_since(cluster, f"widgets-{name}") >= int(reported[(cluster.name, "Ready")])

        engine.apply(widgets("v2"))
        await asyncio.to_thread(completed, engine, "widgets", "Halted")
    finally:
        controller.cancel()
    failed = failure(engine, "widgets")
    assert failed["cluster"] == "c1" and "HealthCheckFailed" in failed["reason"], failed
    # the `failed` expression, not the timeout: kstatus stops waiting as soon as it holds
    assert "failed early" in failed["reason"] and "Widget/widgets/gadget status: 'Failed'" in failed["reason"], failed
    assert "HealthCheckFailed" in await ready_message(c1, "Kustomization", "widgets-c1")
    history = engine.history("widgets")
    assert [d["cluster"] for d in history if d["action"] == "assign" and d["revision"] == "v2"] == ["c1"]
    on_wave = await c2.object("widgets", "widgets", "gadget", group="health.rollout.dev")
    assert on_wave is not None and on_wave["spec"] == {"outcome": "Ready"}  # the wave still runs v1


# --- 4: OCI over plain HTTP and over TLS with a private CA -----------------------------------


async def test_oci_artifacts_sync_over_plain_http_with_insecure_and_over_tls_with_a_cert_secret_ref(
    engine: EngineOnFlux, oci_registry: OCIRegistry
) -> None:
    tls_registry = OCIRegistry(engine.workdir / "oci-tls", tls=True).start()
    try:
        plain_digest = oci_registry.push_artifact("apps/plain", "v1", {"cm.yaml": configmap("over-http", via="http")})
        tls_digest = tls_registry.push_artifact("apps/tls", "v1", {"cm.yaml": configmap("over-tls", via="tls")})
        assert tls_registry.ca is not None
        await create_namespaces(engine, "oci-apps")
        await put_secret(engine, "registry-ca", {"ca.crt": tls_registry.ca.read_bytes()})
        kustomize = {"kustomize": {"path": "./", "targetNamespace": "oci-apps"}}
        plain = {"url": f"{oci_registry.url}/apps/plain", "version": {"tag": "v1"}}
        tls = {"url": f"{tls_registry.url}/apps/tls", "version": {"tag": "v1"}}
        engine.apply(
            module("oci-plain", {"oci": plain | {"insecure": True}}, kustomize),
            module("oci-tls", {"oci": tls | {"certSecretRef": {"name": "registry-ca"}}}, kustomize),
            module("oci-untrusted", {"oci": tls}, kustomize, progressDeadline=FAILING_DEADLINE),
        )

        completed(engine, "oci-plain")
        completed(engine, "oci-tls")
        completed(engine, "oci-untrusted", "Halted")
        # read while the registry still answers: the controller retries, and a retry after
        # stop() says "connection refused" instead of why it was refused
        assert assigned(engine, "oci-untrusted") == ["c1"]
        refused = await ready_message(engine.fleet.workloads["c1"], "OCIRepository", "oci-untrusted-c1")
        assert refused.startswith("False") and "certificate signed by unknown authority" in refused, refused
    finally:
        tls_registry.stop()

    for name, cluster in engine.fleet.workloads.items():
        assert await config_map(cluster, "oci-apps", "over-http") == {"via": "http"}
        assert await config_map(cluster, "oci-apps", "over-tls") == {"via": "tls"}
        plain_source = await get(cluster, "OCIRepository", FLUX_NAMESPACE, f"oci-plain-{name}")
        tls_source = await get(cluster, "OCIRepository", FLUX_NAMESPACE, f"oci-tls-{name}")
        assert plain_source is not None and plain_source["status"]["artifact"]["revision"] == f"v1@{plain_digest}"
        assert tls_source is not None and tls_source["status"]["artifact"]["revision"] == f"v1@{tls_digest}"


# --- 5: Helm targetNamespace + storageNamespace ----------------------------------------------


async def test_a_helm_release_installs_into_its_target_namespace_and_keeps_its_history_in_its_storage_namespace(
    engine: EngineOnFlux, helm_repository: HelmRepository
) -> None:
    helm_repository.add_chart(build_chart("stored", "0.1.0", {"configmap.yaml": CHART_CONFIGMAP}, {"color": "red"}))
    await create_namespaces(engine, "helm-history")
    source = {"helm": {"url": helm_repository.url, "chart": "stored", "version": "0.1.0"}}
    package = {
        "helm": {
            "releaseName": "stored",
            "targetNamespace": "helm-apps",
            "storageNamespace": "helm-history",
            "values": {"color": "green"},
        }
    }
    engine.apply(module("stored", source, package))

    completed(engine, "stored")
    for cluster in engine.fleet.workloads.values():
        assert await config_map(cluster, "helm-apps", "stored-settings") == {"color": "green"}
        release = await secret_data(cluster, "helm-history", "sh.helm.release.v1.stored.v1")
        assert release is not None, f"no Helm release secret in helm-history of {cluster.name}"
        for elsewhere in ("helm-apps", FLUX_NAMESPACE):
            assert await secret_data(cluster, elsewhere, "sh.helm.release.v1.stored.v1") is None
