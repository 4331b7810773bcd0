"""The formats of manifest values: Kubernetes names and labels, durations, URLs, Git tags.

Each `check_*` returns the value or raises `ValueError` with a message a user can act on
(the models in manifests.py call them from their validators; projections/ use the
patterns for the objects they write). Every pattern is anchored with `\\Z`: `$` would
accept a trailing newline, and `prod\\n` is not a name. A value quoted in a message is cut to
about SHOWN characters (`shown`): a 7 MB tag makes a one-line error, not a 7 MB one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from urllib.parse import urlsplit

# Kubernetes name patterns, shared with projections/ (CRD validation, object names, paths).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
# Flux checks out `spec.ref.commit` by full hash: a short SHA never resolves.
COMMIT = re.compile(r"^((sha1:)?[0-9a-f]{40}|sha256:[0-9a-f]{64})\Z")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+\Z")
PERCENT = re.compile(r"^([0-9]{1,3})%\Z")
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# the OCI distribution spec's tag grammar
OCI_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
# git check-ref-format: no space or ~ ^ : ? * [ \\ in a ref name
GIT_REF_FORBIDDEN = re.compile(r"[\s~^:?*\[\\]")
GIT_SCHEMES = ("http", "https", "ssh")
MAX_URL = 2048
MAX_DURATION_SECONDS = 366 * 24 * 3600
SHOWN = 60


def shown(value: object) -> str:
    """`value` as an error message quotes it: its repr, cut to about SHOWN characters."""
    text = repr(value[: 2 * SHOWN]) if isinstance(value, str) else repr(value)
    if len(text) <= SHOWN:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
    return f"{text[:SHOWN]}... ({size})"


def check_dns1123_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{shown(value)} is not a DNS-1123 label: lower-case alphanumerics and '-', "
            "starting and ending with an alphanumeric, at most 63 characters"
        )
    return value


def check_label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {shown(key)}: prefix {shown(prefix)} is not a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"label key {shown(key)}: name part must be 1-63 alphanumerics, '-', '_' or '.'")
    return key


def check_label_value(value: str) -> str:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        raise ValueError(f"label value {shown(value)}: at most 63 alphanumerics, '-', '_' or '.'")
    return value


def parse_duration(text: str) -> float:
    """Seconds in a Go/Flux duration string such as `5m`, `1h30m`, `90s`, `250ms`."""
    if len(text) > 32 or not DURATION.match(text):
        raise ValueError(f"{shown(text)} is not a duration such as 90s, 5m or 1h30m")
    total = 0.0
    for number, _, unit in re.findall(r"([0-9]+(\.[0-9]+)?)(ms|s|m|h)", text):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    if not math.isfinite(total):
        raise ValueError(f"{shown(text)} is too long a duration")
    return total


def check_duration(text: str, *, field: str, positive: bool) -> str:
    """A manifest's duration: parseable, at most a year, and above zero when `positive`."""
    seconds = parse_duration(text)
    if positive and seconds <= 0:
        raise ValueError(f"{field} must be longer than 0s: a zero deadline would fail every rollout at once")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{field} {shown(text)} is longer than a year (8784h)")
    return text


def check_url(value: str, *, schemes: tuple[str, ...], what: str) -> str:
    """A URL with one of `schemes`, a host, and no whitespace or control characters."""
    if len(value) > MAX_URL:
        raise ValueError(f"{what} URL {shown(value)} is longer than {MAX_URL} characters")
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in value):
        raise ValueError(f"{what} URL {shown(value)} contains whitespace or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as error:
        raise ValueError(f"{what} URL {shown(value)} is malformed: {error}") from None
    allowed = ", ".join(f"{scheme}://" for scheme in schemes)
    if parts.scheme not in schemes or not value.startswith(f"{parts.scheme}://"):
        raise ValueError(f"{shown(value)}: a {what} URL must start with {allowed}")
    if not parts.hostname:
        raise ValueError(f"{what} URL {shown(value)} has no host: write {parts.scheme}://HOST/PATH")
    return value


def check_git_tag(tag: str) -> str:
    """A Git tag name as `git check-ref-format` accepts it, and visibly what it says."""
    bad = next((ch for ch in tag if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(
            f"tag {shown(tag)} contains the control or formatting character U+{ord(bad):04X} "
            "(NUL, newline, bidi override, ...): a tag must read as what it is"
        )
    if not tag or len(tag) > 255:
        raise ValueError("tag must be 1-255 characters")
    if GIT_REF_FORBIDDEN.search(tag) or ".." in tag or "@{" in tag or "//" in tag or tag == "@":
        raise ValueError(f"tag {shown(tag)} is not a Git ref name: no whitespace, ~ ^ : ? * [ \\, '..' or '@{{'")
    if tag.startswith(("-", "/", ".")) or tag.endswith(("/", ".", ".lock")) or "/." in tag:
        raise ValueError(
            f"tag {shown(tag)} is not a Git ref name: "
            "it may not start with '-', '/' or '.', nor end with '/', '.' or '.lock'"
        )
    return tag
