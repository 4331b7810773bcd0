"""Credentials of a local kube-apiserver, made with the `openssl` command line.

Into a directory (mode 0700): a CA (`ca.crt`/`ca.key`), a serving certificate for
127.0.0.1 and localhost signed by it (`serving.crt`/`serving.key`), the service-account
signing key pair (`sa.key`/`sa.pub`) and a static token file (`tokens.csv`) with one random
admin token in `system:masters`. Nothing here is secret beyond the test run; the files are
deleted with the directory.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.localkube.errors import LocalKubeError

ADMIN_USER = "rollout-admin"


@dataclass(frozen=True)
class Credentials:
    directory: Path
    token: str

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "serving.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def token_file(self) -> Path:
        return self.directory / "tokens.csv"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise LocalKubeError("the `openssl` command is needed to make the local API server's certificates")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise LocalKubeError(f"`openssl {' '.join(args[:2])}` failed: {result.stderr.strip()[-800:]}")


def make_credentials(directory: Path) -> Credentials:
    """CA, serving cert, service-account keys and an admin token in `directory` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    days = "3650"
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=directory)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=rollout-local-ca", "-days", days,
             "-out", "ca.crt", cwd=directory)  # fmt: skip
    _openssl("genrsa", "-out", "serving.key", "2048", cwd=directory)
    _openssl("req", "-new", "-key", "serving.key", "-subj", "/CN=kube-apiserver", "-out", "serving.csr",
             cwd=directory)  # fmt: skip
    (directory / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", days, "-extfile", "serving.ext", "-out", "serving.crt", cwd=directory)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    token = secrets.token_hex(24)
    (directory / "tokens.csv").write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    return Credentials(directory=directory, token=token)
