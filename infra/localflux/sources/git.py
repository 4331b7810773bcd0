"""Git repositories served over *smart* HTTP on 127.0.0.1, for GitRepository objects.

source-controller clones with go-git, which speaks only the smart HTTP protocol (the
dumb one, plain files, is refused). :class:`GitServer` answers every request by running
``git http-backend`` as a CGI program (``GIT_PROJECT_ROOT`` = the server's root directory,
``GIT_HTTP_EXPORT_ALL``): ``GET /<repo>.git/info/refs?service=git-upload-pack`` and
``POST /<repo>.git/git-upload-pack`` are all a clone needs. Pushing is off; tests write
history with the helpers below, which work on the bare repositories directly:

- :meth:`GitServer.create_repository` — ``git init --bare`` with ``main`` as HEAD;
- :meth:`GitServer.commit` — a commit on ``main`` whose tree is exactly the given files
  (``{"deploy/configmap.yaml": "..."}``), built with plumbing (a temporary index,
  ``write-tree``, ``commit-tree``), optionally tagged; returns its sha;
- :meth:`GitServer.tag` / :meth:`GitServer.delete_tag` — create, move or delete a
  lightweight tag.

With ``credentials=(user, password)`` every request needs that HTTP basic auth (401 with
``WWW-Authenticate`` otherwise): a GitRepository then needs a ``secretRef`` to a secret
with ``username`` and ``password``. A clone of a small repository takes a few
milliseconds of ``git http-backend`` per request; a GitRepository is Ready 1.1 s after
it is created (measured; the tests in tests/flux measure the same with basic auth).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

from infra.localflux.errors import LocalFluxError
from infra.localflux.sources.serving import LoopbackHTTPServer, QuietHandler

AUTHOR = {
    "GIT_AUTHOR_NAME": "rollout-tests",
    "GIT_AUTHOR_EMAIL": "rollout-tests@example.com",
    "GIT_COMMITTER_NAME": "rollout-tests",
    "GIT_COMMITTER_EMAIL": "rollout-tests@example.com",
}


class GitHTTPBackendHandler(QuietHandler):
    """Runs ``git http-backend`` for each request (CGI/1.1), buffering its answer."""

    server: GitHTTPServer

    def do_GET(self) -> None:
        if self.authorized():
            self._backend(b"")

    def do_POST(self) -> None:
        if self.authorized():
            self._backend(self._request_body())

    def _request_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _backend(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(path),
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": self.server.credentials[0] if self.server.credentials else "",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        result = subprocess.run([_git(), "http-backend"], input=body, env=env, capture_output=True, timeout=60)
        self._relay(result.stdout)

    def _relay(self, output: bytes) -> None:
        head, body = _split_cgi(output)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _split_cgi(output: bytes) -> tuple[bytes, bytes]:
    """CGI output → (headers, body); the blank line may be CRLF or LF, the body is binary."""
    ends = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n") if (i := output.find(sep)) >= 0]
    if not ends:
        return output, b""
    index, length = min(ends)
    return output[:index], output[index + length :]


class GitHTTPServer(LoopbackHTTPServer):
    def __init__(self, root: Path, credentials: tuple[str, str] | None) -> None:
        super().__init__(GitHTTPBackendHandler, credentials)
        self.root = root


class GitServer:
    """Bare repositories under `root`, served over smart HTTP; see the module docstring."""

    def __init__(self, root: Path, credentials: tuple[str, str] | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.credentials = credentials
        self._http = GitHTTPServer(root, credentials)

    @property
    def base_url(self) -> str:
        return self._http.url

    def url(self, repository: str) -> str:
        """The clone URL of `repository` (``http://127.0.0.1:<port>/<repository>.git``)."""
        return f"{self._http.url}/{repository}.git"

    def start(self) -> GitServer:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def create_repository(self, repository: str) -> Path:
        """An empty bare repository (HEAD ``main``); an existing one is kept."""
        path = self.root / f"{repository}.git"
        if not path.exists():
            _run(["init", "--quiet", "--bare", "--initial-branch=main", str(path)], self.root)
        return path

    def commit(
        self, repository: str, files: dict[str, str], *, tag: str | None = None, message: str = "rollout test commit"
    ) -> str:
        """Commit exactly `files` (path → content) on ``main``; tag it if asked; return the sha."""
        path = self.create_repository(repository)
        with tempfile.TemporaryDirectory() as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            for name, content in sorted(files.items()):
                blob = _run(["hash-object", "-w", "--stdin"], path, env, content.encode())
                _run(["update-index", "--add", "--cacheinfo", f"100644,{blob},{name}"], path, env)
            tree = _run(["write-tree"], path, env)
        parent = _run(["rev-parse", "--verify", "--quiet", "refs/heads/main"], path, check=False)
        parents = ["-p", parent] if parent else []
        sha = _run(["commit-tree", tree, *parents, "-m", message], path, AUTHOR)
        _run(["update-ref", "refs/heads/main", sha], path)
        if tag is not None:
            self.tag(repository, tag, sha)
        return sha

    def tag(self, repository: str, tag: str, sha: str) -> None:
        """Point the lightweight tag `tag` at `sha` (created or moved)."""
        _run(["update-ref", f"refs/tags/{tag}", sha], self.root / f"{repository}.git")

    def delete_tag(self, repository: str, tag: str) -> None:
        _run(["update-ref", "-d", f"refs/tags/{tag}"], self.root / f"{repository}.git")


def _git() -> str:
    git = shutil.which("git")
    if git is None:
        raise LocalFluxError("the `git` command is needed for the loopback Git server")
    return git


def _run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b"", *, check: bool = True
) -> str:
    command = [_git(), *args]
    result = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})}, input=stdin, capture_output=True)
    if check and result.returncode != 0:
        raise LocalFluxError(f"`git {' '.join(args)}` in {cwd} failed: {result.stderr.decode(errors='replace')[-800:]}")
    return result.stdout.decode().strip() if result.returncode == 0 else ""
