"""The engine's documents as the CLI reads them: each parsed with its wire model
(rollout/wire/status.py, verdicts.py, dead_letters.py), attributes read, never keys.

A module-status or rollout-target document this rollout cannot read — of a newer
`schemaVersion`, written by a newer worker, or not the model's shape — ends the command
with the reason and the record's key: showing it half-read would show something wrong.
Heavy imports (pydantic) happen on first use: `rollout --help` stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rollout_cli.options import fail

if TYPE_CHECKING:
    from rollout.wire.status import ModuleStatus, TargetStatus


def module_status(key: str, document: Any) -> ModuleStatus:
    """The module-status document of module `key` (a record's value, raw or parsed)."""
    from rollout.wire.documents import DocumentError
    from rollout.wire.status import ModuleStatus

    try:
        return ModuleStatus.read(document)
    except DocumentError as error:
        fail(f"module {key}: {error}")
        raise  # not reached: fail exits


def module_statuses(documents: Mapping[str, Any]) -> dict[str, ModuleStatus]:
    """Module → its status, from the latest document per key (`Context.latest`)."""
    return {key: module_status(key, document) for key, document in documents.items()}


def target_statuses(documents: Mapping[str, Any], module: str) -> list[TargetStatus]:
    """The rollout-target documents of `module`'s clusters (keys `module/cluster`), by cluster."""
    from rollout.wire.documents import DocumentError
    from rollout.wire.status import TargetStatus

    targets = []
    for key, document in sorted(documents.items()):
        if key.startswith(f"{module}/"):
            try:
                targets.append(TargetStatus.read(document))
            except DocumentError as error:
                fail(f"rollout target {key}: {error}")
    return targets
