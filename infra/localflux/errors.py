"""Errors of the local Flux controllers and sources: each says what failed, with the log tail."""

from __future__ import annotations


class LocalFluxError(Exception):
    """A Flux controller, the OCI registry or a loopback source could not be built, started or used."""


class BuildError(LocalFluxError):
    """`go build` / `go install` failed; the message carries the end of its output."""
