"""The status writer: the engine's module status and verdicts, written back on the objects
`rollout watch-modules` publishes, so that `kubectl get modules` shows the rollout.

    module-status (compacted, by module) ─┐
    verdicts (by event id)               ─┴─► status of Module / BootstrapModule /
                                              RolloutApproval / RolloutCommand + Events

- Module and BootstrapModule: `resource_status` — phase, target and stable revision,
  per-stage counts, progress, Ready / Progressing / Stalled conditions
  (`rollout.api.resources`) — and `observedGeneration`: the object generation of the latest ModuleApplied the engine
  has answered (its verdict names the event id, which carries the generation). A refused
  apply makes the object Stalled with the engine's reason; a spec the manifest rules refuse,
  Stalled with `InvalidSpec`; one its namespace's ModuleRestriction refuses, with
  `Restricted` (the message names the restriction, the rule and the value). When the
  phase or the current stage changes, an Event is recorded on the object
  (`rollout.api.resources.phase_change`: StageStarted, WaitingForApproval, Halted, RolledBack,
  Complete, ...).
- RolloutApproval and RolloutCommand: `eventId`, and `verdict` Published → Accepted or
  Refused with the engine's message.

Both topics' documents are read with their models (rollout/wire/status.py, verdicts.py),
shared with the worker that writes them. One this writer cannot read — a newer
schemaVersion — is logged and skipped: the object keeps the status last written.

Status is written through the status subresource with a JSON patch replacing it whole, only when it
differs from what was last written (so an unchanged module-status record costs nothing).
Both topics are read from the beginning (`read_committed`) by `infra.client.follow`, so a
restarted writer rebuilds what it needs. The module-status topic is first read to its end
(`seed`, before the watcher lists anything): a new leader starts from the engine's current
view of each module, and the older records `follow` then replays are skipped — otherwise a
takeover would walk every object back through its history (Pending, an earlier stage, ...)
and record its Events a second time. Failures to write are logged and retried on the
next change: status is a view, never a source of truth.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from infra import client
from projections.kube import RetryPolicy, call, describe
from projections.module_watcher import GROUP, KINDS, VERSION, ModuleWatcher, ObjectRef
from rollout.api.resources import (
    INVALID_SPEC_REASON,
    RESTRICTED_REASON,
    Condition,
    ModuleResourceStatus,
    condition_message,
    conditions_for,
    invalid_status,
    phase_change,
)
from rollout.api.resources import StageStatus as StageResourceStatus
from rollout.wire.documents import DocumentError
from rollout.wire.status import PENDING, ModuleStatus, StageStatus
from rollout.wire.verdicts import VerdictDocument

__all__ = ["StatusWriter", "resource_status"]

log = logging.getLogger("rollout.modules")

COMPONENT = "rollout-watch-modules"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


NOT_STAGED = ModuleStatus(module="", phase=PENDING, reason="not staged by the engine yet")


def resource_status(
    view: ModuleStatus | None,
    *,
    generation: int | None,
    previous: dict[str, Any] | None,
    now: str,
    refusal: str | None = None,
) -> dict[str, Any]:
    """The object's `status` from the engine's module-status document `view` (None: the
    engine has none yet) — any shape, a pending one shows `Pending` with why. `generation`:
    the object generation the engine has answered; `refusal`: the engine's reason when it
    refused the latest one (the object is then Stalled)."""
    view = view or NOT_STAGED
    stages = [_stage_status(stage) for stage in view.stages]
    members = sum(stage.members for stage in stages) + view.unstaged.members
    phase, reason = view.phase, view.last_decision or view.reason or ""
    message = condition_message(phase, view.current_stage, view.target_revision, reason)
    if refusal is not None:
        phase, message = "Refused", f"the engine refused generation {generation}: {refusal}"
    conditions = conditions_for(
        "Halted" if phase == "Refused" else phase,
        message,
        generation=generation,
        previous=(previous or {}).get("conditions") or [],
        now=now,
    )
    if phase == "Refused":
        conditions = [{**c, "reason": "Refused"} for c in conditions]
    status = ModuleResourceStatus(
        observedGeneration=generation,
        phase=phase,
        targetRevision=view.target_revision,
        stableRevision=view.stable_revision,
        currentStage=view.current_stage,
        currentStages=view.stages_under_way,
        progress=f"{view.succeeded}/{members}" if stages else None,
        stages=stages,
        lastDecision=view.last_decision or None,
        conditions=[Condition.model_validate(c) for c in conditions],
    )
    return status.model_dump(by_alias=True, exclude_none=True)


def _stage_status(stage: StageStatus) -> StageResourceStatus:
    counts = stage.counts
    return StageResourceStatus(
        name=stage.name,
        state=stage.state,
        members=counts.members,
        succeeded=counts.succeeded,
        updating=counts.updating,
        failed=counts.failed,
        pending=counts.pending + counts.not_ready,
    )


class StatusWriter:
    """Writes status and Events for the objects `watcher` knows; see the module docstring."""

    def __init__(
        self,
        api: ApiClient,
        watcher: ModuleWatcher,
        *,
        policy: RetryPolicy | None = None,
        now: Callable[[], str] = _now,
    ) -> None:
        self.api = api
        self.watcher = watcher
        self.policy = policy or RetryPolicy()
        self.now = now
        self.views: dict[str, ModuleStatus] = {}  # module name → its module-status document
        self.answered: dict[str, tuple[int, str | None]] = {}  # module → (generation, refusal)
        self.verdicts: dict[str, VerdictDocument] = {}  # event id → its verdict
        self.written: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name) → status
        self._seeded: dict[str, tuple[int, int]] = {}  # module → (partition, offset) read by `seed`
        self._lock = asyncio.Lock()

    async def seed(self, bootstrap: str, module_status: str) -> None:
        """Read the module-status topic to its end: the engine's current view of each module."""
        for record in await client.read_all(bootstrap, module_status):
            if record.key is not None:
                self._seeded[record.key] = (record.partition, record.offset)
                self._view(record.key, record.value)

    def _view(self, module: str, value: bytes | None) -> None:
        if value is None:
            self.views.pop(module, None)
            return
        try:
            self.views[module] = ModuleStatus.read(value)
        except DocumentError as error:
            log.error("module %s: %s; its status is left as it was", module, error)

    async def follow(self, bootstrap: str, module_status: str, verdicts: str) -> None:
        """Read both topics until cancelled."""
        await asyncio.gather(self._follow_status(bootstrap, module_status), self._follow_verdicts(bootstrap, verdicts))

    async def _follow_status(self, bootstrap: str, topic: str) -> None:
        async for record in client.follow(bootstrap, topic):
            if record.key is None or (record.partition, record.offset) <= self._seeded.get(record.key, (-1, -1)):
                continue  # history `seed` has read past
            self._view(record.key, record.value)
            ref = self.watcher.refs.get(record.key)
            if ref is not None:
                await self.refresh(ref)

    async def _follow_verdicts(self, bootstrap: str, topic: str) -> None:
        async for record in client.follow(bootstrap, topic):
            if record.value is None:
                continue
            try:
                verdict = VerdictDocument.read(record.value)
            except DocumentError as error:
                log.error("verdict %s: %s; skipped", record.key, error)
                continue
            event_id = verdict.event
            ref = self.watcher.event_refs.get(event_id)
            if ref is None:
                if event_id.startswith("k8s-"):
                    self.verdicts[event_id] = verdict  # for an object the watcher has not listed yet
                continue
            await self._on_verdict(ref, event_id, verdict)

    async def _on_verdict(self, ref: ObjectRef, event_id: str, verdict: VerdictDocument) -> None:
        self.verdicts[event_id] = verdict
        if ref.plural in KINDS:
            refused = None if verdict.accepted else verdict.reason
            previous = self.answered.get(ref.name, (0, None))[0]
            if ref.generation >= previous:
                self.answered[ref.name] = (ref.generation, refused)
        current = self.watcher.refs.get(ref.name) if ref.plural in KINDS else ref
        if current is not None:
            await self.refresh(current)

    async def refresh(self, ref: ObjectRef) -> None:
        """Write `ref`'s status (and an Event) if it changed since last written."""
        async with self._lock:
            if ref.plural in KINDS:
                await self._refresh_module(ref)
            else:
                await self._refresh_request(ref)

    async def _refresh_module(self, ref: ObjectRef) -> None:
        key = (ref.plural, ref.namespace, ref.name)
        previous = self.written.get(key) or (self.watcher.objects.get(key) or {}).get("status")
        problem = self.watcher.problems.get(ref.name)
        if problem is not None:
            reason = RESTRICTED_REASON if ref.name in self.watcher.restricted else INVALID_SPEC_REASON
            now = self.now()
            status = invalid_status(problem, generation=ref.generation, previous=previous, now=now, reason=reason)
        else:
            generation, refusal = self.answered.get(ref.name, (None, None))
            if generation is None and previous:
                generation = previous.get("observedGeneration")  # answered before this writer started
            view = self.views.get(ref.name)
            status = resource_status(view, generation=generation, previous=previous, now=self.now(), refusal=refusal)
        if status == previous:
            return
        if await self._write(ref, status):
            change = phase_change(previous, status)
            if change is not None:
                await self._event(ref, *change)

    async def _refresh_request(self, ref: ObjectRef) -> None:
        key = (ref.plural, ref.namespace, ref.name)
        previous = self.written.get(key) or (self.watcher.objects.get(key) or {}).get("status")
        event_id = f"k8s-{ref.uid}"
        problem = self.watcher.problems.get(event_id)
        verdict = self.verdicts.get(event_id)
        if problem is not None:
            status = {"verdict": "Invalid", "message": problem}
        elif verdict is not None:
            status = {"eventId": event_id, "verdict": "Accepted" if verdict.accepted else "Refused"}
            status["message"] = verdict.reason or ("accepted" if verdict.accepted else "refused")
        else:
            status = {"eventId": event_id, "verdict": "Published", "message": "waiting for the engine's verdict"}
        if status != previous:
            await self._write(ref, status)

    async def _write(self, ref: ObjectRef, status: dict[str, Any]) -> bool:
        custom = CustomObjectsApi(self.api)
        try:
            await call(
                custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                ref.namespace,
                ref.plural,
                ref.name,
                [{"op": "add", "path": "/status", "value": status}],  # JSON patch: replaces the whole status
                policy=self.policy,
                what=f"status of {ref.kind} {ref.namespace}/{ref.name}",
            )
        except ApiException as error:
            if error.status != 404:
                log.warning("status of %s %s/%s: %s", ref.kind, ref.namespace, ref.name, describe(error))
            return False
        self.written[(ref.plural, ref.namespace, ref.name)] = status
        return True

    async def _event(self, ref: ObjectRef, reason: str, kind: str, message: str) -> None:
        now = self.now()
        body = {
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": ref.namespace},
            "involvedObject": ref.involved,
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await call(
                CoreV1Api(self.api).create_namespaced_event,
                ref.namespace,
                body,
                policy=self.policy,
                what=f"event on {ref.kind} {ref.namespace}/{ref.name}",
            )
        except ApiException as error:
            log.warning("event %s on %s %s/%s: %s", reason, ref.kind, ref.namespace, ref.name, describe(error))
