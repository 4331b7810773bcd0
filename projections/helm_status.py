"""A HelmRelease's sync state: what Flux's helm-controller (v2) writes, read as a rollout state.

    HelmRelease (metadata.generation, status) + the assigned revision -> succeeded | failed | updating

The counterpart of `projections.status.sync_state` for Kustomizations; the status reporter
picks one or the other by kind. The rules:

- `succeeded`: the spec was observed (`metadata.generation == status.observedGeneration`, so
  new values count only once the controller has seen them), condition `Ready=True` (reasons
  such as `InstallSucceeded`, `UpgradeSucceeded`, `TestSucceeded`), the last attempted
  revision is the assigned one, and neither `Reconciling` nor `Stalled` is True.
- `failed`: the spec was attempted and `Stalled=True` (e.g. `RetriesExceeded`), or `Ready=False`
  with a failure reason (anything but `Progressing` and `DependencyNotReady`: `InstallFailed`,
  `UpgradeFailed`, `ArtifactFailed`, `InitFailed`, ...) for the assigned revision.
  *Attempted* means `status.lastAttemptedGeneration == metadata.generation` (or the spec was
  observed): helm-controller leaves `observedGeneration` where it was — `-1` for a release
  never installed — while it keeps retrying a failing install or upgrade (measured on
  helm-controller v1.6.2: `observedGeneration: -1`, `lastAttemptedGeneration: 1`,
  `failures: 8`, `Ready=False InstallFailed`, no `Stalled`). Requiring `observedGeneration`
  for a failure would leave such a release `updating` until the progress deadline, with no
  halt and no rollback.
- `updating`: anything else.

Revisions. The renderer annotates the assigned revision (`rollout.dev/revision`): a chart
version for a Helm repository (`6.7.0`), a tag or digest for an OCIRepository. helm-controller
writes `status.lastAttemptedRevision` as the chart version — with `+<first 12 of the digest>`
appended for an OCIRepository source — and the full digest in `lastAttemptedRevisionDigest`.
A version or tag matches the part before `+`; a digest matches `lastAttemptedRevisionDigest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout.wire.events import SyncState

__all__ = ["WAITING_REASONS", "release_revision_matches", "release_state"]

WAITING_REASONS = frozenset({"Progressing", "DependencyNotReady"})
_DIGEST_PREFIXES = ("sha256:", "sha384:", "sha512:", "blake3:")


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def _is_true(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def release_revision_matches(status: Mapping[str, Any], assigned: str) -> bool:
    """Was the assigned chart version, tag or digest the one helm-controller last attempted?"""
    if not assigned:
        return False
    if assigned.startswith(_DIGEST_PREFIXES):
        return status.get("lastAttemptedRevisionDigest") == assigned
    attempted = status.get("lastAttemptedRevision")
    return isinstance(attempted, str) and attempted.partition("+")[0] == assigned


def release_state(release: Mapping[str, Any], assigned_revision: str) -> SyncState:
    """`succeeded`, `failed` or `updating` for one HelmRelease; see the module docstring."""
    generation = (release.get("metadata") or {}).get("generation")
    status = release.get("status") or {}
    observed = generation is not None and status.get("observedGeneration") == generation
    attempted = observed or (generation is not None and status.get("lastAttemptedGeneration") == generation)
    if not attempted:
        return "updating"
    if _is_true(_condition(status, "Stalled")):
        return "failed"
    ready = _condition(status, "Ready")
    matches = release_revision_matches(status, assigned_revision)
    if _is_true(ready):
        succeeded = observed and matches and not _is_true(_condition(status, "Reconciling"))
        return "succeeded" if succeeded else "updating"
    if ready is not None and ready.get("status") == "False" and ready.get("reason") not in WAITING_REASONS:
        return "failed" if matches else "updating"
    return "updating"
