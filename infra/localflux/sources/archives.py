"""Reproducible ``.tar.gz`` archives of in-memory files (Flux artifacts, Helm charts).

Every entry has mode 0644, owner 0 and mtime 0, and the gzip header no timestamp: the same
files give the same bytes, hence the same OCI digest — a re-push of unchanged content is
a no-op for source-controller, as with ``flux push artifact`` of an unchanged directory.
"""

from __future__ import annotations

import gzip
import io
import tarfile


def tar_gz(files: dict[str, str], prefix: str = "") -> bytes:
    """A tar.gz of `files` (path → text), each path under `prefix` (e.g. ``"mychart/"``)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in sorted(files.items()):
            data = content.encode()
            info = tarfile.TarInfo(prefix + name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def read_member(archive: bytes, suffix: str) -> str:
    """The text of the first member of a tar.gz whose path ends with `suffix`."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.name.endswith(suffix) and (extracted := tar.extractfile(member)) is not None:
                return extracted.read().decode()
    raise KeyError(f"no {suffix} in the archive")
