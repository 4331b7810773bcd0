"""The API documents a stored record keeps — a module's spec, its generations' syncs, a
namespace's ModuleRestriction — and what happens when a release's rules refuse one.

    record JSON ──► spec (as stored) ──(this release's ModuleSpec rules)──► ModuleSpec
                                      └──(refused)──► RefusedSpec: the stored JSON, kept as is,
                                                      and why it was refused (a `Refusal`)

The API types (rollout/api/manifests.py) are strict and may tighten from one release to the
next; a record is written once and read by every later release. So a record does not hold
its documents as the API types, but as `AppliedSpec`, `AppliedSync` and
`AppliedRestriction`: the API type when this release's rules accept the stored JSON — as
nearly always — and otherwise a `Refused*` instance of it, built from the stored JSON
without validation (`as_stored`: every part that still validates is validated, the rest
kept as stored), which is written back exactly as it was stored. Nothing is lost, the
partition loads, and a rollback to the release that wrote it reads it as before.

What a refusal means (README "Upgrading a running engine"):

* a module whose *spec* is refused halts (`spec_refusal`, checked first in
  `StageMachine.advance`): decision `halted` with the reason `StoredSpecRefused`
  (rollout/wire/decision_reasons.py; its sentence names `STORED_SPEC_REFUSED`) and
  what each rule said; nothing more moves; `rollout resume` does not lift it — re-applying
  the module with a spec this release accepts does (it replaces the spec). Clusters that
  join get what the fleet runs, as for any halted module;
* a refused *sync* of a generation (the stable one, say) stays what those clusters run;
* a refused *restriction* still restricts, as stored, until it is applied again.

The worker logs every refusal when it restores a partition (streams/state.py), with the
record's key.
"""

from __future__ import annotations

import functools
import json
import types
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    PrivateAttr,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_serializer,
)

from rollout.api.freezes import FreezeCalendarSpec
from rollout.api.manifests import ModuleRestrictionManifest, ModuleSpec, Sync
from rollout.wire.decision_reasons import STORED_SPEC_REFUSED as STORED_SPEC_REFUSED  # re-exported: the halt's name
from rollout.wire.decision_reasons import StoredSpecRefused

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Refusal:
    """Why this release refuses a document a record kept: `document` is the record's field
    ("spec", "sync", "restriction"), `problems` one line per rule broken ("sync.source.git.url: …")."""

    document: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.document}: " + "; ".join(self.problems)

    def halt_reason(self) -> StoredSpecRefused:
        """The reason of the `halted` decision of a module whose spec is refused."""
        return StoredSpecRefused(problems=list(self.problems))


class KeptAsStored(BaseModel):
    """The part every `Refused*` document shares: the JSON as stored (written back as is)
    and its `Refusal`."""

    _stored: Any = PrivateAttr(default=None)
    _refusal: Refusal | None = PrivateAttr(default=None)

    @model_serializer(mode="plain")
    def _as_stored(self) -> Any:
        return self._stored

    @property
    def refusal(self) -> Refusal:
        assert self._refusal is not None
        return self._refusal


class RefusedSpec(ModuleSpec, KeptAsStored):
    """A module spec as stored, which this release's rules refuse."""


class RefusedSync(Sync, KeptAsStored):
    """A generation's sync as stored, which this release's rules refuse."""


class RefusedRestriction(ModuleRestrictionManifest, KeptAsStored):
    """A namespace's ModuleRestriction as stored, which this release's rules refuse."""


class RefusedFreezeCalendar(FreezeCalendarSpec, KeptAsStored):
    """A freeze calendar's spec as stored, which this release's rules refuse: it freezes
    its modules until it is applied again (freeze_gate.py: a freeze is never lifted by an
    upgrade)."""


def spec_refusal(spec: ModuleSpec) -> Refusal | None:
    """Why this release refuses a module's spec as stored (None: it accepts it)."""
    return spec.refusal if isinstance(spec, RefusedSpec) else None


def refusal_of(document: Any) -> Refusal | None:
    return document.refusal if isinstance(document, KeptAsStored) else None


class KeepAsStored:
    """The validator of an `Applied*` field: the API type when this release's rules accept
    the JSON, else `refused` built as stored, with its `Refusal` (also appended to the
    validation context when that is a list: the decoder's, stored.py)."""

    def __init__(self, refused: type[KeptAsStored]) -> None:
        self.refused = refused

    def __call__(self, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if isinstance(value, KeptAsStored):
            return value  # a record copied or rebuilt by the engine: it stays as stored
        try:
            return handler(value)
        except ValidationError as error:
            if isinstance(value, BaseModel):
                raise  # the engine built it: a bug, not a stored document
            kept = as_stored(self.refused, value)
            kept._stored = value
            kept._refusal = Refusal(
                info.field_name or self.refused.__name__,
                tuple(_problem(detail) for detail in error.errors(include_url=False)),
            )
            if isinstance(info.context, list):
                info.context.append(kept._refusal)
            return kept


AppliedSpec = Annotated[ModuleSpec, SerializeAsAny(), WrapValidator(KeepAsStored(RefusedSpec))]
AppliedSync = Annotated[Sync, SerializeAsAny(), WrapValidator(KeepAsStored(RefusedSync))]
AppliedRestriction = Annotated[
    ModuleRestrictionManifest, SerializeAsAny(), WrapValidator(KeepAsStored(RefusedRestriction))
]
AppliedFreezeCalendar = Annotated[
    FreezeCalendarSpec, SerializeAsAny(), WrapValidator(KeepAsStored(RefusedFreezeCalendar))
]


def _problem(detail: Any) -> str:
    where = ".".join(str(part) for part in detail["loc"])
    return f"{where}: {detail['msg']}" if where else str(detail["msg"])


# -- building a document as stored -----------------------------------------------------------


def as_stored(model: type[M], data: Any) -> M:
    """`data` (a model's JSON) as an instance of `model`, without validating it as a whole:
    each field that validates on its own is validated, a nested model that does not is
    built the same way, anything else is kept as stored. Fields missing get their default."""
    if not isinstance(data, dict):
        return model.model_construct()
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        for key in (name, field.alias):
            if key is not None and key in data:
                values[name] = _value_as_stored(field.annotation, data[key])
                break
    return model.model_construct(**values)


def _value_as_stored(annotation: Any, value: Any) -> Any:
    try:
        return _adapter(annotation).validate_json(json.dumps(value))
    except (ValidationError, TypeError, ValueError):
        pass
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _value_as_stored(args[0], value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return as_stored(annotation, value)
    if origin in (Union, types.UnionType) and value is not None:
        for option in args:
            if _shaped_like(option, value):
                return _value_as_stored(option, value)
    if origin is list and isinstance(value, list) and args:
        return [_value_as_stored(args[0], item) for item in value]
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {key: _value_as_stored(args[1], item) for key, item in value.items()}
    return value


def _shaped_like(annotation: Any, value: Any) -> bool:
    """Whether `value`'s JSON shape (object, array) is the one `annotation` takes."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _shaped_like(get_args(annotation)[0], value)
    if isinstance(value, dict):
        return origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel))
    return isinstance(value, list) and origin is list


@functools.lru_cache(maxsize=512)
def _cached_adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an annotation that cannot be hashed
        return TypeAdapter(annotation)
