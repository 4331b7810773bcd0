"""Auto-promotion: a source's `autoPromote` — follow the highest version of a semver range.

    source {oci|git|helm, autoPromote: {semver: ">=1.4.0 <2.0.0", hold: false}}
        `rollout promoter` lists the source's versions (OCI tags, Helm index.yaml, Git tags)
        ──► the highest in range, when newer than the module's target
        ──► PromotionObserved (module, version, source, promoter) ──► the engine
        (rollout/engine/promotions.py): a new target revision, unless promotion is held

The range is Flux's: what an OCIRepository's or GitRepository's `spec.ref.semver` and a
HelmRelease's chart `version` take (Masterminds/semver constraints) — comparisons
`>= <= > < = !=`, `~1.2` (patch updates), `^1.2` (minor updates), `1.2.x` / `1.x` / `*`,
hyphen ranges `1.2 - 1.4.5`, AND by space or comma, OR by `||`. We read it with
node-semver (PyPI `node-semver`, a port of npm's node-semver: the same grammar, and a
`loose` mode that takes a leading `v` and commas); semantic_version's NpmSpec refuses
commas, and PyPI `semver` has no ranges at all.

Pre-releases follow Flux (Masterminds) rather than npm: they are excluded unless the range
itself names one (`>=2.0.0-rc.0`), and then every pre-release within bounds counts — npm
would only take pre-releases of the very version the range names.

A version is a tag that is a full semantic version, optionally prefixed `v` (`1.4.2`,
`v1.4.2`, `2.0.0-rc.1`, `1.4.2+build.7`); tags like `latest`, `1.4` or `main` are never
candidates. Everything here is pure (no clock, no I/O): the engine re-checks each observed
version with the same functions the promoter used to pick it.

Cost: ranges and versions are parsed once (lru caches); an observation the engine ignores
(older, out of range, the same again) costs it 31 µs (`engine.handle`, on the loaded
2-core machine), against 394 µs when node-semver parsed the range and both versions on
every check. One that promotes costs what an apply of a new tag does (110 ms vs 102 ms for
a module of 1,000 members: its members re-sorted and recategorised).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import nodesemver
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.api.formats import shown

MAX_RANGE_CHARS = 256
# a full semantic version (semver.org's grammar, leading zeros refused), optionally prefixed v
VERSION = re.compile(
    r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?\Z"
)


class AutoPromote(BaseModel):
    """A source's auto-promotion: follow the highest version in `semver` (Flux's `ref.semver`).

    The manifest's own version (`tag`, chart `version`) is where it starts, and the floor:
    a newer version in range becomes the module's target revision — a new generation, rolled
    out stage by stage — unless promotion is held (`hold: true` here, or `rollout promotion
    hold`); a held promotion remembers the newest version seen, promoted on resume."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # the range of versions to follow, e.g. ">=1.4.0 <2.0.0", "~1.4", "^1.4", "1.x"
    semver: str
    # true: versions seen are recorded as available, not promoted (until false, or resumed)
    hold: bool = Field(default=False, exclude_if=lambda value: not value)

    @field_validator("semver")
    @classmethod
    def _range(cls, value: str) -> str:
        check_range(value)
        return value

    def admits(self, version: str) -> bool:
        return in_range(version, self.semver)


def check_range(text: str) -> str:
    """`text` if it is a semver range Flux would take; else ValueError saying why."""
    if not text.strip() or len(text) > MAX_RANGE_CHARS:
        raise ValueError(f"semver must be a range of 1 to {MAX_RANGE_CHARS} characters, such as '>=1.4.0 <2.0.0'")
    if _parsed_range(text) is None:
        raise ValueError(
            f"semver {shown(text)} is not a semver range: write comparisons such as '>=1.4.0 <2.0.0', "
            "'~1.4', '^1.4', '1.x' or '*', joined by spaces (and) or '||' (or)"
        )
    return text


@functools.lru_cache(maxsize=1024)  # parsed once per range: a check is then ~20 µs, not ~300
def _parsed_range(text: str) -> nodesemver.Range | None:
    try:
        return nodesemver.make_range(text, True)
    except ValueError:
        return None


def is_version(tag: str) -> bool:
    """A tag that names a full semantic version (optionally prefixed v)."""
    return VERSION.match(tag) is not None


@functools.lru_cache(maxsize=4096)  # the versions seen; SemVer is not changed by comparing or testing
def _semver(tag: str) -> nodesemver.SemVer:
    return nodesemver.make_semver(tag, True)


def wants_prereleases(text: str) -> bool:
    """The range names a pre-release (`>=2.0.0-rc.0`): pre-releases within it count (Flux)."""
    parsed = _parsed_range(text)
    return parsed is not None and any(
        comparator.semver is not None and comparator.semver.prerelease
        for alternative in parsed.set
        for comparator in alternative
    )


def in_range(version: str, text: str) -> bool:
    """`version` is a semantic version within range `text` (pre-releases as the module doc says)."""
    if not is_version(version):
        return False
    parsed, semver = _parsed_range(text), _semver(version)
    prerelease = bool(semver.prerelease)
    if parsed is None or (prerelease and not wants_prereleases(text)):
        return False
    return bool(parsed.test(semver, include_prerelease=prerelease))


def newer(version: str, than: str) -> bool:
    """`version` is a higher semantic version than `than` (build metadata ignored, as semver says).
    A `than` that is no version (a digest, a commit) is never compared: False."""
    if not is_version(version) or not is_version(than):
        return False
    return bool(_semver(version).compare(_semver(than)) > 0)


def newest_in_range(tags: Iterable[str], text: str) -> str | None:
    """The highest of `tags` within range `text` (None: none is). Of tags naming the same
    version (`1.4.0` and `v1.4.0`), the first in sorted order."""
    best: str | None = None
    for tag in sorted(set(tags)):
        if in_range(tag, text) and (best is None or newer(tag, best)):
            best = tag
    return best
