"""The notifier's configuration: which webhooks get which notifications, how hard to try.

    --config notifier.yaml (or --webhook URL …) ──► NotifierConfig ──► the notifier (notifier.py)

A YAML (or JSON) file, read once at start; docs/configuration.md ("Notifications") has the
reference and an example. Every field is checked here, so a mistake is a one-line error at
start naming the file, the field and why — not a webhook that silently never fires:

    source: /rollout/prod               # CloudEvents `source` (default /rollout/<topic prefix>)
    queueSize: 1000                     # events held in memory per webhook (backpressure)
    retry: {attempts: 8, initialDelay: 1s, maxDelay: 1m}
    webhooks:
      - name: oncall                    # names its metrics, logs and dead letters
        url: https://hooks.example.com/rollout
        modules: ["shop", "pay-*"]      # shell-style patterns; absent: every module
        types: [dev.rollout.module.halted, dev.rollout.module.rollback-started]  # absent: all
        timeout: 10s
        authHeader: {name: Authorization, valueFile: /etc/rollout/oncall-token}   # or valueEnv

The auth header's value is read from a file (a mounted Secret, re-read when it changes) or
an environment variable — never from the file itself and never from Kafka, so the
configuration can live in a ConfigMap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rollout.api.formats import parse_duration
from rollout.wire.notifications import EVENT_TYPES

NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


class ConfigError(ValueError):
    """A configuration the notifier cannot run with: what, where and why."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _seconds(value: Any) -> float:
    """A duration: `1s`, `500ms`, `5m` — or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_duration(value)
    else:
        raise ValueError("expected a duration such as 1s, 500ms or 5m")
    if seconds <= 0:
        raise ValueError("must be longer than 0s")
    return seconds


class Retry(Strict):
    """Exponential backoff with full jitter: before retry n (1, 2, …) the notifier waits a
    random time in [0, min(maxDelay, initialDelay * 2^(n-1))]; after `attempts` tries in all
    the event is dead-lettered for that webhook."""

    attempts: int = Field(default=8, ge=1, le=100)
    initial_delay: float = Field(default=1.0, alias="initialDelay")
    max_delay: float = Field(default=60.0, alias="maxDelay")

    _durations = field_validator("initial_delay", "max_delay", mode="before")(_seconds)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_delay < self.initial_delay:
            raise ValueError("maxDelay must be at least initialDelay")
        return self


class AuthHeader(Strict):
    """A header sent with every request to the webhook; its value from exactly one of a
    file (`valueFile`, re-read when it changes) or an environment variable (`valueEnv`)."""

    name: str = "Authorization"
    value_file: Path | None = Field(default=None, alias="valueFile")
    value_env: str | None = Field(default=None, alias="valueEnv")

    @field_validator("name")
    @classmethod
    def _header(cls, name: str) -> str:
        if not HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.value_file is None) == (self.value_env is None):
            raise ValueError("give exactly one of valueFile and valueEnv")
        return self


class Webhook(Strict):
    """One receiver of notifications."""

    name: str
    url: str
    modules: list[str] = Field(default_factory=list)  # fnmatch patterns; empty: every module
    types: list[str] = Field(default_factory=list)  # CloudEvents types; empty: every notified type
    timeout: float = 10.0
    auth_header: AuthHeader | None = Field(default=None, alias="authHeader")

    _timeout = field_validator("timeout", mode="before")(_seconds)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not NAME.match(name):
            raise ValueError(f"{name!r}: 1-63 lowercase letters, digits or '-', starting and ending alphanumeric")
        return name

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise ValueError("credentials do not go into the URL (it is logged): use authHeader")
        return url

    @field_validator("types")
    @classmethod
    def _types(cls, types: list[str]) -> list[str]:
        known = sorted(EVENT_TYPES.values())
        for each in types:
            if each not in known:
                raise ValueError(f"{each!r} is not a notification type; one of {', '.join(known)}")
        return types


class NotifierConfig(Strict):
    source: str | None = None
    queue_size: int = Field(default=1000, ge=1, le=100_000, alias="queueSize")
    retry: Retry = Field(default_factory=Retry)
    webhooks: list[Webhook] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        names = [webhook.name for webhook in self.webhooks]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"webhook names must be distinct: {', '.join(twice)} appear more than once")
        return self


def _where(error: ValidationError) -> str:
    lines = []
    for each in error.errors():
        where = ".".join(str(part) for part in each["loc"]) or "the document"
        lines.append(f"{where}: {each['msg'].removeprefix('Value error, ')}")
    return "; ".join(lines)


def load_config(path: Path | None, *, urls: list[str] | None = None, source: str | None = None) -> NotifierConfig:
    """The configuration in `path` (None: none), with `--webhook` `urls` added to its
    webhooks and `source` (when given) overriding its own; `ConfigError` naming the file
    and the field otherwise."""
    document: Any = {}
    if path is not None:
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as error:
            raise ConfigError(f"{path}: cannot read it: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not YAML: {error}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: expected a mapping with `webhooks`, got {type(document).__name__}")
    if urls:
        listed = document.get("webhooks")
        document["webhooks"] = [*(listed if isinstance(listed, list) else []), *webhooks_from_urls(urls)]
    if source is not None:
        document["source"] = source
    return config_from(document, str(path) if path is not None else "--webhook")


def config_from(document: Any, where: str) -> NotifierConfig:
    try:
        return NotifierConfig.model_validate(document)
    except ValidationError as error:
        raise ConfigError(f"{where}: {_where(error)}") from None


def webhooks_from_urls(urls: list[str]) -> list[dict[str, Any]]:
    """`--webhook URL` flags as webhook entries (named hook-1, hook-2, …; no filters, no auth)."""
    return [{"name": f"hook-{n}", "url": url} for n, url in enumerate(urls, 1)]


class HeaderValue:
    """The auth header's current value: the environment variable's, or the file's — read
    again when the file's modification time changes (a rotated Secret), else from memory."""

    def __init__(self, header: AuthHeader) -> None:
        self.header = header
        self._stamp: float | None = None
        self._value = ""

    def current(self) -> str:
        if self.header.value_env is not None:
            value = os.environ.get(self.header.value_env)
            if value is None:
                raise ConfigError(f"authHeader.valueEnv: ${self.header.value_env} is not set")
            return value.strip()
        assert self.header.value_file is not None
        try:
            stamp = self.header.value_file.stat().st_mtime
            if stamp != self._stamp:
                self._value, self._stamp = self.header.value_file.read_text().strip(), stamp
        except OSError as error:
            raise ConfigError(f"authHeader.valueFile {self.header.value_file}: {error.strerror}") from None
        return self._value
