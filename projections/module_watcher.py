"""The module watcher: Module, BootstrapModule, RolloutApproval and RolloutCommand objects
of the management cluster become intents on Kafka.

What flows through here: the four `rollout.dev/v1alpha1` kinds, listed and watched in the
namespaces given (or all) with `projections.informer.list_and_watch`, go in; the same
events `rollout apply`, `rollout delete`, `rollout approve` and `rollout pause|resume|...`
publish come out on the intents topic:

- a Module/BootstrapModule created or changed → `ModuleApplied` (its manifest: name,
  namespace, labels, annotations and spec, validated by `rollout/api/manifests.py`), stamped
  with the cluster-observation positions known when it is published (`fleet`, causal
  order: rollout_cli/publishing/intents.py); only when the manifest differs from what was last
  published for that name. An object the manifest rules refuse is reported on its status
  (`InvalidSpec`) and not published.
- deleted (or gone while nobody watched) → `ModuleDeleted`.
- a ModuleRestriction created or changed → `RestrictionApplied` on the cluster-observations
  topic (rollout/api/restrictions.py; keyed by namespace, beside the fleet it restricts), deleted
  → `RestrictionDeleted`; published before any module, and every module of its namespace is
  checked again. A Module/BootstrapModule breaking its namespace's restriction is reported
  on its status (Stalled, reason `Restricted`, the message naming the restriction, the rule
  and the value) and not published — the engine would refuse it too.
- a FreezeCalendar (in the namespaces watched) or ClusterFreezeCalendar (cluster-wide,
  whatever the namespaces) created or changed → `FreezeCalendarApplied` on the
  cluster-observations topic (keyed by scope and name, as `rollout apply` publishes it),
  deleted → `FreezeCalendarDeleted` (rollout/engine/freeze_gate.py); an object the
  manifest rules refuse is logged, naming the field, and not published.
- a RolloutApproval → `RolloutCommanded(command=approve, stage, user=spec.approver)`; a
  RolloutCommand → `RolloutCommanded(command, cluster, user=spec.requestedBy)` — both with
  `via: crd` and `namespace` = the object's namespace, the only one where RBAC let its
  creator create it: the engine refuses the command for a module of another namespace
  (rollout/engine/intents.py `door_refusal`), a verdict written back as `Refused`; a
  RolloutBreakGlass → `CalendarBreakGlass(scope=its namespace, name=spec.calendar, reason,
  until, user=spec.requestedBy)` (keyed `freeze/<namespace>/<name>`: every module the
  calendar governs, rollout/engine/freeze_gate.py). Once per object, whatever happens to it
  later (its spec is immutable; deleting it undoes nothing). RolloutBreakGlass is watched
  only where the API server serves it (an older chart's CRDs: said loudly, as the policies).

Event ids are derived from the object (`k8s-<uid>-g<generation>-rv<resourceVersion>`,
`k8s-<uid>` for approvals and commands), so the same object version always gives the same
event, and the engine — which drops an intent id it has handled — applies it once even if
two watchers published it. The marker annotation `rollout.dev/applied-by: watch-modules`
on published manifests tells the modules this watcher owns from those applied with
`rollout apply`: only those are deleted when their object is gone.

Seeding (`PublishedIntents.fold`): what was published before, read from the intents topic
after the publisher fenced any previous leader (projections/fenced_publisher.py), so a
restart or a new leader republishes nothing that is unchanged. Nothing is published before
all four kinds have been listed once. Names are fleet-wide keys: a module name used in two
namespaces (or by both kinds) is a conflict, logged, and only the first is published.

`on_change(ref)` tells the status writer (projections/module_status.py) which objects to
refresh; `refs` and `event_refs` are what it reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from projections.informer import list_and_watch
from projections.kube import RetryPolicy, call
from rollout.api.manifests import CLUSTER_SCOPE, MANIFEST_ADAPTER, ModuleRestrictionManifest
from rollout.api.resources import ApprovalSpec, BreakGlassSpec, CommandSpec
from rollout.api.restrictions import RestrictionViolation, check_module
from rollout.wire.events import (
    CalendarBreakGlass,
    EventRejected,
    FreezeCalendarApplied,
    FreezeCalendarDeleted,
    ModuleApplied,
    ModuleDeleted,
    RestrictionApplied,
    RestrictionDeleted,
    RolloutCommanded,
    freeze_key,
    parse_event,
    restriction_key,
)

__all__ = [
    "APPLIED_BY",
    "GROUP",
    "KINDS",
    "RESTRICTIONS",
    "ModuleWatcher",
    "ObjectRef",
    "PublishedIntents",
    "problem_text",
]

log = logging.getLogger("rollout.modules")

GROUP, VERSION = "rollout.dev", "v1alpha1"
APPLIED_BY = ("rollout.dev/applied-by", "watch-modules")
KINDS = {"modules": "Module", "bootstrapmodules": "BootstrapModule"}
REQUESTS = {"rolloutapprovals": "RolloutApproval", "rolloutcommands": "RolloutCommand"}
BREAK_GLASSES = {"rolloutbreakglasses": "RolloutBreakGlass"}  # a request an older chart may not serve yet
RESTRICTIONS = {"modulerestrictions": "ModuleRestriction"}
CALENDARS = {"freezecalendars": "FreezeCalendar"}  # namespaced: watched in each namespace, as restrictions
CLUSTER_CALENDARS = {"clusterfreezecalendars": "ClusterFreezeCalendar"}  # cluster-scoped: watched once
POLICIES = {**RESTRICTIONS, **CALENDARS, **CLUSTER_CALENDARS}
LATER_KINDS = {**POLICIES, **BREAK_GLASSES}  # kinds an older chart may not serve yet: watched when served
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

Publish = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
Fleet = Callable[[], Awaitable[dict[int, int]]]


@dataclass(frozen=True)
class ObjectRef:
    """Where an object lives, and the version of it an event was made from."""

    plural: str
    kind: str
    namespace: str
    name: str
    uid: str
    generation: int = 0

    @property
    def involved(self) -> dict[str, str]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass
class PublishedIntents:
    """What the intents topic already holds from this watcher: manifests by name, event ids."""

    modules: dict[str, Any] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    # namespace → the ModuleRestriction this watcher published for it (cluster-observations topic)
    restrictions: dict[str, ModuleRestrictionManifest] = field(default_factory=dict)
    # (scope, name) → the freeze calendar this watcher published (cluster-observations topic)
    calendars: dict[tuple[str, str], Any] = field(default_factory=dict)

    def fold_restrictions(self, records: Iterable[bytes | None]) -> PublishedIntents:
        """Add what the cluster-observations topic holds of this watcher's restrictions."""
        for value in records:
            try:
                event = parse_event(value)
            except EventRejected:
                continue
            if isinstance(event, RestrictionApplied):
                manifest = event.restriction
                namespace = manifest.metadata.namespace
                if manifest.metadata.annotations.get(APPLIED_BY[0]) == APPLIED_BY[1]:
                    self.restrictions[namespace] = manifest
                else:
                    self.restrictions.pop(namespace, None)
            elif isinstance(event, RestrictionDeleted):
                current = self.restrictions.get(event.namespace)
                if current is not None and current.metadata.name == event.name:
                    del self.restrictions[event.namespace]
            elif isinstance(event, FreezeCalendarApplied):
                calendar = event.calendar
                if calendar.metadata.annotations.get(APPLIED_BY[0]) == APPLIED_BY[1]:
                    self.calendars[calendar.scope, calendar.name] = calendar
                else:
                    self.calendars.pop((calendar.scope, calendar.name), None)
            elif isinstance(event, FreezeCalendarDeleted):
                self.calendars.pop((event.scope, event.name), None)
        return self

    @classmethod
    def fold(cls, records: Iterable[bytes | None]) -> PublishedIntents:
        seen = cls()
        for value in records:
            try:
                event = parse_event(value)
            except EventRejected:
                continue
            if isinstance(event, ModuleApplied | ModuleDeleted | RolloutCommanded | CalendarBreakGlass):
                if event.id.startswith("k8s-"):
                    seen.ids.add(event.id)
            if isinstance(event, ModuleApplied):
                if event.module.metadata.annotations.get(APPLIED_BY[0]) == APPLIED_BY[1]:
                    seen.modules[event.module.name] = event.module
                else:
                    seen.modules.pop(event.module.name, None)
            elif isinstance(event, ModuleDeleted):
                seen.modules.pop(event.name, None)
        return seen


