"""Errors of the local kube-apiserver: each says what failed and what would fix it."""

from __future__ import annotations


class LocalKubeError(Exception):
    """The local kube-apiserver or etcd could not be built, started or reached."""


class BuildError(LocalKubeError):
    """`go build` of kube-apiserver or etcd failed; the message carries the end of its output."""
