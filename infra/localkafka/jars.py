"""The broker's classpath: the jars pinned by ``infra/kafka-jars.lock``, fetched from Maven Central.

    read_lock(lock_file)  -> [LockedJar]       one ``group:artifact:version sha1`` line each
    ensure_jars(lib_dir)  -> lib_dir           holding exactly the locked jars, each verified

A download streams into a temp file in ``lib_dir`` while hashing it; only a jar whose SHA-1
equals the lock's is renamed into place. Cached jars are re-hashed on every run; a file
lock serialises concurrent runs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from infra.localkafka.defaults import KAFKA_VERSION, LOCK_FILE, MAVEN_CENTRAL, default_lib_dir
from infra.localkafka.errors import JarVerificationError, KafkaError

log = logging.getLogger("infra.localkafka")

_DOWNLOAD_WORKERS = 6
_DOWNLOAD_ATTEMPTS = 3
_STALE_PART_SECONDS = 3600


@dataclass(frozen=True)
class LockedJar:
    group: str
    artifact: str
    version: str
    sha1: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def filename(self) -> str:
        # group-qualified: two artifacts with the same name (metrics-core!) must not collide
        return f"{self.group}__{self.artifact}-{self.version}.jar"

    def url(self, repo: str = MAVEN_CENTRAL) -> str:
        path = self.group.replace(".", "/")
        return f"{repo.rstrip('/')}/{path}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"


_LOCK_LINE = re.compile(r"^([\w.\-]+):([\w.\-]+):([\w.\-]+)\s+([0-9a-f]{40})$")


def read_lock(lock_file: Path = LOCK_FILE) -> list[LockedJar]:
    try:
        text = lock_file.read_text()
    except OSError as e:
        raise KafkaError(f"cannot read the jar lock {lock_file}: {e}") from e
    jars = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LOCK_LINE.match(line)
        if not m:
            raise KafkaError(f"{lock_file}:{n}: malformed lock line {line!r}")
        jars.append(LockedJar(*m.groups()))
    if not jars:
        raise KafkaError(f"{lock_file} lists no jars")
    return jars


def _sha1_of(path: Path) -> str:
    h = hashlib.sha1()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(jar: LockedJar, lib_dir: Path, repo: str) -> None:
    """Fetch one jar into ``lib_dir`` atomically: temp file, SHA-1 check, rename."""
    url = jar.url(repo)
    last: Exception | None = None
    for attempt in range(1, _DOWNLOAD_ATTEMPTS + 1):
        fd, tmp_name = tempfile.mkstemp(prefix=f".{jar.filename}.", suffix=".part", dir=lib_dir)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha1()
            req = urllib.request.Request(url, headers={"User-Agent": "rollout-localkafka"})
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(req, timeout=60) as resp:
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    h.update(chunk)
                    out.write(chunk)
            got = h.hexdigest()
            if got != jar.sha1:
                raise JarVerificationError(
                    f"{jar.coordinate}: SHA-1 mismatch for {url}: expected {jar.sha1} (from the lock), got {got}"
                )
            os.replace(tmp, lib_dir / jar.filename)
            return
        except JarVerificationError:
            raise
        except urllib.error.HTTPError as e:
            last = e
            if e.code == 404:
                break
        except (OSError, urllib.error.URLError) as e:
            last = e
        finally:
            tmp.unlink(missing_ok=True)
        time.sleep(0.5 * attempt)
    raise KafkaError(f"cannot download {jar.coordinate} from {url}: {last}")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_jars(
    lib_dir: Path | None = None,
    *,
    lock_file: Path = LOCK_FILE,
    repo: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Make ``lib_dir`` hold exactly the locked jars, each verified; return ``lib_dir``.

    Cached jars are re-hashed; a mismatching one is reported and downloaded again. A
    download whose SHA-1 differs from the lock raises :class:`JarVerificationError` and
    leaves nothing behind.
    """
    lib_dir = lib_dir or default_lib_dir()
    repo = repo or os.environ.get("ROLLOUT_MAVEN_REPO") or MAVEN_CENTRAL
    say = progress or (lambda msg: log.info("%s", msg))
    jars = read_lock(lock_file)
    lib_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(lib_dir / ".lock"):
        wanted = {j.filename for j in jars}
        now = time.time()
        for p in lib_dir.iterdir():
            if p.suffix == ".jar" and p.name not in wanted:
                p.unlink()  # keep `-cp lib/*` equal to the lock
            elif p.suffix == ".part" and now - p.stat().st_mtime > _STALE_PART_SECONDS:
                p.unlink(missing_ok=True)
        missing = []
        for j in jars:
            path = lib_dir / j.filename
            if not path.exists():
                missing.append(j)
            elif _sha1_of(path) != j.sha1:
                say(f"cached {path.name} fails its SHA-1 check; downloading it again")
                path.unlink()
                missing.append(j)
        if missing:
            say(f"downloading {len(missing)} Kafka {KAFKA_VERSION} jar(s) from {repo} into {lib_dir}")
            with concurrent.futures.ThreadPoolExecutor(_DOWNLOAD_WORKERS) as pool:
                futures = [pool.submit(_download, j, lib_dir, repo) for j in missing]
                errors = [error for f in futures if (error := f.exception()) is not None]
            if errors:
                verification = [e for e in errors if isinstance(e, JarVerificationError)]
                raise (verification or errors)[0]
    return lib_dir