def problem_text(error: ValidationError) -> str:
    """Pydantic's errors as one line per field: `spec.rollout.stages.0.name: ...`."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'object'}: {e['msg'].removeprefix('Value error, ')}"
        for e in error.errors()
    )


def manifest_of(obj: Mapping[str, Any]) -> Any:
    """The manifest `rollout apply` would take for this object; ValidationError if refused."""
    metadata = obj.get("metadata") or {}
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    annotations[APPLIED_BY[0]] = APPLIED_BY[1]
    return MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": {
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "labels": dict(metadata.get("labels") or {}),
                "annotations": annotations,
            },
            "spec": obj.get("spec"),
        }
    )


def _ref(plural: str, obj: Mapping[str, Any]) -> ObjectRef:
    metadata = obj.get("metadata") or {}
    return ObjectRef(
        plural=plural,
        kind=KINDS.get(plural) or REQUESTS.get(plural) or LATER_KINDS[plural],
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        generation=int(metadata.get("generation") or 0),
    )


class ModuleWatcher:
    """Publishes intents for the rollout.dev objects; see the module docstring."""

    def __init__(
        self,
        api: ApiClient,
        publish: Publish,
        fleet: Fleet,
        *,
        namespaces: Sequence[str] = (),
        seed: PublishedIntents | None = None,
        on_change: Callable[[ObjectRef], Awaitable[None]] | None = None,
        policy: RetryPolicy | None = None,
        watch_timeout: int = 300,
        publish_restrictions: Publish | None = None,
    ) -> None:
        self.api = api
        self.publish = publish
        self.fleet = fleet
        # to the cluster-observations topic; None: restrictions are enforced here, not published
        self.publish_restrictions = publish_restrictions
        self.namespaces: list[str | None] = list(dict.fromkeys(namespaces)) or [None]
        self.published = seed or PublishedIntents()
        self.on_change = on_change
        self.policy = policy or RetryPolicy()
        self.watch_timeout = watch_timeout
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name)
        self.refs: dict[str, ObjectRef] = {}  # module name → its object
        self.problems: dict[str, str] = {}  # module name → why its spec is refused
        self.restrictions: dict[str, ModuleRestrictionManifest] = {}  # namespace → the one in force
        self.restricted: set[str] = set()  # modules whose problem is their namespace's restriction
        self.calendar_problems: dict[tuple[str, str, str], str] = {}  # a refused calendar object → why
        self.event_refs: dict[str, ObjectRef] = {}  # event id → the object version it came from
        self._listed: set[tuple[str | None, str]] = set()
        self._lock = asyncio.Lock()

    def _scopes(self, plural: str) -> list[str | None]:
        """Where `plural` is listed: a cluster-scoped kind once, cluster-wide (None)."""
        return [None] if plural in CLUSTER_CALENDARS else self.namespaces

    @property
    def synced(self) -> bool:
        plurals = (*LATER_KINDS, *KINDS, *REQUESTS)
        return all((scope, plural) in self._listed for plural in plurals for scope in self._scopes(plural))

    async def run(self) -> None:
        """Watch until cancelled."""
        custom = CustomObjectsApi(self.api)
        plurals = (*await self._served_later_kinds(custom), *KINDS, *REQUESTS)
        tasks = []
        for plural in plurals:
            for scope in self._scopes(plural):
                if scope is None:
                    list_fn = partial(custom.list_cluster_custom_object, GROUP, VERSION, plural)
                else:
                    list_fn = partial(custom.list_namespaced_custom_object, GROUP, VERSION, scope, plural)
                tasks.append(self._informer(scope, plural, list_fn))
        await asyncio.gather(*tasks)

    async def _served_later_kinds(self, custom: CustomObjectsApi) -> tuple[str, ...]:
        """The plurals of LATER_KINDS (ModuleRestriction, the freeze calendars,
        RolloutBreakGlass) the API server serves. Helm installs a chart's CRDs on install,
        not on upgrade: a management cluster upgraded from a release without a kind must
        keep publishing modules (that kind not enforced, said loudly) rather than wait
        forever for a list that answers 404."""
        try:
            served = await call(custom.get_api_resources, GROUP, VERSION, policy=self.policy, what=f"{GROUP}/{VERSION}")
        except ApiException as error:
            if error.status != 404:
                raise
            served = None  # no rollout.dev kind at all yet: the informers below wait for theirs
        names = {resource.name for resource in served.resources} if served is not None else set()
        for plural, kind in LATER_KINDS.items():
            if plural in names:
                continue
            log.warning(
                "%s/%s serves no %s: %s objects are not enforced here "
                "(kubectl apply -f charts/rollout/crds/rollout.dev.yaml, then restart)",
                GROUP,
                VERSION,
                plural,
                kind,
            )
            self._listed.update((scope, plural) for scope in self._scopes(plural))
        return tuple(plural for plural in LATER_KINDS if plural in names)

    def _informer(self, scope: str | None, plural: str, list_fn: Callable[..., Awaitable[Any]]) -> Awaitable[None]:
        async def on_list(items: list[dict[str, Any]]) -> None:
            async with self._lock:
                first = not self.synced
                self._listed.add((scope, plural))
                for key in [k for k in self.objects if k[0] == plural and (scope is None or k[1] == scope)]:
                    del self.objects[key]
                for item in items:
                    self.objects[(plural, *_key(item))] = item
                if self.synced:
                    await self._reconcile_all(None if first else scope)

        async def on_event(kind: str, obj: dict[str, Any]) -> None:
            async with self._lock:
                if kind == "DELETED":
                    self.objects.pop((plural, *_key(obj)), None)
                else:
                    self.objects[(plural, *_key(obj))] = obj
                if self.synced:
                    await self._reconcile_object(plural, obj, deleted=kind == "DELETED")

        return list_and_watch(
            list_fn,
            on_list=on_list,
            on_event=on_event,
            what=f"{plural} in {scope or 'all namespaces'}",
            policy=self.policy,
            watch_timeout=self.watch_timeout,
        )

    async def _reconcile_all(self, scope: str | None) -> None:
        await self._reconcile_restrictions(scope)
        await self._reconcile_calendars()
        for (plural, namespace, _name), obj in sorted(self.objects.items(), key=lambda item: item[0]):
            if (scope is None or namespace == scope) and plural not in POLICIES:
                await self._reconcile_object(plural, obj, deleted=False)
        present = {name for (plural, _ns, name) in self.objects if plural in KINDS}
        for name, manifest in sorted(self.published.modules.items()):
            in_scope = scope is None or manifest.metadata.namespace == scope
            if (
                name not in present
                and in_scope
                and (None in self.namespaces or manifest.metadata.namespace in self.namespaces)
            ):
                digest = hashlib.sha256(manifest.model_dump_json(by_alias=True).encode()).hexdigest()[:16]
                await self._delete(manifest.kind, name, f"k8s-gone-{name}-{digest}")

    async def _reconcile_object(self, plural: str, obj: dict[str, Any], *, deleted: bool) -> None:
        if plural in CALENDARS or plural in CLUSTER_CALENDARS:
            await self._reconcile_calendars()
        elif plural in RESTRICTIONS:
            namespace = _key(obj)[0]
            await self._reconcile_restrictions(namespace)
            for (other, space, _name), module in sorted(self.objects.items(), key=lambda item: item[0]):
                if other in KINDS and space == namespace:  # checked again under the new restriction
                    await self._module_changed(other, module)
        elif plural in KINDS:
            if deleted:
                await self._module_deleted(_ref(plural, obj))
            else:
                await self._module_changed(plural, obj)
        elif not deleted:
            await self._request(plural, obj)

    async def _module_changed(self, plural: str, obj: dict[str, Any]) -> None:
        ref = _ref(plural, obj)
        owner = self.refs.get(ref.name)
        if owner is not None and (owner.namespace, owner.kind) != (ref.namespace, ref.kind):
            if (owner.plural, owner.namespace, owner.name) in self.objects:
                log.error(
                    "%s %s/%s: the name is taken by %s %s/%s; module names are fleet-wide",
                    ref.kind, ref.namespace, ref.name, owner.kind, owner.namespace, owner.name,
                )  # fmt: skip
                return
        self.refs[ref.name] = ref
        try:
            manifest = manifest_of(obj)
        except ValidationError as error:
            self.problems[ref.name] = problem_text(error)
            self.restricted.discard(ref.name)
            log.error("%s %s/%s refused: %s", ref.kind, ref.namespace, ref.name, self.problems[ref.name])
            await self._changed(ref)
            return
        try:
            check_module(self.restrictions.get(ref.namespace), manifest)
        except RestrictionViolation as violation:
            self.problems[ref.name] = str(violation)
            self.restricted.add(ref.name)
            log.error("%s %s/%s %s", ref.kind, ref.namespace, ref.name, violation)
            await self._changed(ref)
            return
        self.problems.pop(ref.name, None)
        self.restricted.discard(ref.name)
        event_id = f"k8s-{ref.uid}-g{ref.generation}-rv{obj['metadata'].get('resourceVersion', '')}"
        self.event_refs.setdefault(event_id, ref)
        if self.published.modules.get(ref.name) != manifest:
            event = ModuleApplied(id=event_id, module=manifest, fleet=await self.fleet())
            await self.publish([(ref.name, event.to_bytes())])
            self.published.modules[ref.name] = manifest
            self.published.ids.add(event_id)
            log.info("%s %s/%s generation %d published", ref.kind, ref.namespace, ref.name, ref.generation)
        await self._changed(ref)

    async def _module_deleted(self, ref: ObjectRef) -> None:
        owner = self.refs.get(ref.name)
        if owner is not None and owner.uid == ref.uid:
            self.refs.pop(ref.name, None)
            self.problems.pop(ref.name, None)
            self.restricted.discard(ref.name)
        manifest = self.published.modules.get(ref.name)
        if manifest is not None and (manifest.metadata.namespace, manifest.kind) == (ref.namespace, ref.kind):
            await self._delete(ref.kind, ref.name, f"k8s-{ref.uid}-deleted")

    async def _delete(self, kind: str, name: str, event_id: str) -> None:
        event = ModuleDeleted(id=event_id, kind=kind, name=name)  # type: ignore[arg-type]
        await self.publish([(name, event.to_bytes())])
        self.published.modules.pop(name, None)
        self.published.ids.add(event_id)
        log.info("%s %s deleted", kind, name)

    async def _reconcile_restrictions(self, scope: str | None) -> None:
        """The restriction in force in each namespace of `scope` (None: all): the first
        valid ModuleRestriction object by name (another is logged and ignored); published
        when it differs from what was, a RestrictionDeleted when the namespace lost its own."""
        found: dict[str, tuple[ModuleRestrictionManifest, dict[str, Any]]] = {}
        for (plural, namespace, name), obj in sorted(self.objects.items(), key=lambda item: item[0]):
            if plural not in RESTRICTIONS or (scope is not None and namespace != scope):
                continue
            try:
                manifest = manifest_of({**obj, "spec": obj.get("spec") or {}})  # every field is optional
            except ValidationError as error:
                log.error("ModuleRestriction %s/%s refused: %s", namespace, name, problem_text(error))
                continue
            if namespace in found:
                kept = found[namespace][0].metadata.name
                log.error("ModuleRestriction %s/%s ignored: %s is the namespace's restriction", namespace, name, kept)
                continue
            found[namespace] = (manifest, obj)
        namespaces = {ns for ns in (*self.restrictions, *self.published.restrictions) if scope in (None, ns)}
        for namespace in sorted(namespaces | set(found)):
            if namespace in found:
                await self._restriction_changed(*found[namespace])
            else:
                await self._restriction_gone(namespace)

    async def _restriction_changed(self, manifest: ModuleRestrictionManifest, obj: dict[str, Any]) -> None:
        namespace = manifest.metadata.namespace
        self.restrictions[namespace] = manifest
        if self.published.restrictions.get(namespace) == manifest or self.publish_restrictions is None:
            return
        ref = _ref("modulerestrictions", obj)
        event_id = f"k8s-{ref.uid}-g{ref.generation}-rv{obj['metadata'].get('resourceVersion', '')}"
        event = RestrictionApplied(id=event_id, restriction=manifest)
        await self.publish_restrictions([(restriction_key(namespace), event.to_bytes())])
        self.published.restrictions[namespace] = manifest
        log.info("ModuleRestriction %s/%s published", namespace, manifest.metadata.name)

    async def _restriction_gone(self, namespace: str) -> None:
        self.restrictions.pop(namespace, None)
        published = self.published.restrictions.get(namespace)
        if published is None or self.publish_restrictions is None:
            return
        if not (None in self.namespaces or namespace in self.namespaces):
            return  # not ours to watch
        digest = hashlib.sha256(published.model_dump_json(by_alias=True).encode()).hexdigest()[:16]
        event = RestrictionDeleted(id=f"k8s-gone-{namespace}-{digest}", namespace=namespace, name=published.name)
        await self.publish_restrictions([(restriction_key(namespace), event.to_bytes())])
        del self.published.restrictions[namespace]
        log.info("ModuleRestriction %s/%s deleted", namespace, published.name)

    async def _reconcile_calendars(self) -> None:
        """Every freeze calendar object as it is: published when it differs from what this
        watcher published for it, FreezeCalendarDeleted for one it published that is gone
        (in the namespaces it watches; the fleet's, always). Calendars are few: all at once."""
        if self.publish_restrictions is None:
            return  # published with the policy, or not at all
        found: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
        for (plural, namespace, name), obj in sorted(self.objects.items(), key=lambda item: item[0]):
            if plural not in CALENDARS and plural not in CLUSTER_CALENDARS:
                continue
            try:
                calendar = manifest_of(obj)
            except ValidationError as error:
                problem = problem_text(error).replace(f"{POLICIES[plural]}.", "")  # the union's tag, not a field
                if self.calendar_problems.get((plural, namespace, name)) != problem:  # said once per problem
                    self.calendar_problems[plural, namespace, name] = problem
                    log.error("%s %s refused: %s", POLICIES[plural], f"{namespace}/{name}".lstrip("/"), problem)
                continue
            self.calendar_problems.pop((plural, namespace, name), None)
            found[calendar.scope, calendar.name] = (calendar, obj)
        for key in sorted(set(found) | set(self.published.calendars)):
            if key in found:
                calendar, obj = found[key]
                if self.published.calendars.get(key) == calendar:
                    continue
                ref = _ref(f"{calendar.kind.lower()}s", obj)
                event_id = f"k8s-{ref.uid}-g{ref.generation}-rv{obj['metadata'].get('resourceVersion', '')}"
                applied = FreezeCalendarApplied(id=event_id, calendar=calendar)
                await self.publish_restrictions([(freeze_key(*key), applied.to_bytes())])
                self.published.calendars[key] = calendar
                log.info("%s %s published", calendar.kind, calendar.identity)
            elif key[0] == CLUSTER_SCOPE or None in self.namespaces or key[0] in self.namespaces:
                published = self.published.calendars.pop(key)
                digest = hashlib.sha256(published.model_dump_json(by_alias=True).encode()).hexdigest()[:16]
                gone = FreezeCalendarDeleted(id=f"k8s-gone-{key[0]}-{key[1]}-{digest}", scope=key[0], name=key[1])
                await self.publish_restrictions([(freeze_key(*key), gone.to_bytes())])
                log.info("%s %s deleted", published.kind, published.identity)

    async def _request(self, plural: str, obj: dict[str, Any]) -> None:
        ref = _ref(plural, obj)
        event_id = f"k8s-{ref.uid}"
        self.event_refs.setdefault(event_id, ref)
        if event_id in self.published.ids:
            return
        try:
            event = _command_event(plural, obj, event_id)
        except ValidationError as error:
            self.problems[event_id] = problem_text(error)
            log.error("%s %s/%s refused: %s", ref.kind, ref.namespace, ref.name, self.problems[event_id])
            self.published.ids.add(event_id)
            await self._changed(ref)
            return
        if isinstance(event, CalendarBreakGlass):
            key, what = freeze_key(event.scope, event.name), f"break-glass of calendar {event.scope}/{event.name}"
        else:
            key, what = event.module, event.command
        await self.publish([(key, event.to_bytes())])
        self.published.ids.add(event_id)
        log.info("%s %s/%s published (%s by %s)", ref.kind, ref.namespace, ref.name, what, event.user)
        await self._changed(ref)

    async def _changed(self, ref: ObjectRef) -> None:
        if self.on_change is not None:
            await self.on_change(ref)


def _command_event(plural: str, obj: Mapping[str, Any], event_id: str) -> RolloutCommanded | CalendarBreakGlass:
    if plural in BREAK_GLASSES:  # the calendar of the object's own namespace: RBAC there decides
        glass = BreakGlassSpec.model_validate(obj.get("spec") or {})
        return CalendarBreakGlass(
            id=event_id,
            scope=_key(obj)[0],
            name=glass.calendar,
            reason=glass.reason,
            until=glass.until_seconds,
            user=glass.requested_by,
            via="crd",
        )
    if plural == "rolloutapprovals":
        approval = ApprovalSpec.model_validate(obj.get("spec") or {})
        return RolloutCommanded(
            id=event_id,
            module=approval.module,
            command="approve",
            stage=approval.stage,
            user=approval.approver,
            groups=approval.approver_groups,
            release=approval.release,
            via="crd",
            namespace=_key(obj)[0],  # where RBAC let it be created: the engine checks the module's
        )
    command = CommandSpec.model_validate(obj.get("spec") or {})
    if command.command in ("pin", "unpin") and command.cluster is None:
        raise ValidationError.from_exception_data(
            "CommandSpec", [{"type": "missing", "loc": ("spec", "cluster"), "input": obj.get("spec")}]
        )
    if command.command == "hold-promotion" and not (command.reason or "").strip():
        raise ValidationError.from_exception_data(
            "CommandSpec", [{"type": "missing", "loc": ("spec", "reason"), "input": obj.get("spec")}]
        )
    return RolloutCommanded(
        id=event_id,
        module=command.module,
        command=command.command,
        cluster=command.cluster,
        reason=command.reason if command.command in ("hold-promotion", "resume-promotion") else None,
        user=command.requested_by,
        via="crd",
        namespace=_key(obj)[0],
    )


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")
