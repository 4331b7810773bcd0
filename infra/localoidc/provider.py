"""Build and run the local OpenID Provider (see the package docstring)."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra.child_processes import Process, spawn, terminate, wait_until_ready
from infra.localflux.build import GoProgram, Progress, ensure_program, go_build
from infra.localflux.errors import BuildError

SOURCE = Path(__file__).with_name("provider")
SOURCE_FILES = ("main.go", "go.mod", "go.sum")
ZITADEL_OIDC_VERSION = "v3.52.0"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
HOST = "127.0.0.1"


class LocalOIDCError(Exception):
    """The local OpenID Provider could not be built or started; the message says why."""


def _source_digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update((SOURCE / name).read_bytes())
    return digest.hexdigest()[:12]


PROVIDER = GoProgram("oidc-provider", f"{ZITADEL_OIDC_VERSION}-{_source_digest()}", "tools")


def ensure_provider(progress: Progress | None = None) -> Path:
    """The cached provider binary, built first when it is not there."""
    try:
        return ensure_program(PROVIDER, go_build(SOURCE), progress)
    except BuildError as error:
        raise LocalOIDCError(str(error)) from None


@dataclass(frozen=True)
class OIDCClientConfig:
    """A confidential web client (client_secret_basic) and the redirect URIs it may use."""

    id: str
    secret: str
    redirectURIs: list[str]  # the provider config's JSON field name


@dataclass(frozen=True)
class OIDCUser:
    """A user of the provider's login page; `email` and `groups` go into the ID token."""

    id: str
    username: str
    password: str
    email: str
    groups: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class LocalOIDC:
    """One running provider: `issuer` (http://127.0.0.1:<port>/), its log, `stop()`."""

    workdir: Path
    clients: list[OIDCClientConfig]
    users: list[OIDCUser]
    port: int = 0
    process: Process | None = None

    @property
    def issuer(self) -> str:
        return f"http://{HOST}:{self.port}/"

    @property
    def log(self) -> Path:
        return self.workdir / "oidc-provider.log"

    def start(self, progress: Progress | None = None) -> LocalOIDC:
        binary = ensure_provider(progress)
        self.port = self.port or _free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "oidc-provider.json"
        document = {
            "issuer": self.issuer,
            "listen": f"{HOST}:{self.port}",
            "clients": [asdict(c) for c in self.clients],
            "users": [asdict(u) for u in self.users],
        }
        config.write_text(json.dumps(document, indent=2))
        self.process = spawn([str(binary), str(config)], self.log)
        wait_until_ready(
            "the OpenID Provider",
            self.process,
            self.log,
            self._discovery_answers,
            error=LocalOIDCError,
            timeout=START_TIMEOUT,
            stop_timeout=STOP_TIMEOUT,
        )
        return self

    def _discovery_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.issuer}.well-known/openid-configuration", timeout=1) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, STOP_TIMEOUT)
            self.process = None
